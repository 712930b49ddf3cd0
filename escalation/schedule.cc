// OnCallAt: overrides, then rotation layers.
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "escalation/escalation.h"

namespace vigil {

absl::StatusOr<std::string> OnCallAt(const Schedule& schedule, double ts) {
  // The newest override (last in the list) covering ts wins.
  for (auto it = schedule.overrides.rbegin(); it != schedule.overrides.rend();
       ++it) {
    if (it->start_ts <= ts && ts < it->end_ts) return it->user;
  }
  // Else the layer that started last (on a tie, the later one listed).
  const RotationLayer* current = nullptr;
  for (const RotationLayer& layer : schedule.layers) {
    if (layer.start_ts > ts || layer.users.empty() ||
        layer.period_seconds <= 0) {
      continue;
    }
    if (current == nullptr || layer.start_ts >= current->start_ts) {
      current = &layer;
    }
  }
  if (current == nullptr) {
    return absl::NotFoundError(absl::StrCat("nobody is on call in schedule \"",
                                            schedule.name, "\" at ", ts,
                                            ": no layer has started"));
  }
  const int64_t turns = static_cast<int64_t>(
      std::floor((ts - current->start_ts) / current->period_seconds));
  const int64_t n = static_cast<int64_t>(current->users.size());
  return current->users[static_cast<size_t>(turns % n)];
}

}  // namespace vigil
