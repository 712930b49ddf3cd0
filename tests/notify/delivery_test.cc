// Every channel end to end: RenderNotice, the real libcurl transport, and a
// local receiver that checks the method, path, content type, each field and
// recomputes each signature on its own.
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "tests/notify/sample_notice.h"
#include "tests/notify/test_receivers.h"

namespace vigil::notify_test {
namespace {

using ::testing::TestWithParam;
using ::testing::ValuesIn;
using json = nlohmann::json;

constexpr double kTimeoutSeconds = 10;

constexpr char kExpectedTwiml[] =
    "<Response><Gather numDigits=\"1\" "
    "action=\"https://hooks.vigil.example/twilio/voice?incident=inc-42&amp;"
    "key=inc-42%2Ftrigger%2F1\" method=\"POST\"><Say>Vigil page. Severity "
    "P0. xid error on gpu-node-7 GPU 3 (job train-llama). XID 79 &amp; GPU "
    "fell off the bus &lt;critical&gt;. Press 1 to acknowledge, 2 to "
    "resolve.</Say></Gather><Say>No input received. Goodbye.</Say>"
    "</Response>";

json Body(const ReceivedRequest& request) {
  json body = json::parse(request.body, nullptr, false);
  EXPECT_FALSE(body.is_discarded()) << request.body;
  return body;
}

// A channel, how its receiver answers, and what the receiver checks.
struct ChannelCase {
  std::string name;
  std::string type;
  std::function<json(const std::string& base_url)> settings;
  int reply_status = 200;
  std::string reply_body;
  size_t requests = 1;
  std::string method = "POST";
  std::string path;
  std::string content_type = "application/json";
  // Checks request number `index`.
  std::function<void(const ReceivedRequest& request, size_t index)> check;
};

void PrintTo(const ChannelCase& c, std::ostream* os) { *os << c.name; }

std::vector<ChannelCase> Cases() {
  std::vector<ChannelCase> cases;
  cases.push_back(
      {.name = "TwilioVoice",
       .type = "twilio_voice",
       .settings =
           [](const std::string& base) {
             return json{
                 {"account_sid", "AC123"},
                 {"auth_token", "tw-token"},
                 {"from", "+15559999"},
                 {"callback_url", "https://hooks.vigil.example/twilio/voice"},
                 {"status_callback",
                  "https://hooks.vigil.example/twilio/status"},
                 {"base_url", base}};
           },
       .reply_status = 201,
       .reply_body = R"({"sid":"CA1","status":"queued"})",
       .requests = 2,
       .path = "/2010-04-01/Accounts/AC123/Calls.json",
       .content_type = "application/x-www-form-urlencoded",
       .check =
           [](const ReceivedRequest& request, size_t index) {
             EXPECT_EQ(request.Header("Authorization"),
                       "Basic " + TestBase64("AC123:tw-token"));
             EXPECT_EQ(request.Param("To"),
                       index == 0 ? "+15550001" : "+15550002");
             EXPECT_EQ(request.Param("From"), "+15559999");
             EXPECT_EQ(request.Param("Twiml"), kExpectedTwiml);
             EXPECT_EQ(request.Param("StatusCallback"),
                       "https://hooks.vigil.example/twilio/status");
           }});
  cases.push_back(
      {.name = "TwilioSms",
       .type = "twilio_sms",
       .settings =
           [](const std::string& base) {
             return json{{"account_sid", "AC123"},
                         {"auth_token", "tw-token"},
                         {"from", "+15559999"},
                         {"base_url", base + "/"}};
           },
       .reply_status = 201,
       .reply_body = R"({"sid":"SM1","status":"queued"})",
       .requests = 2,
       .path = "/2010-04-01/Accounts/AC123/Messages.json",
       .content_type = "application/x-www-form-urlencoded",
       .check =
           [](const ReceivedRequest& request, size_t index) {
             EXPECT_EQ(request.Header("Authorization"),
                       "Basic " + TestBase64("AC123:tw-token"));
             EXPECT_EQ(request.Param("To"),
                       index == 0 ? "+15550001" : "+15550002");
             EXPECT_EQ(request.Param("From"), "+15559999");
             EXPECT_EQ(request.Param("Body"),
                       "Vigil [P0] xid_error on gpu-node-7 GPU 3 (job "
                       "train-llama): XID 79 & GPU fell off the bus "
                       "<critical>\nhttps://vigil.example/incidents/inc-42");
           }});
  cases.push_back(
      {.name = "AliyunSms",
       .type = "aliyun_sms",
       .settings =
           [](const std::string& base) {
             return json{{"access_key_id", "LTAI-test"},
                         {"access_key_secret", "ali-secret"},
                         {"sign_name", "Vigil"},
                         {"template_code", "SMS_1234"},
                         {"base_url", base}};
           },
       .reply_body =
           R"({"Code":"OK","Message":"OK","BizId":"9","RequestId":"R"})",
       .method = "GET",
       .path = "/",
       .content_type = "",
       .check =
           [](const ReceivedRequest& request, size_t) {
             const std::map<std::string, std::string> expected = {
                 {"AccessKeyId", "LTAI-test"},
                 {"Action", "SendSms"},
                 {"Format", "JSON"},
                 {"PhoneNumbers", "+15550001,+15550002"},
                 {"RegionId", "cn-hangzhou"},
                 {"SignName", "Vigil"},
                 {"SignatureMethod", "HMAC-SHA1"},
                 {"SignatureVersion", "1.0"},
                 {"TemplateCode", "SMS_1234"},
                 {"Timestamp", "2025-11-24T16:00:00Z"},
                 {"Version", "2017-05-25"}};
             for (const auto& [key, value] : expected) {
               EXPECT_EQ(request.Param(key), value) << key;
             }
             EXPECT_EQ(request.Param("SignatureNonce").size(), 32u);
             const json template_param =
                 json::parse(request.Param("TemplateParam"), nullptr, false);
             ASSERT_TRUE(template_param.is_object());
             EXPECT_EQ(template_param["severity"], "P0");
             EXPECT_EQ(template_param["kind"], "xid_error");
             EXPECT_EQ(template_param["where"],
                       "gpu-node-7 GPU 3 (job train-llama)");
             EXPECT_EQ(template_param["summary"],
                       "XID 79 & GPU fell off the bus <cri\xe2\x80\xa6");
             // Recompute the v1.0 signature from what arrived.
             std::string canonical;
             for (const auto& [key, value] : request.params) {
               if (key == "Signature") continue;
               absl::StrAppend(&canonical, canonical.empty() ? "" : "&",
                               TestPercentEncode(key), "=",
                               TestPercentEncode(value));
             }
             const std::string string_to_sign =
                 "GET&%2F&" + TestPercentEncode(canonical);
             EXPECT_EQ(
                 request.Param("Signature"),
                 TestBase64(TestHmac("SHA1", "ali-secret&", string_to_sign)));
           }});
  cases.push_back(
      {.name = "Slack",
       .type = "slack",
       .settings =
           [](const std::string& base) {
             return json{{"url", base + "/services/T0/B0/XYZ"}};
           },
       .reply_body = "ok",
       .path = "/services/T0/B0/XYZ",
       .check =
           [](const ReceivedRequest& request, size_t) {
             const json body = Body(request);
             EXPECT_EQ(body["text"],
                       "[P0] xid_error on gpu-node-7 GPU 3 (job train-llama): "
                       "XID 79 & GPU fell off the bus <critical>");
             const json& blocks = body["blocks"];
             ASSERT_EQ(blocks.size(), 4u);
             EXPECT_EQ(blocks[0]["type"], "header");
             EXPECT_EQ(blocks[0]["text"]["type"], "plain_text");
             EXPECT_EQ(blocks[0]["text"]["text"], "P0 \xc2\xb7 xid_error");
             EXPECT_EQ(blocks[1]["type"], "section");
             EXPECT_EQ(blocks[1]["text"]["type"], "mrkdwn");
             EXPECT_EQ(blocks[1]["text"]["text"],
                       "*XID 79 &amp; GPU fell off the bus &lt;critical&gt;*\n"
                       "Job: train-llama\nNode: gpu-node-7\nGPU: 3\n"
                       "Hint: drain the node\nPaging <@U024BE7LH>");
             EXPECT_EQ(blocks[2]["type"], "context");
             EXPECT_EQ(blocks[2]["elements"][0]["text"],
                       "Incident inc-42 \xc2\xb7 trigger \xc2\xb7 started "
                       "2025-11-24T15:58:00Z");
             EXPECT_EQ(blocks[3]["type"], "actions");
             EXPECT_EQ(blocks[3]["elements"][0]["type"], "button");
             EXPECT_EQ(blocks[3]["elements"][0]["url"],
                       "https://vigil.example/incidents/inc-42");
           }});
  cases.push_back(
      {.name = "FeishuSigned",
       .type = "feishu",
       .settings =
           [](const std::string& base) {
             return json{{"url", base + "/open-apis/bot/v2/hook/abc"},
                         {"secret", "feishu-secret"}};
           },
       .reply_body = R"({"code":0,"msg":"success","data":{}})",
       .path = "/open-apis/bot/v2/hook/abc",
       .check =
           [](const ReceivedRequest& request, size_t) {
             const json body = Body(request);
             EXPECT_EQ(body["msg_type"], "interactive");
             EXPECT_EQ(body["card"]["header"]["title"]["content"],
                       "P0 \xc2\xb7 xid_error");
             EXPECT_EQ(body["card"]["header"]["template"], "red");
             EXPECT_TRUE(absl::StrContains(
                 body["card"]["elements"][0]["text"]["content"]
                     .get<std::string>(),
                 "**XID 79 & GPU fell off the bus <critical>**"));
             EXPECT_EQ(body["card"]["elements"][1]["actions"][0]["url"],
                       "https://vigil.example/incidents/inc-42");
             ASSERT_TRUE(body["timestamp"].is_string());
             const std::string timestamp = body["timestamp"];
             EXPECT_EQ(timestamp, "1764000000");
             EXPECT_EQ(body["sign"],
                       TestBase64(TestHmac("SHA256",
                                           timestamp + "\nfeishu-secret", "")));
           }});
  cases.push_back(
      {.name = "DingTalkSigned",
       .type = "dingtalk",
       .settings =
           [](const std::string& base) {
             return json{{"url", base + "/robot/send?access_token=tok"},
                         {"secret", "SEC0123456789abcdef"}};
           },
       .reply_body = R"({"errcode":0,"errmsg":"ok"})",
       .path = "/robot/send",
       .check =
           [](const ReceivedRequest& request, size_t) {
             EXPECT_EQ(request.Param("access_token"), "tok");
             const std::string timestamp = request.Param("timestamp");
             EXPECT_EQ(timestamp, "1764000000000");
             EXPECT_EQ(
                 request.Param("sign"),
                 TestBase64(TestHmac("SHA256", "SEC0123456789abcdef",
                                     timestamp + "\nSEC0123456789abcdef")));
             const json body = Body(request);
             EXPECT_EQ(body["msgtype"], "markdown");
             EXPECT_EQ(body["markdown"]["title"], "P0 \xc2\xb7 xid_error");
             const std::string text = body["markdown"]["text"];
             EXPECT_TRUE(absl::StartsWith(text, "### P0 \xc2\xb7 xid_error"))
                 << text;
             EXPECT_TRUE(absl::EndsWith(text, "@+15550001 @+15550002")) << text;
             EXPECT_EQ(body["at"]["atMobiles"],
                       json::array({"+15550001", "+15550002"}));
             EXPECT_EQ(body["at"]["isAtAll"], false);
           }});
  cases.push_back(
      {.name = "WeCom",
       .type = "wecom",
       .settings =
           [](const std::string& base) {
             return json{{"url", base + "/cgi-bin/webhook/send?key=k1"}};
           },
       .reply_body = R"({"errcode":0,"errmsg":"ok"})",
       .path = "/cgi-bin/webhook/send",
       .check =
           [](const ReceivedRequest& request, size_t) {
             EXPECT_EQ(request.Param("key"), "k1");
             const json body = Body(request);
             EXPECT_EQ(body["msgtype"], "markdown");
             const std::string content = body["markdown"]["content"];
             EXPECT_TRUE(
                 absl::StartsWith(content, "**P0 \xc2\xb7 xid_error**\n"))
                 << content;
             EXPECT_TRUE(absl::StrContains(
                 content,
                 "[Open incident](https://vigil.example/incidents/inc-42)"));
           }});
  cases.push_back(
      {.name = "PagerDuty",
       .type = "pagerduty",
       .settings =
           [](const std::string& base) {
             return json{{"routing_key", "R0UTING"},
                         {"url", base + "/v2/enqueue"}};
           },
       .reply_status = 202,
       .reply_body = R"({"status":"success","message":"Event processed",)"
                     R"("dedup_key":"vigil-inc-42"})",
       .path = "/v2/enqueue",
       .check =
           [](const ReceivedRequest& request, size_t) {
             const json body = Body(request);
             EXPECT_EQ(body["routing_key"], "R0UTING");
             EXPECT_EQ(body["event_action"], "trigger");
             EXPECT_EQ(body["dedup_key"], "vigil-inc-42");
             const json& payload = body["payload"];
             EXPECT_EQ(payload["summary"],
                       "[P0] xid_error on gpu-node-7 GPU 3 (job train-llama): "
                       "XID 79 & GPU fell off the bus <critical>");
             EXPECT_EQ(payload["source"], "gpu-node-7");
             EXPECT_EQ(payload["severity"], "critical");
             EXPECT_EQ(payload["timestamp"], "2025-11-24T15:58:00Z");
             EXPECT_EQ(payload["component"], "gpu-node-7/gpu3");
             EXPECT_EQ(payload["group"], "train-llama");
             EXPECT_EQ(payload["class"], "xid_error");
             EXPECT_EQ(payload["custom_details"]["gpu"], 3);
             EXPECT_EQ(payload["custom_details"]["hint"], "drain the node");
             EXPECT_EQ(body["links"],
                       json::parse(R"([{"href":"https://vigil.example/)"
                                   R"(incidents/inc-42","text":"Vigil )"
                                   R"(incident"}])"));
           }});
  cases.push_back(
      {.name = "Alertmanager",
       .type = "alertmanager",
       .settings =
           [](const std::string& base) {
             return json{{"url", base + "/alerts"}};
           },
       .reply_body = "",
       .path = "/alerts",
       .check =
           [](const ReceivedRequest& request, size_t) {
             const json body = Body(request);
             EXPECT_EQ(body["version"], "4");
             EXPECT_EQ(body["status"], "firing");
             EXPECT_EQ(body["receiver"], "test-receiver");
             EXPECT_EQ(body["truncatedAlerts"], 0);
             EXPECT_EQ(body["groupKey"], "{}:{incident=\"inc-42\"}");
             EXPECT_EQ(body["groupLabels"], json({{"incident", "inc-42"}}));
             EXPECT_EQ(body["externalURL"], "https://vigil.example");
             ASSERT_EQ(body["alerts"].size(), 1u);
             const json& alert = body["alerts"][0];
             EXPECT_EQ(alert["status"], "firing");
             EXPECT_EQ(alert["labels"], json({{"alertname", "xid_error"},
                                              {"severity", "P0"},
                                              {"job", "train-llama"},
                                              {"node", "gpu-node-7"},
                                              {"gpu", "3"},
                                              {"incident", "inc-42"}}));
             EXPECT_EQ(body["commonLabels"], alert["labels"]);
             EXPECT_EQ(
                 alert["annotations"],
                 json({{"summary", "XID 79 & GPU fell off the bus <critical>"},
                       {"description", "drain the node"}}));
             EXPECT_EQ(alert["startsAt"], "2025-11-24T15:58:00Z");
             EXPECT_EQ(alert["endsAt"], "0001-01-01T00:00:00Z");
             EXPECT_EQ(alert["generatorURL"],
                       "https://vigil.example/incidents/inc-42");
             EXPECT_EQ(alert["fingerprint"],
                       TestHex(TestSha256("inc-42")).substr(0, 16));
           }});
  cases.push_back(
      {.name = "GenericWebhook",
       .type = "webhook",
       .settings =
           [](const std::string& base) {
             return json{{"url", base + "/hooks/vigil"},
                         {"secret", "wh-secret"}};
           },
       .reply_status = 204,
       .reply_body = "",
       .path = "/hooks/vigil",
       .check =
           [](const ReceivedRequest& request, size_t) {
             const std::string timestamp = request.Header("X-Vigil-Timestamp");
             EXPECT_EQ(timestamp, "1764000000");
             EXPECT_EQ(
                 request.Header("X-Vigil-Signature"),
                 "v1=" + TestHex(TestHmac("SHA256", "wh-secret",
                                          timestamp + "." + request.body)));
             const json body = Body(request);
             EXPECT_EQ(body["event"], "trigger");
             EXPECT_EQ(body["key"], "inc-42/trigger/1");
             const json& incident = body["incident"];
             EXPECT_EQ(incident["id"], "inc-42");
             EXPECT_EQ(incident["severity"], "P0");
             EXPECT_EQ(incident["kind"], "xid_error");
             EXPECT_EQ(incident["job"], "train-llama");
             EXPECT_EQ(incident["node"], "gpu-node-7");
             EXPECT_EQ(incident["gpu"], 3);
             EXPECT_EQ(incident["summary"],
                       "XID 79 & GPU fell off the bus <critical>");
             EXPECT_EQ(incident["hint"], "drain the node");
             EXPECT_EQ(incident["state"], "open");
             EXPECT_EQ(incident["started_at"], "2025-11-24T15:58:00Z");
             EXPECT_EQ(incident["url"],
                       "https://vigil.example/incidents/inc-42");
             ASSERT_EQ(body["recipients"].size(), 2u);
             EXPECT_EQ(body["recipients"][0]["name"], "alice");
             EXPECT_EQ(body["recipients"][0]["phone"], "+15550001");
             EXPECT_EQ(body["recipients"][1]["email"], "bob@example.com");
           }});
  return cases;
}

class ChannelDeliveryTest : public TestWithParam<ChannelCase> {};

TEST_P(ChannelDeliveryTest, ReceiverAcceptsTheRenderedRequest) {
  const ChannelCase& c = GetParam();
  HttpReceiver receiver;
  receiver.Reply(c.reply_status, c.reply_body);
  ReceiverConfig config{"test-receiver", c.type,
                        c.settings(receiver.base_url())};
  const Notice notice = SampleNotice();

  absl::StatusOr<std::vector<OutboundRequest>> rendered =
      RenderNotice(config, notice, kNow);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  ASSERT_EQ(rendered->size(), c.requests);
  std::unique_ptr<Transport> transport = NewCurlTransport();
  for (const OutboundRequest& request : *rendered) {
    const TransportResult result = transport->Send(request, kTimeoutSeconds);
    EXPECT_EQ(result.http_status, c.reply_status) << result.error;
    const DeliveryJudgement judgement = JudgeResponse(c.type, result);
    EXPECT_EQ(judgement.verdict, DeliveryVerdict::kDelivered)
        << judgement.detail;
  }

  const std::vector<ReceivedRequest> received = receiver.requests();
  ASSERT_EQ(received.size(), c.requests);
  for (size_t i = 0; i < received.size(); ++i) {
    SCOPED_TRACE(absl::StrCat(c.name, " request ", i));
    const ReceivedRequest& request = received[i];
    EXPECT_EQ(request.method, c.method);
    EXPECT_EQ(request.path, c.path);
    EXPECT_EQ(request.Header("Content-Type"), c.content_type);
    EXPECT_EQ(request.Header("Idempotency-Key"), notice.key);
    EXPECT_EQ(request.Header("User-Agent"), "vigil/1");
    c.check(request, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, ChannelDeliveryTest, ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ChannelCase>& info) {
                           return info.param.name;
                         });

// The diagnostic report and the headers arrive through a real SMTP
// exchange; dot-stuffing survives the round trip.
TEST(EmailDeliveryTest, SmtpReceiverGetsMessageAndAttachment) {
  SmtpReceiver smtp;
  ReceiverConfig config{
      "mail",
      "email",
      {{"smtp_url", smtp.url()},
       {"from", "vigil@example.com"},
       {"to", json::array({"oncall@example.com", "alice@example.com"})}}};
  Notice notice = SampleNotice();
  notice.severity = "P2";
  notice.report = "GPU 3 report\n.hidden dot line\nECC errors: 12\n";

  absl::StatusOr<std::vector<OutboundRequest>> rendered =
      RenderNotice(config, notice, kNow);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  ASSERT_EQ(rendered->size(), 1u);
  const TransportResult result =
      NewCurlTransport()->Send(rendered->front(), kTimeoutSeconds);
  EXPECT_EQ(JudgeResponse("email", result).verdict, DeliveryVerdict::kDelivered)
      << result.http_status << " " << result.error;

  const ReceivedMail mail = smtp.Finish();
  EXPECT_EQ(mail.mail_from, "vigil@example.com");
  EXPECT_EQ(mail.rcpt_to,
            (std::vector<std::string>{"alice@example.com", "bob@example.com",
                                      "oncall@example.com"}));
  EXPECT_TRUE(mail.quit);
  const std::string& data = mail.data;
  for (const char* header :
       {"From: vigil@example.com\r\n",
        "To: alice@example.com, bob@example.com, oncall@example.com\r\n",
        "Subject: [Vigil P2] xid_error on gpu-node-7 (train-llama)\r\n",
        "Date: Mon, 24 Nov 2025 16:00:00 +0000\r\n",
        "Message-ID: <inc-42_trigger_1@vigil>\r\n", "MIME-Version: 1.0\r\n",
        "Content-Type: multipart/mixed; boundary=\"vigil-"}) {
    EXPECT_TRUE(absl::StrContains(data, header)) << header << "\n" << data;
  }
  EXPECT_TRUE(absl::StrContains(
      data, "XID 79 & GPU fell off the bus <critical>\r\n\r\nSeverity: P2"))
      << data;
  EXPECT_TRUE(absl::StrContains(
      data, "Open: https://vigil.example/incidents/inc-42\r\n"));
  EXPECT_TRUE(absl::StrContains(
      data, "Content-Disposition: attachment; filename=\"inc-42-report.txt\""));
  EXPECT_TRUE(absl::StrContains(
      data, "\r\n\r\nGPU 3 report\r\n.hidden dot line\r\nECC errors: 12\r\n"))
      << data;
  // Every line ends in CRLF.
  for (size_t at = data.find('\n'); at != std::string::npos;
       at = data.find('\n', at + 1)) {
    ASSERT_GT(at, 0u);
    ASSERT_EQ(data[at - 1], '\r') << "bare LF at " << at;
  }
}

TEST(EmailDeliveryTest, RejectedRecipientIsAFailureTemporaryIsARetry) {
  for (const auto& [reply, verdict] :
       std::vector<std::pair<std::string, DeliveryVerdict>>{
           {"550 No such user", DeliveryVerdict::kFailed},
           {"451 Try again later", DeliveryVerdict::kRetry}}) {
    SmtpReceiver smtp(reply);
    ReceiverConfig config{
        "mail",
        "email",
        {{"smtp_url", smtp.url()}, {"from", "vigil@example.com"}}};
    Notice notice = SampleNotice();
    notice.recipients.resize(1);
    absl::StatusOr<std::vector<OutboundRequest>> rendered =
        RenderNotice(config, notice, kNow);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    const TransportResult result =
        NewCurlTransport()->Send(rendered->front(), kTimeoutSeconds);
    EXPECT_EQ(result.http_status, std::stoi(reply.substr(0, 3)))
        << result.error;
    EXPECT_FALSE(result.error.empty());
    EXPECT_EQ(JudgeResponse("email", result).verdict, verdict) << reply;
    smtp.Finish();
  }
}

}  // namespace
}  // namespace vigil::notify_test
