// The remediation actions Vigil asks for, the job-state query, and the seam
// to the scheduler that performs and answers them (Slurm, Kubernetes, or a
// dry run).
#ifndef VIGIL_ACTUATOR_SCHEDULER_H_
#define VIGIL_ACTUATOR_SCHEDULER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::actuator {

// The actions of the webhook contract (actuator/README.md).
enum class ActionType : uint8_t {
  kCheckpointThenPause,  // "checkpoint_then_pause_job"
  kPause,                // "pause_job"
  kCordon,               // "cordon_node"
  kUncordon,             // "uncordon_node"
  kDiagnosticReport,     // "diagnostic_report"
};

// The wire name of `type` ("pause_job", ...).
std::string_view ActionTypeName(ActionType type);
// The action called `name` on the wire, or nullopt.
std::optional<ActionType> ActionTypeFromName(std::string_view name);

// One validated action request. Names are as sent; each backend checks
// them against what it can pass on safely.
struct ActionRequest {
  std::string id;  // unique per action, e.g. "act-000001"
  ActionType type = ActionType::kDiagnosticReport;
  std::string incident_id;
  std::string severity;
  std::string job;  // scheduler job id or name; may be empty
  std::string node;  // node name; may be empty
  std::string reason;
  std::string requested_by;
  // How long a checkpoint action waits for the job's confirmation.
  double checkpoint_timeout_seconds = 300;
  // Clock time the request arrived; checkpoint confirmations older than
  // this do not count.
  double received_at = 0;
};

// What an action did.
struct ActionOutcome {
  // The commands or API requests made and what they returned, for humans.
  std::string detail;
  // Checkpoint actions only: "confirmed" when the job confirmed it saved a
  // checkpoint, "timed_out" when it did not in time (the job is paused
  // either way), "skipped" for a dry run. Empty for other actions.
  std::string checkpoint;
};

// What a job is doing, as the job-state query reports it (POST
// /v1/jobs/query, actuator/README.md has each backend's mapping).
enum class JobState : uint8_t {
  kRunning,    // "running": its processes run on `nodes`
  kSuspended,  // "suspended": stopped in place (Slurm suspend, k8s suspend)
  kPending,    // "pending": waiting to start or to start again (requeued)
  kEnded,      // "ended": finished, failed, cancelled, or its processes are
               // ending; it will not run again as this job
  kNotFound,   // "not_found": the scheduler does not know it (never existed,
               // or forgotten since it ended)
  kUnknown,    // "unknown": a state this code does not know; the raw one is
               // in scheduler_state. Neither alive nor ended: no conclusion.
};

// The wire name of `state` ("running", ...).
std::string_view JobStateName(JobState state);

// One job as the scheduler sees it.
struct JobStatus {
  std::string job;     // as asked
  std::string job_id;  // the job answered for (e.g. the newest of a name);
                       // empty when not_found
  std::string name;    // the job's name
  JobState state = JobState::kNotFound;
  // The scheduler's own word: "RUNNING", "COMPLETED", "NODE_FAIL" (Slurm),
  // "Running", "Complete", "Failed" (Kubernetes). Empty when not_found.
  std::string scheduler_state;
  // Host names (expanded, sorted, no repeats) of the job's tasks in
  // `state`: where it runs or is suspended; where it ran, once ended, as
  // long as the scheduler still says.
  std::vector<std::string> nodes;
  std::string user;  // who submitted it; empty when the scheduler has none
  // Unix seconds it ended; only for ended jobs, when the scheduler says.
  std::optional<double> end_time;
};

// Performs actions on one scheduler. Every method blocks until the action
// is done or failed; implementations are safe for concurrent use.
//
// Failures, as the webhook answers them: kInvalidArgument when a job or
// node name cannot be passed on safely (400); kNotFound when the job or
// node does not exist and kFailedPrecondition when the job is in a state
// that cannot be paused (422, not retried); anything else means the
// scheduler command or API failed (502, retried). The message says what was
// run and what it printed.
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // "slurm", "kubernetes" or "noop".
  virtual std::string_view Name() const = 0;
  // Asks `request.job` to checkpoint, waits up to
  // request.checkpoint_timeout_seconds for its confirmation, then pauses it.
  virtual absl::StatusOr<ActionOutcome> CheckpointThenPause(
      const ActionRequest& request) = 0;
  // Pauses `request.job` (suspends it when running, holds it when pending).
  virtual absl::StatusOr<ActionOutcome> Pause(const ActionRequest& request) = 0;
  // Stops new work landing on `request.node`; running work continues.
  virtual absl::StatusOr<ActionOutcome> Cordon(const ActionRequest& request) = 0;
  // Undoes Cordon.
  virtual absl::StatusOr<ActionOutcome> Uncordon(
      const ActionRequest& request) = 0;
  // The scheduler's view of `request.node` and/or `request.job`.
  virtual absl::StatusOr<ActionOutcome> Report(const ActionRequest& request) = 0;

  // The state of each of `jobs` (ids or names, as the backend reads them),
  // in the same order; a job the scheduler does not know is kNotFound, not
  // an error. Read-only. kInvalidArgument when a job cannot be passed on
  // safely (the message names it); kUnimplemented when the backend has no
  // scheduler to ask (noop); anything else: the scheduler command or API
  // failed (the message says what was run and what it printed).
  virtual absl::StatusOr<std::vector<JobStatus>> QueryJobs(
      const std::vector<std::string>& jobs) = 0;
};

// Calls the method of `scheduler` that performs `request.type`.
absl::StatusOr<ActionOutcome> Perform(Scheduler& scheduler,
                                      const ActionRequest& request);

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_SCHEDULER_H_
