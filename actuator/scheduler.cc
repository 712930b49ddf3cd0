#include "actuator/scheduler.h"

#include <array>
#include <utility>

namespace vigil::actuator {
namespace {

constexpr std::array<std::pair<ActionType, std::string_view>, 5> kNames = {{
    {ActionType::kCheckpointThenPause, "checkpoint_then_pause_job"},
    {ActionType::kPause, "pause_job"},
    {ActionType::kCordon, "cordon_node"},
    {ActionType::kUncordon, "uncordon_node"},
    {ActionType::kDiagnosticReport, "diagnostic_report"},
}};

}  // namespace

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "running";
    case JobState::kSuspended:
      return "suspended";
    case JobState::kPending:
      return "pending";
    case JobState::kEnded:
      return "ended";
    case JobState::kNotFound:
      return "not_found";
    case JobState::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string_view ActionTypeName(ActionType type) {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "unknown";
}

std::optional<ActionType> ActionTypeFromName(std::string_view name) {
  for (const auto& [t, n] : kNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

absl::StatusOr<ActionOutcome> Perform(Scheduler& scheduler,
                                      const ActionRequest& request) {
  switch (request.type) {
    case ActionType::kCheckpointThenPause:
      return scheduler.CheckpointThenPause(request);
    case ActionType::kPause:
      return scheduler.Pause(request);
    case ActionType::kCordon:
      return scheduler.Cordon(request);
    case ActionType::kUncordon:
      return scheduler.Uncordon(request);
    case ActionType::kDiagnosticReport:
      return scheduler.Report(request);
  }
  return absl::InvalidArgumentError("unknown action type");
}

}  // namespace vigil::actuator
