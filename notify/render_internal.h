// Helpers shared by the channel renderers (private to vigil_notify).
#ifndef VIGIL_NOTIFY_RENDER_INTERNAL_H_
#define VIGIL_NOTIFY_RENDER_INTERNAL_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"

namespace vigil::notify_internal {

// The string setting `key` of `receiver`, or `fallback` when it is absent
// or empty. ValidateReceiver has already checked the types.
std::string Setting(const ReceiverConfig& receiver, std::string_view key,
                    std::string_view fallback = "");

// An HTTP request to `url` carrying the headers every channel sends
// (Idempotency-Key, User-Agent).
OutboundRequest NewHttpRequest(std::string method, std::string url,
                               const Notice& notice);
// A POST of `body` as application/json.
OutboundRequest NewJsonPost(std::string url, const nlohmann::json& body,
                            const Notice& notice);
// `json` as compact UTF-8 text; invalid UTF-8 is replaced, never thrown.
std::string DumpJson(const nlohmann::json& json);

// `url` with `query` ("k=v&...") appended after '?' or '&' as needed.
std::string AppendQuery(std::string_view url, std::string_view query);

// RFC 3339 UTC time with seconds: "2025-11-24T16:00:00Z".
std::string Rfc3339(double unix_seconds);

// At most `max_bytes` of `text`, cut at a UTF-8 character boundary; an
// ellipsis ("…") replaces the tail when something was cut.
std::string TruncateUtf8(std::string_view text, size_t max_bytes);
// At most `max_chars` UTF-8 characters of `text`, same ellipsis rule.
std::string TruncateChars(std::string_view text, size_t max_chars);

// True for the events that wake someone: trigger, repage, escalate.
bool IsPageEvent(std::string_view event);
// "P0 · xid_error", with the event appended when it is not a trigger
// ("P0 · xid_error · resolved").
std::string Headline(const Notice& notice);
// Where it happened: "node-7 GPU 3 (job train-llama)", parts omitted when
// unknown; "unknown location" when nothing is known.
std::string Where(const Notice& notice);
// A one-line summary: "[P0] xid_error on node-7 GPU 3 (job train): ...",
// the event in brackets after the place when it is not a trigger
// ("[resolved]", "[acknowledged by alice]").
std::string OneLine(const Notice& notice);
// The recipients' phone numbers, in order, skipping empty ones.
std::vector<std::string> Phones(const Notice& notice);

// Renderers, one per receiver type. The receiver is already validated and
// the notice's event is a known one.
using Rendered = absl::StatusOr<std::vector<OutboundRequest>>;
Rendered RenderTwilioVoice(const ReceiverConfig& receiver, const Notice& notice,
                           double now);
Rendered RenderTwilioSms(const ReceiverConfig& receiver, const Notice& notice,
                         double now);
Rendered RenderAliyunSms(const ReceiverConfig& receiver, const Notice& notice,
                         double now);
Rendered RenderSlack(const ReceiverConfig& receiver, const Notice& notice,
                     double now);
Rendered RenderFeishu(const ReceiverConfig& receiver, const Notice& notice,
                      double now);
Rendered RenderDingTalk(const ReceiverConfig& receiver, const Notice& notice,
                        double now);
Rendered RenderWeCom(const ReceiverConfig& receiver, const Notice& notice,
                     double now);
Rendered RenderPagerDuty(const ReceiverConfig& receiver, const Notice& notice,
                         double now);
Rendered RenderAlertmanager(const ReceiverConfig& receiver,
                            const Notice& notice, double now);
Rendered RenderWebhook(const ReceiverConfig& receiver, const Notice& notice,
                       double now);
Rendered RenderEmail(const ReceiverConfig& receiver, const Notice& notice,
                     double now);

}  // namespace vigil::notify_internal

#endif  // VIGIL_NOTIFY_RENDER_INTERNAL_H_
