#include "notify/signing.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <charconv>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace vigil {
namespace {

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

std::string Hmac(const EVP_MD* digest, std::string_view key,
                 std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  HMAC(digest, key.data(), static_cast<int>(key.size()), Bytes(message),
       message.size(), out, &out_len);
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

bool IsUnreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

constexpr char kHexDigits[] = "0123456789abcdef";
constexpr char kUpperHexDigits[] = "0123456789ABCDEF";
constexpr std::string_view kSignaturePrefix = "v1=";

}  // namespace

std::string HmacSha256(std::string_view key, std::string_view message) {
  return Hmac(EVP_sha256(), key, message);
}

std::string HmacSha1(std::string_view key, std::string_view message) {
  return Hmac(EVP_sha1(), key, message);
}

std::string Sha256(std::string_view data) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(Bytes(data), data.size(), out);
  return std::string(reinterpret_cast<const char*>(out), sizeof(out));
}

std::string Base64Encode(std::string_view data) {
  // EVP_EncodeBlock writes 4 characters per 3 input bytes plus a NUL.
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                Bytes(data), static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(written));
  return out;
}

std::string HexEncode(std::string_view data) {
  std::string out;
  out.reserve(data.size() * 2);
  for (unsigned char c : data) {
    out.push_back(kHexDigits[c >> 4]);
    out.push_back(kHexDigits[c & 0xf]);
  }
  return out;
}

std::string UrlEncode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (IsUnreserved(static_cast<char>(c))) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kUpperHexDigits[c >> 4]);
      out.push_back(kUpperHexDigits[c & 0xf]);
    }
  }
  return out;
}

std::string UrlDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
               HexValue(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(text[i + 1]) * 16 +
                                      HexValue(text[i + 2])));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string SignWebhook(std::string_view secret, int64_t timestamp,
                        std::string_view body) {
  std::string message = absl::StrCat(timestamp, ".");
  message.append(body);
  return absl::StrCat(std::string(kSignaturePrefix),
                      HexEncode(HmacSha256(secret, message)));
}

absl::Status VerifyWebhook(std::string_view secret,
                           std::string_view timestamp_header,
                           std::string_view signature_header,
                           std::string_view body, double now,
                           double window_seconds) {
  if (signature_header.size() <= kSignaturePrefix.size() ||
      !signature_header.starts_with(kSignaturePrefix)) {
    return absl::UnauthenticatedError(
        "X-Vigil-Signature: missing or not of the form v1=<hex>");
  }
  int64_t timestamp = 0;
  const char* end = timestamp_header.data() + timestamp_header.size();
  auto [ptr, ec] = std::from_chars(timestamp_header.data(), end, timestamp);
  if (timestamp_header.empty() || ec != std::errc() || ptr != end) {
    return absl::DeadlineExceededError(
        "X-Vigil-Timestamp: missing or not an integer");
  }
  if (std::fabs(static_cast<double>(timestamp) - now) > window_seconds) {
    return absl::DeadlineExceededError(
        absl::StrCat("X-Vigil-Timestamp: ", timestamp,
                     " is outside the replay window of ", window_seconds, "s"));
  }
  if (!ConstantTimeEquals(SignWebhook(secret, timestamp, body),
                          signature_header)) {
    return absl::UnauthenticatedError("X-Vigil-Signature: does not match");
  }
  return absl::OkStatus();
}

}  // namespace vigil
