// What a fault-injection run injects: a scenario spec names one or more
// faults, each with where (node, GPU, NIC), when (a step or seconds after
// the start), for how long and how strongly. One spec describes a whole
// cluster: every node's simulator sees all of it, so job-wide effects (a
// straggler slowing the job, a hung ring) reach nodes the spec does not name.
//
// Specs come from a scenario name with defaults (ScenarioSpecFromName) or
// from JSON text (ParseScenarioSpec):
//
//   {"name": "drill",                      optional, default "custom"
//    "faults": [{"kind": "thermal_throttle",   required, see FaultKindNames()
//                "node": "n001",           optional, default: see Resolve...
//                "gpu": 3,                 optional, default 3
//                "dev": "mlx5_3",          optional, NIC; default mlx5_<gpu>
//                "nodes": ["n001", "n002"], rack_down only; default: see
//                                          ResolveFaultDefaults
//                "xid": 94,                xid_storm only; default by seed
//                "at_step": 1200,          optional, or
//                "at_seconds": 120,        optional, default per kind
//                "duration_seconds": 600,  optional, default: to the end
//                "magnitude": 0.75,        optional, per kind (see kinds)
//                "hang_after_seconds": 90, packet_loss_hang only
//                "period_steps": 4,        dataloader_stall only
//                "nan": true}]}            grad_explosion only
//
// Thread-compatible plain data and pure functions, except
// ScenarioSpecFromArg, which may read a file.
#ifndef VIGIL_AGENT_SIM_SCENARIO_SPEC_H_
#define VIGIL_AGENT_SIM_SCENARIO_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::agent {

// One injected fault. Unset optionals take the kind's defaults when the
// scenario is built.
struct FaultSpec {
  // One of FaultKindNames(), e.g. "thermal_throttle".
  std::string kind;
  // Node the fault sits on; empty = the default node chosen by the caller
  // (ResolveFaultDefaults). Job-wide kinds (loss_nan, throughput drops, ...)
  // ignore it.
  std::string node;
  // GPU index on that node (GPU-level kinds). Default 3, or the last GPU
  // on nodes with fewer.
  std::optional<int> gpu;
  // NIC (packet_loss_hang). Default "mlx5_<gpu>" (the GPU's rail).
  std::string dev;
  // rack_down: every node that goes down at once (`node` is the first).
  std::vector<std::string> nodes;
  // xid_storm: the XID code reported (94 hardware, 13 or 31 application).
  std::optional<int> xid;
  // Start: the first tick at or after this training step, or this many
  // seconds after the simulation started. Neither: the kind's default
  // (DefaultStartSeconds).
  std::optional<int64_t> at_step;
  std::optional<double> at_seconds;
  // Seconds the fault lasts; unset = until the end of the run.
  std::optional<double> duration_seconds;
  // Strength, in the kind's unit (FaultKindHelp()); unset = a default
  // varied a little with the seed.
  std::optional<double> magnitude;
  // packet_loss_hang: seconds of packet loss before the ring hangs.
  std::optional<double> hang_after_seconds;
  // dataloader_stall: a stall every this many steps.
  std::optional<int> period_steps;
  // grad_explosion: whether the explosion ends in NaN (default: by seed).
  std::optional<bool> nan;
};

// A named set of faults; empty `faults` is a healthy run.
struct ScenarioSpec {
  std::string name = "healthy";
  std::vector<FaultSpec> faults;
};

// Every fault kind, in catalogue order.
const std::vector<std::string>& FaultKindNames();
// One line on what `kind` does and what its magnitude means; "" if unknown.
std::string_view FaultKindHelp(std::string_view kind);
// Seconds after the start at which `kind` begins when the spec gives no
// start: 0 for low_mfu (a property of the job from the first step), 2400
// for the throughput drops (they are measured against a baseline learned
// over the first 1000 steps), 120 for every other kind.
double DefaultStartSeconds(std::string_view kind);

// The spec of scenario `name`: "healthy" (no fault) or one fault kind with
// every field at its default. kInvalidArgument naming the known scenarios
// otherwise.
absl::StatusOr<ScenarioSpec> ScenarioSpecFromName(std::string_view name);

// Parses a JSON scenario spec. kInvalidArgument listing every error, one per
// line, each with its JSON path (e.g. "$.faults[0].gpu: must be an integer
// 0..63").
absl::StatusOr<ScenarioSpec> ParseScenarioSpec(std::string_view json_text);

// A spec from a command-line argument: a file when `arg` ends in ".json"
// (kNotFound if it cannot be read; parse errors are prefixed with the file
// name), a scenario name otherwise.
absl::StatusOr<ScenarioSpec> ScenarioSpecFromArg(const std::string& arg);

// Command-line overrides applied to every fault of a spec.
struct FaultOverrides {
  std::optional<std::string> node;
  std::optional<int> gpu;
  // Setting one start clears the other.
  std::optional<int64_t> at_step;
  std::optional<double> at_seconds;
};

// Applies `overrides`, then fills each fault's empty node with
// `default_node` and its GPU and NIC with their defaults for a node of
// `gpus` GPUs and `nics` NICs. rack_down without `nodes` takes its node and
// the next ones of `nodes` (wrapping), 3 in all but leaving at least one
// node up (only its node when `nodes` is empty). kInvalidArgument if a GPU
// or NIC is out of range, or a node not in `nodes` (when `nodes` is
// non-empty) is named.
absl::Status ResolveFaultDefaults(const FaultOverrides& overrides,
                                  const std::string& default_node,
                                  const std::vector<std::string>& nodes,
                                  int gpus, int nics, ScenarioSpec* spec);

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SIM_SCENARIO_SPEC_H_
