// Simulated cluster runs replayed in memory through the replay library
// (the code path of vigil-replay), and their incidents scored against the
// simulator's truth with the criteria of docs/DETECTION.md, which
// scripts/evaluate_detection.py applies to files.
#ifndef VIGIL_TESTS_SERVER_REPLAY_SCENARIO_REPLAY_H_
#define VIGIL_TESTS_SERVER_REPLAY_SCENARIO_REPLAY_H_

#include <optional>
#include <string>
#include <vector>

#include "agent/sim/cluster_sim.h"
#include "agent/sim/scenario_spec.h"
#include "nlohmann/json.hpp"
#include "server/replay/replay.h"

namespace vigil {

// One run: the cluster, the scenario and where/when its fault starts.
struct ScenarioRunOptions {
  agent::ClusterOptions cluster;
  // A fault kind of agent::FaultKindNames(), or "healthy".
  std::string scenario = "healthy";
  agent::FaultOverrides overrides;
};

// What the replay of a run produced.
struct ScenarioReplay {
  std::vector<nlohmann::json> lines;  // the output lines, parsed
  std::vector<std::string> bad_lines;
  ReplayStats stats;
  nlohmann::json truth;  // agent::TruthJson, parsed
};

// Simulates `options` and replays its frames as they are generated. Fails
// the calling test on simulator errors.
ScenarioReplay RunAndReplay(const ScenarioRunOptions& options);

// How one expected incident of the truth was met.
struct EntryResult {
  nlohmann::json expected;           // the truth's "expected" entry
  std::optional<nlohmann::json> hit;  // the first output line meeting it
  double delay_s = 0;                 // hit ts - the fault's start_ts
};

// A run scored against its truth.
struct Score {
  std::vector<EntryResult> entries;  // one per expected incident
  // P0-P2 output lines of incidents the fault does not explain.
  std::vector<nlohmann::json> false_alarms;
  // Whether every expected incident was met.
  bool Detected() const;
  // What was expected and what came out, for failure messages.
  std::string Describe(const ScenarioReplay& replay) const;
};

// Scores `replay`: an expected entry is met by the first line at or after
// the fault's start whose severity is the entry's, whose kind is one of the
// entry's kinds (or whose id is that of the incident meeting the first
// entry: grouping raised it), and which carries the truth's node/GPU where
// the entry asks for them (rack_down: its "nodes", as a set). A P0-P2 line
// is a false alarm unless its incident met an entry, or its kind is a side
// effect of the fault, or one of the entries' kinds with a localisation not
// contradicting the truth.
Score ScoreReplay(const ScenarioReplay& replay);

}  // namespace vigil

#endif  // VIGIL_TESTS_SERVER_REPLAY_SCENARIO_REPLAY_H_
