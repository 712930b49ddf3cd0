// A simulated node as a Collector, so that --simulate runs through the same
// CollectRunner (tick grid, series registration, stream) as a real node.
// The agent's only door to the simulator (agent/sim/): vigil-agent builds
// its simulated node here and never includes agent/sim/ headers itself.
#ifndef VIGIL_AGENT_SIMULATOR_COLLECTOR_H_
#define VIGIL_AGENT_SIMULATOR_COLLECTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/collector.h"

namespace vigil::agent {

class Simulator;  // agent/sim/simulator.h

// Adds the simulator's frame for each tick: its samples, the job and the
// step. A tick where the simulated node is down adds nothing. Not
// thread-safe, like the Simulator.
class SimulatorCollector : public Collector {
 public:
  // `sim` is not owned and must outlive the collector.
  explicit SimulatorCollector(Simulator* sim) : sim_(sim) {}

  std::string_view name() const override { return "simulator"; }
  // Never fails.
  absl::Status Collect(Tick* tick) override;

 private:
  Simulator* const sim_;
};

// What vigil-agent --simulate asks for.
struct SimulatedNodeOptions {
  // "healthy", a fault kind (SimulatedFaultKinds) or a JSON scenario file.
  std::string scenario = "healthy";
  // This node; a fault without a node of its own sits here.
  std::string node;
  std::string job = "llama-70b";
  // GPUs (and as many NICs) of the node.
  int gpus = 8;
  uint64_t seed = 1;
  int64_t start_step = 0;
  // Where and when the scenario's faults sit, overriding the spec
  // (--fault-node, --fault-gpu, --fault-at-step, --fault-at).
  std::optional<std::string> fault_node;
  std::optional<int> fault_gpu;
  std::optional<int64_t> fault_at_step;
  std::optional<double> fault_at_seconds;
};

// A simulated node ready to collect.
struct SimulatedNode {
  // Owns the simulator and its fault scenario.
  std::unique_ptr<Collector> collector;
  // One line per fault: "scenario NAME: KIND on WHERE WHEN (magnitude M)".
  std::vector<std::string> faults;
};

// The simulated node of `options`. kInvalidArgument (or kNotFound for a
// scenario file that cannot be read) naming what is wrong with the scenario
// or the overrides.
absl::StatusOr<SimulatedNode> MakeSimulatedNode(const SimulatedNodeOptions& options);

// The fault kinds --simulate accepts, each with its one-line help.
std::vector<std::pair<std::string, std::string>> SimulatedFaultKinds();

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SIMULATOR_COLLECTOR_H_
