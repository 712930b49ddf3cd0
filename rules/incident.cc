#include "rules/incident.h"

#include <array>

namespace vigil {
namespace {

constexpr std::array<std::string_view, 4> kSeverities = {"P0", "P1", "P2",
                                                         "P3"};
constexpr std::array<std::string_view, 6> kResponses = {
    "checkpoint_then_pause_job", "pause_job", "cordon_node", "notify_sre",
    "diagnostic_report",         "log"};
constexpr std::array<std::string_view, 10> kCategories = {
    "gpu_hardware", "communication", "data_pipeline", "model",
    "memory",       "node",          "performance",   "general",
    "application",  "lifecycle"};
constexpr std::array<std::string_view, 5> kUpdates = {
    "opened", "severity_raised", "evidence_added", "resolved", "reopened"};

static_assert(static_cast<size_t>(Response::kLog) + 1 == kResponses.size());
static_assert(static_cast<size_t>(HintCategory::kLifecycle) + 1 ==
              kCategories.size());
static_assert(static_cast<size_t>(UpdateType::kReopened) + 1 ==
              kUpdates.size());

template <typename Enum, size_t N>
std::optional<Enum> Parse(const std::array<std::string_view, N>& names,
                          std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

}  // namespace

std::string_view SeverityName(Severity severity) {
  return kSeverities[static_cast<size_t>(severity)];
}

std::optional<Severity> ParseSeverity(std::string_view name) {
  return Parse<Severity>(kSeverities, name);
}

std::string_view ResponseName(Response response) {
  return kResponses[static_cast<size_t>(response)];
}

std::optional<Response> ParseResponse(std::string_view name) {
  return Parse<Response>(kResponses, name);
}

std::string_view HintCategoryName(HintCategory category) {
  return kCategories[static_cast<size_t>(category)];
}

std::optional<HintCategory> ParseHintCategory(std::string_view name) {
  return Parse<HintCategory>(kCategories, name);
}

std::string_view IncidentStateName(IncidentState state) {
  return state == IncidentState::kFiring ? "firing" : "resolved";
}

std::string_view UpdateTypeName(UpdateType type) {
  return kUpdates[static_cast<size_t>(type)];
}

}  // namespace vigil
