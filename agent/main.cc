// vigil-agent: streams a node's metrics to vigil-server. For now the node is
// simulated (--simulate); real collectors come later.
//
//   vigil-agent --server HOST:PORT --node NAME --simulate[=SCENARIO]
//               [--job NAME] [--gpus 8] [--interval 1.0] [--seed N]
//               [--start-step N] [--duration SECONDS] [--fault-node NAME]
//               [--fault-gpu N] [--fault-at-step N] [--fault-at SECONDS]
//               [--spool-dir DIR] [--spool-max-mb 256]
//
// Flags take "--name value" or "--name=value"; --simulate takes a value only
// as --simulate=SCENARIO (bare --simulate means "healthy"). SCENARIO is a
// fault kind (vigil::agent::FaultKindNames) or a JSON scenario file. The
// fault sits on --fault-node (default: this node) unless the spec names a
// node; a node the fault is not on still shows its job-wide effects (a
// straggler slows, a hang stops every node), so run every agent of a job
// with the same scenario, seed and --fault-node.
//
// Unacknowledged batches wait in memory (64 MiB), or with --spool-dir in a
// disk spool of at most --spool-max-mb (see agent/disk_spool.h); either way
// the oldest are dropped, and counted, when the bound is hit.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "agent/disk_spool.h"
#include "agent/runner.h"
#include "agent/scenario_spec.h"
#include "agent/scenarios.h"
#include "agent/simulator.h"
#include "agent/stream_client.h"

namespace {

constexpr char kUsage[] =
    "usage: vigil-agent --server HOST:PORT --node NAME --simulate[=SCENARIO]\n"
    "         [--job NAME] [--gpus 8] [--interval 1.0] [--seed N]\n"
    "         [--start-step N] [--duration SECONDS (0 = forever)]\n"
    "         [--fault-node NAME (this node)] [--fault-gpu 3]\n"
    "         [--fault-at-step N | --fault-at SECONDS (kind default, 120)]\n"
    "         [--spool-dir DIR (none: queue in memory)] [--spool-max-mb 256]\n"
    "  SCENARIO: healthy, a fault kind or FILE.json; kinds:\n";

// Seconds the agent keeps trying to deliver pending batches on exit.
constexpr double kFlushSeconds = 5.0;

void PrintUsage(std::FILE* f) {
  std::fputs(kUsage, f);
  for (const std::string& kind : vigil::agent::FaultKindNames()) {
    std::string help(vigil::agent::FaultKindHelp(kind));
    std::fprintf(f, "    %-20s %s\n", kind.c_str(), help.c_str());
  }
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "vigil-agent: %s\n", message.c_str());
  PrintUsage(stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {
      {"server", ""},      {"node", ""},           {"job", "llama-70b"},
      {"gpus", "8"},       {"interval", "1.0"},    {"seed", "1"},
      {"start-step", "0"}, {"duration", "0"},      {"fault-node", ""},
      {"fault-gpu", ""},   {"fault-at-step", ""},  {"fault-at", ""},
      {"spool-dir", ""},   {"spool-max-mb", "256"}};
  std::string simulate;  // empty: not given
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      PrintUsage(stdout);
      return 0;
    }
    if (arg.rfind("--", 0) != 0) return Fail("unexpected argument " + arg);
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "simulate") {
      simulate = has_value ? value : "healthy";
      continue;
    }
    if (flags.find(name) == flags.end()) return Fail("unknown flag --" + name);
    if (!has_value) {
      if (i + 1 >= argc) return Fail("--" + name + " needs a value");
      value = argv[++i];
    }
    flags[name] = value;
  }
  if (flags["server"].empty() || flags["node"].empty()) {
    return Fail("--server and --node are required");
  }
  if (simulate.empty()) {
    return Fail("only simulated nodes are supported yet: pass --simulate");
  }
  int gpus = 0;
  double interval = 0, duration = 0;
  uint64_t seed = 0, spool_max_mb = 0;
  int64_t start_step = 0;
  if (!absl::SimpleAtoi(flags["spool-max-mb"], &spool_max_mb) ||
      spool_max_mb == 0 || spool_max_mb > (uint64_t{1} << 20)) {
    return Fail("bad --spool-max-mb: want 1 to 1048576");
  }
  if (!absl::SimpleAtoi(flags["gpus"], &gpus) ||
      !absl::SimpleAtod(flags["interval"], &interval) || !(interval > 0) ||
      !absl::SimpleAtod(flags["duration"], &duration) || duration < 0 ||
      !absl::SimpleAtoi(flags["seed"], &seed) ||
      !absl::SimpleAtoi(flags["start-step"], &start_step)) {
    return Fail(
        "bad number in --gpus, --interval, --duration, --seed or "
        "--start-step");
  }

  vigil::agent::FaultOverrides overrides;
  if (!flags["fault-node"].empty()) overrides.node = flags["fault-node"];
  int fault_gpu = 0;
  int64_t fault_step = 0;
  double fault_at = 0;
  if (!flags["fault-gpu"].empty()) {
    if (!absl::SimpleAtoi(flags["fault-gpu"], &fault_gpu)) {
      return Fail("bad --fault-gpu");
    }
    overrides.gpu = fault_gpu;
  }
  if (!flags["fault-at-step"].empty()) {
    if (!absl::SimpleAtoi(flags["fault-at-step"], &fault_step) ||
        fault_step < 0) {
      return Fail("bad --fault-at-step");
    }
    overrides.at_step = fault_step;
  }
  if (!flags["fault-at"].empty()) {
    if (!absl::SimpleAtod(flags["fault-at"], &fault_at) || fault_at < 0) {
      return Fail("bad --fault-at");
    }
    overrides.at_seconds = fault_at;
  }
  absl::StatusOr<vigil::agent::ScenarioSpec> spec =
      vigil::agent::ScenarioSpecFromArg(simulate);
  if (!spec.ok()) return Fail(std::string(spec.status().message()));
  absl::Status resolved = vigil::agent::ResolveFaultDefaults(
      overrides, flags["node"], {}, gpus, gpus, &*spec);
  if (!resolved.ok()) return Fail(std::string(resolved.message()));
  absl::StatusOr<std::vector<vigil::agent::ResolvedFault>> faults =
      vigil::agent::ResolveFaults(*spec, seed);
  if (!faults.ok()) return Fail(std::string(faults.status().message()));
  vigil::agent::FaultScenario scenario(*faults, flags["node"]);

  vigil::agent::SimulatorOptions sim_options;
  sim_options.node = flags["node"];
  sim_options.job = flags["job"];
  sim_options.gpus = gpus;
  sim_options.nics = gpus;
  sim_options.seed = seed;
  sim_options.start_step = start_step;
  vigil::agent::AdjustJobOptions(*faults, &sim_options);
  absl::StatusOr<vigil::agent::Simulator> sim =
      vigil::agent::Simulator::Create(sim_options, &scenario);
  if (!sim.ok()) return Fail(std::string(sim.status().message()));

  vigil::agent::StreamClientOptions client_options;
  client_options.server = flags["server"];
  client_options.node = flags["node"];
  client_options.interval_seconds = interval;
  std::unique_ptr<vigil::agent::BatchQueue> queue;  // null: in memory
  if (!flags["spool-dir"].empty()) {
    absl::StatusOr<std::unique_ptr<vigil::agent::DiskBatchQueue>> spool =
        vigil::agent::DiskBatchQueue::Open(flags["spool-dir"],
                                           spool_max_mb << 20);
    if (!spool.ok()) return Fail(std::string(spool.status().message()));
    if ((*spool)->dropped() > 0) {
      std::fprintf(stderr,
                   "vigil-agent: dropped %llu unacknowledged batches a "
                   "previous agent left in %s\n",
                   static_cast<unsigned long long>((*spool)->dropped()),
                   flags["spool-dir"].c_str());
    }
    queue = std::move(*spool);
  }
  absl::StatusOr<std::unique_ptr<vigil::agent::StreamClient>> client =
      vigil::agent::StreamClient::Create(client_options, std::move(queue));
  if (!client.ok()) return Fail(std::string(client.status().message()));

  // SIGINT/SIGTERM go to one thread: the first stops the runner (pending
  // batches are then flushed), a second exits at once.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  vigil::agent::NodeRunnerOptions run_options;
  run_options.interval_seconds = interval;
  run_options.duration_seconds = duration;
  vigil::agent::NodeRunner runner(run_options, &*sim, client->get(),
                                  vigil::RealClock());
  std::thread([&signals, &runner] {
    int sig;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "vigil-agent: signal %d, flushing and exiting\n", sig);
    runner.Stop();
    sigwait(&signals, &sig);
    std::_Exit(1);
  }).detach();

  (*client)->Start();
  std::fprintf(stderr,
               "vigil-agent: node %s (instance %s) streaming %zu series of a "
               "simulated %d-GPU node to %s every %gs\n",
               flags["node"].c_str(), (*client)->agent_instance().c_str(),
               sim->series().size(), gpus, flags["server"].c_str(), interval);
  for (const vigil::agent::ResolvedFault& f : *faults) {
    const vigil::agent::FaultSpec& s = f.spec;
    std::string when =
        s.at_step.has_value()
            ? "at step " + std::to_string(*s.at_step)
            : "after " + std::to_string(static_cast<int>(*s.at_seconds)) + " s";
    std::string where = vigil::agent::IsNodeFault(f)
                            ? s.node + " gpu " + std::to_string(*s.gpu) +
                                  (s.dev.empty() ? "" : " " + s.dev)
                            : "the whole job";
    std::fprintf(stderr,
                 "vigil-agent: scenario %s: %s on %s %s (magnitude %g)%s\n",
                 spec->name.c_str(), s.kind.c_str(), where.c_str(),
                 when.c_str(), f.magnitude,
                 vigil::agent::IsNodeFault(f) && s.node != flags["node"]
                     ? " (job-wide effects only here)"
                     : "");
  }
  absl::Status status = runner.Run();
  if (!status.ok()) {
    std::fprintf(stderr, "vigil-agent: %s\n", status.ToString().c_str());
  }
  bool flushed = (*client)->WaitForAcked(
      runner.last_seq(), vigil::RealClock()->Now() + kFlushSeconds);
  (*client)->Stop();
  vigil::agent::StreamClientStats s = (*client)->stats();
  std::fprintf(stderr,
               "vigil-agent: exiting: sent %llu acked %llu pending %zu%s\n",
               static_cast<unsigned long long>(s.batches_sent),
               static_cast<unsigned long long>(s.batches_acked),
               s.pending_batches, flushed ? "" : " (not all delivered)");
  return status.ok() ? 0 : 1;
}
