// Simulates every node of one training job over a stretch of simulated time
// (no sleeping) and renders the frames in the offline replay input format,
// one JSON object per line, sorted by ts:
//
//   {"ts": 1764000000.25, "node": "n003", "job": "llama-70b", "step": 1234,
//    "samples": [{"m": "gpu_power_watts", "gpu": 3, "v": 612.5},
//                {"m": "net_drops_total", "dev": "mlx5_0", "v": 0},
//                {"m": "train_loss", "v": "nan"}]}
//
// Numbers are written in their shortest round-trip form; non-finite values
// as "nan", "inf", "-inf". Also writes the truth file that says what was
// injected (TruthJson). Pure apart from the sink it is given.
#ifndef VIGIL_AGENT_SIM_CLUSTER_SIM_H_
#define VIGIL_AGENT_SIM_CLUSTER_SIM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/sim/scenario_spec.h"
#include "agent/sim/scenarios.h"

namespace vigil::agent {

// Shape and length of a simulated cluster run.
struct ClusterOptions {
  // Job name of every frame.
  std::string job = "llama-70b";
  // Nodes, named n000, n001, ... (ClusterNodeNames). 1..4096.
  int nodes = 4;
  // GPUs (and RDMA NICs) per node. 1..64.
  int gpus = 8;
  // Simulated seconds; ticks at start_ts + k * interval for k = 0 .. while
  // below start_ts + seconds.
  double seconds = 3600;
  // Seconds between a node's frames. >= 0.1.
  double interval_seconds = 1.0;
  // Seed of all randomness (nodes' readings, fault strengths, jitter).
  uint64_t seed = 1;
  // Unix time of the first tick.
  double start_ts = 1764000000.0;
  // Training step at the first tick.
  int64_t start_step = 0;
  // Largest offset of a node's tick from the grid, seconds: each node has a
  // fixed phase plus a little per-tick jitter. Capped at interval / 4 so
  // frames stay sorted tick by tick. Tick times are whole milliseconds.
  double jitter_seconds = 0.05;
};

// What a run produced, and when each fault began.
struct ClusterRun {
  uint64_t frames = 0;
  uint64_t samples = 0;
  double end_ts = 0;  // time of the last tick
  // The spec's faults, resolved, with their onsets: on the fault's node for
  // node-level kinds, the earliest node's for job-wide kinds; nullopt if the
  // fault never began within the run.
  std::vector<ResolvedFault> faults;
  std::vector<std::optional<FaultOnset>> onsets;
};

// "n000", "n001", ... for `n` nodes.
std::vector<std::string> ClusterNodeNames(int n);

// Runs the cluster with `spec` (its defaults resolved by
// ResolveFaultDefaults against ClusterNodeNames) and hands the JSONL output
// to `sink` in chunks of about a megabyte. kInvalidArgument on bad options.
absl::StatusOr<ClusterRun> SimulateCluster(
    const ClusterOptions& options, const ScenarioSpec& spec,
    const std::function<void(std::string_view)>& sink);

// The truth file of a run, pretty-printed JSON:
//   {"scenario", "job", "nodes": [..], "gpus_per_node", "interval_seconds",
//    "seed", "start_ts", "end_ts", "frames", "samples",
//    "faults": [{"kind", "node" (or null for job-wide kinds), "gpu" (or
//      null), "dev" (or null), "magnitude", "job_speed", "start_ts",
//      "start_step" (null if it never began), "end_ts" (null: to the end),
//      "severity" (the highest expected), "expected": [{"kinds": [..],
//      "severity", "node", "gpu", "ts"}], "side_effect_kinds": [..]}]}
// rack_down faults also carry "nodes": [..] (the nodes that went down),
// and so does their expected entry (one incident naming exactly those).
// A healthy run has no faults: no P0-P2 incident is expected.
std::string TruthJson(const ClusterOptions& options, std::string_view scenario,
                      const ClusterRun& run);

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SIM_CLUSTER_SIM_H_
