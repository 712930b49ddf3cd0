// Builds the collectors an AgentConfig enables, in the order they are read
// each tick.
#ifndef VIGIL_AGENT_COLLECTORS_H_
#define VIGIL_AGENT_COLLECTORS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent_config.h"
#include "agent/collector.h"
#include "common/clock.h"

namespace vigil::agent {

// The enabled collectors of `config`, not started. `clock` (not owned)
// stamps events and receive times. kInvalidArgument if a collector's
// options are unusable.
absl::StatusOr<std::vector<std::unique_ptr<Collector>>> MakeCollectors(
    const AgentConfig& config, Clock* clock);

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_COLLECTORS_H_
