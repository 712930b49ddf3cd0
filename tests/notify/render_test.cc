// Rendering without a network: validation, render errors, event gating,
// escaping, truncation and the signing recipes with hand-computed values.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "tests/notify/sample_notice.h"
#include "tests/notify/test_receivers.h"

namespace vigil::notify_test {
namespace {

using json = nlohmann::json;

// A valid receiver of every type.
std::vector<ReceiverConfig> EveryReceiver() {
  return {
      {"voice",
       "twilio_voice",
       {{"account_sid", "AC1"},
        {"auth_token", "t"},
        {"from", "+1555"},
        {"callback_url", "https://cb.example/voice"}}},
      {"sms",
       "twilio_sms",
       {{"account_sid", "AC1"}, {"auth_token", "t"}, {"from", "+1555"}}},
      {"ali",
       "aliyun_sms",
       {{"access_key_id", "id"},
        {"access_key_secret", "s"},
        {"sign_name", "Vigil"},
        {"template_code", "SMS_1"}}},
      {"slack", "slack", {{"url", "https://hooks.slack.com/services/x"}}},
      {"feishu",
       "feishu",
       {{"url", "https://open.feishu.cn/open-apis/bot/v2/hook/x"}}},
      {"ding",
       "dingtalk",
       {{"url", "https://oapi.dingtalk.com/robot/send?access_token=x"}}},
      {"wecom",
       "wecom",
       {{"url", "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=x"}}},
      {"pd", "pagerduty", {{"routing_key", "r"}}},
      {"am", "alertmanager", {{"url", "http://am.example/hook"}}},
      {"hook", "webhook", {{"url", "https://t.example/h"}, {"secret", "s"}}},
      {"mail",
       "email",
       {{"smtp_url", "smtp://mail.example:587"}, {"from", "v@example.com"}}},
  };
}

ReceiverConfig Receiver(const std::string& type) {
  for (const ReceiverConfig& receiver : EveryReceiver()) {
    if (receiver.type == type) return receiver;
  }
  ADD_FAILURE() << "no receiver " << type;
  return {};
}

std::vector<OutboundRequest> RenderOk(const ReceiverConfig& receiver,
                                      const Notice& notice) {
  absl::StatusOr<std::vector<OutboundRequest>> rendered =
      RenderNotice(receiver, notice, kNow);
  EXPECT_TRUE(rendered.ok()) << receiver.type << ": " << rendered.status();
  return rendered.ok() ? *rendered : std::vector<OutboundRequest>{};
}

json JsonBody(const OutboundRequest& request) {
  json body = json::parse(request.body, nullptr, false);
  EXPECT_FALSE(body.is_discarded()) << request.body;
  return body;
}

std::string HeaderOf(const OutboundRequest& request, const std::string& name) {
  for (const auto& [key, value] : request.headers) {
    if (key == name) return value;
  }
  return "";
}

TEST(ValidateReceiverTest, AcceptsEveryType) {
  for (const ReceiverConfig& receiver : EveryReceiver()) {
    EXPECT_TRUE(ValidateReceiver(receiver).ok())
        << receiver.type << ": " << ValidateReceiver(receiver);
  }
}

TEST(ValidateReceiverTest, NamesTheBadSetting) {
  struct Case {
    ReceiverConfig receiver;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"", "slack", {{"url", "https://x"}}}, "name: required"},
      {{"r", "telegram", json::object()}, "type: unknown receiver type"},
      {{"r", "slack", json::object()}, "settings.url: required"},
      {{"r", "slack", {{"url", "ftp://x"}}},
       "settings.url: must be an http:// or https:// URL"},
      {{"r", "slack", {{"url", 5}}}, "settings.url: must be a non-empty"},
      {{"r", "slack", {{"url", ""}}}, "settings.url: must be a non-empty"},
      {{"r", "slack", {{"url", "https://x"}, {"secret", "s"}}},
       "settings.secret: unknown setting for slack"},
      {{"r", "slack", json::array()}, "settings: must be an object"},
      {{"r", "slack", {{"url", "https://x"}}, -1},
       "rate_per_minute: must be >= 0"},
      {{"r", "webhook", {{"url", "https://x"}}}, "settings.secret: required"},
      {{"r", "pagerduty", json::object()}, "settings.routing_key: required"},
      {{"r",
        "twilio_voice",
        {{"account_sid", "a"}, {"auth_token", "t"}, {"from", "+1"}}},
       "settings.callback_url: required"},
      {{"r",
        "aliyun_sms",
        {{"access_key_id", "a"},
         {"access_key_secret", "s"},
         {"sign_name", "n"}}},
       "settings.template_code: required"},
      {{"r", "email", {{"smtp_url", "http://x"}, {"from", "a@b"}}},
       "settings.smtp_url: must be an smtp:// or smtps:// URL"},
      {{"r",
        "email",
        {{"smtp_url", "smtp://x"}, {"from", "a@b"}, {"to", {"a@b", 1}}}},
       "settings.to: every address must be a non-empty string"},
      {{"r", "email", {{"smtp_url", "smtp://x"}, {"from", "a@b"}, {"to", 3}}},
       "settings.to: must be a string or an array of strings"},
      {{"r", "feishu", {{"url", "https://x"}, {"msg_type", "post"}}},
       "settings.msg_type: \"post\" is not one of interactive, text"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ValidateReceiver(c.receiver);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_TRUE(absl::StrContains(status.message(), c.error))
        << status << " does not contain " << c.error;
  }
}

TEST(ValidateReceiverTest, EffectiveRateUsesTheTypeDefault) {
  EXPECT_EQ(EffectiveRatePerMinute(Receiver("dingtalk")), 20);
  EXPECT_EQ(EffectiveRatePerMinute(Receiver("wecom")), 20);
  EXPECT_EQ(EffectiveRatePerMinute(Receiver("slack")), 60);
  EXPECT_EQ(EffectiveRatePerMinute(Receiver("twilio_voice")), 60);
  EXPECT_EQ(EffectiveRatePerMinute(Receiver("twilio_sms")), 60);
  EXPECT_EQ(EffectiveRatePerMinute(Receiver("webhook")), 0);
  ReceiverConfig custom = Receiver("dingtalk");
  custom.rate_per_minute = 5;
  EXPECT_EQ(EffectiveRatePerMinute(custom), 5);
}

TEST(RenderNoticeTest, EveryHttpRequestCarriesIdempotencyKeyAndUserAgent) {
  for (const ReceiverConfig& receiver : EveryReceiver()) {
    for (const OutboundRequest& request : RenderOk(receiver, SampleNotice())) {
      if (request.smtp) continue;
      EXPECT_EQ(HeaderOf(request, "Idempotency-Key"), "inc-42/trigger/1")
          << receiver.type;
      EXPECT_EQ(HeaderOf(request, "User-Agent"), "vigil/1") << receiver.type;
    }
  }
}

TEST(RenderNoticeTest, IsDeterministic) {
  for (const ReceiverConfig& receiver : EveryReceiver()) {
    const std::vector<OutboundRequest> first =
        RenderOk(receiver, SampleNotice());
    const std::vector<OutboundRequest> second =
        RenderOk(receiver, SampleNotice());
    ASSERT_EQ(first.size(), second.size()) << receiver.type;
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(first[i].url, second[i].url) << receiver.type;
      EXPECT_EQ(first[i].body, second[i].body) << receiver.type;
      EXPECT_EQ(first[i].headers, second[i].headers) << receiver.type;
    }
  }
}

TEST(RenderNoticeTest, RejectsBadNotices) {
  Notice unknown_event = SampleNotice();
  unknown_event.event = "page";
  Notice no_key = SampleNotice();
  no_key.key = "";
  Notice no_incident = SampleNotice();
  no_incident.incident_id = "";
  Notice forged_key = SampleNotice();
  forged_key.key = "k\r\nX-Admin: 1";
  for (const auto& [notice, error] :
       std::vector<std::pair<Notice, std::string>>{
           {unknown_event, "notice.event: unknown event \"page\""},
           {no_key, "notice.key: required"},
           {no_incident, "notice.incident_id: required"},
           {forged_key, "notice.key: must not contain control characters"}}) {
    const auto rendered = RenderNotice(Receiver("slack"), notice, kNow);
    EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(rendered.status().message(), error))
        << rendered.status();
  }
  ReceiverConfig invalid = Receiver("slack");
  invalid.settings.erase("url");
  EXPECT_EQ(RenderNotice(invalid, SampleNotice(), kNow).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RenderNoticeTest, PhoneChannelsNeedAPhoneNumber) {
  Notice notice = SampleNotice();
  for (Recipient& recipient : notice.recipients) recipient.phone = "";
  for (const char* type : {"twilio_sms", "twilio_voice", "aliyun_sms"}) {
    const auto rendered = RenderNotice(Receiver(type), notice, kNow);
    EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument)
        << type;
    EXPECT_TRUE(absl::StrContains(rendered.status().message(),
                                  "no recipient has a phone number"))
        << rendered.status();
  }
}

TEST(RenderNoticeTest, EmailNeedsAnAddress) {
  Notice notice = SampleNotice();
  for (Recipient& recipient : notice.recipients) recipient.email = "";
  const auto rendered = RenderNotice(Receiver("email"), notice, kNow);
  EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
  ReceiverConfig with_to = Receiver("email");
  with_to.settings["to"] = "ops@example.com";
  const std::vector<OutboundRequest> requests = RenderOk(with_to, notice);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].mail_rcpt, std::vector<std::string>{"ops@example.com"});
}

TEST(RenderNoticeTest, CallsOnlyWakePeople) {
  for (const char* event : {"trigger", "repage", "escalate"}) {
    Notice notice = SampleNotice();
    notice.event = event;
    EXPECT_EQ(RenderOk(Receiver("twilio_voice"), notice).size(), 2u) << event;
  }
  for (const char* event : {"acknowledged", "resolved", "action"}) {
    Notice notice = SampleNotice();
    notice.event = event;
    for (Recipient& recipient : notice.recipients) recipient.phone = "";
    EXPECT_TRUE(RenderOk(Receiver("twilio_voice"), notice).empty()) << event;
  }
}

TEST(RenderNoticeTest, TwimlEscapesTextAndAttributes) {
  Notice notice = SampleNotice();
  notice.kind = "ecc\"<x>'";
  notice.incident_id = "a&b";
  ReceiverConfig receiver = Receiver("twilio_voice");
  receiver.settings["callback_url"] = "https://cb.example/voice?t=\"1\"";
  const std::vector<OutboundRequest> requests = RenderOk(receiver, notice);
  ASSERT_FALSE(requests.empty());
  const std::string& body = requests[0].body;
  // The form value is percent-encoded; look at the decoded TwiML.
  const size_t start = body.find("Twiml=") + 6;
  std::string twiml = body.substr(start, body.find('&', start) - start);
  std::string decoded;
  for (size_t i = 0; i < twiml.size(); ++i) {
    if (twiml[i] == '%') {
      decoded +=
          static_cast<char>(std::stoi(twiml.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      decoded += twiml[i];
    }
  }
  EXPECT_TRUE(absl::StrContains(
      decoded,
      "action=\"https://cb.example/voice?t=&quot;1&quot;&amp;incident=a%26b"
      "&amp;key=inc-42%2Ftrigger%2F1\""))
      << decoded;
  EXPECT_TRUE(absl::StrContains(decoded, "ecc&quot;&lt;x&gt;&apos; on"))
      << decoded;
  EXPECT_FALSE(absl::StrContains(decoded, "<x>"));
}

TEST(RenderNoticeTest, SmsFitsIn1600CharactersAndKeepsTheLink) {
  Notice notice = SampleNotice();
  notice.summary = std::string(3000, 'x');
  const std::vector<OutboundRequest> requests =
      RenderOk(Receiver("twilio_sms"), notice);
  ASSERT_FALSE(requests.empty());
  const std::string body = requests[0].body;
  const size_t start = body.find("Body=") + 5;
  std::string text = body.substr(start);
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%') {
      // %E2%80%A6 is one character (the ellipsis).
      const int byte = std::stoi(text.substr(i + 1, 2), nullptr, 16);
      if ((byte & 0xC0) != 0x80) ++chars;
      i += 2;
    } else {
      ++chars;
    }
  }
  EXPECT_LE(chars, 1600u);
  EXPECT_GT(chars, 1500u);
  EXPECT_TRUE(absl::EndsWith(body,
                             "%0Ahttps%3A%2F%2Fvigil.example%2F"
                             "incidents%2Finc-42"));
}

TEST(RenderNoticeTest, FeishuSignMatchesHandComputedValue) {
  // python3: base64(hmac.new(b"1764000000\nfeishu-secret", b"",
  //                          sha256).digest())
  ReceiverConfig receiver = Receiver("feishu");
  receiver.settings["secret"] = "feishu-secret";
  const json body = JsonBody(RenderOk(receiver, SampleNotice()).at(0));
  EXPECT_EQ(body["timestamp"], "1764000000");
  EXPECT_EQ(body["sign"], "bawp1QohUKo4zWjDLixyPpNrgP17wAwVBH+FAFNgDt8=");
}

TEST(RenderNoticeTest, FeishuWithoutSecretIsUnsignedAndTextWhenAsked) {
  ReceiverConfig receiver = Receiver("feishu");
  receiver.settings["msg_type"] = "text";
  const json body = JsonBody(RenderOk(receiver, SampleNotice()).at(0));
  EXPECT_EQ(body["msg_type"], "text");
  EXPECT_EQ(body["content"]["text"],
            "[P0] xid_error on gpu-node-7 GPU 3 (job train-llama): XID 79 & "
            "GPU fell off the bus <critical>\n"
            "https://vigil.example/incidents/inc-42");
  EXPECT_FALSE(body.contains("sign"));
  EXPECT_FALSE(body.contains("timestamp"));
}

TEST(RenderNoticeTest, DingTalkSignMatchesHandComputedValue) {
  // python3: quote(base64(hmac.new(b"SEC0123456789abcdef",
  //   b"1764000000000\nSEC0123456789abcdef", sha256).digest()), safe="")
  ReceiverConfig receiver = Receiver("dingtalk");
  receiver.settings["secret"] = "SEC0123456789abcdef";
  EXPECT_EQ(RenderOk(receiver, SampleNotice()).at(0).url,
            "https://oapi.dingtalk.com/robot/send?access_token=x"
            "&timestamp=1764000000000"
            "&sign=O%2FDxk%2BW6uCrkxq7mUGZ07y1ieeBTkSH%2BXzgk9sbgFSI%3D");
  receiver.settings["url"] = "https://ding.example/robot";
  EXPECT_TRUE(absl::StartsWith(RenderOk(receiver, SampleNotice()).at(0).url,
                               "https://ding.example/robot?timestamp="));
  EXPECT_EQ(RenderOk(Receiver("dingtalk"), SampleNotice()).at(0).url,
            "https://oapi.dingtalk.com/robot/send?access_token=x");
}

TEST(RenderNoticeTest, AliyunNonceChangesWithSendTime) {
  const OutboundRequest first =
      RenderNotice(Receiver("aliyun_sms"), SampleNotice(), kNow)->at(0);
  const OutboundRequest later =
      RenderNotice(Receiver("aliyun_sms"), SampleNotice(), kNow + 60)->at(0);
  auto nonce = [](const std::string& url) {
    const size_t start = url.find("SignatureNonce=") + 15;
    return url.substr(start, url.find('&', start) - start);
  };
  EXPECT_EQ(nonce(first.url).size(), 32u);
  EXPECT_NE(nonce(first.url), nonce(later.url));
  EXPECT_TRUE(absl::StartsWith(first.url, "https://dysmsapi.aliyuncs.com/?"));
  EXPECT_EQ(first.method, "GET");
}

TEST(RenderNoticeTest, PagerDutyMapsEventsOntoOneDedupKey) {
  struct Case {
    const char* event;
    const char* action;  // nullptr: nothing sent
  };
  for (const Case& c :
       {Case{"trigger", "trigger"}, Case{"repage", "trigger"},
        Case{"escalate", "trigger"}, Case{"acknowledged", "acknowledge"},
        Case{"resolved", "resolve"}, Case{"action", nullptr}}) {
    Notice notice = SampleNotice();
    notice.event = c.event;
    const std::vector<OutboundRequest> requests =
        RenderOk(Receiver("pagerduty"), notice);
    if (c.action == nullptr) {
      EXPECT_TRUE(requests.empty()) << c.event;
      continue;
    }
    ASSERT_EQ(requests.size(), 1u) << c.event;
    EXPECT_EQ(requests[0].url, "https://events.pagerduty.com/v2/enqueue");
    const json body = JsonBody(requests[0]);
    EXPECT_EQ(body["event_action"], c.action) << c.event;
    EXPECT_EQ(body["dedup_key"], "vigil-inc-42") << c.event;
    EXPECT_EQ(body.contains("payload"), std::string(c.action) == "trigger")
        << c.event;
  }
}

TEST(RenderNoticeTest, SmsNamesWhoAcknowledged) {
  Notice notice = SampleNotice();
  notice.event = "acknowledged";
  notice.acknowledged_by = "alice";
  const std::string body = RenderOk(Receiver("twilio_sms"), notice).at(0).body;
  EXPECT_TRUE(absl::StrContains(
      body, "%28job%20train-llama%29%20%5Backnowledged%20by%20alice%5D%3A"))
      << body;
}

TEST(RenderNoticeTest, PagerDutySeverityFollowsPriority) {
  for (const auto& [severity, expected] :
       std::vector<std::pair<std::string, std::string>>{{"P0", "critical"},
                                                        {"P1", "error"},
                                                        {"P2", "warning"},
                                                        {"P3", "info"}}) {
    Notice notice = SampleNotice();
    notice.severity = severity;
    EXPECT_EQ(JsonBody(RenderOk(Receiver("pagerduty"), notice)
                           .at(0))["payload"]["severity"],
              expected);
  }
}

TEST(RenderNoticeTest, AlertmanagerResolvesWithEndTime) {
  Notice notice = SampleNotice();
  notice.event = "resolved";
  notice.gpu.reset();
  notice.job = "";
  const json body = JsonBody(RenderOk(Receiver("alertmanager"), notice).at(0));
  EXPECT_EQ(body["status"], "resolved");
  EXPECT_EQ(body["alerts"][0]["status"], "resolved");
  EXPECT_EQ(body["alerts"][0]["endsAt"], "2025-11-24T16:00:00Z");
  EXPECT_FALSE(body["alerts"][0]["labels"].contains("gpu"));
  EXPECT_FALSE(body["alerts"][0]["labels"].contains("job"));
  notice.event = "action";
  EXPECT_TRUE(RenderOk(Receiver("alertmanager"), notice).empty());
}

TEST(RenderNoticeTest, WebhookSignatureVerifiesWithSigningHelpers) {
  const OutboundRequest request =
      RenderOk(Receiver("webhook"), SampleNotice()).at(0);
  EXPECT_EQ(HeaderOf(request, "X-Vigil-Timestamp"), "1764000000");
  EXPECT_EQ(
      HeaderOf(request, "X-Vigil-Signature"),
      "v1=" + TestHex(TestHmac("SHA256", "s", "1764000000." + request.body)));
}

TEST(RenderNoticeTest, EmailWithoutReportHasNoAttachment) {
  const OutboundRequest request =
      RenderOk(Receiver("email"), SampleNotice()).at(0);
  EXPECT_TRUE(request.smtp);
  EXPECT_EQ(request.url, "smtp://mail.example:587");
  EXPECT_EQ(request.mail_from, "v@example.com");
  EXPECT_EQ(request.mail_rcpt,
            (std::vector<std::string>{"alice@example.com", "bob@example.com"}));
  EXPECT_FALSE(absl::StrContains(request.body, "Content-Disposition"));
  EXPECT_TRUE(absl::StrContains(
      request.body,
      "Subject: [Vigil P0] xid_error on gpu-node-7 (train-llama)"));
}

TEST(RenderNoticeTest, EmailEncodesNonAsciiAndKeepsHeadersOnOneLine) {
  Notice notice = SampleNotice();
  notice.event = "resolved";
  notice.kind = "显存错误";
  notice.summary = "GPU 掉卡";
  notice.node = "node\r\nBcc: evil@example.com";
  const std::string body = RenderOk(Receiver("email"), notice).at(0).body;
  EXPECT_FALSE(absl::StrContains(body, "\r\nBcc:"));
  EXPECT_TRUE(absl::StrContains(body, "Subject: =?UTF-8?B?")) << body;
  // The subject decodes back to the original text.
  const size_t start = body.find("Subject: ") + 9;
  const std::string folded = body.substr(start, body.find("\r\nDate:") - start);
  std::string subject;
  for (size_t at = folded.find("=?UTF-8?B?"); at != std::string::npos;
       at = folded.find("=?UTF-8?B?", at + 1)) {
    const size_t end = folded.find("?=", at + 10);
    subject += TestBase64Decode(folded.substr(at + 10, end - at - 10));
  }
  EXPECT_EQ(subject,
            "[Vigil P0 resolved] 显存错误 on node  Bcc: evil@example.com "
            "(train-llama)");
  // The non-ASCII text part goes base64.
  EXPECT_TRUE(absl::StrContains(body, "Content-Transfer-Encoding: base64"));
  const size_t part =
      body.find("Content-Transfer-Encoding: base64\r\n\r\n") + 37;
  const std::string text =
      TestBase64Decode(body.substr(part, body.find("--vigil-", part) - part));
  EXPECT_TRUE(absl::StartsWith(text, "GPU 掉卡\n")) << text;
}

}  // namespace
}  // namespace vigil::notify_test
