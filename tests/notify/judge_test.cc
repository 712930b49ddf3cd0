// Judging responses, backoff, and what the transport reports when things go
// wrong (no listener, Retry-After, a server that never answers).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "notify/notify.h"
#include "tests/notify/test_receivers.h"

namespace vigil::notify_test {
namespace {

struct JudgeCase {
  std::string type;
  int status;
  std::string body;
  std::optional<double> retry_after;
  DeliveryVerdict verdict;
  std::string detail;  // a substring of the judgement's detail
};

TEST(JudgeResponseTest, Table) {
  using V = DeliveryVerdict;
  const std::vector<JudgeCase> cases = {
      {"webhook", 0, "", std::nullopt, V::kRetry, "no response"},
      {"webhook", 200, "", std::nullopt, V::kDelivered, "HTTP 200"},
      {"webhook", 204, "", std::nullopt, V::kDelivered, "HTTP 204"},
      {"webhook", 429, "slow down", 30.0, V::kRetry, "HTTP 429: slow down"},
      {"webhook", 408, "", std::nullopt, V::kRetry, "HTTP 408"},
      {"webhook", 503, "", 5.0, V::kRetry, "HTTP 503"},
      {"webhook", 500, "", std::nullopt, V::kRetry, "HTTP 500"},
      {"webhook", 400, "bad", std::nullopt, V::kFailed, "HTTP 400: bad"},
      {"webhook", 404, "", std::nullopt, V::kFailed, "HTTP 404"},
      {"webhook", 301, "", std::nullopt, V::kFailed, "HTTP 301"},
      {"alertmanager", 200, "", std::nullopt, V::kDelivered, "HTTP 200"},
      {"twilio_sms", 201, R"({"sid":"SM1"})", std::nullopt, V::kDelivered,
       "HTTP 201"},
      {"twilio_voice", 401, R"({"code":20003})", std::nullopt, V::kFailed,
       "HTTP 401"},
      {"slack", 200, "ok", std::nullopt, V::kDelivered, "HTTP 200"},
      {"slack", 400, "invalid_payload", std::nullopt, V::kFailed,
       "invalid_payload"},
      {"slack", 200, "invalid_payload", std::nullopt, V::kFailed,
       "invalid_payload"},
      {"slack", 429, "rate_limited", 2.0, V::kRetry, "HTTP 429"},
      {"feishu", 200, R"({"code":0,"msg":"success"})", std::nullopt,
       V::kDelivered, "HTTP 200"},
      {"feishu", 200, R"({"StatusCode":0,"StatusMessage":"success"})",
       std::nullopt, V::kDelivered, "HTTP 200"},
      {"feishu", 200, R"({"code":11232,"msg":"frequency limited"})",
       std::nullopt, V::kRetry, "code 11232: frequency limited"},
      {"feishu", 200, R"({"code":19021,"msg":"sign match fail"})", std::nullopt,
       V::kFailed, "code 19021: sign match fail"},
      {"feishu", 200, "not json", std::nullopt, V::kFailed, "no code"},
      {"dingtalk", 200, R"({"errcode":0,"errmsg":"ok"})", std::nullopt,
       V::kDelivered, "HTTP 200"},
      {"dingtalk", 200, R"({"errcode":130101,"errmsg":"send too fast"})",
       std::nullopt, V::kRetry, "errcode 130101: send too fast"},
      {"dingtalk", 200, R"({"errcode":310000,"errmsg":"sign not match"})",
       std::nullopt, V::kFailed, "errcode 310000: sign not match"},
      {"wecom", 200, R"({"errcode":0,"errmsg":"ok"})", std::nullopt,
       V::kDelivered, "HTTP 200"},
      {"wecom", 200, R"({"errcode":45009,"errmsg":"api freq out of limit"})",
       std::nullopt, V::kRetry, "errcode 45009"},
      {"wecom", 200, R"({"errcode":93000,"errmsg":"invalid webhook url"})",
       std::nullopt, V::kFailed, "errcode 93000"},
      {"pagerduty", 202, R"({"status":"success","message":"Event processed"})",
       std::nullopt, V::kDelivered, "HTTP 202"},
      {"pagerduty", 400, R"({"status":"invalid event"})", std::nullopt,
       V::kFailed, "HTTP 400"},
      {"pagerduty", 429, "", 60.0, V::kRetry, "HTTP 429"},
      {"aliyun_sms", 200, R"({"Code":"OK","Message":"OK"})", std::nullopt,
       V::kDelivered, "HTTP 200"},
      {"aliyun_sms", 200,
       R"({"Code":"isv.BUSINESS_LIMIT_CONTROL","Message":"limit"})",
       std::nullopt, V::kRetry, "Code isv.BUSINESS_LIMIT_CONTROL: limit"},
      {"aliyun_sms", 200,
       R"({"Code":"isv.MOBILE_NUMBER_ILLEGAL","Message":"bad"})", std::nullopt,
       V::kFailed, "Code isv.MOBILE_NUMBER_ILLEGAL"},
      {"email", 250, "", std::nullopt, V::kDelivered, "SMTP 250"},
      {"email", 451, "", std::nullopt, V::kRetry, "SMTP 451"},
      {"email", 550, "", std::nullopt, V::kFailed, "SMTP 550"},
      {"email", 0, "", std::nullopt, V::kRetry, "no response"},
  };
  for (const JudgeCase& c : cases) {
    TransportResult result;
    result.http_status = c.status;
    result.body = c.body;
    result.retry_after_seconds = c.retry_after;
    if (c.status == 0) result.error = "Couldn't connect to server";
    const DeliveryJudgement judgement = JudgeResponse(c.type, result);
    SCOPED_TRACE(absl::StrCat(c.type, " ", c.status, " ", c.body));
    EXPECT_EQ(judgement.verdict, c.verdict);
    EXPECT_TRUE(absl::StrContains(judgement.detail, c.detail))
        << judgement.detail;
    if (c.verdict == V::kRetry) {
      EXPECT_EQ(judgement.retry_after_seconds, c.retry_after);
    } else {
      EXPECT_FALSE(judgement.retry_after_seconds.has_value());
    }
  }
}

TEST(BackoffSecondsTest, StaysWithinTheExponentialCeiling) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    for (int attempt = 1; attempt <= 12; ++attempt) {
      const double delay = BackoffSeconds(attempt, 2, 300, seed);
      const double ceiling = std::min(300.0, 2.0 * (1 << (attempt - 1)));
      EXPECT_GE(delay, 0);
      EXPECT_LE(delay, ceiling) << attempt;
    }
  }
}

TEST(BackoffSecondsTest, IsDeterministicAndJittered) {
  EXPECT_EQ(BackoffSeconds(3, 1, 60, 42), BackoffSeconds(3, 1, 60, 42));
  std::set<double> delays;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    delays.insert(BackoffSeconds(5, 1, 60, seed));
  }
  EXPECT_GT(delays.size(), 45u);
  // Full jitter spreads over the whole range.
  EXPECT_LT(*delays.begin(), 4.0);
  EXPECT_GT(*delays.rbegin(), 12.0);
}

TEST(BackoffSecondsTest, HandlesOddInputs) {
  EXPECT_LE(BackoffSeconds(0, 5, 100, 1), 5.0);
  EXPECT_LE(BackoffSeconds(-3, 5, 100, 1), 5.0);
  EXPECT_LE(BackoffSeconds(100000, 5, 100, 1), 100.0);
  EXPECT_EQ(BackoffSeconds(1, 0, 100, 1), 0);
  EXPECT_EQ(BackoffSeconds(1, 5, 0, 1), 0);
}

OutboundRequest PostTo(const std::string& url) {
  OutboundRequest request;
  request.url = url;
  request.headers = {{"Content-Type", "application/json"}};
  request.body = "{}";
  return request;
}

TEST(CurlTransportTest, ConnectionRefusedHasNoStatusAndAnError) {
  const TransportResult result = NewCurlTransport()->Send(
      PostTo(absl::StrCat("http://127.0.0.1:", UnusedPort(), "/x")), 5);
  EXPECT_EQ(result.http_status, 0);
  EXPECT_TRUE(absl::StrContains(result.error, "Couldn't connect"))
      << result.error;
  EXPECT_EQ(JudgeResponse("webhook", result).verdict, DeliveryVerdict::kRetry);
}

TEST(CurlTransportTest, ReadsRetryAfterSeconds) {
  HttpReceiver receiver;
  receiver.Reply(429, "slow down", {{"Retry-After", "17"}});
  const TransportResult result =
      NewCurlTransport()->Send(PostTo(receiver.base_url() + "/x"), 5);
  EXPECT_EQ(result.http_status, 429);
  EXPECT_EQ(result.body, "slow down");
  EXPECT_EQ(result.retry_after_seconds, 17.0);
  const DeliveryJudgement judgement = JudgeResponse("slack", result);
  EXPECT_EQ(judgement.verdict, DeliveryVerdict::kRetry);
  EXPECT_EQ(judgement.retry_after_seconds, 17.0);
}

TEST(CurlTransportTest, ReadsRetryAfterDateAgainstTheResponseDate) {
  HttpReceiver receiver;
  receiver.Reply(503, "",
                 {{"Retry-After", "Wed, 21 Oct 2015 07:28:30 GMT"},
                  {"Date", "Wed, 21 Oct 2015 07:28:00 GMT"}});
  const TransportResult result =
      NewCurlTransport()->Send(PostTo(receiver.base_url() + "/x"), 5);
  EXPECT_EQ(result.http_status, 503);
  EXPECT_EQ(result.retry_after_seconds, 30.0);
}

TEST(CurlTransportTest, IgnoresUnusableRetryAfter) {
  HttpReceiver receiver;
  receiver.Reply(429, "", {{"Retry-After", "soon"}});
  const TransportResult result =
      NewCurlTransport()->Send(PostTo(receiver.base_url() + "/x"), 5);
  EXPECT_EQ(result.http_status, 429);
  EXPECT_FALSE(result.retry_after_seconds.has_value());
}

TEST(CurlTransportTest, DoesNotFollowRedirects) {
  HttpReceiver receiver;
  receiver.Reply(302, "", {{"Location", "http://127.0.0.1:1/elsewhere"}});
  const TransportResult result =
      NewCurlTransport()->Send(PostTo(receiver.base_url() + "/x"), 5);
  EXPECT_EQ(result.http_status, 302);
  EXPECT_EQ(receiver.requests().size(), 1u);
  EXPECT_EQ(JudgeResponse("webhook", result).verdict, DeliveryVerdict::kFailed);
}

TEST(CurlTransportTest, RefusesOtherProtocols) {
  const TransportResult result =
      NewCurlTransport()->Send(PostTo("file:///etc/passwd"), 5);
  EXPECT_EQ(result.http_status, 0);
  EXPECT_FALSE(result.error.empty());
  EXPECT_TRUE(result.body.empty());
}

TEST(CurlTransportTest, SilentServerTimesOut) {
  // A listener that never accepts: the kernel completes the handshake, then
  // nothing answers.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::listen(fd, 1);
  const TransportResult result = NewCurlTransport()->Send(
      PostTo(absl::StrCat("http://127.0.0.1:", ntohs(address.sin_port), "/")),
      0.2);
  ::close(fd);
  EXPECT_EQ(result.http_status, 0);
  EXPECT_TRUE(absl::StrContains(result.error, "imeout")) << result.error;
}

}  // namespace
}  // namespace vigil::notify_test
