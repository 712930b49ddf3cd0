// vigil-sim: simulates a whole training cluster with an injected fault and
// writes its frames in the offline replay input format (JSONL, sorted by
// ts), plus optionally a truth file describing the fault.
//
//   vigil-sim --scenario NAME|FILE.json|healthy --output FILE|-
//             [--nodes 4] [--gpus 8] [--hours H | --seconds S]
//             [--interval 1.0] [--seed 1] [--job llama-70b]
//             [--start-ts 1764000000] [--start-step 0] [--truth FILE]
//             [--fault-node NAME] [--fault-gpu N] [--fault-at-step N]
//             [--fault-at SECONDS]
//
// or a cluster living its ordinary life, jobs coming and going, with
// faults of every kind at random times (agent/sim/multi_job_sim.h):
//
//   vigil-sim --multi-job --output FILE|- [--truth FILE]
//             [--nodes 64] [--gpus 8] [--hours 24 | --seconds S]
//             [--interval 10] [--seed 1] [--start-ts 1764000000]
//             [--faults-per-day 12 | --no-faults]
//
// Valued flags take "--name value" or "--name=value".
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "agent/sim/cluster_sim.h"
#include "agent/sim/multi_job_sim.h"
#include "agent/sim/scenario_spec.h"
#include "common/clock.h"

namespace {

constexpr char kUsage[] =
    "usage: vigil-sim --scenario NAME|FILE.json|healthy --output FILE|-\n"
    "         [--nodes 4] [--gpus 8] [--hours H | --seconds S (3600)]\n"
    "         [--interval 1.0] [--seed 1] [--job llama-70b]\n"
    "         [--start-ts 1764000000] [--start-step 0] [--truth FILE]\n"
    "         [--fault-node n001] [--fault-gpu 3] [--fault-at-step N]\n"
    "         [--fault-at SECONDS]\n"
    "   or: vigil-sim --multi-job --output FILE|- [--truth FILE]\n"
    "         [--nodes 64] [--gpus 8] [--hours 24 | --seconds S]\n"
    "         [--interval 10] [--seed 1] [--start-ts 1764000000]\n"
    "         [--faults-per-day 12 | --no-faults]\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "vigil-sim: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// Writes `text` to `path`; false on failure.
bool WriteFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

// --multi-job: `flags` as parsed, `given` the flags on the command line.
int MultiJob(std::map<std::string, std::string>& flags,
             const std::set<std::string>& given, bool no_faults) {
  for (const char* f : {"scenario", "job", "start-step", "fault-node",
                        "fault-gpu", "fault-at-step", "fault-at"}) {
    if (given.count(f)) {
      return Fail(std::string("--") + f + " is not a --multi-job flag");
    }
  }
  if (flags["output"].empty()) return Fail("--output is required");
  if (no_faults && given.count("faults-per-day")) {
    return Fail("give --faults-per-day or --no-faults, not both");
  }
  vigil::agent::MultiJobOptions options;
  if (!given.count("nodes")) flags["nodes"] = "64";
  if (!given.count("interval")) flags["interval"] = "10";
  double hours = 24;
  if (!absl::SimpleAtoi(flags["nodes"], &options.nodes) ||
      !absl::SimpleAtoi(flags["gpus"], &options.gpus) ||
      !absl::SimpleAtod(flags["interval"], &options.interval_seconds) ||
      !absl::SimpleAtoi(flags["seed"], &options.seed) ||
      !absl::SimpleAtod(flags["start-ts"], &options.start_ts) ||
      (!flags["hours"].empty() && !absl::SimpleAtod(flags["hours"], &hours)) ||
      (!flags["seconds"].empty() &&
       !absl::SimpleAtod(flags["seconds"], &options.seconds)) ||
      (!flags["faults-per-day"].empty() &&
       !absl::SimpleAtod(flags["faults-per-day"], &options.faults_per_day))) {
    return Fail("bad number in a flag");
  }
  if (!flags["hours"].empty() || flags["seconds"].empty()) {
    options.seconds = hours * 3600;  // --hours wins, as without --multi-job
  }
  if (no_faults) options.faults_per_day = 0;

  std::FILE* out = flags["output"] == "-"
                       ? stdout
                       : std::fopen(flags["output"].c_str(), "w");
  if (out == nullptr) return Fail("cannot write " + flags["output"]);
  const double started = vigil::RealClock()->Now();
  absl::StatusOr<vigil::agent::MultiJobResult> run =
      vigil::agent::SimulateMultiJob(options, [out](std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), out);
      });
  bool write_failed = std::fflush(out) != 0 || std::ferror(out) != 0;
  if (out != stdout) write_failed = std::fclose(out) != 0 || write_failed;
  if (!run.ok()) return Fail(std::string(run.status().message()));
  if (write_failed) return Fail("error writing " + flags["output"]);
  if (!flags["truth"].empty() &&
      !WriteFile(flags["truth"],
                 vigil::agent::MultiJobTruthJson(options, *run))) {
    return Fail("cannot write " + flags["truth"]);
  }
  double wall = vigil::RealClock()->Now() - started;
  std::fprintf(stderr,
               "vigil-sim: multi-job: %d nodes x %d GPUs, %.0f simulated s "
               "at %g s: %zu runs, %zu faults, busy %.1f %%: %llu frames, "
               "%llu samples in %.2f s (%.0f frames/s, %.2f M samples/s)\n",
               options.nodes, options.gpus, options.seconds,
               options.interval_seconds, run->plan.runs.size(),
               run->plan.faults.size(), 100 * run->plan.busy_fraction,
               static_cast<unsigned long long>(run->frames),
               static_cast<unsigned long long>(run->samples), wall,
               run->frames / std::max(wall, 1e-9),
               run->samples / std::max(wall, 1e-9) / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {
      {"scenario", ""},      {"output", ""},
      {"nodes", "4"},        {"gpus", "8"},
      {"hours", ""},         {"seconds", ""},
      {"interval", "1"},     {"seed", "1"},
      {"job", "llama-70b"},  {"start-ts", "1764000000"},
      {"start-step", "0"},   {"truth", ""},
      {"fault-node", ""},    {"fault-gpu", ""},
      {"fault-at-step", ""}, {"fault-at", ""},
      {"faults-per-day", ""}};
  std::set<std::string> given;
  bool multi_job = false, no_faults = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--multi-job" || arg == "--no-faults") {
      (arg == "--multi-job" ? multi_job : no_faults) = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) return Fail("unexpected argument " + arg);
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= argc) return Fail("--" + name + " needs a value");
      value = argv[++i];
    }
    if (flags.find(name) == flags.end()) return Fail("unknown flag --" + name);
    flags[name] = value;
    given.insert(name);
  }
  if (multi_job) return MultiJob(flags, given, no_faults);
  if (no_faults || given.count("faults-per-day")) {
    return Fail("--faults-per-day and --no-faults need --multi-job");
  }
  if (flags["scenario"].empty() || flags["output"].empty()) {
    return Fail("--scenario and --output are required");
  }
  vigil::agent::ClusterOptions options;
  options.job = flags["job"];
  double hours = 0;
  if (!absl::SimpleAtoi(flags["nodes"], &options.nodes) ||
      !absl::SimpleAtoi(flags["gpus"], &options.gpus) ||
      !absl::SimpleAtod(flags["interval"], &options.interval_seconds) ||
      !absl::SimpleAtoi(flags["seed"], &options.seed) ||
      !absl::SimpleAtod(flags["start-ts"], &options.start_ts) ||
      !absl::SimpleAtoi(flags["start-step"], &options.start_step) ||
      (!flags["hours"].empty() && !absl::SimpleAtod(flags["hours"], &hours)) ||
      (!flags["seconds"].empty() &&
       !absl::SimpleAtod(flags["seconds"], &options.seconds))) {
    return Fail("bad number in a flag");
  }
  if (!flags["hours"].empty()) options.seconds = hours * 3600;

  vigil::agent::FaultOverrides overrides;
  if (!flags["fault-node"].empty()) overrides.node = flags["fault-node"];
  int gpu = 0;
  int64_t at_step = 0;
  double at = 0;
  if (!flags["fault-gpu"].empty()) {
    if (!absl::SimpleAtoi(flags["fault-gpu"], &gpu)) return Fail("--fault-gpu");
    overrides.gpu = gpu;
  }
  if (!flags["fault-at-step"].empty()) {
    if (!absl::SimpleAtoi(flags["fault-at-step"], &at_step) || at_step < 0) {
      return Fail("bad --fault-at-step");
    }
    overrides.at_step = at_step;
  }
  if (!flags["fault-at"].empty()) {
    if (!absl::SimpleAtod(flags["fault-at"], &at) || at < 0) {
      return Fail("bad --fault-at");
    }
    overrides.at_seconds = at;
  }
  absl::StatusOr<vigil::agent::ScenarioSpec> spec =
      vigil::agent::ScenarioSpecFromArg(flags["scenario"]);
  if (!spec.ok()) return Fail(std::string(spec.status().message()));
  std::vector<std::string> nodes =
      vigil::agent::ClusterNodeNames(std::max(options.nodes, 1));
  absl::Status resolved = vigil::agent::ResolveFaultDefaults(
      overrides, nodes[std::min<size_t>(1, nodes.size() - 1)], nodes,
      options.gpus, options.gpus, &*spec);
  if (!resolved.ok()) return Fail(std::string(resolved.message()));

  std::FILE* out = flags["output"] == "-"
                       ? stdout
                       : std::fopen(flags["output"].c_str(), "w");
  if (out == nullptr) return Fail("cannot write " + flags["output"]);
  const double started = vigil::RealClock()->Now();
  absl::StatusOr<vigil::agent::ClusterRun> run = vigil::agent::SimulateCluster(
      options, *spec,
      [out](std::string_view s) { std::fwrite(s.data(), 1, s.size(), out); });
  bool write_failed = std::fflush(out) != 0 || std::ferror(out) != 0;
  if (out != stdout) write_failed = std::fclose(out) != 0 || write_failed;
  if (!run.ok()) return Fail(std::string(run.status().message()));
  if (write_failed) return Fail("error writing " + flags["output"]);
  if (!flags["truth"].empty()) {
    std::FILE* truth = std::fopen(flags["truth"].c_str(), "w");
    std::string text = vigil::agent::TruthJson(options, spec->name, *run);
    if (truth == nullptr ||
        std::fwrite(text.data(), 1, text.size(), truth) != text.size() ||
        std::fclose(truth) != 0) {
      return Fail("cannot write " + flags["truth"]);
    }
  }
  double wall = vigil::RealClock()->Now() - started;
  std::fprintf(stderr,
               "vigil-sim: %s: %d nodes x %d GPUs, %.0f simulated s: %llu "
               "frames, %llu samples in %.2f s\n",
               spec->name.c_str(), options.nodes, options.gpus, options.seconds,
               static_cast<unsigned long long>(run->frames),
               static_cast<unsigned long long>(run->samples), wall);
  return 0;
}
