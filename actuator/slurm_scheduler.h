// Performs actions on Slurm by running its client programs (scontrol,
// squeue, scancel) directly, never through a shell, and answers job-state
// queries with squeue. Commands, state mapping and the checkpoint protocol:
// actuator/README.md.
#ifndef VIGIL_ACTUATOR_SLURM_SCHEDULER_H_
#define VIGIL_ACTUATOR_SLURM_SCHEDULER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/command_runner.h"
#include "actuator/scheduler.h"
#include "common/clock.h"

namespace vigil::actuator {

struct SlurmOptions {
  // The client programs; a bare name is looked up in PATH. They find the
  // cluster the usual way (SLURM_CONF, /etc/slurm/slurm.conf).
  std::string scontrol = "scontrol";
  std::string scancel = "scancel";
  std::string squeue = "squeue";
  // Where jobs confirm checkpoints: <checkpoint_dir>/<jobid>.checkpointed.
  // Required (no default).
  std::string checkpoint_dir;
  // The signal scancel sends to ask for a checkpoint. Default "USR1".
  std::string checkpoint_signal = "USR1";
  // How often the confirmation file is looked for. Default 1 s.
  double checkpoint_poll_seconds = 1;
  // Each client command is killed after this long. Default 30 s.
  double command_timeout_seconds = 30;
};

// Slurm backend. Job names map to ids with squeue (every matching job is
// acted on; a query answers for the newest). Thread-safe.
class SlurmScheduler : public Scheduler {
 public:
  // `clock` must outlive this.
  SlurmScheduler(SlurmOptions options, Clock& clock);

  std::string_view Name() const override { return "slurm"; }
  absl::StatusOr<ActionOutcome> CheckpointThenPause(
      const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Pause(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Cordon(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Uncordon(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Report(const ActionRequest& request) override;
  // One squeue for all the ids and one for all the names (defined in
  // slurm_job_query.cc).
  absl::StatusOr<std::vector<JobStatus>> QueryJobs(
      const std::vector<std::string>& jobs) override;

 private:
  class Transcript;

  // Runs `argv`, records it in `transcript`; a non-zero exit is an error
  // (kNotFound when Slurm says the job or node is unknown) unless stderr
  // contains `tolerated` (when not empty).
  absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                                    Transcript& transcript,
                                    std::string_view tolerated = {});
  // The ids of `job`: itself when numeric, else the ids squeue lists
  // under that name (kNotFound when none).
  absl::StatusOr<std::vector<std::string>> ResolveJob(const std::string& job,
                                                      Transcript& transcript);
  // Suspends `job_id` when running, holds it when pending, leaves it when
  // already suspended; kFailedPrecondition in any other state.
  absl::Status PauseJobId(const std::string& job_id, Transcript& transcript);
  // True once every job has confirmed a checkpoint taken at or after
  // `since`, false when `deadline` passes first.
  bool WaitForCheckpoints(const std::vector<std::string>& job_ids, double since,
                          double deadline);
  absl::StatusOr<ActionOutcome> UpdateNode(const ActionRequest& request,
                                           bool drain);

  const SlurmOptions options_;
  Clock& clock_;
};

// OK when `name` may be passed to Slurm as a job or node name: 1 to 128 of
// A-Z a-z 0-9 . _ - and not starting with '-'. kInvalidArgument naming
// `what` ("job", "node") otherwise.
absl::Status ValidateSlurmName(std::string_view what, std::string_view name);

// What a Slurm job state, as squeue's %T prints it ("RUNNING", "NODE_FAIL",
// ...), means for a query; kUnknown for a state not in the table of
// actuator/README.md.
JobState SlurmJobState(std::string_view state);

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_SLURM_SCHEDULER_H_
