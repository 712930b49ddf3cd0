// A simulated node as a Collector, so that --simulate runs through the same
// CollectRunner (tick grid, series registration, stream) as a real node.
#ifndef VIGIL_AGENT_SIMULATOR_COLLECTOR_H_
#define VIGIL_AGENT_SIMULATOR_COLLECTOR_H_

#include <string_view>

#include "absl/status/status.h"
#include "agent/collector.h"
#include "agent/simulator.h"

namespace vigil::agent {

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

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_SIMULATOR_COLLECTOR_H_
