// Notification channels: each receiver type's real wire format, the
// transport that sends it (libcurl: HTTP(S) and SMTP), and how a
// response is judged (delivered / retry later / failed for good).
// Rendering and judging are pure; only Transport does I/O.
//
// Receiver types and their settings (ReceiverConfig::settings):
//   twilio_voice  {"account_sid", "auth_token", "from", "callback_url",
//                  "status_callback" (optional),
//                  "base_url" (default https://api.twilio.com)}
//   twilio_sms    {"account_sid", "auth_token", "from", "base_url"}
//   aliyun_sms    {"access_key_id", "access_key_secret", "sign_name",
//                  "template_code", "region" (cn-hangzhou),
//                  "base_url" (https://dysmsapi.aliyuncs.com)}
//   slack         {"url"}
//   feishu        {"url", "secret" (optional: signed bot),
//                  "msg_type" ("interactive" card, default, or "text")}
//   dingtalk      {"url" (…/robot/send?access_token=…), "secret" (optional)}
//   wecom         {"url" (…/cgi-bin/webhook/send?key=…)}
//   pagerduty     {"routing_key", "url" (https://events.pagerduty.com/v2/enqueue)}
//   alertmanager  {"url"}            (Alertmanager webhook payload, version 4)
//   webhook       {"url", "secret"}  (generic JSON, signed as signing.h)
//   email         {"smtp_url" (smtp://host:port or smtps://), "from",
//                  "username", "password" (optional),
//                  "to" (optional extra recipients: a string or an array)}
// Unknown settings are errors. notify/README.md says what each type sends
// and how its answers are judged.
#ifndef VIGIL_NOTIFY_NOTIFY_H_
#define VIGIL_NOTIFY_NOTIFY_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vigil {

// One configured destination.
struct ReceiverConfig {
  std::string name;  // unique, e.g. "oncall-slack"
  std::string type;  // see the top of the file
  nlohmann::json settings = nlohmann::json::object();
  // Most sends per minute (token bucket); 0: the type's default
  // (dingtalk and wecom 20, slack 60, twilio 60, others unlimited).
  int rate_per_minute = 0;
};

// Checks a receiver's type and settings. kInvalidArgument naming the
// missing or bad setting ("settings.url: required").
absl::Status ValidateReceiver(const ReceiverConfig& receiver);

// Every receiver type with its settings, in the order of the table above;
// an optional setting ends in '?' ("secret?"). For the config reference.
std::vector<std::pair<std::string, std::vector<std::string>>> ReceiverTypeSettings();

// The most sends per minute `receiver` allows: its rate_per_minute, or its
// type's default when that is 0. 0 means unlimited (also for unknown types).
int EffectiveRatePerMinute(const ReceiverConfig& receiver);

// Someone a notice is addressed to.
struct Recipient {
  std::string name;
  std::string phone;
  std::string email;
  std::string im;
};

// What to tell: one page of one incident, channel-independent.
struct Notice {
  // Idempotency key, unique per page and receiver; sent as the
  // Idempotency-Key header (and in bodies that have a place for it).
  std::string key;
  // "trigger", "repage", "escalate", "acknowledged", "resolved", or for
  // actions "action".
  std::string event;
  std::string incident_id;
  // What groups a receiver's events of one incident (PagerDuty dedup_key,
  // the Alertmanager fingerprint): empty for the incident id; in a cluster
  // pair, the key both members derive alike (docs/SCALING.md), so that the
  // receiver sees one incident whichever member pages.
  std::string group_key;
  std::string severity;  // "P0".."P3"
  std::string kind;
  std::string job;
  std::string node;
  std::optional<int> gpu;
  std::string summary;
  std::string hint;
  std::string state;          // lifecycle name
  double incident_ts = 0;     // first detection
  std::string url;            // the incident in the UI
  std::vector<Recipient> recipients;
  std::string acknowledged_by;
  std::string report;         // diagnostic report (P2 email), may be empty
};

// A request ready for the transport: HTTP, or an SMTP submission when
// `smtp` is set (then url is the smtp_url and body the RFC 5322 message).
struct OutboundRequest {
  std::string method = "POST";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool smtp = false;
  std::string mail_from;
  std::vector<std::string> mail_rcpt;
  std::string username;  // HTTP basic auth / SMTP auth, when set
  std::string password;
};

// Alertmanager's API v2, shared by the server's watchdog alert and its
// alert forwarder: `base` (an Alertmanager's URL) + "/api/v2/alerts",
// unless it names that path already.
std::string AlertmanagerAlertsUrl(std::string base);
// `unix_seconds` in RFC 3339, UTC, with milliseconds, as Alertmanager's API
// reads startsAt and endsAt.
std::string AlertmanagerTime(double unix_seconds);

// The request `receiver` needs for `notice` at unix time `now`. Pure and
// deterministic (nonces derive from notice.key). kInvalidArgument when the
// notice cannot go to this receiver (e.g. twilio_sms and no recipient has
// a phone number; email and no address).
absl::StatusOr<std::vector<OutboundRequest>> RenderNotice(
    const ReceiverConfig& receiver, const Notice& notice, double now);

// What came back from one send.
struct TransportResult {
  int http_status = 0;  // 0: no response (connection refused, timeout...)
  std::string body;
  std::optional<double> retry_after_seconds;  // from Retry-After
  std::string error;  // transport error text when http_status == 0
};

// Sends requests. Thread-safe.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportResult Send(const OutboundRequest& request,
                               double timeout_seconds) = 0;
};

// TLS files (PEM) for HTTPS requests of a transport. Empty: the system's
// CA store and no client certificate.
struct TlsFiles {
  std::string ca_file;    // CAs that may sign the server's certificate
  std::string cert_file;  // client certificate (mutual TLS), with key_file
  std::string key_file;
};
// libcurl (HTTP, HTTPS, SMTP/SMTPS).
std::unique_ptr<Transport> NewCurlTransport(TlsFiles tls = {});

// How a send went.
enum class DeliveryVerdict : uint8_t { kDelivered, kRetry, kFailed };

struct DeliveryJudgement {
  DeliveryVerdict verdict = DeliveryVerdict::kFailed;
  std::optional<double> retry_after_seconds;
  std::string detail;  // "HTTP 503", "errcode 130101: send too fast", ...
};

// Judges `result` for a receiver of `type`: 2xx with the type's success
// body (Feishu code 0, DingTalk/WeCom errcode 0, Slack "ok") is delivered;
// no response, 408, 429 (Retry-After honoured), 5xx and the IM "too fast"
// codes are retried; other 4xx and error codes fail for good.
DeliveryJudgement JudgeResponse(std::string_view type,
                                const TransportResult& result);

// `text` escaped for XML element content and attribute values (& < > " ').
// Used for TwiML, including the server's answer to Twilio's callback.
std::string XmlEscape(std::string_view text);

// Delay before retry number `attempt` (1-based): exponential from
// `base_seconds`, capped at `max_seconds`, with full jitter drawn
// deterministically from `jitter_seed`.
double BackoffSeconds(int attempt, double base_seconds, double max_seconds,
                      uint64_t jitter_seed);

}  // namespace vigil

#endif  // VIGIL_NOTIFY_NOTIFY_H_
