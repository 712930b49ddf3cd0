#include "server/escalation/page_notice.h"

#include "absl/strings/str_cat.h"
#include "server/escalation/escalation_internal.h"

namespace vigil {

using Json = nlohmann::json;
using escalation_internal::StringAt;

Json NoticeToJson(const Notice& notice) {
  Json recipients = Json::array();
  for (const Recipient& r : notice.recipients)
    recipients.push_back(
        {{"name", r.name}, {"phone", r.phone}, {"email", r.email}, {"im", r.im}});
  Json j = {{"key", notice.key},
            {"event", notice.event},
            {"incident_id", notice.incident_id},
            {"group_key", notice.group_key},
            {"severity", notice.severity},
            {"kind", notice.kind},
            {"job", notice.job},
            {"node", notice.node},
            {"summary", notice.summary},
            {"hint", notice.hint},
            {"state", notice.state},
            {"incident_ts", notice.incident_ts},
            {"url", notice.url},
            {"recipients", recipients},
            {"acknowledged_by", notice.acknowledged_by},
            {"report", notice.report}};
  if (notice.gpu) j["gpu"] = *notice.gpu;
  return j;
}

// The notice NoticeToJson stored; kInvalidArgument if `j` is not one.
absl::StatusOr<Notice> NoticeFromJson(const Json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("notice: not an object");
  Notice n;
  n.key = StringAt(j, "key", "");
  n.event = StringAt(j, "event", "");
  n.incident_id = StringAt(j, "incident_id", "");
  n.group_key = StringAt(j, "group_key", "");
  n.severity = StringAt(j, "severity", "");
  n.kind = StringAt(j, "kind", "");
  n.job = StringAt(j, "job", "");
  n.node = StringAt(j, "node", "");
  n.summary = StringAt(j, "summary", "");
  n.hint = StringAt(j, "hint", "");
  n.state = StringAt(j, "state", "");
  n.url = StringAt(j, "url", "");
  n.acknowledged_by = StringAt(j, "acknowledged_by", "");
  n.report = StringAt(j, "report", "");
  if (auto gpu = j.find("gpu"); gpu != j.end()) {
    if (!gpu->is_number_integer())
      return absl::InvalidArgumentError("notice.gpu: not an integer");
    n.gpu = gpu->get<int>();
  }
  if (auto ts = j.find("incident_ts"); ts != j.end() && ts->is_number())
    n.incident_ts = ts->get<double>();
  auto recipients = j.find("recipients");
  if (recipients == j.end() || !recipients->is_array())
    return absl::InvalidArgumentError("notice.recipients: not an array");
  for (const Json& r : *recipients) {
    if (!r.is_object())
      return absl::InvalidArgumentError("notice.recipients: not an object");
    n.recipients.push_back({StringAt(r, "name", ""), StringAt(r, "phone", ""),
                            StringAt(r, "email", ""), StringAt(r, "im", "")});
  }
  return n;
}

// The requests of a page (payload {"notice"}) to the receiver named
// `receiver`, from its configuration in `notifications` at `now`.
// kNotFound when no such receiver is configured (any more).
absl::StatusOr<std::vector<OutboundRequest>> RenderPage(
    const NotificationOptions& notifications, const std::string& receiver,
    const Json& payload, double now) {
  const ReceiverConfig* config = nullptr;
  for (const ReceiverConfig& r : notifications.receivers) {
    if (r.name == receiver) config = &r;
  }
  if (config == nullptr)
    return absl::NotFoundError(
        absl::StrCat("no receiver ", receiver, " is configured"));
  auto notice = payload.find("notice");
  if (!payload.is_object() || notice == payload.end())
    return absl::InvalidArgumentError("payload: no notice");
  absl::StatusOr<Notice> parsed = NoticeFromJson(*notice);
  if (!parsed.ok()) return parsed.status();
  return RenderNotice(*config, *parsed, now);
}

}  // namespace vigil
