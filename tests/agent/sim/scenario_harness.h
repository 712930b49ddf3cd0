// Runs a small simulated cluster with a fault scenario in memory, for the
// scenario tests: every node's frames, by series text.
#ifndef VIGIL_TESTS_AGENT_SIM_SCENARIO_HARNESS_H_
#define VIGIL_TESTS_AGENT_SIM_SCENARIO_HARNESS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/sim/scenario_spec.h"
#include "agent/sim/scenarios.h"

namespace vigil::agent {

// First tick of every run.
inline constexpr double kHarnessStart = 1764000000.0;

// One node's frames at 1 Hz: values keyed "metric" or "metric{gpu=\"3\"}".
struct NodeFrames {
  std::string node;
  std::vector<double> ts;
  std::vector<int64_t> steps;
  std::vector<std::map<std::string, double>> values;
};

// A run of the harness.
struct HarnessRun {
  std::vector<NodeFrames> nodes;  // n000, n001, ...
  std::vector<ResolvedFault> faults;
  std::vector<std::optional<FaultOnset>> onsets;  // on each fault's node
};

// How the harness runs.
struct HarnessOptions {
  int nodes = 2;
  int gpus = 4;
  int ticks = 400;
  int64_t start_step = 5000;  // past warm-up
  uint64_t seed = 7;
  // Default: the fault starts 60 s in, on n001 GPU 3.
  FaultOverrides overrides = {std::nullopt, std::nullopt, std::nullopt, 60.0};
};

// Runs scenario `name` (a kind or "healthy"); fails the test on errors.
HarnessRun RunScenario(const std::string& name, const HarnessOptions& options);
// As above from a spec.
HarnessRun RunSpec(ScenarioSpec spec, const HarnessOptions& options);

// "metric{gpu=\"g\"}", "metric{dev=\"d\"}".
std::string GpuKey(const char* metric, int gpu);
std::string DevKey(const char* metric, const std::string& dev);

// Mean of `key` over frames [from, to) of `n` that carry it; NaN if none.
double Mean(const NodeFrames& n, const std::string& key, size_t from,
            size_t to);
// Increase of counter `key` between frames `from` and `to` of `n`.
double Increase(const NodeFrames& n, const std::string& key, size_t from,
                size_t to);

}  // namespace vigil::agent

#endif  // VIGIL_TESTS_AGENT_SIM_SCENARIO_HARNESS_H_
