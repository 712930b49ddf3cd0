// From a fault's first anomalous frame to a notification leaving the
// system: Vigil against an equivalent Prometheus 2.42 rule + Alertmanager
// 0.25, on the same samples at the same time (issue 15;
// bench/vs-prometheus/run.sh runs it, bench/RESULTS.md has the results).
//
// N 8-GPU nodes of one job stream the agent simulator's frames at 1 Hz, in
// real time, to both systems: to vigil-server over gRPC as agents stream
// them, and to Prometheus' remote-write receiver as one request per
// node-tick. After a lead-in, faults start one by one, `--spacing` seconds
// apart (so they fall at every phase of Prometheus' evaluation interval):
//   - red line: GPU 0's ECC double-bit counter of node i goes up by one
//     (Vigil: P0 at once; Prometheus: `gpu_ecc_dbe_total > 0`, no `for:`);
//   - power drop: GPU 0 of another node draws 80 W less (Vigil: P2 when
//     4 of 5 frames are 50 W below the job's median; Prometheus: the same
//     comparison against the job's median with `for: 3s`, the time 4 of 5
//     frames take at 1 Hz).
// Both systems notify one webhook receiver in this process (Vigil's
// `webhook` receiver; Alertmanager's webhook_config). The latency of a
// fault is the time from sending its first faulty frame to that system to
// the first notification naming the node.
//
// --intervals=default keeps Prometheus' and Alertmanager's defaults
// (evaluation_interval 1m, group_wait 30s); --intervals=tuned is what an
// operator who cares sets (evaluation_interval 1s, group_wait 0s,
// group_interval 1s). Vigil has no such interval; its detection warm-up is
// shortened (warmup_steps 5) so that the run need not last half an hour:
// that changes when detection starts, not how fast it reacts.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "agent/stream_client.h"
#include "bench/bench_load.h"

namespace {

using vigil::bench::GenerateNode;
using vigil::bench::NodeFault;
using vigil::bench::NodeLoad;
using vigil::bench::Percentile;
using vigil::bench::StartServer;
using vigil::bench::Steady;
using vigil::bench::Stop;

struct Args {
  std::string server_bin = "build/server/vigil-server";
  std::string prometheus_bin = "/usr/bin/prometheus";
  std::string alertmanager_bin = "/usr/bin/prometheus-alertmanager";
  std::string intervals = "tuned";  // or "default"
  int nodes = 20;
  int faults = 8;         // of each kind; nodes >= 2 * faults + 3
  int spacing_s = 7;      // between two faults of a kind
  int lead_s = 60;        // frames before the first fault
  int grpc_port = 17171;
  int http_port = 18181;
  int prometheus_port = 19191;
  int alertmanager_port = 19193;
  int hook_port = 19195;
  std::string dir = "/tmp/vigil-alert-latency";
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* name) { return vigil::bench::FlagValue(argv[i], name); };
    if (auto v = value("server-bin")) a->server_bin = v;
    else if (auto v = value("prometheus-bin")) a->prometheus_bin = v;
    else if (auto v = value("alertmanager-bin")) a->alertmanager_bin = v;
    else if (auto v = value("intervals")) a->intervals = v;
    else if (auto v = value("nodes")) a->nodes = std::atoi(v);
    else if (auto v = value("faults")) a->faults = std::atoi(v);
    else if (auto v = value("spacing")) a->spacing_s = std::atoi(v);
    else if (auto v = value("lead")) a->lead_s = std::atoi(v);
    else if (auto v = value("dir")) a->dir = v;
    else {
      std::fprintf(stderr, "alert_latency: unknown argument %s\n", argv[i]);
      return false;
    }
  }
  return (a->intervals == "default" || a->intervals == "tuned") && a->faults > 0 &&
         a->nodes >= 2 * a->faults + 3 && a->spacing_s > 0 && a->lead_s >= 30;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// First notification per (system, node), as steady-clock nanoseconds.
class Notifications {
 public:
  void Record(const std::string& system, const std::string& node, const std::string& what) {
    const int64_t now = Steady::now().time_since_epoch().count();
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = first_.try_emplace(system + "/" + node, Seen{now, what});
    (void)it;
    if (fresh) ++count_;
  }
  // The first notification about `node` from `system`; false if none yet.
  bool First(const std::string& system, const std::string& node, int64_t* ns,
             std::string* what) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = first_.find(system + "/" + node);
    if (it == first_.end()) return false;
    *ns = it->second.ns;
    *what = it->second.what;
    return true;
  }
  int count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  struct Seen {
    int64_t ns;
    std::string what;
  };
  mutable std::mutex mu_;
  std::map<std::string, Seen> first_;
  int count_ = 0;
};

std::string VigilConfig(const Args& args) {
  const nlohmann::json page_step = {{"targets", {"user:bench"}},
                                    {"channels", {"webhook"}},
                                    {"wait_minutes", 5},
                                    {"repeat", 1}};
  const nlohmann::json config = {
      {"detection", {{"warmup_steps", 5}, {"warmup_max_seconds", 5}, {"rewarm_seconds", 5}}},
      {"escalation",
       {{"users", {{{"name", "bench"}, {"email", "bench@example.com"}}}},
        {"policies",
         {{"P0", {{"steps", {page_step}}}},
          {"P1", {{"steps", {page_step}}}},
          {"P2", {{"steps", {page_step}}}}}}}},
      {"notifications",
       {{"receivers",
         {{{"name", "bench"},
           {"type", "webhook"},
           {"settings",
            {{"url", "http://127.0.0.1:" + std::to_string(args.hook_port) + "/vigil"},
             {"secret", "bench"}}}}}},
        {"channels", {{"webhook", {{"receivers", {"bench"}}}}}}}},
  };
  return config.dump(2);
}

std::string PrometheusConfig(const Args& args) {
  std::string global = args.intervals == "tuned" ? "global:\n  evaluation_interval: 1s\n"
                                                 : "global: {}\n";
  return global + "rule_files: [" + args.dir + "/rules.yml]\n" +
         "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['127.0.0.1:" +
         std::to_string(args.alertmanager_port) + "']\n";
}

// The rules an operator would write for the same two faults.
constexpr char kRules[] = R"(groups:
  - name: gpu
    rules:
      - alert: GpuEccDoubleBit
        expr: gpu_ecc_dbe_total > 0
        labels: {severity: critical}
      - alert: GpuPowerBelowPeers
        expr: >
          gpu_power_watts
            < on(job) group_left() (quantile by (job) (0.5, gpu_power_watts) - 50)
          and on(job) quantile by (job) (0.5, gpu_power_watts) > 150
        for: 3s
        labels: {severity: warning}
)";

std::string AlertmanagerConfig(const Args& args) {
  std::string route = "route:\n  receiver: bench\n  group_by: [alertname, node]\n";
  if (args.intervals == "tuned") route += "  group_wait: 0s\n  group_interval: 1s\n";
  return route + "receivers:\n  - name: bench\n    webhook_configs:\n      - url: http://127.0.0.1:" +
         std::to_string(args.hook_port) + "/am\n";
}

struct Fault {
  int node;  // index into the loads
  NodeFault::Kind kind;
  int frame;
};

// Streams `load` to Vigil, one batch per tick from `t0` (each node at its
// own phase within the second, as agents tick); records when the fault
// batch was written. False on a stream error.
bool StreamToVigil(const Args& args, const NodeLoad& load, Steady::time_point t0,
                   const std::atomic<bool>& done, std::atomic<int64_t>* fault_sent) {
  grpc::ChannelArguments ch;
  vigil::agent::SetIngestChannelArguments(&ch);
  auto stub = vigil::v1::Ingest::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(args.grpc_port), grpc::InsecureChannelCredentials(), ch));
  grpc::ClientContext ctx;
  auto rw = stub->Stream(&ctx);
  bool ok = true;
  for (size_t k = 0; k < load.batches.size() && !done; ++k) {
    std::this_thread::sleep_until(t0 + std::chrono::seconds(k));
    const vigil::v1::FrameBatch& batch = load.batches[k];
    if (batch.seq() == load.fault_seq) *fault_sent = Steady::now().time_since_epoch().count();
    vigil::v1::Ack ack;
    if (!rw->Write(batch) || !rw->Read(&ack)) {
      ok = false;
      break;
    }
  }
  rw->WritesDone();
  (void)rw->Finish();
  return ok;
}

// The same to Prometheus, one remote-write request per tick, at the same
// times.
bool StreamToPrometheus(const Args& args, const NodeLoad& load, Steady::time_point t0,
                        const std::atomic<bool>& done, std::atomic<int64_t>* fault_sent) {
  std::vector<std::string> bodies;
  for (const vigil::v1::FrameBatch& batch : load.batches)
    bodies.push_back(vigil::bench::RemoteWriteBody(load, batch));
  httplib::Client client("127.0.0.1", args.prometheus_port);
  client.set_keep_alive(true);
  const httplib::Headers headers = {{"Content-Encoding", "snappy"},
                                    {"X-Prometheus-Remote-Write-Version", "0.1.0"}};
  for (size_t k = 0; k < bodies.size() && !done; ++k) {
    std::this_thread::sleep_until(t0 + std::chrono::seconds(k));
    if (load.batches[k].seq() == load.fault_seq)
      *fault_sent = Steady::now().time_since_epoch().count();
    auto reply = client.Post("/api/v1/write", headers, bodies[k], "application/x-protobuf");
    if (!reply || reply->status / 100 != 2) {
      std::fprintf(stderr, "prometheus refused a request: %s\n",
                   reply ? (std::to_string(reply->status) + " " + reply->body).c_str()
                         : "no answer");
      return false;
    }
  }
  return true;
}

void Report(const char* kind, const std::vector<double>& vigil,
            const std::vector<double>& prom, int faults) {
  auto ms = [](const std::vector<double>& v, double p) { return Percentile(v, p) * 1e3; };
  std::printf("%s vigil_found=%zu/%d vigil_p50_ms=%.0f vigil_max_ms=%.0f prometheus_found=%zu/%d "
              "prometheus_p50_ms=%.0f prometheus_max_ms=%.0f ratio_p50=%.1fx\n",
              kind, vigil.size(), faults, ms(vigil, 0.5), ms(vigil, 1.0), prom.size(), faults,
              ms(prom, 0.5), ms(prom, 1.0),
              vigil.empty() || prom.empty() ? NAN : Percentile(prom, 0.5) / Percentile(vigil, 0.5));
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: alert_latency [--intervals=default|tuned] [--server-bin=P] "
                 "[--prometheus-bin=P] [--alertmanager-bin=P] [--nodes=N (>= 2*faults+3)] "
                 "[--faults=N] [--spacing=S] [--lead=S (>= 30)] [--dir=D]\n");
    return 2;
  }
  std::filesystem::remove_all(args.dir);
  std::filesystem::create_directories(args.dir);
  // Time after the last fault for the slowest path: an evaluation interval
  // for the condition, another for `for:`, then group_wait.
  const int tail_s = args.intervals == "tuned" ? 20 : 160;
  const int frames = args.lead_s + args.faults * args.spacing_s + tail_s;
  std::vector<Fault> faults;
  for (int i = 0; i < args.faults; ++i) {
    faults.push_back({i, NodeFault::kEccDoubleBit, args.lead_s + i * args.spacing_s});
    faults.push_back({args.faults + i, NodeFault::kPowerDrop,
                      args.lead_s + i * args.spacing_s + args.spacing_s / 2});
  }

  Notifications seen;
  httplib::Server hook;
  hook.Post("/vigil", [&](const httplib::Request& req, httplib::Response& res) {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (!body.is_discarded() && body.value("event", "") == "trigger") {
      const auto& incident = body["incident"];
      seen.Record("vigil", incident.value("node", ""),
                  incident.value("severity", "") + " " + incident.value("kind", ""));
    }
    res.set_content("{}", "application/json");
  });
  hook.Post("/am", [&](const httplib::Request& req, httplib::Response& res) {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (!body.is_discarded() && body.contains("alerts")) {
      for (const auto& alert : body["alerts"]) {
        if (alert.value("status", "") != "firing") continue;
        const auto& labels = alert["labels"];
        seen.Record("prometheus", labels.value("node", ""), labels.value("alertname", ""));
      }
    }
    res.set_content("{}", "application/json");
  });
  std::thread hook_thread([&] { hook.listen("127.0.0.1", args.hook_port); });
  while (!hook.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  WriteFile(args.dir + "/vigil.json", VigilConfig(args));
  WriteFile(args.dir + "/rules.yml", kRules);
  WriteFile(args.dir + "/prometheus.yml", PrometheusConfig(args));
  WriteFile(args.dir + "/alertmanager.yml", AlertmanagerConfig(args));
  const pid_t vigil = StartServer(
      {args.server_bin, "--data-dir=" + args.dir + "/vigil", "--config=" + args.dir + "/vigil.json",
       "--grpc-listen=127.0.0.1:" + std::to_string(args.grpc_port),
       "--http-listen=127.0.0.1:" + std::to_string(args.http_port), "--grpc-insecure"},
      args.dir + "/vigil.log", args.http_port, "/healthz");
  const pid_t am = StartServer(
      {args.alertmanager_bin, "--config.file=" + args.dir + "/alertmanager.yml",
       "--storage.path=" + args.dir + "/am",
       "--web.listen-address=127.0.0.1:" + std::to_string(args.alertmanager_port),
       "--cluster.listen-address="},
      args.dir + "/alertmanager.log", args.alertmanager_port, "/-/ready");
  const pid_t prom = StartServer(
      {args.prometheus_bin, "--config.file=" + args.dir + "/prometheus.yml",
       "--storage.tsdb.path=" + args.dir + "/prometheus",
       "--web.listen-address=127.0.0.1:" + std::to_string(args.prometheus_port),
       "--web.enable-remote-write-receiver"},
      args.dir + "/prometheus.log", args.prometheus_port, "/-/ready");
  if (vigil < 0 || am < 0 || prom < 0) {
    for (pid_t p : {vigil, am, prom})
      if (p > 0) Stop(p);
    hook.stop();
    hook_thread.join();
    return 1;
  }

  // Frames in real time: frame k carries the wall-clock second it is sent in.
  const auto wall_now = std::chrono::system_clock::now();
  const double now_s = std::chrono::duration<double>(wall_now.time_since_epoch()).count();
  const double start_ts = std::ceil(now_s) + 2;
  const Steady::time_point t0 =
      Steady::now() + std::chrono::duration_cast<Steady::duration>(
                          std::chrono::duration<double>(start_ts - now_s));
  std::vector<NodeLoad> loads(args.nodes);
  {
    std::vector<std::thread> gen;
    for (int i = 0; i < args.nodes; ++i)
      gen.emplace_back([&, i] {
        NodeFault fault;
        for (const Fault& f : faults)
          if (f.node == i) fault = {f.kind, f.frame};
        loads[i] = GenerateNode(i + 1, frames, 1, start_ts, fault);
      });
    for (auto& t : gen) t.join();
  }
  std::printf("intervals=%s nodes=%d faults=%d+%d frames=%d\n", args.intervals.c_str(),
              args.nodes, args.faults, args.faults, frames);
  std::fflush(stdout);

  std::atomic<bool> done{false};
  std::atomic<bool> ok{true};
  std::vector<std::atomic<int64_t>> vigil_sent(args.nodes), prom_sent(args.nodes);
  std::vector<std::thread> senders;
  for (int i = 0; i < args.nodes; ++i) {
    // Node i ticks i / nodes of a second into each second.
    const Steady::time_point node_t0 =
        t0 + std::chrono::duration_cast<Steady::duration>(
                 std::chrono::duration<double>(static_cast<double>(i) / args.nodes));
    senders.emplace_back([&, i, node_t0] {
      if (!StreamToVigil(args, loads[i], node_t0, done, &vigil_sent[i])) ok = false;
    });
    senders.emplace_back([&, i, node_t0] {
      if (!StreamToPrometheus(args, loads[i], node_t0, done, &prom_sent[i])) ok = false;
    });
  }
  // Stop early once every fault has been notified by both.
  const int expected = 2 * static_cast<int>(faults.size());
  while (Steady::now() < t0 + std::chrono::seconds(frames)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    int found = 0;
    for (const Fault& f : faults) {
      int64_t ns;
      std::string what;
      found += seen.First("vigil", loads[f.node].node, &ns, &what);
      found += seen.First("prometheus", loads[f.node].node, &ns, &what);
    }
    if (found == expected) break;
  }
  done = true;
  for (auto& t : senders) t.join();

  std::vector<double> vigil_lat[2], prom_lat[2];
  for (const Fault& f : faults) {
    const int k = f.kind == NodeFault::kEccDoubleBit ? 0 : 1;
    const std::string& node = loads[f.node].node;
    int64_t ns;
    std::string what;
    if (seen.First("vigil", node, &ns, &what) && vigil_sent[f.node] > 0) {
      vigil_lat[k].push_back((ns - vigil_sent[f.node]) / 1e9);
      std::printf("  vigil      %s %-10s %6.0f ms (%s)\n", node.c_str(), k == 0 ? "red-line" : "power",
                  vigil_lat[k].back() * 1e3, what.c_str());
    }
    if (seen.First("prometheus", node, &ns, &what) && prom_sent[f.node] > 0) {
      prom_lat[k].push_back((ns - prom_sent[f.node]) / 1e9);
      std::printf("  prometheus %s %-10s %6.0f ms (%s)\n", node.c_str(), k == 0 ? "red-line" : "power",
                  prom_lat[k].back() * 1e3, what.c_str());
    }
  }
  // Notifications about nodes without a fault are false pages.
  int false_pages = 0;
  for (int i = 0; i < args.nodes; ++i) {
    bool faulty = false;
    for (const Fault& f : faults) faulty |= f.node == i;
    int64_t ns;
    std::string what;
    for (const char* system : {"vigil", "prometheus"}) {
      if (!faulty && seen.First(system, loads[i].node, &ns, &what)) {
        ++false_pages;
        std::printf("  false page: %s about %s (%s)\n", system, loads[i].node.c_str(), what.c_str());
      }
    }
  }
  Report("red_line", vigil_lat[0], prom_lat[0], args.faults);
  Report("power_drop", vigil_lat[1], prom_lat[1], args.faults);
  std::printf("false_pages=%d streams_ok=%d\n", false_pages, ok ? 1 : 0);
  for (pid_t p : {vigil, am, prom}) Stop(p);
  hook.stop();
  hook_thread.join();
  return ok ? 0 : 1;
}
