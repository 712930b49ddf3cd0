// Machine receivers: PagerDuty Events API v2, the Alertmanager webhook
// payload, and Vigil's own signed generic webhook.
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "notify/render_internal.h"
#include "notify/signing.h"

namespace vigil::notify_internal {
namespace {

constexpr char kPagerDutyUrl[] = "https://events.pagerduty.com/v2/enqueue";
constexpr char kAlertmanagerZeroTime[] = "0001-01-01T00:00:00Z";

std::string PagerDutySeverity(std::string_view severity) {
  if (severity == "P0") return "critical";
  if (severity == "P1") return "error";
  if (severity == "P2") return "warning";
  return "info";
}

// The facts every machine receiver gets, as JSON.
nlohmann::json Details(const Notice& notice) {
  nlohmann::json details = {{"incident_id", notice.incident_id},
                            {"event", notice.event},
                            {"kind", notice.kind},
                            {"job", notice.job},
                            {"node", notice.node},
                            {"hint", notice.hint},
                            {"state", notice.state}};
  details["gpu"] = notice.gpu.has_value() ? nlohmann::json(*notice.gpu)
                                          : nlohmann::json(nullptr);
  if (!notice.acknowledged_by.empty()) {
    details["acknowledged_by"] = notice.acknowledged_by;
  }
  return details;
}

// "scheme://host[:port]" of `url`, or "" when it has no scheme.
std::string Origin(std::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return "";
  const size_t path = url.find('/', scheme_end + 3);
  return std::string(url.substr(0, path));
}

}  // namespace

Rendered RenderPagerDuty(const ReceiverConfig& receiver, const Notice& notice,
                         double /*now*/) {
  std::vector<OutboundRequest> requests;
  std::string action;
  if (IsPageEvent(notice.event)) {
    action = "trigger";
  } else if (notice.event == "acknowledged") {
    action = "acknowledge";
  } else if (notice.event == "resolved") {
    action = "resolve";
  } else {
    return requests;  // actions are not PagerDuty alerts
  }
  nlohmann::json body = {
      {"routing_key", Setting(receiver, "routing_key")},
      {"event_action", action},
      {"dedup_key", absl::StrCat("vigil-", notice.group_key.empty() ? notice.incident_id
                                                                    : notice.group_key)}};
  if (action == "trigger") {
    std::string component = notice.node;
    if (notice.gpu.has_value()) {
      component = absl::StrCat(notice.node, notice.node.empty() ? "" : "/",
                               "gpu", *notice.gpu);
    }
    body["payload"] = {
        {"summary", TruncateChars(OneLine(notice), 1024)},
        {"source", notice.node.empty() ? notice.job : notice.node},
        {"severity", PagerDutySeverity(notice.severity)},
        {"timestamp", Rfc3339(notice.incident_ts)},
        {"component", component},
        {"group", notice.job},
        {"class", notice.kind},
        {"custom_details", Details(notice)}};
    if (!notice.url.empty()) {
      body["links"] = {{{"href", notice.url}, {"text", "Vigil incident"}}};
    }
  }
  requests.push_back(
      NewJsonPost(Setting(receiver, "url", kPagerDutyUrl), body, notice));
  return requests;
}

Rendered RenderAlertmanager(const ReceiverConfig& receiver,
                            const Notice& notice, double now) {
  std::vector<OutboundRequest> requests;
  const bool resolved = notice.event == "resolved";
  if (!resolved && !IsPageEvent(notice.event)) {
    return requests;  // Alertmanager alerts fire or resolve; nothing else
  }
  // Prometheus semantics: an empty label is an absent label.
  nlohmann::json labels = {{"alertname", notice.kind},
                           {"severity", notice.severity},
                           {"incident", notice.incident_id}};
  if (!notice.job.empty()) labels["job"] = notice.job;
  if (!notice.node.empty()) labels["node"] = notice.node;
  if (notice.gpu.has_value()) labels["gpu"] = absl::StrCat(*notice.gpu);
  nlohmann::json annotations = {{"summary", notice.summary}};
  if (!notice.hint.empty()) annotations["description"] = notice.hint;
  const std::string status = resolved ? "resolved" : "firing";
  const nlohmann::json alert = {
      {"status", status},
      {"labels", labels},
      {"annotations", annotations},
      {"startsAt", Rfc3339(notice.incident_ts)},
      {"endsAt", resolved ? Rfc3339(now) : kAlertmanagerZeroTime},
      {"generatorURL", notice.url},
      {"fingerprint",
       HexEncode(Sha256(notice.group_key.empty() ? notice.incident_id : notice.group_key))
           .substr(0, 16)}};
  const nlohmann::json body = {
      {"version", "4"},
      {"groupKey", absl::StrCat("{}:{incident=\"", notice.incident_id, "\"}")},
      {"truncatedAlerts", 0},
      {"status", status},
      {"receiver", receiver.name},
      {"groupLabels", {{"incident", notice.incident_id}}},
      {"commonLabels", labels},
      {"commonAnnotations", annotations},
      {"externalURL", Origin(notice.url)},
      {"alerts", {alert}}};
  requests.push_back(NewJsonPost(Setting(receiver, "url"), body, notice));
  return requests;
}

Rendered RenderWebhook(const ReceiverConfig& receiver, const Notice& notice,
                       double now) {
  nlohmann::json recipients = nlohmann::json::array();
  for (const Recipient& recipient : notice.recipients) {
    recipients.push_back({{"name", recipient.name},
                          {"phone", recipient.phone},
                          {"email", recipient.email},
                          {"im", recipient.im}});
  }
  nlohmann::json incident = {{"id", notice.incident_id},
                             {"severity", notice.severity},
                             {"kind", notice.kind},
                             {"job", notice.job},
                             {"node", notice.node},
                             {"summary", notice.summary},
                             {"hint", notice.hint},
                             {"state", notice.state},
                             {"started_at", Rfc3339(notice.incident_ts)},
                             {"url", notice.url}};
  incident["gpu"] = notice.gpu.has_value() ? nlohmann::json(*notice.gpu)
                                           : nlohmann::json(nullptr);
  if (!notice.acknowledged_by.empty()) {
    incident["acknowledged_by"] = notice.acknowledged_by;
  }
  const nlohmann::json body = {{"event", notice.event},
                               {"incident", incident},
                               {"recipients", recipients},
                               {"key", notice.key}};
  OutboundRequest request = NewJsonPost(Setting(receiver, "url"), body, notice);
  const int64_t timestamp = static_cast<int64_t>(std::floor(now));
  request.headers.emplace_back("X-Vigil-Timestamp", absl::StrCat(timestamp));
  request.headers.emplace_back(
      "X-Vigil-Signature",
      SignWebhook(Setting(receiver, "secret"), timestamp, request.body));
  return std::vector<OutboundRequest>{std::move(request)};
}

}  // namespace vigil::notify_internal

namespace vigil {

std::string AlertmanagerAlertsUrl(std::string base) {
  constexpr std::string_view kPath = "/api/v2/alerts";
  if (base.ends_with(kPath)) return base;
  while (base.ends_with('/')) base.pop_back();
  return base + std::string(kPath);
}

std::string AlertmanagerTime(double unix_seconds) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                          absl::FromUnixMillis(static_cast<int64_t>(unix_seconds * 1000)),
                          absl::UTCTimeZone());
}

}  // namespace vigil
