#include "ctl/requests.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "notify/signing.h"

namespace vigil::ctl {
namespace {

using Json = nlohmann::json;

constexpr char kApi[] = "/api/v1";

// "?a=1&b=2" of those `flags` of `invocation` that were set (query
// parameters are named like the flags); "" if none was.
std::string Query(const Invocation& invocation,
                  const std::vector<std::string>& flags) {
  std::vector<std::string> parts;
  for (const std::string& flag : flags) {
    std::string value = invocation.Flag(flag);
    if (value.empty()) continue;
    if (flag == "severity") value = *ParseSeverityList(value);
    parts.push_back(absl::StrCat(flag, "=", UrlEncode(value)));
  }
  return parts.empty() ? "" : absl::StrCat("?", absl::StrJoin(parts, "&"));
}

// A Unix time as JSON: an integer when whole.
Json UnixSeconds(double seconds) {
  if (seconds == std::floor(seconds)) return static_cast<int64_t>(seconds);
  return seconds;
}

// The body of ack, unack and resolve.
std::string CommentBody(const Invocation& invocation) {
  Json body = Json::object();
  if (std::string comment = invocation.Flag("comment"); !comment.empty()) {
    body["comment"] = comment;
  }
  return body.dump();
}

absl::StatusOr<std::string> SilenceBody(const Invocation& invocation,
                                        double now) {
  Json body;
  body["matchers"] = Json::array();
  for (const std::string& text : invocation.flags.at("match")) {
    LabelMatcher matcher = *ParseMatcher(text);
    body["matchers"].push_back(
        {{"name", matcher.name}, {"value", matcher.value}});
  }
  if (std::string start = invocation.Flag("start"); !start.empty()) {
    body["starts_at"] = UnixSeconds(*ParseRfc3339(start));
  }
  if (std::string until = invocation.Flag("until"); !until.empty()) {
    const double ends_at = *ParseRfc3339(until);
    if (ends_at <= now) {
      return absl::InvalidArgumentError(
          absl::StrCat("silence add: --until ", until, " lies in the past"));
    }
    body["ends_at"] = UnixSeconds(ends_at);
  } else {
    body["duration_minutes"] =
        *ParseDurationMinutes(invocation.Flag("duration"));
  }
  body["comment"] = invocation.Flag("comment");
  return body.dump();
}

std::string ActionBody(const Invocation& invocation) {
  Json body = {{"action", invocation.args[0]},
               {"job", invocation.Flag("job")},
               {"node", invocation.Flag("node")},
               {"reason", invocation.Flag("reason")}};
  if (std::string incident = invocation.Flag("incident"); !incident.empty()) {
    body["incident_id"] = incident;
  }
  return body.dump();
}

}  // namespace

absl::StatusOr<HttpRequest> BuildRequest(const Invocation& invocation,
                                         double now) {
  const std::string& command = invocation.command;
  // The first argument, encoded for a path segment.
  const std::string id =
      invocation.args.empty() ? "" : UrlEncode(invocation.args[0]);
  const auto get = [](std::string target) {
    return HttpRequest{"GET", std::move(target), "", ""};
  };
  const auto post = [](std::string target, std::string body) {
    return HttpRequest{"POST", std::move(target), std::move(body), ""};
  };
  if (command == "incidents") {
    return get(absl::StrCat(
        kApi, "/incidents",
        Query(invocation, {"state", "severity", "job", "node", "limit"})));
  }
  if (command == "incident") return get(absl::StrCat(kApi, "/incidents/", id));
  if (command == "ack" || command == "unack" || command == "resolve") {
    return post(absl::StrCat(kApi, "/incidents/", id, "/", command),
                CommentBody(invocation));
  }
  if (command == "silences") return get(absl::StrCat(kApi, "/silences"));
  if (command == "silence add") {
    absl::StatusOr<std::string> body = SilenceBody(invocation, now);
    if (!body.ok()) return body.status();
    return post(absl::StrCat(kApi, "/silences"), *std::move(body));
  }
  if (command == "silence expire") {
    return HttpRequest{"DELETE", absl::StrCat(kApi, "/silences/", id), "", ""};
  }
  if (command == "deliveries" || command == "actions") {
    return get(
        absl::StrCat(kApi, "/", command, Query(invocation, {"incident"})));
  }
  if (command == "action run") {
    return post(absl::StrCat(kApi, "/actions"), ActionBody(invocation));
  }
  if (command == "approve") {
    return post(absl::StrCat(kApi, "/actions/", id, "/approve"), "{}");
  }
  if (command == "remediation") return get(absl::StrCat(kApi, "/remediation"));
  if (command == "remediation reset") {
    return post(absl::StrCat(kApi, "/remediation/reset"), "{}");
  }
  if (command == "reload") return post("/-/reload", "{}");
  if (command == "audit") {
    return get(absl::StrCat(kApi, "/audit", Query(invocation, {"limit"})));
  }
  if (command == "oncall" || command == "whoami") {
    return get(absl::StrCat(kApi, "/", command));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", command, "\" sends no request to the server"));
}

}  // namespace vigil::ctl
