// Page channels: personal ones page each person, group ones post once per
// page round naming everyone. Private to escalation/.
#ifndef VIGIL_ESCALATION_CHANNELS_H_
#define VIGIL_ESCALATION_CHANNELS_H_

#include <string_view>

namespace vigil::escalation_internal {

// phone, sms, email: one page per person.
inline bool IsPersonalChannel(std::string_view channel) {
  return channel == "phone" || channel == "sms" || channel == "email";
}

// im, pagerduty, webhook, ticket: one page per round.
inline bool IsGroupChannel(std::string_view channel) {
  return channel == "im" || channel == "pagerduty" || channel == "webhook" ||
         channel == "ticket";
}

}  // namespace vigil::escalation_internal

#endif  // VIGIL_ESCALATION_CHANNELS_H_
