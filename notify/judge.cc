// How a send went, per receiver type, and how long to wait before retrying.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "notify/notify.h"

namespace vigil {
namespace {

constexpr size_t kDetailBodyMaxBytes = 200;

// Aliyun SMS codes that mean "later".
constexpr std::string_view kAliyunRetryCodes[] = {
    "Throttling", "Throttling.User", "isv.BUSINESS_LIMIT_CONTROL",
    "ServiceUnavailable"};

DeliveryJudgement Judgement(DeliveryVerdict verdict, std::string detail,
                            const TransportResult& result) {
  DeliveryJudgement judgement;
  judgement.verdict = verdict;
  judgement.detail = std::move(detail);
  if (verdict == DeliveryVerdict::kRetry) {
    judgement.retry_after_seconds = result.retry_after_seconds;
  }
  return judgement;
}

// "HTTP 400: <start of body>".
std::string HttpDetail(const TransportResult& result) {
  std::string body(absl::StripAsciiWhitespace(result.body));
  if (body.size() > kDetailBodyMaxBytes) body.resize(kDetailBodyMaxBytes);
  return body.empty() ? absl::StrCat("HTTP ", result.http_status)
                      : absl::StrCat("HTTP ", result.http_status, ": ", body);
}

// The integer member `field` of a JSON body, if there is one.
std::optional<int64_t> IntField(const nlohmann::json& body,
                                std::string_view field) {
  if (!body.is_object()) return std::nullopt;
  auto it = body.find(std::string(field));
  if (it == body.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

std::string StringField(const nlohmann::json& body, std::string_view field) {
  if (!body.is_object()) return "";
  auto it = body.find(std::string(field));
  if (it == body.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// IM bots answer 200 with an error code in the body: `code_field` must be
// 0; `retry_code` means "sending too fast".
DeliveryJudgement JudgeCodeBody(const TransportResult& result,
                                const nlohmann::json& body,
                                std::string_view code_field,
                                std::string_view message_field,
                                int64_t retry_code) {
  const std::optional<int64_t> code = IntField(body, code_field);
  if (!code.has_value()) {
    return Judgement(
        DeliveryVerdict::kFailed,
        absl::StrCat(HttpDetail(result), " (no ", std::string(code_field), ")"),
        result);
  }
  if (*code == 0) {
    return Judgement(DeliveryVerdict::kDelivered, HttpDetail(result), result);
  }
  const std::string detail =
      absl::StrCat(std::string(code_field), " ", *code, ": ",
                   StringField(body, message_field));
  return Judgement(
      *code == retry_code ? DeliveryVerdict::kRetry : DeliveryVerdict::kFailed,
      detail, result);
}

// SMTP replies: 2xx sent, 4xx transient, 5xx permanent.
DeliveryJudgement JudgeSmtp(const TransportResult& result) {
  const std::string detail =
      result.error.empty()
          ? absl::StrCat("SMTP ", result.http_status)
          : absl::StrCat("SMTP ", result.http_status, ": ", result.error);
  if (result.http_status >= 200 && result.http_status < 300) {
    return Judgement(DeliveryVerdict::kDelivered, detail, result);
  }
  if (result.http_status >= 400 && result.http_status < 500) {
    return Judgement(DeliveryVerdict::kRetry, detail, result);
  }
  return Judgement(DeliveryVerdict::kFailed, detail, result);
}

// A 2xx answer, judged by the type's success body.
DeliveryJudgement JudgeSuccessBody(std::string_view type,
                                   const TransportResult& result) {
  const nlohmann::json body =
      nlohmann::json::parse(result.body, nullptr, false);
  if (type == "slack") {
    if (absl::StripAsciiWhitespace(result.body) == "ok") {
      return Judgement(DeliveryVerdict::kDelivered, HttpDetail(result), result);
    }
    return Judgement(DeliveryVerdict::kFailed, HttpDetail(result), result);
  }
  if (type == "feishu") {
    // Current bots answer {"code":0}; older ones {"StatusCode":0}.
    const bool legacy = !IntField(body, "code").has_value() &&
                        IntField(body, "StatusCode").has_value();
    return legacy ? JudgeCodeBody(result, body, "StatusCode", "StatusMessage",
                                  11232)
                  : JudgeCodeBody(result, body, "code", "msg", 11232);
  }
  if (type == "dingtalk") {
    return JudgeCodeBody(result, body, "errcode", "errmsg", 130101);
  }
  if (type == "wecom") {
    return JudgeCodeBody(result, body, "errcode", "errmsg", 45009);
  }
  if (type == "pagerduty") {
    if (StringField(body, "status") == "success") {
      return Judgement(DeliveryVerdict::kDelivered, HttpDetail(result), result);
    }
    return Judgement(DeliveryVerdict::kFailed, HttpDetail(result), result);
  }
  if (type == "aliyun_sms") {
    const std::string code = StringField(body, "Code");
    if (code == "OK") {
      return Judgement(DeliveryVerdict::kDelivered, HttpDetail(result), result);
    }
    const bool retry =
        std::find(std::begin(kAliyunRetryCodes), std::end(kAliyunRetryCodes),
                  code) != std::end(kAliyunRetryCodes);
    return Judgement(retry ? DeliveryVerdict::kRetry : DeliveryVerdict::kFailed,
                     absl::StrCat("Code ", code.empty() ? "(none)" : code, ": ",
                                  StringField(body, "Message")),
                     result);
  }
  return Judgement(DeliveryVerdict::kDelivered, HttpDetail(result), result);
}

// splitmix64: a well-mixed 64-bit value from `x`.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

DeliveryJudgement JudgeResponse(std::string_view type,
                                const TransportResult& result) {
  if (result.http_status == 0) {
    return Judgement(
        DeliveryVerdict::kRetry,
        absl::StrCat("no response: ",
                     result.error.empty() ? "unknown error" : result.error),
        result);
  }
  if (type == "email") return JudgeSmtp(result);
  const int status = result.http_status;
  if (status == 408 || status == 429 || status >= 500) {
    return Judgement(DeliveryVerdict::kRetry, HttpDetail(result), result);
  }
  if (status < 200 || status >= 300) {
    return Judgement(DeliveryVerdict::kFailed, HttpDetail(result), result);
  }
  return JudgeSuccessBody(type, result);
}

double BackoffSeconds(int attempt, double base_seconds, double max_seconds,
                      uint64_t jitter_seed) {
  if (!(base_seconds > 0) || !(max_seconds > 0)) return 0;
  const int doublings = std::clamp(attempt, 1, 64) - 1;
  const double ceiling =
      std::min(max_seconds, std::ldexp(base_seconds, doublings));
  // Full jitter: uniform in [0, ceiling], from the seed and the attempt.
  const uint64_t draw =
      Mix(jitter_seed ^ Mix(static_cast<uint64_t>(doublings)));
  const double unit = static_cast<double>(draw >> 11) * 0x1.0p-53;
  return ceiling * unit;
}

}  // namespace vigil
