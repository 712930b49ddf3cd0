// A page as the outbox stores it: the notice (everything a renderer needs
// besides the receiver's configuration, no credentials), and its rendering
// into requests at each send from the receiver's current configuration.
#ifndef VIGIL_SERVER_ESCALATION_PAGE_NOTICE_H_
#define VIGIL_SERVER_ESCALATION_PAGE_NOTICE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "server/config/config.h"

namespace vigil {

// `notice` as stored in an outbox item's payload: everything a renderer
// needs besides the receiver's configuration, no credentials.
nlohmann::json NoticeToJson(const Notice& notice);

// The notice NoticeToJson stored; kInvalidArgument if `j` is not one.
absl::StatusOr<Notice> NoticeFromJson(const nlohmann::json& j);

// The requests of a page (payload {"notice"}) to the receiver named
// `receiver`, from its configuration in `notifications` at `now`.
// kNotFound when no such receiver is configured (any more).
absl::StatusOr<std::vector<OutboundRequest>> RenderPage(
    const NotificationOptions& notifications, const std::string& receiver,
    const nlohmann::json& payload, double now);

}  // namespace vigil

#endif  // VIGIL_SERVER_ESCALATION_PAGE_NOTICE_H_
