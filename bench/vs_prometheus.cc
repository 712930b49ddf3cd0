// Vigil against Prometheus 2.42 on identical data (issue 15,
// bench/vs-prometheus/run.sh runs it and bench/RESULTS.md has the results).
//
// The agent's simulator makes the frames of N 8-GPU nodes at 1 Hz before
// timing starts. The same samples then go
//   - to vigil-server over gRPC, as agents stream them (detection on), and
//   - to Prometheus' remote-write receiver, as snappy protobuf requests,
// in lockstep rounds: every node sends its next request, then the next
// round starts (a cluster's ticks, unpaced). --batch-frames=1 is one
// node-tick per request, as a 1 Hz agent sends; larger is a batch.
//
// Reported per system: CPU seconds of the server process per million
// samples, bytes on disk per sample (Vigil: its sample blocks, closed and
// open, and its series index after a clean shutdown, with the whole data
// dir beside it; Prometheus: its persisted blocks after the head was
// compacted into them, against the samples the blocks' meta.json count),
// and RSS growth per active series. Then the ratios, Prometheus over Vigil.
#include <barrier>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <httplib.h>
#include <rocksdb/db.h>

#include "agent/stream_client.h"
#include "bench/bench_load.h"
#include "bench/noisy_data.h"

namespace {

using vigil::bench::DirBytes;
using vigil::bench::GenerateNode;
using vigil::bench::NodeLoad;
using vigil::bench::ProcessCpuSeconds;
using vigil::bench::ProcessRssBytes;
using vigil::bench::StartServer;
using vigil::bench::Stop;
using vigil::bench::Steady;

struct Args {
  std::string server_bin = "build/server/vigil-server";
  std::string prometheus_bin = "/usr/bin/prometheus";
  int nodes = 8;
  int frames = 1800;  // 30 min at 1 Hz: Prometheus compacts 5-min blocks
  int batch_frames = 1;
  bool noisy = false;  // bench/noisy_data.h
  int grpc_port = 17170;
  int http_port = 18180;
  int prometheus_port = 19190;
  std::string dir = "/tmp/vigil-vs-prometheus";
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) { return vigil::bench::FlagValue(argv[i], name); };
    if (auto v = value("server-bin")) a->server_bin = v;
    else if (auto v = value("prometheus-bin")) a->prometheus_bin = v;
    else if (auto v = value("nodes")) a->nodes = std::atoi(v);
    else if (auto v = value("frames")) a->frames = std::atoi(v);
    else if (auto v = value("batch-frames")) a->batch_frames = std::atoi(v);
    else if (auto v = value("dir")) a->dir = v;
    else if (arg == "--noisy") a->noisy = true;
    else {
      std::fprintf(stderr, "vs_prometheus: unknown argument %s\n", argv[i]);
      return false;
    }
  }
  return a->nodes > 0 && a->frames >= 600 && a->batch_frames > 0;
}

// What one system did with the load.
struct Result {
  double cpu_s = 0;
  double wall_s = 0;
  uint64_t samples = 0;       // sent
  double disk_bytes = 0;      // persisted: blocks and their index
  double disk_samples = 0;    // samples in what was persisted
  double dir_bytes = 0;       // the whole data dir
  double rss_growth = 0;      // bytes, end minus start
  bool ok = true;
};

// Runs `send(node, round)` for every node in lockstep rounds.
template <typename Send>
bool Rounds(int nodes, size_t rounds, Send send) {
  std::barrier sync(nodes);
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int n = 0; n < nodes; ++n) {
    threads.emplace_back([&, n] {
      for (size_t r = 0; r < rounds; ++r) {
        if (!send(n, r)) ok = false;
        sync.arrive_and_wait();
      }
    });
  }
  for (auto& t : threads) t.join();
  return ok;
}

// Bytes of each RocksDB column family of the databases under `dir`
// (opened read-only after the server stopped), summed by family name; none
// when `dir` does not exist (bench/grpc_floor_server keeps nothing).
std::map<std::string, uint64_t> FamilyBytes(const std::string& dir) {
  std::map<std::string, uint64_t> out;
  std::error_code error;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, error)) {
    if (!e.is_regular_file() || e.path().filename() != "CURRENT") continue;
    const std::string db_dir = e.path().parent_path().string();
    std::vector<std::string> names;
    if (!rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), db_dir, &names).ok()) continue;
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& name : names) descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    if (!rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(), db_dir, descriptors, &handles, &db).ok())
      continue;
    for (rocksdb::ColumnFamilyHandle* h : handles) {
      rocksdb::ColumnFamilyMetaData meta;
      db->GetColumnFamilyMetaData(h, &meta);
      out[h->GetName()] += meta.size;
      (void)db->DestroyColumnFamilyHandle(h);
    }
    delete db;
  }
  return out;
}

Result RunVigil(const Args& args, const std::vector<NodeLoad>& loads, uint64_t samples) {
  Result res;
  res.samples = samples;
  const std::string data = args.dir + "/vigil";
  std::filesystem::remove_all(data);
  const pid_t server = StartServer(
      {args.server_bin, "--data-dir=" + data,
       "--grpc-listen=127.0.0.1:" + std::to_string(args.grpc_port),
       "--http-listen=127.0.0.1:" + std::to_string(args.http_port), "--grpc-insecure"},
      args.dir + "/vigil.log", args.http_port, "/healthz");
  if (server < 0) {
    res.ok = false;
    return res;
  }
  const double rss0 = ProcessRssBytes(server);
  const double cpu0 = ProcessCpuSeconds(server);
  const auto wall0 = Steady::now();
  // One stream per node, one batch in flight (an agent's), written and
  // acked round by round.
  struct Stream {
    std::unique_ptr<vigil::v1::Ingest::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<vigil::v1::FrameBatch, vigil::v1::Ack>> rw;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  for (int n = 0; n < args.nodes; ++n) {
    grpc::ChannelArguments ch;
    vigil::agent::SetIngestChannelArguments(&ch);
    auto s = std::make_unique<Stream>();
    s->stub = vigil::v1::Ingest::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(args.grpc_port), grpc::InsecureChannelCredentials(), ch));
    s->rw = s->stub->Stream(&s->ctx);
    streams.push_back(std::move(s));
  }
  const size_t rounds = loads[0].batches.size();
  res.ok = Rounds(args.nodes, rounds, [&](int n, size_t r) {
    if (r >= loads[n].batches.size()) return true;
    vigil::v1::Ack ack;
    return streams[n]->rw->Write(loads[n].batches[r]) && streams[n]->rw->Read(&ack);
  });
  for (auto& s : streams) {
    s->rw->WritesDone();
    (void)s->rw->Finish();
  }
  res.wall_s = std::chrono::duration<double>(Steady::now() - wall0).count();
  res.cpu_s = ProcessCpuSeconds(server) - cpu0;
  res.rss_growth = ProcessRssBytes(server) - rss0;
  Stop(server);
  res.dir_bytes = DirBytes(data);
  // What stands for Prometheus' blocks: the closed sample blocks, the open
  // ones saved at shutdown and the series index.
  const std::map<std::string, uint64_t> families = FamilyBytes(data);
  uint64_t in_families = 0;
  for (const auto& [name, bytes] : families) {
    in_families += bytes;
    std::printf("  vigil column family %-10s %10lu bytes\n", name.c_str(),
                static_cast<unsigned long>(bytes));
    if (name == "raw" || name == "open" || name == "index") res.disk_bytes += bytes;
  }
  std::printf("  vigil other files (frame log, RocksDB logs and manifests) %lu bytes\n",
              static_cast<unsigned long>(res.dir_bytes - in_families));
  res.disk_samples = samples;
  return res;
}

// Sums meta.json numSamples and the bytes of every persisted block.
void Blocks(const std::string& tsdb, double* bytes, double* samples) {
  *bytes = *samples = 0;
  if (!std::filesystem::is_directory(tsdb)) return;
  const std::regex num(R"("numSamples":\s*([0-9]+))");
  for (const auto& e : std::filesystem::directory_iterator(tsdb)) {
    const auto meta = e.path() / "meta.json";
    if (!e.is_directory() || !std::filesystem::exists(meta)) continue;
    std::ifstream in(meta);
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    std::smatch m;
    if (!std::regex_search(s, m, num)) continue;
    *samples += std::stod(m[1]);
    *bytes += DirBytes(e.path().string());
  }
}

Result RunPrometheus(const Args& args, const std::vector<NodeLoad>& loads, uint64_t samples) {
  Result res;
  res.samples = samples;
  // The requests, encoded before timing: one per batch, one TimeSeries per
  // series, every frame's sample of it.
  std::vector<std::vector<std::string>> bodies(loads.size());
  for (size_t n = 0; n < loads.size(); ++n) {
    for (const vigil::v1::FrameBatch& batch : loads[n].batches)
      bodies[n].push_back(vigil::bench::RemoteWriteBody(loads[n], batch));
  }
  const std::string tsdb = args.dir + "/prometheus";
  std::filesystem::remove_all(tsdb);
  std::filesystem::create_directories(tsdb);
  {
    std::ofstream config(args.dir + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1m\n";
  }
  // Blocks of 5 min (as 2 h would need 3 h of data to compact): the head
  // is compacted into blocks while the run lasts, and again a minute on.
  const pid_t server = StartServer(
      {args.prometheus_bin, "--config.file=" + args.dir + "/prometheus.yml",
       "--storage.tsdb.path=" + tsdb,
       "--web.listen-address=127.0.0.1:" + std::to_string(args.prometheus_port),
       "--web.enable-remote-write-receiver", "--storage.tsdb.min-block-duration=5m",
       "--storage.tsdb.max-block-duration=5m"},
      args.dir + "/prometheus.log", args.prometheus_port, "/-/ready");
  if (server < 0) {
    res.ok = false;
    return res;
  }
  const double rss0 = ProcessRssBytes(server);
  const double cpu0 = ProcessCpuSeconds(server);
  const auto wall0 = Steady::now();
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int n = 0; n < args.nodes; ++n) {
    clients.push_back(std::make_unique<httplib::Client>("127.0.0.1", args.prometheus_port));
    clients.back()->set_keep_alive(true);
  }
  const httplib::Headers headers = {{"Content-Encoding", "snappy"},
                                    {"X-Prometheus-Remote-Write-Version", "0.1.0"}};
  std::atomic<int> refused{0};
  res.ok = Rounds(args.nodes, bodies[0].size(), [&](int n, size_t r) {
    if (r >= bodies[n].size()) return true;
    auto reply = clients[n]->Post("/api/v1/write", headers, bodies[n][r],
                                  "application/x-protobuf");
    if (!reply || reply->status / 100 != 2) {
      if (refused++ < 3)
        std::fprintf(stderr, "prometheus refused a request: %s\n",
                     reply ? (std::to_string(reply->status) + " " + reply->body).c_str()
                           : "no answer");
      return false;
    }
    return true;
  });
  res.wall_s = std::chrono::duration<double>(Steady::now() - wall0).count();
  res.cpu_s = ProcessCpuSeconds(server) - cpu0;
  res.rss_growth = ProcessRssBytes(server) - rss0;
  // Wait for the head to be compacted into blocks (Prometheus tries every
  // minute); the compaction's own CPU is not counted above.
  double bytes = 0, persisted = 0;
  for (int i = 0; i < 180; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    Blocks(tsdb, &bytes, &persisted);
    if (persisted >= samples / 3.0) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      Blocks(tsdb, &bytes, &persisted);
      break;
    }
  }
  Stop(server);
  res.disk_bytes = bytes;
  res.disk_samples = persisted;
  res.dir_bytes = bytes;
  return res;
}

void Print(const char* who, const Result& r, double series) {
  std::printf("%-10s cpu_s=%.3f wall_s=%.2f samples=%lu cpu_s_per_M=%.3f "
              "bytes_per_sample=%.3f (persisted %.0f samples) dir_bytes_per_sample=%.3f "
              "rss_per_series=%.0f ok=%d\n",
              who, r.cpu_s, r.wall_s, static_cast<unsigned long>(r.samples),
              r.cpu_s / (r.samples / 1e6), r.disk_samples > 0 ? r.disk_bytes / r.disk_samples : 0,
              r.disk_samples, r.disk_samples > 0 ? r.dir_bytes / r.disk_samples : 0,
              r.rss_growth / series, r.ok ? 1 : 0);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: vs_prometheus [--server-bin=P] [--prometheus-bin=P] [--nodes=N] "
                 "[--frames=N (>= 600)] [--batch-frames=N] [--noisy] [--dir=D]\n");
    return 2;
  }
  std::filesystem::create_directories(args.dir);
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const double start_ts = std::floor(now) - args.frames - 120;
  std::vector<NodeLoad> loads(args.nodes);
  {
    std::vector<std::thread> gen;
    for (int i = 0; i < args.nodes; ++i)
      gen.emplace_back([&, i] {
        loads[i] = GenerateNode(i + 1, args.frames, args.batch_frames, start_ts, {});
        if (args.noisy) vigil::bench::MakeNoisy(&loads[i], 7000 + i);
      });
    for (auto& t : gen) t.join();
  }
  uint64_t samples = 0;
  double series = 0;
  for (const NodeLoad& l : loads) {
    samples += l.samples;
    series += l.series.size();
  }
  const double entropy = vigil::bench::EntropyBytesPerSample(loads);
  std::printf("nodes=%d frames=%d batch_frames=%d noisy=%d samples=%lu series=%.0f "
              "entropy_bytes_per_sample=%.3f\n",
              args.nodes, args.frames, args.batch_frames, args.noisy ? 1 : 0,
              static_cast<unsigned long>(samples), series, entropy);
  const Result vigil = RunVigil(args, loads, samples);
  Print("vigil", vigil, series);
  const Result prom = RunPrometheus(args, loads, samples);
  Print("prometheus", prom, series);
  const double vb = vigil.disk_bytes / vigil.disk_samples;
  const double pb = prom.disk_samples > 0 ? prom.disk_bytes / prom.disk_samples : NAN;
  std::printf("ratio cpu_per_sample=%.1fx bytes_per_sample=%.3f rss_per_series=%.2f "
              "vigil_over_entropy=%.2f prometheus_over_entropy=%.2f "
              "(Prometheus over Vigil for CPU; Vigil over Prometheus for bytes and memory)\n",
              (prom.cpu_s / prom.samples) / (vigil.cpu_s / vigil.samples), vb / pb,
              vigil.rss_growth / prom.rss_growth, vb / entropy, pb / entropy);
  return vigil.ok && prom.ok ? 0 : 1;
}
