// A scheduler that only says what it would do: for demos and dry runs.
#ifndef VIGIL_ACTUATOR_NOOP_SCHEDULER_H_
#define VIGIL_ACTUATOR_NOOP_SCHEDULER_H_

#include "actuator/scheduler.h"

namespace vigil::actuator {

// Every action succeeds at once with a detail starting "dry run: would";
// checkpoint actions report checkpoint "skipped". Queries are
// kUnimplemented: there is no scheduler to tell the truth about jobs.
// Thread-safe (stateless).
class NoopScheduler : public Scheduler {
 public:
  std::string_view Name() const override { return "noop"; }
  absl::StatusOr<ActionOutcome> CheckpointThenPause(
      const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Pause(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Cordon(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Uncordon(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Report(const ActionRequest& request) override;
  absl::StatusOr<std::vector<JobStatus>> QueryJobs(
      const std::vector<std::string>& jobs) override;
};

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_NOOP_SCHEDULER_H_
