// What the files of EscalationService (escalation_service.cc, the core;
// escalation_actions.cc; escalation_journal.cc; twilio_callback.cc) share.
// Internal to server/escalation/.
#ifndef VIGIL_SERVER_ESCALATION_ESCALATION_INTERNAL_H_
#define VIGIL_SERVER_ESCALATION_ESCALATION_INTERNAL_H_

#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "server/config/config.h"

namespace vigil::escalation_internal {

// The string at `key` of the object `obj`, or `fallback` when it is absent
// or not a string.
inline std::string StringAt(const nlohmann::json& obj, const char* key,
                            const std::string& fallback) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>()
                                            : fallback;
}

// The receiver name of vigil-actuator in the action outbox.
inline constexpr char kActuatorReceiver[] = "vigil-actuator";
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The request of an action (payload {"id", "body"}) to vigil-actuator at
// its configured URL; signed by the outbox. kNotFound for another
// receiver, kFailedPrecondition when no actuator is configured (any more).
// (escalation_actions.cc)
absl::StatusOr<std::vector<OutboundRequest>> RenderAction(
    const ActuatorOptions& actuator, const std::string& receiver,
    const nlohmann::json& payload);

}  // namespace vigil::escalation_internal

#endif  // VIGIL_SERVER_ESCALATION_ESCALATION_INTERNAL_H_
