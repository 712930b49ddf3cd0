// EscalationService's answer to Twilio's <Gather> callback: a keypress on
// a phone page acknowledges or resolves the incident.
#include "server/escalation/escalation_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "notify/signing.h"

namespace vigil {

using Json = nlohmann::json;

absl::StatusOr<std::string> EscalationService::TwilioCallback(
    std::string_view query, const std::multimap<std::string, std::string>& form,
    std::string_view signature) {
  const std::shared_ptr<const Settings> settings = this->settings();
  const ReceiverConfig* voice = nullptr;
  for (const ReceiverConfig& r : settings->notifications.receivers) {
    if (r.type == "twilio_voice") voice = &r;
  }
  if (voice == nullptr)
    return absl::NotFoundError("no twilio_voice receiver is configured");
  // Twilio signs the full URL followed by every POST parameter, sorted by
  // name, as name + value, with HMAC-SHA1 under the auth token (base64).
  std::string signed_text = absl::StrCat(
      voice->settings.value("callback_url", ""), query.empty() ? "" : "?",
      std::string(query));
  for (const auto& [name, value] : form) absl::StrAppend(&signed_text, name, value);
  const std::string expected = Base64Encode(
      HmacSha1(voice->settings.value("auth_token", ""), signed_text));
  if (!ConstantTimeEquals(expected, signature))
    return absl::UnauthenticatedError("X-Twilio-Signature does not match");
  {
    auto call = form.find("CallSid");
    if (call == form.end() || call->second.empty())
      return absl::InvalidArgumentError("Twilio callback without CallSid");
    auto digits = form.find("Digits");
    const std::string seen_key = absl::StrCat(
        call->second, "/", digits == form.end() ? "" : digits->second);
    const double now = options_.clock->Now();
    constexpr double kTwilioReplaySeconds = 86400;
    constexpr size_t kMaxTwilioCalls = 100'000;
    std::lock_guard<std::mutex> l(twilio_mu_);
    std::erase_if(twilio_calls_, [&](const auto& entry) {
      return entry.second < now - kTwilioReplaySeconds;
    });
    if (twilio_calls_.contains(seen_key))
      return absl::AlreadyExistsError(
          "this Twilio callback was already handled (a replay?)");
    if (twilio_calls_.size() >= kMaxTwilioCalls) twilio_calls_.clear();
    twilio_calls_.emplace(seen_key, now);
  }
  std::map<std::string, std::string> query_params;
  for (absl::string_view pair : absl::StrSplit(absl::string_view(query.data(), query.size()), '&', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    query_params[UrlDecode(kv.first)] = UrlDecode(kv.second);
  }
  const std::string incident = query_params["incident"];
  const std::string key = query_params["key"];
  auto digits_it = form.find("Digits");
  const std::string digits = digits_it == form.end() ? "" : digits_it->second;
  // The key names who was called: "<incident>/<n>/phone/<user>".
  const std::string user = key.substr(key.rfind('/') + 1);
  const Identity who{absl::StrCat("phone:", user), Role::kOperator};
  std::string say;
  if (digits == "1") {
    absl::StatusOr<Json> s = Acknowledge(incident, who, "acknowledged by phone");
    say = s.ok() ? "Incident acknowledged. Thank you."
                 : absl::StrCat("Could not acknowledge: ", s.status().message());
  } else if (digits == "2") {
    absl::StatusOr<Json> s = Resolve(incident, who, "resolved by phone");
    say = s.ok() ? "Incident resolved."
                 : absl::StrCat("Could not resolve: ", s.status().message());
  } else {
    say = "No valid choice received. The incident stays open.";
  }
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Say>", XmlEscape(say),
      "</Say></Response>");
}

}  // namespace vigil
