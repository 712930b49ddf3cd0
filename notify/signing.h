// Encodings and message authentication used by notification channels and
// by the signed action webhooks (OpenSSL underneath; nothing hand-rolled).
//
// Vigil webhook signature (action webhooks and the generic webhook):
//   X-Vigil-Timestamp: <unix seconds, integer>
//   X-Vigil-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>
// A receiver accepts a request when the signature matches and the
// timestamp is within its replay window of its own clock.
#ifndef VIGIL_NOTIFY_SIGNING_H_
#define VIGIL_NOTIFY_SIGNING_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace vigil {

// Raw 32-byte HMAC-SHA256 / 20-byte HMAC-SHA1 of `message` under `key`.
std::string HmacSha256(std::string_view key, std::string_view message);
std::string HmacSha1(std::string_view key, std::string_view message);
// Raw 32-byte SHA-256 of `data`.
std::string Sha256(std::string_view data);

// Standard base64 with padding.
std::string Base64Encode(std::string_view data);
// Lower-case hex.
std::string HexEncode(std::string_view data);
// RFC 3986 percent-encoding: everything but A-Z a-z 0-9 - _ . ~ is encoded
// (space as %20).
std::string UrlEncode(std::string_view text);
// application/x-www-form-urlencoded decoding ('+' is a space); malformed
// escapes are copied verbatim.
std::string UrlDecode(std::string_view text);

// Constant-time comparison of two byte strings.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The X-Vigil-Signature value of `body` sent at `timestamp`: "v1=<hex>".
std::string SignWebhook(std::string_view secret, int64_t timestamp,
                        std::string_view body);

// Checks a signed webhook. kUnauthenticated when the signature header is
// missing/malformed or does not match; kDeadlineExceeded when `timestamp`
// is not an integer or lies more than `window_seconds` from `now`.
absl::Status VerifyWebhook(std::string_view secret,
                           std::string_view timestamp_header,
                           std::string_view signature_header,
                           std::string_view body, double now,
                           double window_seconds);

}  // namespace vigil

#endif  // VIGIL_NOTIFY_SIGNING_H_
