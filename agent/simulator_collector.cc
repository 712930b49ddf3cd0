#include "agent/simulator_collector.h"

#include <optional>

namespace vigil::agent {

absl::Status SimulatorCollector::Collect(Tick* tick) {
  std::optional<SimFrame> frame = sim_->Tick(tick->ts);
  if (!frame.has_value()) return absl::OkStatus();  // node down
  tick->job = sim_->options().job;
  // The simulated node stands for one whose scheduler confirmed its job
  // (agent/job_identity.h); the actuator still checks with the real
  // scheduler before acting on it.
  tick->verified_job_id = sim_->options().job;
  tick->step = frame->step;
  tick->samples.reserve(tick->samples.size() + frame->samples.size());
  for (const SimSample& s : frame->samples) {
    tick->samples.push_back(Sample{sim_->series()[s.series], s.value});
  }
  return absl::OkStatus();
}

}  // namespace vigil::agent
