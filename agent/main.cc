// vigil-agent: streams a node's metrics to vigil-server.
//
// A real node (the default) reads its GPUs through NVML, its RDMA NICs,
// disks and CPU through sysfs and /proc, and the training process through a
// Unix socket (agent/collector.h):
//
//   vigil-agent [--config FILE] --server HOST:PORT [--node NAME]
//               (--insecure | [--tls-ca F] [--tls-cert F --tls-key F])
//               [--token-file F] [--collectors nvml,infiniband,...]
//               [--metrics-listen HOST:PORT] [--once] ...
//
// A simulated node (--simulate[=SCENARIO]) streams the simulator's frames
// instead, optionally with a fault scenario. Flags override the config file
// (agent/agent_config.h; the example deploy/systemd/agent.json lists every
// key). Flags take "--name value" or "--name=value"; the switches --insecure
// and --once take none, and --simulate takes a value only as
// --simulate=SCENARIO (bare --simulate means "healthy"). SCENARIO is a fault
// kind (vigil::agent::SimulatedFaultKinds) or a JSON scenario file. The fault sits
// on --fault-node (default: this node) unless the spec names a node; a node
// the fault is not on still shows its job-wide effects (a straggler slows, a
// hang stops every node), so run every agent of a job with the same
// scenario, seed and --fault-node.
//
// Unacknowledged batches wait in memory (64 MiB), or with --spool-dir in a
// disk spool of at most --spool-max-mb (see agent/disk_spool.h); either way
// the oldest are dropped, and counted, when the bound is hit.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "agent/agent_config.h"
#include "agent/agent_metrics.h"
#include "agent/collect_runner.h"
#include "agent/collectors.h"
#include "agent/disk_spool.h"
#include "agent/server_reachability.h"
#include "agent/simulator_collector.h"
#include "agent/pair_streamer.h"
#include "agent/stream_client.h"
#include "agent/transport_security.h"
#include "nlohmann/json.hpp"

namespace {

constexpr char kUsage[] =
    "usage: vigil-agent [--config FILE] --server HOST:PORT [--node NAME]\n"
    "  transport: --insecure (plain text) | [--tls-ca FILE]\n"
    "             [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]\n"
    "             [--token-file FILE]\n"
    "  common:    [--interval 1.0] [--duration SECONDS (0 = forever)]\n"
    "             [--spool-dir DIR (none: queue in memory)] [--spool-max-mb 256]\n"
    "             [--metrics-listen HOST:PORT (none)]\n"
    "  real node: [--idle-job idle] [--collectors nvml,infiniband,disk,cpu,training]\n"
    "             [--nvml-library libnvidia-ml.so.1] [--sysfs-root /sys]\n"
    "             [--proc-root /proc] [--training-socket /run/vigil/train.sock]\n"
    "             [--once: print one frame as JSON and exit]\n"
    "  simulated: --simulate[=SCENARIO] [--job NAME] [--gpus 8] [--seed N]\n"
    "             [--start-step N] [--fault-node NAME (this node)] [--fault-gpu 3]\n"
    "             [--fault-at-step N | --fault-at SECONDS (kind default, 120)]\n"
    "  SCENARIO: healthy, a fault kind or FILE.json; kinds:\n";

// Seconds the agent keeps trying to deliver pending batches on exit.
constexpr double kFlushSeconds = 5.0;

void PrintUsage(std::FILE* f) {
  std::fputs(kUsage, f);
  for (const auto& [kind, help] : vigil::agent::SimulatedFaultKinds()) {
    std::fprintf(f, "    %-20s %s\n", kind.c_str(), help.c_str());
  }
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "vigil-agent: %s\n", message.c_str());
  std::fprintf(stderr, "(vigil-agent --help lists the flags)\n");
  return 2;
}

// The command line: valued flags, switches and --simulate.
struct CommandLine {
  std::map<std::string, std::string> flags;
  std::set<std::string> switches;
  std::string simulate;  // empty: a real node
  bool help = false;
};

// Parses argv; an error names the offending argument.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  static const std::set<std::string> kValued = {
      "config", "server", "node", "interval", "duration", "spool-dir",
      "spool-max-mb", "metrics-listen", "tls-ca", "tls-cert", "tls-key",
      "tls-server-name", "token-file", "idle-job", "collectors",
      "nvml-library", "sysfs-root", "proc-root", "training-socket", "job",
      "gpus", "seed", "start-step", "fault-node", "fault-gpu",
      "fault-at-step", "fault-at"};
  static const std::set<std::string> kSwitches = {"insecure", "once"};
  CommandLine cl;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      cl.help = true;
      return cl;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError("unexpected argument " + arg);
    }
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "simulate") {
      cl.simulate = has_value ? value : "healthy";
      continue;
    }
    if (kSwitches.count(name)) {
      if (has_value) {
        return absl::InvalidArgumentError("--" + name + " takes no value");
      }
      cl.switches.insert(name);
      continue;
    }
    if (!kValued.count(name)) {
      return absl::InvalidArgumentError("unknown flag --" + name);
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError("--" + name + " needs a value");
      }
      value = argv[++i];
    }
    cl.flags[name] = value;
  }
  return cl;
}

// The host name up to its first dot, as Slurm names nodes.
std::string ShortHostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  std::string name = host;
  return name.substr(0, name.find('.'));
}

// Applies the flags that mirror config keys on top of `config`.
absl::Status ApplyFlags(const CommandLine& cl, vigil::agent::AgentConfig* c) {
  auto flag = [&](const char* name, std::string* out) {
    if (auto it = cl.flags.find(name); it != cl.flags.end()) *out = it->second;
  };
  flag("server", &c->server);
  flag("node", &c->node);
  flag("idle-job", &c->idle_job);
  flag("spool-dir", &c->spool_dir);
  flag("metrics-listen", &c->metrics_listen);
  flag("tls-ca", &c->transport.ca_file);
  flag("tls-cert", &c->transport.cert_file);
  flag("tls-key", &c->transport.key_file);
  flag("tls-server-name", &c->transport.server_name);
  flag("token-file", &c->transport.token_file);
  flag("nvml-library", &c->nvml.library);
  flag("sysfs-root", &c->sysfs_root);
  flag("proc-root", &c->proc_root);
  flag("training-socket", &c->training.socket);
  if (cl.switches.count("insecure")) c->transport.insecure = true;
  if (auto it = cl.flags.find("interval"); it != cl.flags.end() &&
      (!absl::SimpleAtod(it->second, &c->interval_seconds) ||
       !(c->interval_seconds > 0))) {
    return absl::InvalidArgumentError("bad --interval: want seconds > 0");
  }
  if (auto it = cl.flags.find("spool-max-mb"); it != cl.flags.end() &&
      !absl::SimpleAtoi(it->second, &c->spool_max_mb)) {
    return absl::InvalidArgumentError("bad --spool-max-mb: want 1 to 1048576");
  }
  if (auto it = cl.flags.find("collectors"); it != cl.flags.end()) {
    return vigil::agent::EnableOnlyCollectors(it->second, c);
  }
  return absl::OkStatus();
}

// Prints `tick` as one JSON object on stdout, with each collector's error.
void PrintTickJson(const vigil::agent::Tick& tick, const std::string& node,
                   const vigil::agent::CollectRunnerStats& stats) {
  nlohmann::json samples = nlohmann::json::array();
  for (const vigil::agent::Sample& s : tick.samples) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [name, value] : s.key.labels) labels[name] = value;
    nlohmann::json value = s.value;
    // JSON has no NaN or infinities; keep them visible as strings.
    if (!std::isfinite(s.value)) value = std::to_string(s.value);
    samples.push_back(
        {{"metric", s.key.metric}, {"labels", labels}, {"value", value}});
  }
  nlohmann::json collectors = nlohmann::json::object();
  for (const vigil::agent::CollectorStats& c : stats.collectors) {
    nlohmann::json entry = {{"running", c.running},
                            {"samples", c.samples}};
    if (!c.start_error.empty()) entry["error"] = c.start_error;
    if (!c.last_error.empty()) entry["error"] = c.last_error;
    collectors[c.name] = entry;
  }
  nlohmann::json out = {{"node", node},       {"job", tick.job},
                        {"ts", tick.ts},      {"collectors", collectors},
                        {"samples", samples}};
  if (tick.step.has_value()) out["step"] = *tick.step;
  std::printf("%s\n", out.dump(2).c_str());
}

// SIGINT and SIGTERM, blocked in every thread from the start of main (so
// threads the collectors start inherit the mask) and taken by one thread.
sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

// Hands SIGINT/SIGTERM to a thread: the first calls `stop`, a second exits
// at once.
void HandleSignals(std::function<void()> stop) {
  std::thread([stop = std::move(stop)] {
    sigset_t signals = StopSignals();
    int sig;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "vigil-agent: signal %d, flushing and exiting\n", sig);
    stop();
    sigwait(&signals, &sig);
    std::_Exit(1);
  }).detach();
}

// The simulated node of --simulate; `config` is already validated.
absl::StatusOr<std::unique_ptr<vigil::agent::Collector>> MakeSimulator(
    const CommandLine& cl, const vigil::agent::AgentConfig& config) {
  auto get = [&](const char* name, const char* fallback) {
    auto it = cl.flags.find(name);
    return it == cl.flags.end() ? std::string(fallback) : it->second;
  };
  vigil::agent::SimulatedNodeOptions options;
  if (!absl::SimpleAtoi(get("gpus", "8"), &options.gpus) ||
      !absl::SimpleAtoi(get("seed", "1"), &options.seed) ||
      !absl::SimpleAtoi(get("start-step", "0"), &options.start_step)) {
    return absl::InvalidArgumentError(
        "bad number in --gpus, --seed or --start-step");
  }
  if (!get("fault-node", "").empty()) options.fault_node = get("fault-node", "");
  if (std::string v = get("fault-gpu", ""); !v.empty()) {
    int gpu = 0;
    if (!absl::SimpleAtoi(v, &gpu))
      return absl::InvalidArgumentError("bad --fault-gpu");
    options.fault_gpu = gpu;
  }
  if (std::string v = get("fault-at-step", ""); !v.empty()) {
    int64_t step = 0;
    if (!absl::SimpleAtoi(v, &step) || step < 0)
      return absl::InvalidArgumentError("bad --fault-at-step");
    options.fault_at_step = step;
  }
  if (std::string v = get("fault-at", ""); !v.empty()) {
    double at = 0;
    if (!absl::SimpleAtod(v, &at) || at < 0)
      return absl::InvalidArgumentError("bad --fault-at");
    options.fault_at_seconds = at;
  }
  options.scenario = cl.simulate;
  options.node = config.node;
  options.job = get("job", "llama-70b");
  absl::StatusOr<vigil::agent::SimulatedNode> node =
      vigil::agent::MakeSimulatedNode(options);
  if (!node.ok()) return node.status();
  for (const std::string& fault : node->faults)
    std::fprintf(stderr, "vigil-agent: %s\n", fault.c_str());
  return std::move(node->collector);
}

// The stream client of `config`, with its spool.
absl::StatusOr<std::unique_ptr<vigil::agent::PairStreamer>> MakeClient(
    const vigil::agent::AgentConfig& config) {
  absl::StatusOr<std::shared_ptr<const vigil::agent::TransportSecurity>>
      security = vigil::agent::TransportSecurity::Create(config.transport);
  if (!security.ok()) return security.status();
  std::fprintf(stderr, "vigil-agent: transport to %s: %s\n",
               config.server.c_str(), (*security)->Describe().c_str());
  vigil::agent::StreamClientOptions options;
  options.security = std::move(*security);
  options.server = config.server;
  options.node = config.node;
  options.interval_seconds = config.interval_seconds;
  std::unique_ptr<vigil::agent::BatchQueue> queue;  // null: in memory
  if (!config.spool_dir.empty()) {
    absl::StatusOr<std::unique_ptr<vigil::agent::DiskBatchQueue>> spool =
        vigil::agent::DiskBatchQueue::Open(config.spool_dir,
                                           config.spool_max_mb << 20);
    if (!spool.ok()) return spool.status();
    if ((*spool)->size() > 0) {
      std::fprintf(stderr,
                   "vigil-agent: resending %zu unacknowledged batches a "
                   "previous agent left in %s\n",
                   (*spool)->size(), config.spool_dir.c_str());
    }
    if ((*spool)->dropped() > 0) {
      std::fprintf(stderr,
                   "vigil-agent: dropped %llu damaged batches a previous "
                   "agent left in %s\n",
                   static_cast<unsigned long long>((*spool)->dropped()),
                   config.spool_dir.c_str());
    }
    queue = std::move(*spool);
  }
  return vigil::agent::PairStreamer::Create(options, std::move(queue));
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  absl::StatusOr<CommandLine> cl = ParseCommandLine(argc, argv);
  if (!cl.ok()) return Fail(std::string(cl.status().message()));
  if (cl->help) {
    PrintUsage(stdout);
    return 0;
  }
  vigil::agent::AgentConfig config;
  if (auto it = cl->flags.find("config"); it != cl->flags.end()) {
    if (absl::Status s = vigil::agent::LoadAgentConfigFile(it->second, &config);
        !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  if (absl::Status s = ApplyFlags(*cl, &config); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (config.node.empty()) config.node = ShortHostName();
  const bool once = cl->switches.count("once") > 0;
  if (once && config.server.empty()) config.server = "unused:0";
  if (absl::Status s = vigil::agent::ValidateAgentConfig(config); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  double duration = 0;
  if (auto it = cl->flags.find("duration"); it != cl->flags.end() &&
      (!absl::SimpleAtod(it->second, &duration) || duration < 0)) {
    return Fail("bad --duration: want seconds >= 0");
  }
  vigil::Clock* clock = vigil::RealClock();

  std::vector<std::unique_ptr<vigil::agent::Collector>> owned;
  std::unique_ptr<vigil::agent::CollectRunner> collect;
  if (!cl->simulate.empty()) {
    if (once) return Fail("--once reads a real node; drop --simulate");
    absl::StatusOr<std::unique_ptr<vigil::agent::Collector>> made =
        MakeSimulator(*cl, config);
    if (!made.ok()) return Fail(std::string(made.status().message()));
    owned.push_back(std::move(*made));
  } else {
    absl::StatusOr<std::vector<std::unique_ptr<vigil::agent::Collector>>>
        made = vigil::agent::MakeCollectors(config, clock);
    if (!made.ok()) return Fail(std::string(made.status().message()));
    owned = std::move(*made);
  }
  // The runner of a real node, sending to `client` (null for --once).
  auto make_collect_runner = [&](vigil::agent::FrameSink* client) {
    std::vector<vigil::agent::Collector*> collectors;
    for (const auto& c : owned) collectors.push_back(c.get());
    vigil::agent::CollectRunnerOptions options;
    options.interval_seconds = config.interval_seconds;
    options.duration_seconds = duration;
    options.idle_job = config.idle_job;
    return std::make_unique<vigil::agent::CollectRunner>(
        options, std::move(collectors), client, clock);
  };

  if (once) {
    collect = make_collect_runner(nullptr);
    // Two readings an interval apart, so rates and ratios have a base.
    collect->StartCollectors();
    collect->CollectNow(clock->Now());
    {
      std::mutex mu;
      std::condition_variable cv;
      std::unique_lock<std::mutex> l(mu);
      clock->WaitUntil(l, cv, clock->Now() + config.interval_seconds);
    }
    vigil::agent::Tick tick = collect->CollectNow(clock->Now());
    PrintTickJson(tick, config.node, collect->stats());
    collect->StopCollectors();
    return 0;
  }

  absl::StatusOr<std::unique_ptr<vigil::agent::PairStreamer>> client =
      MakeClient(config);
  if (!client.ok()) return Fail(std::string(client.status().message()));
  collect = make_collect_runner(client->get());

  // Says on the node when no server acknowledges (log, metrics, file).
  vigil::agent::ServerReachabilityOptions reach_options;
  reach_options.stats = [c = client->get()] { return c->stats(); };
  reach_options.server = config.server;
  reach_options.unreachable_after_seconds = config.unreachable_after_seconds;
  // Every 10 s, or often enough to notice a short threshold in time.
  reach_options.check_seconds =
      std::min(reach_options.check_seconds, config.unreachable_after_seconds / 2);
  reach_options.status_file = config.status_file;
  reach_options.clock = clock;
  vigil::agent::ServerReachability reachability(std::move(reach_options));

  std::unique_ptr<vigil::agent::MetricsEndpoint> metrics;
  if (!config.metrics_listen.empty()) {
    vigil::agent::PairStreamer* c = client->get();
    vigil::agent::CollectRunner* r = collect.get();
    metrics = std::make_unique<vigil::agent::MetricsEndpoint>(
        [c, r, reach = &reachability] {
          vigil::agent::CollectRunnerStats runner_stats = r->stats();
          return vigil::agent::RenderAgentMetrics(
                     c->stats(), runner_stats,
                     vigil::agent::ReadProcessUsage()) +
                 reach->MetricsText();
        });
    absl::StatusOr<int> port = metrics->Start(config.metrics_listen);
    if (!port.ok()) return Fail(std::string(port.status().message()));
    std::fprintf(stderr, "vigil-agent: /metrics on port %d\n", *port);
  }

  HandleSignals([&] { collect->Stop(); });
  (*client)->Start();
  reachability.Start();
  std::fprintf(stderr,
               "vigil-agent: node %s (instance %s) streaming %s to %s every "
               "%gs\n",
               config.node.c_str(), (*client)->agent_instance().c_str(),
               !cl->simulate.empty() ? "a simulated node" : "this node",
               config.server.c_str(), config.interval_seconds);
  absl::Status status = collect->Run();
  if (!status.ok()) {
    std::fprintf(stderr, "vigil-agent: %s\n", status.ToString().c_str());
  }
  bool flushed = (*client)->Flush(clock->Now() + kFlushSeconds);
  (*client)->Stop();
  if (metrics != nullptr) metrics->Stop();
  reachability.Stop();
  vigil::agent::StreamClientStats s = (*client)->stats();
  std::fprintf(stderr,
               "vigil-agent: exiting: enqueued %llu sent %llu acked %llu "
               "pending %zu%s\n",
               static_cast<unsigned long long>(s.batches_enqueued),
               static_cast<unsigned long long>(s.batches_sent),
               static_cast<unsigned long long>(s.batches_acked),
               s.pending_batches, flushed ? "" : " (not all delivered)");
  return status.ok() ? 0 : 1;
}
