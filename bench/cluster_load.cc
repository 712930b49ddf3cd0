// A share of a big cluster's agents, in real time, against a running
// vigil-server (issue 15: one server, a 10,000-GPU cluster;
// bench/cluster-load/run.sh runs a few of these against one server).
//
// Nodes node<first>..node<first + nodes - 1> (8 GPUs each, the agent
// simulator's ~229 series) each stream one frame a second over their own
// gRPC connection, as a 1 Hz agent does: timestamps are the wall-clock
// second, so the processes of one run agree on them, and a node's ticks
// fall at its own phase within the second. Nodes are grouped into jobs of
// --job-nodes (a job's nodes step in lockstep). --fault-nodes of them get a
// red line (GPU 0's ECC double-bit counter goes up by one) at times spread
// over the second half of the run; the incidents API is polled every 100 ms
// for the P0 naming each, and the time from writing the faulty frame to
// that poll is the node's frame -> incident latency. With --job-minutes=M
// every job ends after M minutes and its nodes go on as a new job
// (job-<n>-r<run>), the jobs' ends spread over the M minutes: a cluster
// whose series keep changing, for the server's memory over time.
//
// Prints one line of key=value pairs (run.sh merges the processes' lines):
// samples sent, batch ack latency p50/p99 past each stream's first 5, and
// every fault's frame -> incident latency in ms.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include "agent/stream_client.h"
#include "bench/bench_load.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace {

using vigil::bench::NodeFault;
using vigil::bench::NodeSource;
using vigil::bench::Percentile;
using vigil::bench::Steady;

struct Args {
  std::string server = "127.0.0.1:7070";  // gRPC, plaintext
  std::string http_host = "127.0.0.1";
  int http_port = 8080;
  int first_node = 1;
  int nodes = 625;
  int job_nodes = 125;
  int seconds = 600;
  int fault_nodes = 5;
  int job_minutes = 0;  // 0: jobs run the whole time
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* name) { return vigil::bench::FlagValue(argv[i], name); };
    if (auto v = value("server")) a->server = v;
    else if (auto v = value("http-port")) a->http_port = std::atoi(v);
    else if (auto v = value("first-node")) a->first_node = std::atoi(v);
    else if (auto v = value("nodes")) a->nodes = std::atoi(v);
    else if (auto v = value("job-nodes")) a->job_nodes = std::atoi(v);
    else if (auto v = value("seconds")) a->seconds = std::atoi(v);
    else if (auto v = value("fault-nodes")) a->fault_nodes = std::atoi(v);
    else if (auto v = value("job-minutes")) a->job_minutes = std::atoi(v);
    else {
      std::fprintf(stderr, "cluster_load: unknown argument %s\n", argv[i]);
      return false;
    }
  }
  return a->first_node > 0 && a->nodes > 0 && a->job_nodes > 0 && a->seconds >= 60 &&
         a->fault_nodes >= 0 && a->fault_nodes <= a->nodes && a->job_minutes >= 0;
}

std::string NodeName(int index) {
  char name[16];
  std::snprintf(name, sizeof(name), "node%04d", index);
  return name;
}

// What one node's stream did.
struct NodeRun {
  uint64_t samples = 0;
  std::vector<double> acks;                // seconds, past the first 5
  std::atomic<int64_t> fault_sent_ns{0};   // steady clock; 0: not yet
  int64_t incident_seen_ns = 0;            // the poller's; 0: not yet
  bool ok = true;
};

// Streams node `index` from wall-clock second `start_wall` (steady time
// `t0`) for `seconds` frames, at `phase` seconds into each second.
void RunNode(const Args& args, int index, const NodeFault& fault, double start_wall,
             Steady::time_point t0, double phase, NodeRun* run) {
  const int job = (index - 1) / args.job_nodes;
  // The job's run at tick k (--job-minutes), its ends offset by job so
  // that they spread over the period.
  const int period = args.job_minutes * 60;
  const int offset = period > 0 ? (job * 97) % period : 0;
  auto job_name = [&](int k) {
    char name[32];
    if (period == 0) {
      std::snprintf(name, sizeof(name), "job-%03d", job);
    } else {
      std::snprintf(name, sizeof(name), "job-%03d-r%d", job, (k + offset) / period);
    }
    return std::string(name);
  };
  NodeSource source(NodeName(index), job_name(0), 1000 + job, fault);
  grpc::ChannelArguments ch;
  vigil::agent::SetIngestChannelArguments(&ch);  // a connection per node
  auto stub = vigil::v1::Ingest::NewStub(
      grpc::CreateCustomChannel(args.server, grpc::InsecureChannelCredentials(), ch));
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  vigil::v1::FrameBatch batch;
  for (int k = 0; k < args.seconds; ++k) {
    std::this_thread::sleep_until(
        t0 + std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(k + phase)));
    batch.Clear();
    batch.set_seq(k + 1);
    if (k == 0) source.AddHello(&batch);
    if (period > 0 && (k + offset) % period == 0) source.SetJob(job_name(k));
    bool fault_starts = false;
    run->samples += source.AddFrame(start_wall + k, &batch, &fault_starts);
    const auto sent = Steady::now();
    if (fault_starts) run->fault_sent_ns = sent.time_since_epoch().count();
    vigil::v1::Ack ack;
    if (!stream->Write(batch) || !stream->Read(&ack)) {
      run->ok = false;
      break;
    }
    if (k >= 5) run->acks.push_back(std::chrono::duration<double>(Steady::now() - sent).count());
  }
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  // Why a stream failed, for whoever reads the benchmark's output.
  if (!run->ok)
    std::fprintf(stderr, "cluster_load: %s: stream ended: %s (%d)\n", NodeName(index).c_str(),
                 status.error_message().c_str(), static_cast<int>(status.error_code()));
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: cluster_load [--server=HOST:PORT] [--http-port=N] [--first-node=N] "
                 "[--nodes=N] [--job-nodes=N] [--seconds=N (>= 60)] [--fault-nodes=N] "
                 "[--job-minutes=M]\n");
    return 2;
  }
  const double now_wall =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double start_wall = std::ceil(now_wall) + 1;
  const Steady::time_point t0 =
      Steady::now() + std::chrono::duration_cast<Steady::duration>(
                          std::chrono::duration<double>(start_wall - now_wall));
  std::vector<NodeRun> runs(args.nodes);
  // Fault j of this process at 50 % + 40 % * j / faults of the run.
  auto fault_of = [&](int i) {
    NodeFault fault;
    if (args.fault_nodes == 0) return fault;
    const int every = args.nodes / args.fault_nodes;
    if (i % every != 0 || i / every >= args.fault_nodes) return fault;
    const int j = i / every;
    fault.kind = NodeFault::kEccDoubleBit;
    fault.frame = static_cast<int>(args.seconds * (0.5 + 0.4 * j / args.fault_nodes));
    return fault;
  };

  std::atomic<bool> streaming{true};
  std::thread poller([&] {
    httplib::Client api(args.http_host, args.http_port);
    auto pending = [&] {
      int waiting = 0;
      for (const NodeRun& r : runs) waiting += r.fault_sent_ns != 0 && r.incident_seen_ns == 0;
      return waiting;
    };
    Steady::time_point streaming_ended{};
    while (true) {
      if (!streaming && streaming_ended == Steady::time_point{}) streaming_ended = Steady::now();
      if (streaming_ended != Steady::time_point{} &&
          (pending() == 0 || Steady::now() - streaming_ended > std::chrono::seconds(30)))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (pending() == 0) continue;
      auto r = api.Get("/api/v1/incidents?severity=P0&limit=10000");
      const int64_t seen = Steady::now().time_since_epoch().count();
      if (!r || r->status != 200) continue;
      for (int i = 0; i < args.nodes; ++i) {
        NodeRun& run = runs[i];
        if (run.fault_sent_ns == 0 || run.incident_seen_ns != 0) continue;
        if (r->body.find("\"node\":\"" + NodeName(args.first_node + i) + "\"") != std::string::npos)
          run.incident_seen_ns = seen;
      }
    }
  });
  std::vector<std::thread> nodes;
  for (int i = 0; i < args.nodes; ++i) {
    const int index = args.first_node + i;
    nodes.emplace_back(RunNode, std::cref(args), index, fault_of(i), start_wall, t0,
                       (index % 1000) / 1000.0, &runs[i]);
  }
  for (auto& t : nodes) t.join();
  streaming = false;
  poller.join();

  uint64_t samples = 0;
  int failed = 0, faults = 0, found = 0;
  std::vector<double> acks;
  std::string latencies;
  for (int i = 0; i < args.nodes; ++i) {
    const NodeRun& r = runs[i];
    samples += r.samples;
    failed += !r.ok;
    acks.insert(acks.end(), r.acks.begin(), r.acks.end());
    if (fault_of(i).kind == NodeFault::kNone) continue;
    ++faults;
    if (r.fault_sent_ns == 0 || r.incident_seen_ns == 0) continue;
    ++found;
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%s%.0f", latencies.empty() ? "" : ",",
                  (r.incident_seen_ns - r.fault_sent_ns) / 1e6);
    latencies += ms;
  }
  std::printf("nodes=%d first_node=%d seconds=%d samples=%lu ack_p50_ms=%.2f ack_p99_ms=%.2f "
              "failed_streams=%d faults=%d found=%d frame_to_incident_ms=%s\n",
              args.nodes, args.first_node, args.seconds, static_cast<unsigned long>(samples),
              Percentile(acks, 0.5) * 1e3, Percentile(acks, 0.99) * 1e3, failed, faults, found,
              latencies.empty() ? "-" : latencies.c_str());
  return failed == 0 && found == faults ? 0 : 1;
}
