#include "actuator/noop_scheduler.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace vigil::actuator {
namespace {

ActionOutcome WouldDo(const std::string& what) {
  return ActionOutcome{absl::StrCat("dry run: would ", what), ""};
}

}  // namespace

absl::StatusOr<ActionOutcome> NoopScheduler::CheckpointThenPause(
    const ActionRequest& request) {
  ActionOutcome outcome = WouldDo(absl::StrCat(
      "ask job ", request.job, " to checkpoint, wait up to ",
      request.checkpoint_timeout_seconds, " s for its confirmation, then pause it"));
  outcome.checkpoint = "skipped";
  return outcome;
}

absl::StatusOr<ActionOutcome> NoopScheduler::Pause(const ActionRequest& request) {
  return WouldDo(absl::StrCat("pause job ", request.job));
}

absl::StatusOr<ActionOutcome> NoopScheduler::Cordon(
    const ActionRequest& request) {
  return WouldDo(absl::StrCat("cordon node ", request.node, " (vigil ",
                              request.incident_id, ": ", request.reason, ")"));
}

absl::StatusOr<ActionOutcome> NoopScheduler::Uncordon(
    const ActionRequest& request) {
  return WouldDo(absl::StrCat("uncordon node ", request.node));
}

absl::StatusOr<ActionOutcome> NoopScheduler::Report(
    const ActionRequest& request) {
  std::string what = "report on";
  if (!request.node.empty()) absl::StrAppend(&what, " node ", request.node);
  if (!request.job.empty()) absl::StrAppend(&what, " job ", request.job);
  return WouldDo(what);
}

absl::StatusOr<std::vector<JobStatus>> NoopScheduler::QueryJobs(
    const std::vector<std::string>&) {
  return absl::UnimplementedError(
      "the noop backend has no scheduler to ask about jobs");
}

}  // namespace vigil::actuator
