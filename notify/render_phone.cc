// Phone and SMS channels: Twilio Voice, Twilio SMS, Aliyun SMS.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "notify/render_internal.h"
#include "notify/signing.h"

namespace vigil {

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace vigil

namespace vigil::notify_internal {
namespace {

constexpr char kTwilioBaseUrl[] = "https://api.twilio.com";
constexpr char kAliyunBaseUrl[] = "https://dysmsapi.aliyuncs.com";
constexpr size_t kSmsMaxChars = 1600;           // Twilio's Body limit
constexpr size_t kSpokenSummaryMaxChars = 300;  // keeps calls short
constexpr size_t kAliyunParamMaxChars = 35;     // per template variable

// application/x-www-form-urlencoded body of `fields`, in order.
std::string FormEncode(
    const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    absl::StrAppend(&out, out.empty() ? "" : "&", UrlEncode(name), "=",
                    UrlEncode(value));
  }
  return out;
}

// {base}/2010-04-01/Accounts/{sid}/{resource}, authenticated as the account.
OutboundRequest TwilioPost(const ReceiverConfig& receiver,
                           std::string_view resource, const Notice& notice) {
  const std::string sid = Setting(receiver, "account_sid");
  const std::string base = std::string(
      absl::StripSuffix(Setting(receiver, "base_url", kTwilioBaseUrl), "/"));
  OutboundRequest request =
      NewHttpRequest("POST",
                     absl::StrCat(base, "/2010-04-01/Accounts/", UrlEncode(sid),
                                  "/", std::string(resource)),
                     notice);
  request.headers.emplace_back("Content-Type",
                               "application/x-www-form-urlencoded");
  request.username = sid;
  request.password = Setting(receiver, "auth_token");
  return request;
}

absl::Status NoPhoneError(std::string_view type) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(type), ": no recipient has a phone number"));
}

// What the call says before the keypad prompt.
std::string SpokenText(const Notice& notice) {
  std::string opening = "Vigil page.";
  if (notice.event == "repage") opening = "Vigil page, repeated.";
  if (notice.event == "escalate") opening = "Vigil page, escalated.";
  std::string text =
      absl::StrCat(opening, " Severity ", notice.severity, ". ",
                   absl::StrReplaceAll(notice.kind, {{"_", " "}}), " on ",
                   Where(notice), ".");
  if (!notice.summary.empty()) {
    absl::StrAppend(&text, " ",
                    TruncateChars(notice.summary, kSpokenSummaryMaxChars), ".");
  }
  return text;
}

// Inline TwiML: read the page, then take one keypress to the callback.
std::string Twiml(const ReceiverConfig& receiver, const Notice& notice) {
  const std::string action =
      AppendQuery(Setting(receiver, "callback_url"),
                  absl::StrCat("incident=", UrlEncode(notice.incident_id),
                               "&key=", UrlEncode(notice.key)));
  return absl::StrCat("<Response><Gather numDigits=\"1\" action=\"",
                      XmlEscape(action), "\" method=\"POST\"><Say>",
                      XmlEscape(SpokenText(notice)),
                      " Press 1 to acknowledge, 2 to resolve.</Say></Gather>"
                      "<Say>No input received. Goodbye.</Say></Response>");
}

}  // namespace

Rendered RenderTwilioVoice(const ReceiverConfig& receiver, const Notice& notice,
                           double /*now*/) {
  std::vector<OutboundRequest> requests;
  if (!IsPageEvent(notice.event)) return requests;  // calls only wake people
  const std::vector<std::string> phones = Phones(notice);
  if (phones.empty()) return NoPhoneError(receiver.type);
  const std::string twiml = Twiml(receiver, notice);
  const std::string status_callback = Setting(receiver, "status_callback");
  for (const std::string& phone : phones) {
    OutboundRequest request = TwilioPost(receiver, "Calls.json", notice);
    std::vector<std::pair<std::string, std::string>> form = {
        {"To", phone}, {"From", Setting(receiver, "from")}, {"Twiml", twiml}};
    if (!status_callback.empty()) {
      form.emplace_back("StatusCallback", status_callback);
    }
    request.body = FormEncode(form);
    requests.push_back(std::move(request));
  }
  return requests;
}

Rendered RenderTwilioSms(const ReceiverConfig& receiver, const Notice& notice,
                         double /*now*/) {
  const std::vector<std::string> phones = Phones(notice);
  if (phones.empty()) return NoPhoneError(receiver.type);
  // The link survives truncation; the text gives way. (A link too long to
  // leave room for text is dropped.)
  std::string link = notice.url.empty() ? "" : absl::StrCat("\n", notice.url);
  if (link.size() > kSmsMaxChars / 2) link.clear();
  const std::string body =
      absl::StrCat(TruncateChars(absl::StrCat("Vigil ", OneLine(notice)),
                                 kSmsMaxChars - link.size()),
                   link);
  std::vector<OutboundRequest> requests;
  for (const std::string& phone : phones) {
    OutboundRequest request = TwilioPost(receiver, "Messages.json", notice);
    request.body = FormEncode(
        {{"To", phone}, {"From", Setting(receiver, "from")}, {"Body", body}});
    requests.push_back(std::move(request));
  }
  return requests;
}

Rendered RenderAliyunSms(const ReceiverConfig& receiver, const Notice& notice,
                         double now) {
  const std::vector<std::string> phones = Phones(notice);
  if (phones.empty()) return NoPhoneError(receiver.type);
  const std::string timestamp = Rfc3339(now);
  const nlohmann::json template_param = {
      {"severity", notice.severity},
      {"kind", TruncateChars(notice.kind, kAliyunParamMaxChars)},
      {"where", TruncateChars(Where(notice), kAliyunParamMaxChars)},
      {"summary", TruncateChars(notice.summary, kAliyunParamMaxChars)}};
  std::string phone_numbers;
  for (const std::string& phone : phones) {
    absl::StrAppend(&phone_numbers, phone_numbers.empty() ? "" : ",", phone);
  }
  // Sorted by key, as the signature's canonical form requires.
  const std::map<std::string, std::string> params = {
      {"AccessKeyId", Setting(receiver, "access_key_id")},
      {"Action", "SendSms"},
      {"Format", "JSON"},
      {"PhoneNumbers", phone_numbers},
      {"RegionId", Setting(receiver, "region", "cn-hangzhou")},
      {"SignName", Setting(receiver, "sign_name")},
      {"SignatureMethod", "HMAC-SHA1"},
      // Unique per notice and send time, so a retry is not a replay.
      {"SignatureNonce",
       HexEncode(Sha256(absl::StrCat(notice.key, "\n", timestamp)))
           .substr(0, 32)},
      {"SignatureVersion", "1.0"},
      {"TemplateCode", Setting(receiver, "template_code")},
      {"TemplateParam", DumpJson(template_param)},
      {"Timestamp", timestamp},
      {"Version", "2017-05-25"},
  };
  std::string canonical;
  for (const auto& [key, value] : params) {
    absl::StrAppend(&canonical, canonical.empty() ? "" : "&", UrlEncode(key),
                    "=", UrlEncode(value));
  }
  const std::string string_to_sign =
      absl::StrCat("GET&%2F&", UrlEncode(canonical));
  const std::string signature = Base64Encode(
      HmacSha1(absl::StrCat(Setting(receiver, "access_key_secret"), "&"),
               string_to_sign));
  const std::string base = std::string(
      absl::StripSuffix(Setting(receiver, "base_url", kAliyunBaseUrl), "/"));
  std::vector<OutboundRequest> requests;
  requests.push_back(NewHttpRequest(
      "GET",
      absl::StrCat(base, "/?", canonical, "&Signature=", UrlEncode(signature)),
      notice));
  return requests;
}

}  // namespace vigil::notify_internal
