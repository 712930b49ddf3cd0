// Receiver types: their settings, validation and render dispatch.
#include "notify/notify.h"

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "notify/render_internal.h"

namespace vigil {
namespace {

using notify_internal::Rendered;

enum class SettingKind : uint8_t {
  kText,         // a non-empty string
  kHttpUrl,      // http:// or https://
  kSmtpUrl,      // smtp:// or smtps://
  kAddressList,  // a string or an array of strings (email addresses)
  kChoice,       // one of SettingSpec::choices
};

struct SettingSpec {
  std::string_view key;
  bool required;
  SettingKind kind;
  std::vector<std::string_view> choices = {};
};

using Renderer = Rendered (*)(const ReceiverConfig&, const Notice&, double);

struct ChannelSpec {
  std::string_view type;
  std::vector<SettingSpec> settings;
  int default_rate_per_minute;  // 0: unlimited
  Renderer render;
};

const std::vector<ChannelSpec>& Channels() {
  using K = SettingKind;
  static const auto* const kChannels = new std::vector<ChannelSpec>{
      {"twilio_voice",
       {{"account_sid", true, K::kText},
        {"auth_token", true, K::kText},
        {"from", true, K::kText},
        {"callback_url", true, K::kHttpUrl},
        {"status_callback", false, K::kHttpUrl},
        {"base_url", false, K::kHttpUrl}},
       60,
       notify_internal::RenderTwilioVoice},
      {"twilio_sms",
       {{"account_sid", true, K::kText},
        {"auth_token", true, K::kText},
        {"from", true, K::kText},
        {"base_url", false, K::kHttpUrl}},
       60,
       notify_internal::RenderTwilioSms},
      {"aliyun_sms",
       {{"access_key_id", true, K::kText},
        {"access_key_secret", true, K::kText},
        {"sign_name", true, K::kText},
        {"template_code", true, K::kText},
        {"region", false, K::kText},
        {"base_url", false, K::kHttpUrl}},
       0,
       notify_internal::RenderAliyunSms},
      {"slack", {{"url", true, K::kHttpUrl}}, 60, notify_internal::RenderSlack},
      {"feishu",
       {{"url", true, K::kHttpUrl},
        {"secret", false, K::kText},
        {"msg_type", false, K::kChoice, {"interactive", "text"}}},
       0,
       notify_internal::RenderFeishu},
      {"dingtalk",
       {{"url", true, K::kHttpUrl}, {"secret", false, K::kText}},
       20,
       notify_internal::RenderDingTalk},
      {"wecom", {{"url", true, K::kHttpUrl}}, 20, notify_internal::RenderWeCom},
      {"pagerduty",
       {{"routing_key", true, K::kText}, {"url", false, K::kHttpUrl}},
       0,
       notify_internal::RenderPagerDuty},
      {"alertmanager",
       {{"url", true, K::kHttpUrl}},
       0,
       notify_internal::RenderAlertmanager},
      {"webhook",
       {{"url", true, K::kHttpUrl}, {"secret", true, K::kText}},
       0,
       notify_internal::RenderWebhook},
      {"email",
       {{"smtp_url", true, K::kSmtpUrl},
        {"from", true, K::kText},
        {"username", false, K::kText},
        {"password", false, K::kText},
        {"to", false, K::kAddressList}},
       0,
       notify_internal::RenderEmail},
  };
  return *kChannels;
}

const ChannelSpec* FindChannel(std::string_view type) {
  for (const ChannelSpec& channel : Channels()) {
    if (channel.type == type) return &channel;
  }
  return nullptr;
}

std::string KnownTypes() {
  std::string out;
  for (const ChannelSpec& channel : Channels()) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(channel.type));
  }
  return out;
}

bool IsNonEmptyString(const nlohmann::json& value) {
  return value.is_string() && !value.get_ref<const std::string&>().empty();
}

// Checks one present setting against its spec.
absl::Status CheckSetting(const SettingSpec& spec,
                          const nlohmann::json& value) {
  const std::string where = absl::StrCat("settings.", std::string(spec.key));
  if (spec.kind == SettingKind::kAddressList) {
    if (IsNonEmptyString(value)) return absl::OkStatus();
    if (value.is_array()) {
      for (const nlohmann::json& address : value) {
        if (!IsNonEmptyString(address)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": every address must be a non-empty string"));
        }
      }
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": must be a string or an array of strings"));
  }
  if (!IsNonEmptyString(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": must be a non-empty string"));
  }
  const std::string& text = value.get_ref<const std::string&>();
  switch (spec.kind) {
    case SettingKind::kHttpUrl:
      if (!absl::StartsWith(text, "http://") &&
          !absl::StartsWith(text, "https://")) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": must be an http:// or https:// URL"));
      }
      break;
    case SettingKind::kSmtpUrl:
      if (!absl::StartsWith(text, "smtp://") &&
          !absl::StartsWith(text, "smtps://")) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": must be an smtp:// or smtps:// URL"));
      }
      break;
    case SettingKind::kChoice: {
      bool known = false;
      std::string allowed;
      for (std::string_view choice : spec.choices) {
        known = known || choice == text;
        absl::StrAppend(&allowed, allowed.empty() ? "" : ", ",
                        std::string(choice));
      }
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": \"", text, "\" is not one of ", allowed));
      }
      break;
    }
    case SettingKind::kText:
    case SettingKind::kAddressList:
      break;
  }
  return absl::OkStatus();
}

absl::Status CheckEvent(std::string_view event) {
  static const auto* const kEvents = new std::set<std::string_view>{
      "trigger", "repage", "escalate", "acknowledged", "resolved", "action"};
  if (kEvents->count(event) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("notice.event: unknown event \"", std::string(event),
                     "\" (trigger, repage, escalate, acknowledged, "
                     "resolved, action)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateReceiver(const ReceiverConfig& receiver) {
  if (receiver.name.empty()) {
    return absl::InvalidArgumentError("name: required");
  }
  const ChannelSpec* channel = FindChannel(receiver.type);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("type: unknown receiver type \"", receiver.type, "\" (",
                     KnownTypes(), ")"));
  }
  if (receiver.rate_per_minute < 0) {
    return absl::InvalidArgumentError("rate_per_minute: must be >= 0");
  }
  if (!receiver.settings.is_object()) {
    return absl::InvalidArgumentError("settings: must be an object");
  }
  for (const auto& [key, value] : receiver.settings.items()) {
    bool known = false;
    for (const SettingSpec& spec : channel->settings) known |= spec.key == key;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "settings.", key, ": unknown setting for ", receiver.type));
    }
  }
  for (const SettingSpec& spec : channel->settings) {
    auto it = receiver.settings.find(std::string(spec.key));
    if (it == receiver.settings.end()) {
      if (spec.required) {
        return absl::InvalidArgumentError(
            absl::StrCat("settings.", std::string(spec.key), ": required"));
      }
      continue;
    }
    VIGIL_RETURN_IF_ERROR(CheckSetting(spec, *it));
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::vector<std::string>>> ReceiverTypeSettings() {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const ChannelSpec& channel : Channels()) {
    std::vector<std::string> settings;
    for (const SettingSpec& spec : channel.settings)
      settings.push_back(absl::StrCat(std::string(spec.key), spec.required ? "" : "?"));
    out.emplace_back(std::string(channel.type), std::move(settings));
  }
  return out;
}

int EffectiveRatePerMinute(const ReceiverConfig& receiver) {
  if (receiver.rate_per_minute > 0) return receiver.rate_per_minute;
  const ChannelSpec* channel = FindChannel(receiver.type);
  return channel == nullptr ? 0 : channel->default_rate_per_minute;
}

absl::StatusOr<std::vector<OutboundRequest>> RenderNotice(
    const ReceiverConfig& receiver, const Notice& notice, double now) {
  VIGIL_RETURN_IF_ERROR(ValidateReceiver(receiver));
  VIGIL_RETURN_IF_ERROR(CheckEvent(notice.event));
  if (notice.key.empty()) {
    return absl::InvalidArgumentError("notice.key: required");
  }
  // The key travels in a header; a line break would forge more headers.
  for (char c : notice.key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          "notice.key: must not contain control characters");
    }
  }
  if (notice.incident_id.empty()) {
    return absl::InvalidArgumentError("notice.incident_id: required");
  }
  return FindChannel(receiver.type)->render(receiver, notice, now);
}

}  // namespace vigil
