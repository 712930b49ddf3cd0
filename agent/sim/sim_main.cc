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
// The flags are Abseil flags below, parsed by common/flags.h (--help,
// --version, exit 2 on a bad flag; docs/CLI.md): "--name value" or
// "--name=value"; --multi-job and --no-faults are switches.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "agent/sim/cluster_sim.h"
#include "agent/sim/multi_job_sim.h"
#include "agent/sim/scenario_spec.h"
#include "common/clock.h"
#include "common/flags.h"

ABSL_FLAG(std::string, scenario, "", "NAME|FILE.json|healthy: the fault scenario");
ABSL_FLAG(std::string, output, "", "FILE|-: where the frames go (JSONL; -: stdout)");
ABSL_FLAG(std::string, truth, "", "FILE: also write what was injected, as JSON");
ABSL_FLAG(int, nodes, vigil::agent::ClusterOptions().nodes,
          "nodes in the cluster (64 with --multi-job)");
ABSL_FLAG(int, gpus, vigil::agent::ClusterOptions().gpus, "GPUs (and NICs) per node");
ABSL_FLAG(std::optional<double>, hours, std::nullopt,
          "H: simulated hours (wins over --seconds; 24 with --multi-job)");
ABSL_FLAG(std::optional<double>, seconds, std::nullopt,
          "S: simulated seconds (3600 without --hours)");
ABSL_FLAG(double, interval, vigil::agent::ClusterOptions().interval_seconds,
          "SECONDS: between a node's frames (10 with --multi-job)");
ABSL_FLAG(uint64_t, seed, vigil::agent::ClusterOptions().seed, "seed of all randomness");
ABSL_FLAG(std::string, job, "llama-70b", "NAME: the job's name");
ABSL_FLAG(double, start_ts, vigil::agent::ClusterOptions().start_ts,
          "UNIX_SECONDS: time of the first tick");
ABSL_FLAG(int64_t, start_step, vigil::agent::ClusterOptions().start_step,
          "STEP: the training step the job starts at");
ABSL_FLAG(std::string, fault_node, "", "NAME: the node the fault sits on (e.g. n001)");
ABSL_FLAG(std::optional<int>, fault_gpu, std::nullopt, "GPU: the faulty GPU (e.g. 3)");
ABSL_FLAG(std::optional<int64_t>, fault_at_step, std::nullopt,
          "STEP: the step the fault starts at (>= 0)");
ABSL_FLAG(std::optional<double>, fault_at, std::nullopt,
          "SECONDS: when the fault starts (>= 0)");
ABSL_FLAG(bool, multi_job, false,
          "simulate a cluster's ordinary life instead: jobs coming and going, faults of "
          "every kind at random times");
ABSL_FLAG(std::optional<double>, faults_per_day, std::nullopt,
          "N: --multi-job: faults injected per simulated day (default: 12)");
ABSL_FLAG(bool, no_faults, false, "--multi-job: inject no fault (and no lemon node)");

namespace {

vigil::flags::Program SimProgram() {
  return {
      .name = "vigil-sim",
      .synopsis = "vigil-sim --scenario NAME|FILE.json|healthy --output FILE|-\n"
                  "                 [--nodes 4] [--gpus 8] [--hours H | --seconds S] [flags]\n"
                  "   or: vigil-sim --multi-job --output FILE|- [--truth FILE]\n"
                  "                 [--nodes 64] [--hours 24 | --seconds S]\n"
                  "                 [--faults-per-day 12 | --no-faults]",
      .about = "Simulates a whole training cluster with an injected fault, or with --multi-job a\n"
               "cluster living its ordinary life, and writes its frames in the offline replay\n"
               "input format (JSONL, sorted by ts; vigil-replay reads it), plus optionally a\n"
               "truth file describing the faults.",
      .notes = "exit codes: 0 done; 2 bad flags, a bad scenario, or a file that cannot be written",
      .flags_file = __FILE__,
      .groups = {{"one fault (without --multi-job)",
                  {"scenario", "job", "start-step", "fault-node", "fault-gpu", "fault-at-step",
                   "fault-at"}},
                 {"cluster life", {"multi-job", "faults-per-day", "no-faults"}}},
  };
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "vigil-sim: %s (see --help)\n", message.c_str());
  return 2;
}

// Writes `text` to `path`; false on failure.
bool WriteFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

// --multi-job; `flags` as parsed.
int MultiJob(const vigil::flags::Parsed& flags) {
  for (const char* f : {"scenario", "job", "start-step", "fault-node",
                        "fault-gpu", "fault-at-step", "fault-at"}) {
    if (flags.Given(f)) {
      return Fail(std::string("--") + f + " is not a --multi-job flag");
    }
  }
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string truth = absl::GetFlag(FLAGS_truth);
  if (output.empty()) return Fail("--output is required");
  const bool no_faults = absl::GetFlag(FLAGS_no_faults);
  if (no_faults && flags.Given("faults-per-day")) {
    return Fail("give --faults-per-day or --no-faults, not both");
  }
  vigil::agent::MultiJobOptions options;
  options.nodes = flags.Given("nodes") ? absl::GetFlag(FLAGS_nodes) : 64;
  options.gpus = absl::GetFlag(FLAGS_gpus);
  options.interval_seconds = flags.Given("interval") ? absl::GetFlag(FLAGS_interval) : 10;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.start_ts = absl::GetFlag(FLAGS_start_ts);
  const std::optional<double> hours = absl::GetFlag(FLAGS_hours);
  const std::optional<double> seconds = absl::GetFlag(FLAGS_seconds);
  // --hours wins, as without --multi-job.
  options.seconds = hours.has_value() || !seconds.has_value() ? hours.value_or(24) * 3600
                                                              : *seconds;
  if (std::optional<double> faults = absl::GetFlag(FLAGS_faults_per_day)) {
    options.faults_per_day = *faults;
  }
  if (no_faults) options.faults_per_day = 0;

  std::FILE* out = output == "-" ? stdout : std::fopen(output.c_str(), "w");
  if (out == nullptr) return Fail("cannot write " + output);
  const double started = vigil::RealClock()->Now();
  absl::StatusOr<vigil::agent::MultiJobResult> run =
      vigil::agent::SimulateMultiJob(options, [out](std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), out);
      });
  bool write_failed = std::fflush(out) != 0 || std::ferror(out) != 0;
  if (out != stdout) write_failed = std::fclose(out) != 0 || write_failed;
  if (!run.ok()) return Fail(std::string(run.status().message()));
  if (write_failed) return Fail("error writing " + output);
  if (!truth.empty() &&
      !WriteFile(truth, vigil::agent::MultiJobTruthJson(options, *run))) {
    return Fail("cannot write " + truth);
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
  const vigil::flags::Parsed flags = vigil::flags::ParseOrExit(SimProgram(), argc, argv);
  if (absl::GetFlag(FLAGS_multi_job)) return MultiJob(flags);
  if (absl::GetFlag(FLAGS_no_faults) || flags.Given("faults-per-day")) {
    return Fail("--faults-per-day and --no-faults need --multi-job");
  }
  const std::string scenario = absl::GetFlag(FLAGS_scenario);
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string truth_file = absl::GetFlag(FLAGS_truth);
  if (scenario.empty() || output.empty()) {
    return Fail("--scenario and --output are required");
  }
  vigil::agent::ClusterOptions options;
  options.job = absl::GetFlag(FLAGS_job);
  options.nodes = absl::GetFlag(FLAGS_nodes);
  options.gpus = absl::GetFlag(FLAGS_gpus);
  options.interval_seconds = absl::GetFlag(FLAGS_interval);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.start_ts = absl::GetFlag(FLAGS_start_ts);
  options.start_step = absl::GetFlag(FLAGS_start_step);
  if (std::optional<double> seconds = absl::GetFlag(FLAGS_seconds)) options.seconds = *seconds;
  if (std::optional<double> hours = absl::GetFlag(FLAGS_hours)) options.seconds = *hours * 3600;

  vigil::agent::FaultOverrides overrides;
  if (std::string node = absl::GetFlag(FLAGS_fault_node); !node.empty()) overrides.node = node;
  overrides.gpu = absl::GetFlag(FLAGS_fault_gpu);
  overrides.at_step = absl::GetFlag(FLAGS_fault_at_step);
  if (overrides.at_step.has_value() && *overrides.at_step < 0) {
    return Fail("bad --fault-at-step");
  }
  overrides.at_seconds = absl::GetFlag(FLAGS_fault_at);
  if (overrides.at_seconds.has_value() && !(*overrides.at_seconds >= 0)) {
    return Fail("bad --fault-at");
  }
  absl::StatusOr<vigil::agent::ScenarioSpec> spec = vigil::agent::ScenarioSpecFromArg(scenario);
  if (!spec.ok()) return Fail(std::string(spec.status().message()));
  std::vector<std::string> nodes =
      vigil::agent::ClusterNodeNames(std::max(options.nodes, 1));
  absl::Status resolved = vigil::agent::ResolveFaultDefaults(
      overrides, nodes[std::min<size_t>(1, nodes.size() - 1)], nodes,
      options.gpus, options.gpus, &*spec);
  if (!resolved.ok()) return Fail(std::string(resolved.message()));

  std::FILE* out = output == "-" ? stdout : std::fopen(output.c_str(), "w");
  if (out == nullptr) return Fail("cannot write " + output);
  const double started = vigil::RealClock()->Now();
  absl::StatusOr<vigil::agent::ClusterRun> run = vigil::agent::SimulateCluster(
      options, *spec,
      [out](std::string_view s) { std::fwrite(s.data(), 1, s.size(), out); });
  bool write_failed = std::fflush(out) != 0 || std::ferror(out) != 0;
  if (out != stdout) write_failed = std::fclose(out) != 0 || write_failed;
  if (!run.ok()) return Fail(std::string(run.status().message()));
  if (write_failed) return Fail("error writing " + output);
  if (!truth_file.empty()) {
    std::FILE* truth = std::fopen(truth_file.c_str(), "w");
    std::string text = vigil::agent::TruthJson(options, spec->name, *run);
    if (truth == nullptr ||
        std::fwrite(text.data(), 1, text.size(), truth) != text.size() ||
        std::fclose(truth) != 0) {
      return Fail("cannot write " + truth_file);
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
