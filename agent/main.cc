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
// (agent/agent_config.h; every key: docs/CONFIG.md or --config-reference). The flags are Abseil flags below, parsed by common/flags.h (--help,
// --version, exit 2 on a bad flag; docs/CLI.md): "--name value" or
// "--name=value"; the switches --insecure and --once take none, and
// --simulate takes a value only as --simulate=SCENARIO (bare --simulate
// means "healthy"). SCENARIO is a fault
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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
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
#include "common/flags.h"
#include "nlohmann/json.hpp"

// Flags that mirror a config key override it only when given; their
// defaults are the config's.
ABSL_FLAG(std::string, config, "", "FILE: agent config (every key: docs/CONFIG.md; an "
          "example: deploy/systemd/agent.json)");
ABSL_FLAG(bool, config_reference, false,
          "print every key of the JSON config (type, default, range, meaning) as JSON and "
          "exit; docs/CONFIG.md is made from it");
ABSL_FLAG(bool, check_config, false,
          "check the config (and the flags over it) and exit: it parses and validates, and the "
          "TLS and token files load as a connection would load them; exit 0 when so, 1 with "
          "the problem");
ABSL_FLAG(std::string, server, "", "HOST:PORT: vigil-server's gRPC ingest address");
ABSL_FLAG(std::string, node, "", "NAME: this node's name (default: the host name up to its "
          "first dot)");
ABSL_FLAG(bool, insecure, false, "talk plain text to the server (never the default)");
ABSL_FLAG(std::string, tls_ca, "", "FILE: CA certificates that sign the server's certificate");
ABSL_FLAG(std::string, tls_cert, "", "FILE: this node's client certificate (with --tls-key)");
ABSL_FLAG(std::string, tls_key, "", "FILE: the key of --tls-cert");
ABSL_FLAG(std::string, tls_server_name, "", "NAME: the name the server's certificate must carry");
ABSL_FLAG(std::string, token_file, "", "FILE: this node's bearer token");
ABSL_FLAG(double, interval, vigil::agent::AgentConfig().interval_seconds,
          "SECONDS: between frames (> 0)");
ABSL_FLAG(double, duration, 0, "SECONDS: stop after this long (0: run until a signal)");
ABSL_FLAG(std::string, spool_dir, "",
          "DIR: disk spool of unacknowledged batches (none: queue in memory, 64 MiB)");
ABSL_FLAG(uint64_t, spool_max_mb, vigil::agent::AgentConfig().spool_max_mb,
          "MB: bound of the disk spool; the oldest batches are dropped beyond it");
ABSL_FLAG(std::string, metrics_listen, "", "HOST:PORT: serve the agent's own /metrics here");
ABSL_FLAG(std::string, idle_job, vigil::agent::AgentConfig().idle_job,
          "NAME: the job of a node that runs none");
ABSL_FLAG(std::string, collectors, "",
          "LIST: only these collectors, comma-separated (COLLECTOR below; none: no collector)");
ABSL_FLAG(std::string, nvml_library, vigil::agent::AgentConfig().nvml.library,
          "FILE: the NVML library to load");
ABSL_FLAG(std::string, sysfs_root, vigil::agent::AgentConfig().sysfs_root,
          "DIR: where sysfs is mounted");
ABSL_FLAG(std::string, proc_root, vigil::agent::AgentConfig().proc_root,
          "DIR: where procfs is mounted");
ABSL_FLAG(std::string, training_socket, vigil::agent::AgentConfig().training.socket,
          "PATH: the Unix socket training processes report to");
ABSL_FLAG(bool, once, false, "print one frame of this node as JSON and exit");
ABSL_FLAG(std::string, simulate, "",
          "SCENARIO: stream a simulated node instead: healthy, a fault kind (below) or FILE.json");
ABSL_FLAG(std::string, job, vigil::agent::SimulatedNodeOptions().job,
          "NAME: the simulated node's job");
ABSL_FLAG(int, gpus, vigil::agent::SimulatedNodeOptions().gpus, "GPUs (and NICs) of the node");
ABSL_FLAG(uint64_t, seed, vigil::agent::SimulatedNodeOptions().seed, "seed of the simulation");
ABSL_FLAG(int64_t, start_step, vigil::agent::SimulatedNodeOptions().start_step,
          "STEP: the training step the job starts at");
ABSL_FLAG(std::string, fault_node, "", "NAME: the node the fault sits on (default: this node)");
ABSL_FLAG(std::optional<int>, fault_gpu, std::nullopt, "GPU: the faulty GPU (default: the kind's)");
ABSL_FLAG(std::optional<int64_t>, fault_at_step, std::nullopt,
          "STEP: the step the fault starts at (>= 0)");
ABSL_FLAG(std::optional<double>, fault_at, std::nullopt,
          "SECONDS: when the fault starts (>= 0; default: the kind's, often 120)");

namespace {

// Seconds the agent keeps trying to deliver pending batches on exit.
constexpr double kFlushSeconds = 5.0;

vigil::flags::Program AgentProgram() {
  std::string kinds;
  for (const auto& [kind, help] : vigil::agent::SimulatedFaultKinds()) {
    std::string name = "  " + kind;
    name.resize(std::max<size_t>(name.size() + 1, 24), ' ');
    kinds += name + help + "\n";
  }
  if (!kinds.empty()) kinds.pop_back();
  return {
      .name = "vigil-agent",
      .synopsis = "vigil-agent [--config FILE] --server HOST:PORT [--node NAME]\n"
                  "                   (--insecure | [--tls-ca FILE] [--tls-cert FILE --tls-key FILE])\n"
                  "                   [flags] [--once | --simulate[=SCENARIO]]",
      .about = "Streams a node's metrics to vigil-server: its GPUs through NVML, RDMA NICs, disks\n"
               "and CPU through sysfs and /proc, and the training process through a Unix socket;\n"
               "or, with --simulate, a simulated node's. Flags override the config file.",
      .notes = "COLLECTOR: " + absl::StrJoin(vigil::agent::CollectorNames(), ", ") +
               "\n\nSCENARIO: healthy, a fault kind or FILE.json; kinds:\n" + kinds +
               "\n\nexit codes: 0 done (--once, --duration, a signal), or --check-config found no\n"
               "problem; 1 the collectors stopped with an error, or --check-config found a\n"
               "problem; 2 bad flags or config",
      .flags_file = __FILE__,
      .groups = {{"transport", {"insecure", "tls-ca", "tls-cert", "tls-key", "tls-server-name",
                                "token-file"}},
                 {"common", {"interval", "duration", "spool-dir", "spool-max-mb", "metrics-listen"}},
                 {"real node", {"idle-job", "collectors", "nvml-library", "sysfs-root",
                                "proc-root", "training-socket", "once"}},
                 {"simulated node", {"simulate", "job", "gpus", "seed", "start-step", "fault-node",
                                     "fault-gpu", "fault-at-step", "fault-at"}}},
      .implicit_values = {{"simulate", "healthy"}},
  };
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "vigil-agent: %s\n", message.c_str());
  std::fprintf(stderr, "(vigil-agent --help lists the flags)\n");
  return 2;
}

// The host name up to its first dot, as Slurm names nodes.
std::string ShortHostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  std::string name = host;
  return name.substr(0, name.find('.'));
}

// Applies the flags that mirror config keys, where given, on top of `config`.
absl::Status ApplyFlags(const vigil::flags::Parsed& flags, vigil::agent::AgentConfig* c) {
  auto flag = [&](const char* name, const absl::Flag<std::string>& value, std::string* out) {
    if (flags.Given(name)) *out = absl::GetFlag(value);
  };
  flag("server", FLAGS_server, &c->server);
  flag("node", FLAGS_node, &c->node);
  flag("idle-job", FLAGS_idle_job, &c->idle_job);
  flag("spool-dir", FLAGS_spool_dir, &c->spool_dir);
  flag("metrics-listen", FLAGS_metrics_listen, &c->metrics_listen);
  flag("tls-ca", FLAGS_tls_ca, &c->transport.ca_file);
  flag("tls-cert", FLAGS_tls_cert, &c->transport.cert_file);
  flag("tls-key", FLAGS_tls_key, &c->transport.key_file);
  flag("tls-server-name", FLAGS_tls_server_name, &c->transport.server_name);
  flag("token-file", FLAGS_token_file, &c->transport.token_file);
  flag("nvml-library", FLAGS_nvml_library, &c->nvml.library);
  flag("sysfs-root", FLAGS_sysfs_root, &c->sysfs_root);
  flag("proc-root", FLAGS_proc_root, &c->proc_root);
  flag("training-socket", FLAGS_training_socket, &c->training.socket);
  if (absl::GetFlag(FLAGS_insecure)) c->transport.insecure = true;
  if (flags.Given("interval")) {
    c->interval_seconds = absl::GetFlag(FLAGS_interval);
    if (!(c->interval_seconds > 0)) {
      return absl::InvalidArgumentError("bad --interval: want seconds > 0");
    }
  }
  if (flags.Given("spool-max-mb")) c->spool_max_mb = absl::GetFlag(FLAGS_spool_max_mb);
  if (flags.Given("collectors")) {
    return vigil::agent::EnableOnlyCollectors(absl::GetFlag(FLAGS_collectors), c);
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
    const vigil::agent::AgentConfig& config) {
  vigil::agent::SimulatedNodeOptions options;
  options.gpus = absl::GetFlag(FLAGS_gpus);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.start_step = absl::GetFlag(FLAGS_start_step);
  if (std::string node = absl::GetFlag(FLAGS_fault_node); !node.empty()) {
    options.fault_node = node;
  }
  options.fault_gpu = absl::GetFlag(FLAGS_fault_gpu);
  options.fault_at_step = absl::GetFlag(FLAGS_fault_at_step);
  if (options.fault_at_step.has_value() && *options.fault_at_step < 0) {
    return absl::InvalidArgumentError("bad --fault-at-step");
  }
  options.fault_at_seconds = absl::GetFlag(FLAGS_fault_at);
  if (options.fault_at_seconds.has_value() && !(*options.fault_at_seconds >= 0)) {
    return absl::InvalidArgumentError("bad --fault-at");
  }
  options.scenario = absl::GetFlag(FLAGS_simulate);
  options.node = config.node;
  options.job = absl::GetFlag(FLAGS_job);
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
  const vigil::flags::Parsed flags = vigil::flags::ParseOrExit(AgentProgram(), argc, argv);
  if (absl::GetFlag(FLAGS_config_reference)) {
    absl::StatusOr<nlohmann::json> reference = vigil::agent::AgentConfigReference();
    if (!reference.ok()) {
      std::fprintf(stderr, "vigil-agent: %s\n", std::string(reference.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", reference->dump(2).c_str());
    return 0;
  }
  // --check-config answers 1 for any problem (a start answers 2).
  const bool check_only = absl::GetFlag(FLAGS_check_config);
  auto bad_config = [check_only](const absl::Status& s) {
    if (!check_only) return Fail(std::string(s.message()));
    std::fprintf(stderr, "vigil-agent: bad config:\n%s\n", std::string(s.message()).c_str());
    return 1;
  };
  vigil::agent::AgentConfig config;
  if (flags.Given("config")) {
    if (absl::Status s = vigil::agent::LoadAgentConfigFile(absl::GetFlag(FLAGS_config), &config);
        !s.ok()) {
      return bad_config(s);
    }
  }
  if (absl::Status s = ApplyFlags(flags, &config); !s.ok()) return bad_config(s);
  if (config.node.empty()) config.node = ShortHostName();
  const bool once = absl::GetFlag(FLAGS_once);
  if (once && config.server.empty()) config.server = "unused:0";
  if (absl::Status s = vigil::agent::ValidateAgentConfig(config); !s.ok()) return bad_config(s);
  if (check_only) {
    absl::StatusOr<std::shared_ptr<const vigil::agent::TransportSecurity>> security =
        vigil::agent::TransportSecurity::Create(config.transport);
    if (!security.ok()) return bad_config(security.status());
    std::printf("vigil-agent: config OK: node %s, server %s, %s\n", config.node.c_str(),
                config.server.c_str(), (*security)->Describe().c_str());
    return 0;
  }
  const double duration = absl::GetFlag(FLAGS_duration);
  if (!(duration >= 0)) return Fail("bad --duration: want seconds >= 0");
  // A simulated node; bare --simulate is "healthy", --simulate= a real node.
  const bool simulated = !absl::GetFlag(FLAGS_simulate).empty();
  vigil::Clock* clock = vigil::RealClock();

  std::vector<std::unique_ptr<vigil::agent::Collector>> owned;
  std::unique_ptr<vigil::agent::CollectRunner> collect;
  if (simulated) {
    if (once) return Fail("--once reads a real node; drop --simulate");
    absl::StatusOr<std::unique_ptr<vigil::agent::Collector>> made = MakeSimulator(config);
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
                     vigil::ReadProcessUsage()) +
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
               simulated ? "a simulated node" : "this node",
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
