// ui_fleet: fills a running vigil-server with a large, realistic fleet for
// the web UI load benchmark (bench/ui_load.sh, bench/RESULTS.md).
//
//   ui_fleet --server=HOST:PORT [--nodes=1000] [--gpus=8] [--interval=30]
//            [--history=1800] [--parallel=4] [--seed=1] [--follow]
//
// Nodes n0000, n0001, ... run the agent's simulator (the whole metric
// catalogue: GPU power, temperature, SM clock, throttle reasons,
// utilization, ECC/XID and NVLink counters, RDMA, disks, and the training
// readings with frame steps) in jobs of mixed sizes (128 nodes down to 1)
// and models. Every eighth node carries no fault, every fourth two, the
// rest one GPU fault of the agent's fault scenarios: single-bit ECC
// storms, a GPU under its peers' power, double-bit ECC errors, and one
// thermal throttle and one NVLink fault per job (only these two slow a job
// down); every eighth job ends in a NaN loss. These fire on red lines, fixed
// thresholds and peer comparisons, without learned baselines: about one
// incident per node.
//
// Each node sends --history seconds of frames, one every --interval seconds,
// ending at the moment it is streamed, on one short stream of the agent's
// own StreamClient (a long-lived stream per node would hold 1000 server
// threads), one node after the other: the detector's clock is the newest
// frame time, so a node whose history streams in parallel with a faster one
// would fall behind it by minutes and look silent. Then "filled ..." is
// printed. With --follow the fleet is kept alive until SIGINT or SIGTERM:
// every --interval seconds each node sends its next frame on a new short
// stream (--parallel nodes at a time), so neither the detector (node
// silence after 6 intervals) nor the UI (stale after 60 s) sees a dead
// fleet.
//
// Exit status: 0; 1 if a node's frames were not acknowledged within 60 s
// while filling (the fill stops there; follow rounds only report such
// nodes); 2 on bad flags.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "agent/collect_runner.h"
#include "agent/sim/scenario_spec.h"
#include "agent/sim/scenarios.h"
#include "agent/sim/simulator.h"
#include "agent/simulator_collector.h"
#include "agent/stream_client.h"
#include "agent/transport_security.h"
#include "common/clock.h"

namespace {

using vigil::agent::FaultScenario;
using vigil::agent::FaultSpec;
using vigil::agent::Simulator;
using vigil::agent::SimulatorCollector;
using vigil::agent::TransportSecurity;

constexpr char kUsage[] =
    "usage: ui_fleet --server=HOST:PORT [--nodes=1000] [--gpus=8]\n"
    "         [--interval=30] [--history=1800] [--parallel=4] [--seed=1]\n"
    "         [--follow]\n";

// Seconds the server has to acknowledge one node's frames.
constexpr double kAckTimeoutSeconds = 60;

struct Args {
  std::string server;     // required
  int nodes = 1000;       // 1..100000
  int gpus = 8;           // per node, 1..64
  double interval = 30;   // seconds between a node's frames, >= 1
  double history = 1800;  // seconds of frames per node, >= 20 intervals
  int parallel = 4;       // nodes streamed at once in follow rounds, 1..64
  uint64_t seed = 1;
  bool follow = false;
};

// Parses "--name=value" flags and the switch --follow; false after printing
// why.
bool ParseArgs(int argc, char** argv, Args* a) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--follow") {
      a->follow = true;
      continue;
    }
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "ui_fleet: unexpected argument '%s'\n%s", argv[i],
                   kUsage);
      return false;
    }
    flags[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
  using Parser = std::function<bool(const std::string&)>;
  const std::map<std::string, Parser> parsers = {
      {"server",
       [a](const std::string& v) { return !(a->server = v).empty(); }},
      {"nodes",
       [a](const std::string& v) { return absl::SimpleAtoi(v, &a->nodes); }},
      {"gpus",
       [a](const std::string& v) { return absl::SimpleAtoi(v, &a->gpus); }},
      {"interval",
       [a](const std::string& v) { return absl::SimpleAtod(v, &a->interval); }},
      {"history",
       [a](const std::string& v) { return absl::SimpleAtod(v, &a->history); }},
      {"parallel",
       [a](const std::string& v) { return absl::SimpleAtoi(v, &a->parallel); }},
      {"seed",
       [a](const std::string& v) { return absl::SimpleAtoi(v, &a->seed); }},
  };
  for (const auto& [name, value] : flags) {
    auto parser = parsers.find(name);
    if (parser == parsers.end() || !parser->second(value)) {
      std::fprintf(stderr, "ui_fleet: %s --%s\n%s",
                   parser == parsers.end() ? "unknown flag" : "bad value for",
                   name.c_str(), kUsage);
      return false;
    }
  }
  if (a->server.empty() || a->nodes < 1 || a->nodes > 100000 || a->gpus < 1 ||
      a->gpus > 64 || !(a->interval >= 1) ||
      !(a->history >= 20 * a->interval) || a->parallel < 1 ||
      a->parallel > 64) {
    std::fprintf(stderr,
                 "ui_fleet: --server is required; --nodes 1..100000, --gpus "
                 "1..64, --interval >= 1, --history >= 20 intervals, "
                 "--parallel 1..64\n%s",
                 kUsage);
    return false;
  }
  return true;
}

// Job sizes in nodes, repeated until every node has a job.
constexpr int kJobSizes[] = {128, 64, 32, 16, 8, 8, 4, 4, 2, 2, 1, 1, 1, 1};

// Models of the jobs, in turn. Step times keep MFU near 50 % with the
// simulator's 2048 tokens per GPU and step on H100s (below 40 % would open
// an mfu_low incident per job).
struct Model {
  const char* name;
  double params;
  double step_seconds;
};
constexpr Model kModels[] = {{"llama-70b", 70e9, 1.7},
                             {"llama-8b", 8e9, 0.2},
                             {"mixtral-8x22b", 39e9, 1.0},
                             {"llama-405b", 405e9, 9.8}};

// Faults per node, by node number: 1.125 on average, since a few faults
// join another incident or confirm only after the fill.
constexpr int kFaultsPerNode[] = {1, 0, 2, 1, 1, 2, 1, 1};
// Node faults that leave the job's speed alone, in turn. Thermal throttling
// and NVLink errors slow the whole synchronous job, once per fault (the
// simulator multiplies the slowdowns), so a job gets one of each: its first
// and fourth faults.
constexpr const char* kQuietFaults[] = {"ecc_sbe_storm", "gpu_power_low_55w",
                                        "ecc_sbe_storm", "ecc_dbe",
                                        "gpu_power_low_55w"};
// Every this many jobs, one ends in a NaN loss.
constexpr int kNanLossEveryJobs = 8;

// One simulated node and what it needs between streams.
struct FleetNode {
  std::string name;
  std::unique_ptr<FaultScenario> scenario;  // read by sim
  std::unique_ptr<Simulator> sim;           // read by collector
  std::unique_ptr<SimulatorCollector> collector;
};

struct Fleet {
  std::vector<FleetNode> nodes;
  int jobs = 0;
  int faults = 0;
};

// The faults of one job whose nodes are `names`, the first of them node
// number `first` of the fleet.
std::vector<FaultSpec> JobFaults(const Args& a, int job, int first,
                                 const std::vector<std::string>& names) {
  std::vector<FaultSpec> faults;
  // Onsets spread over the history, at least 10 frames before its end, so
  // that sustained conditions have confirmed.
  const int slots = std::max(1, static_cast<int>(a.history / a.interval) - 12);
  for (size_t i = 0; i < names.size(); ++i) {
    const int g = first + static_cast<int>(i);
    for (int f = 0; f < kFaultsPerNode[g % std::size(kFaultsPerNode)]; ++f) {
      FaultSpec spec;
      const size_t n = faults.size();
      spec.kind = n == 0   ? "thermal_throttle"
                  : n == 3 ? "nvlink_degradation"
                           : kQuietFaults[(g + f) % std::size(kQuietFaults)];
      spec.node = names[i];
      spec.gpu = (3 * g + 4 * f) % a.gpus;  // two faults: two GPUs (gpus > 1)
      spec.at_seconds = a.interval * (1 + (37 * g + 11 * f) % slots);
      faults.push_back(std::move(spec));
    }
  }
  if (job % kNanLossEveryJobs == kNanLossEveryJobs - 3) {
    FaultSpec spec;
    spec.kind = "loss_nan";
    spec.at_seconds = a.history / 2;
    faults.push_back(std::move(spec));
  }
  return faults;
}

// Builds every node's simulator with its job's faults; an error names the
// job.
absl::StatusOr<Fleet> BuildFleet(const Args& a) {
  Fleet fleet;
  int first = 0;
  for (int job = 0; first < a.nodes; ++job) {
    const int size =
        std::min(kJobSizes[job % std::size(kJobSizes)], a.nodes - first);
    const Model& model = kModels[job % std::size(kModels)];
    const std::string job_name = absl::StrFormat("%s-%03d", model.name, job);
    std::vector<std::string> names;
    for (int i = 0; i < size; ++i)
      names.push_back(absl::StrFormat("n%04d", first + i));
    vigil::agent::ScenarioSpec spec;
    spec.name = job_name;
    spec.faults = JobFaults(a, job, first, names);
    absl::Status s = vigil::agent::ResolveFaultDefaults({}, names[0], names,
                                                        a.gpus, a.gpus, &spec);
    absl::StatusOr<std::vector<vigil::agent::ResolvedFault>> faults =
        s.ok() ? vigil::agent::ResolveFaults(spec, a.seed + job)
               : absl::StatusOr<std::vector<vigil::agent::ResolvedFault>>(s);
    if (!faults.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(job_name, ": ", faults.status().message()));
    }
    for (const std::string& name : names) {
      FleetNode node;
      node.name = name;
      node.scenario = std::make_unique<FaultScenario>(*faults, name);
      vigil::agent::SimulatorOptions so;
      so.node = name;
      so.job = job_name;
      so.gpus = a.gpus;
      so.nics = a.gpus;
      so.seed = a.seed + job;
      so.start_step = 20000 + 7919 * job;  // resumed jobs, past LR warm-up
      so.model_params = model.params;
      so.step_seconds = model.step_seconds;
      vigil::agent::AdjustJobOptions(*faults, &so);
      absl::StatusOr<Simulator> sim =
          Simulator::Create(so, node.scenario.get());
      if (!sim.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(job_name, ": ", sim.status().message()));
      }
      node.sim = std::make_unique<Simulator>(std::move(*sim));
      node.collector = std::make_unique<SimulatorCollector>(node.sim.get());
      fleet.nodes.push_back(std::move(node));
    }
    fleet.faults += static_cast<int>(faults->size());
    fleet.jobs = job + 1;
    first += size;
  }
  return fleet;
}

// Sends the frames of `node` at Unix times `ticks` on one new stream, as the
// agent would (Hello, series dictionary, one batch per frame), and adds the
// samples sent to `samples`. False, after printing why, unless every batch
// was acknowledged within kAckTimeoutSeconds.
bool SendTicks(const Args& a,
               const std::shared_ptr<const TransportSecurity>& security,
               FleetNode& node, const std::vector<double>& ticks,
               std::atomic<uint64_t>* samples) {
  vigil::agent::StreamClientOptions options;
  options.server = a.server;
  options.security = security;
  options.node = node.name;
  options.interval_seconds = a.interval;
  auto client = vigil::agent::StreamClient::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "ui_fleet: %s: %s\n", node.name.c_str(),
                 std::string(client.status().message()).c_str());
    return false;
  }
  vigil::agent::CollectRunnerOptions runner_options;
  runner_options.interval_seconds = a.interval;
  runner_options.status_every_seconds = 0;
  vigil::agent::CollectRunner runner(runner_options, {node.collector.get()},
                                     client->get(), vigil::RealClock());
  runner.StartCollectors();
  for (double ts : ticks) {
    vigil::agent::Tick tick = runner.CollectNow(ts);
    *samples += tick.samples.size();
    runner.Deliver(std::move(tick));
  }
  (*client)->Start();
  const bool acked = (*client)->WaitForAcked(
      runner.last_seq(), vigil::RealClock()->Now() + kAckTimeoutSeconds);
  (*client)->Stop();
  if (!acked) {
    const vigil::agent::StreamClientStats s = (*client)->stats();
    std::fprintf(stderr,
                 "ui_fleet: %s: %llu of %llu batches acknowledged (%llu "
                 "rejected, %llu reconnects)\n",
                 node.name.c_str(),
                 static_cast<unsigned long long>(s.acked_seq),
                 static_cast<unsigned long long>(runner.last_seq()),
                 static_cast<unsigned long long>(s.batches_rejected),
                 static_cast<unsigned long long>(s.reconnects));
  }
  return acked;
}

// Runs `send(node)` for every node on `parallel` threads until done or
// `stop()` is true; returns how many returned false.
int ForEachNode(Fleet& fleet, int parallel, const std::function<bool()>& stop,
                const std::function<bool(FleetNode&)>& send) {
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < parallel; ++w) {
    workers.emplace_back([&] {
      while (!stop()) {
        const size_t i = next++;
        if (i >= fleet.nodes.size()) break;
        if (!send(fleet.nodes[i])) ++failed;
      }
    });
  }
  for (std::thread& t : workers) t.join();
  return failed;
}

// Set once SIGINT or SIGTERM arrived (--follow); `stopped` is notified.
std::atomic<bool> stop_requested{false};
std::mutex stop_mu;
std::condition_variable stopped;

// Sends every node its next frame each --interval seconds from `first`
// until SIGINT or SIGTERM (stop_requested), then prints how many rounds ran.
void Follow(const Args& a, Fleet& fleet,
            const std::shared_ptr<const TransportSecurity>& security,
            double first, std::atomic<uint64_t>* samples) {
  vigil::Clock* clock = vigil::RealClock();
  int rounds = 0;
  double round_seconds = 0;
  std::unique_lock<std::mutex> lock(stop_mu);
  // Rounds start an interval apart; one that took longer is followed at
  // once.
  for (double next = first;;) {
    clock->WaitUntil(lock, stopped, next);
    if (stop_requested) break;
    if (clock->Now() < next) continue;  // woken early
    lock.unlock();
    const double round_start = clock->Now();
    const int round_failed = ForEachNode(
        fleet, a.parallel, [] { return stop_requested.load(); },
        [&](FleetNode& node) {
          return SendTicks(a, security, node, {std::floor(clock->Now())},
                           samples);
        });
    ++rounds;
    round_seconds += clock->Now() - round_start;
    if (round_failed > 0) {
      std::fprintf(stderr, "ui_fleet: round %d: %d nodes not acknowledged\n",
                   rounds, round_failed);
    }
    next = std::max(next, round_start) + a.interval;
    lock.lock();
  }
  std::printf("followed rounds=%d seconds_per_round=%.1f\n", rounds,
              rounds > 0 ? round_seconds / rounds : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) return 2;
  std::thread signal_waiter;
  if (a.follow) {
    // Blocked here, before any thread starts, so that every thread inherits
    // the mask and only the waiter takes them.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal_waiter = std::thread([signals] {
      int signal = 0;
      sigwait(&signals, &signal);
      std::lock_guard<std::mutex> l(stop_mu);
      stop_requested = true;
      stopped.notify_all();
    });
  }
  absl::StatusOr<Fleet> fleet = BuildFleet(a);
  if (!fleet.ok()) {
    std::fprintf(stderr, "ui_fleet: %s\n",
                 std::string(fleet.status().message()).c_str());
    return 2;
  }
  vigil::agent::AgentTransportConfig transport;
  transport.insecure = true;  // the benchmark's server runs --grpc-insecure
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> security =
      TransportSecurity::Create(transport);
  if (!security.ok()) {
    std::fprintf(stderr, "ui_fleet: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }

  vigil::Clock* clock = vigil::RealClock();
  const int frames = static_cast<int>(a.history / a.interval) + 1;
  std::atomic<uint64_t> samples{0};
  const double fill_start = clock->Now();
  bool failed_fill = false;  // one thread fills
  const int failed = ForEachNode(
      *fleet, 1, [&] { return stop_requested || failed_fill; },
      [&](FleetNode& node) {
        std::vector<double> ticks;
        const double end = std::floor(clock->Now());
        for (int k = 0; k < frames; ++k)
          ticks.push_back(end - a.history + k * a.interval);
        if (!SendTicks(a, *security, node, ticks, &samples)) failed_fill = true;
        return !failed_fill;
      });
  std::printf(
      "filled nodes=%zu jobs=%d gpus=%zu faults=%d frames=%zu samples=%llu "
      "seconds=%.1f failed=%d\n",
      fleet->nodes.size(), fleet->jobs, fleet->nodes.size() * a.gpus,
      fleet->faults, fleet->nodes.size() * frames,
      static_cast<unsigned long long>(samples.load()),
      clock->Now() - fill_start, failed);
  std::fflush(stdout);
  if (!a.follow) return failed == 0 ? 0 : 1;

  Follow(a, *fleet, *security, fill_start + a.interval, &samples);
  signal_waiter.join();
  return failed == 0 ? 0 : 1;
}
