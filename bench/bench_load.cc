#include "bench/bench_load.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>

#include <httplib.h>

#include "agent/sim/simulator.h"
#include "server/remote_write/write_request.h"

namespace vigil::bench {

namespace {

pid_t Spawn(std::vector<std::string> argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::FILE* out = std::fopen(log.c_str(), "w");
    if (out != nullptr) {
      dup2(fileno(out), 1);
      dup2(fileno(out), 2);
    }
    std::vector<char*> args;
    for (std::string& s : argv) args.push_back(s.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::perror("exec");
    _exit(127);
  }
  return pid;
}

}  // namespace

const char* FlagValue(const char* arg, const char* name) {
  const std::string prefix = std::string("--") + name + "=";
  return std::string_view(arg).starts_with(prefix) ? arg + prefix.size() : nullptr;
}

pid_t StartServer(std::vector<std::string> argv, const std::string& log, int port,
                  const char* path) {
  const pid_t pid = Spawn(std::move(argv), log);
  httplib::Client c("127.0.0.1", port);
  for (int i = 0; i < 300; ++i) {
    auto r = c.Get(path);
    if (r && r->status == 200) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "%s did not come up (%s)\n", path, log.c_str());
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

void Stop(pid_t pid) {
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

// CPU seconds (user + system) used so far by process `pid`.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  // Fields after the command name, which is in parentheses.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f;
  for (std::string s; rest >> s;) f.push_back(s);
  // f[0] is field 3 (state); utime is field 14, stime field 15.
  return (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK);
}

// Resident set size of `pid` in bytes.
uint64_t ProcessRssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code error;  // a server that keeps nothing (the floor) has no dir
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, error)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}


NodeSource::NodeSource(const std::string& node, const std::string& job, uint64_t seed,
                       const NodeFault& fault)
    : fault_(fault) {
  agent::SimulatorOptions options;
  options.node = node;
  options.job = job;
  options.seed = seed;
  auto sim = agent::Simulator::Create(options);
  if (!sim.ok()) {
    std::fprintf(stderr, "simulator: %s\n", sim.status().ToString().c_str());
    std::exit(1);
  }
  sim_ = std::make_unique<agent::Simulator>(std::move(*sim));
  node_ = node;
  job_ = job;
  series_ = sim_->series();
  for (SeriesKey& key : series_) {
    key.labels.emplace_back("job", job);
    key.labels.emplace_back("node", node);
    std::sort(key.labels.begin(), key.labels.end());
  }
  // The series the fault changes: GPU 0's ECC double-bit counter or power.
  const char* fault_metric = fault.kind == NodeFault::kEccDoubleBit ? "gpu_ecc_dbe_total"
                             : fault.kind == NodeFault::kPowerDrop  ? "gpu_power_watts"
                                                                    : "";
  for (uint32_t id = 0; id < sim_->series().size(); ++id) {
    const auto& key = sim_->series()[id];
    if (key.metric == fault_metric && key.LabelValue("gpu") == "0") faulty_series_ = id;
  }
}

NodeSource::~NodeSource() = default;
NodeSource::NodeSource(NodeSource&&) noexcept = default;

void NodeSource::SetJob(const std::string& job) {
  job_ = job;
  for (SeriesKey& key : series_) {
    for (auto& [name, value] : key.labels) {
      if (name == "job") value = job;
    }
  }
}

void NodeSource::AddHello(v1::FrameBatch* batch) const {
  batch->mutable_hello()->set_node(node_);
  batch->mutable_hello()->set_agent_instance("bench-" + node_);
  batch->mutable_hello()->set_interval_seconds(1.0);
  const auto& series = sim_->series();
  for (uint32_t id = 0; id < series.size(); ++id) {
    auto* def = batch->add_series();
    def->set_id(id);
    def->set_metric(series[id].metric);
    for (const auto& [n, v] : series[id].labels) {
      if (n == "job" || n == "node") continue;
      auto* l = def->add_labels();
      l->set_name(n);
      l->set_value(v);
    }
  }
}

int NodeSource::AddFrame(double ts, v1::FrameBatch* batch, bool* fault_starts) {
  *fault_starts = false;
  if (frames_ == 0) sim_->Tick(ts - 1);
  auto frame = sim_->Tick(ts);
  const int index = frames_++;
  if (!frame) return 0;
  if (fault_.kind != NodeFault::kNone && index >= fault_.frame) {
    const double delta = fault_.kind == NodeFault::kPowerDrop ? -80 : 1;
    for (auto& sample : frame->samples) {
      if (sample.series == faulty_series_) sample.value += delta;
    }
    *fault_starts = index == fault_.frame;
  }
  auto* f = batch->add_frames();
  f->set_job(job_);
  f->set_step(frame->step);
  f->set_ts(frame->ts);
  f->mutable_series_ids()->Reserve(frame->samples.size());
  f->mutable_values()->Reserve(frame->samples.size());
  for (const auto& s : frame->samples) {
    f->add_series_ids(s.series);
    f->add_values(s.value);
  }
  return static_cast<int>(frame->samples.size());
}

NodeLoad GenerateNode(int index, int frames, int batch_frames, double start_ts,
                      const NodeFault& fault) {
  char name[16];
  std::snprintf(name, sizeof(name), "n%03d", index);
  NodeSource source(name, "bench-job", 1000 + index, fault);
  NodeLoad load;
  load.node = name;
  load.job = "bench-job";
  load.series = source.series();
  v1::FrameBatch batch;
  uint64_t seq = 0;
  auto start_batch = [&] {
    batch.Clear();
    batch.set_seq(++seq);
    if (seq == 1) source.AddHello(&batch);
  };
  start_batch();
  for (int i = 0; i < frames; ++i) {
    bool fault_starts = false;
    load.samples += source.AddFrame(start_ts + i, &batch, &fault_starts);
    if (fault_starts) load.fault_seq = seq;
    if (batch.frames_size() == batch_frames) {
      load.batches.push_back(batch);
      start_batch();
    }
  }
  if (batch.frames_size() > 0) load.batches.push_back(batch);
  return load;
}

std::string RemoteWriteBody(const NodeLoad& load, const v1::FrameBatch& batch) {
  std::vector<ExportSeries> series(load.series.size());
  for (size_t id = 0; id < load.series.size(); ++id) series[id].key = &load.series[id];
  for (const v1::Frame& f : batch.frames()) {
    const int64_t ms = static_cast<int64_t>(std::llround(f.ts() * 1000));
    for (int i = 0; i < f.series_ids_size(); ++i)
      series[f.series_ids(i)].samples.emplace_back(ms, f.values(i));
  }
  std::erase_if(series, [](const ExportSeries& s) { return s.samples.empty(); });
  return EncodeWriteRequest(series);
}

// Streams `load` with up to `window` unacked batches; appends each batch's
// ack latency (seconds) to `latencies`. Paced (pace_hz > 0), batch k is
// sent at `start` + k / pace_hz, as an agent sends one a tick. False on a
// stream error.
bool StreamNode(const std::shared_ptr<grpc::Channel>& channel,
                const NodeLoad& load, int window, double pace_hz,
                Steady::time_point start, std::vector<double>* latencies,
                std::atomic<int64_t>* fault_sent_ns, uint64_t* acked_batches) {
  // The stream opens when its first batch is due, as an agent's opens when
  // it has a frame to send: opened earlier, 1,250 client threads sharing
  // the server's cores can write that batch past the server's first-batch
  // deadline (ingest.first_batch_seconds), which cancels the stream.
  std::this_thread::sleep_until(start);
  auto stub = vigil::v1::Ingest::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  std::vector<Steady::time_point> sent(load.batches.size() + 1);
  std::atomic<uint64_t> acked{0};
  // Bumped with every ack and when the stream ends (the server may end it,
  // e.g. when the first batch came too late): the writer waits on it.
  std::atomic<uint64_t> events{0};
  std::atomic<bool> ended{false};
  std::thread reader([&] {
    vigil::v1::Ack ack;
    while (stream->Read(&ack)) {
      auto now = Steady::now();
      for (uint64_t s = acked + 1; s <= ack.acked_seq(); ++s) {
        latencies->push_back(std::chrono::duration<double>(now - sent[s]).count());
      }
      acked = ack.acked_seq();
      ++events;
      events.notify_all();
    }
    ended = true;
    ++events;
    events.notify_all();
  });
  for (const auto& batch : load.batches) {
    uint64_t seq = batch.seq();
    if (pace_hz > 0) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Steady::duration>(
                      std::chrono::duration<double>((seq - 1) / pace_hz)));
    }
    while (!ended && seq > acked.load() + window) {
      const uint64_t seen = events.load();
      if (!ended && seq > acked.load() + window) events.wait(seen);
    }
    if (ended) break;
    sent[seq] = Steady::now();
    if (seq == load.fault_seq)
      fault_sent_ns->store(sent[seq].time_since_epoch().count());
    if (!stream->Write(batch)) break;
  }
  stream->WritesDone();
  reader.join();
  grpc::Status status = stream->Finish();
  *acked_batches = acked.load();
  if (!status.ok() || acked != load.batches.size()) {
    std::fprintf(stderr, "stream ended: %s (acked %lu of %zu)\n",
                 status.error_message().c_str(),
                 static_cast<unsigned long>(acked.load()), load.batches.size());
    return false;
  }
  return true;
}

}  // namespace vigil::bench
