// The libcurl Transport: one easy handle per send, so sends on different
// threads share nothing.
#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "notify/notify.h"

namespace vigil {
namespace {

constexpr size_t kMaxResponseBytes = 64 * 1024;  // enough to judge
constexpr double kMaxConnectSeconds = 10;

// Calls curl_global_init once per process, before the first handle.
void InitCurlOnce() {
  static const CURLcode kInit = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)kInit;  // a failed init shows up as curl_easy_init failing
}

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

// Appends `item` to `list` (a failed allocation drops the item; the send
// then goes without it and the server says what is missing).
void Append(Slist& list, const std::string& item) {
  curl_slist* head = curl_slist_append(list.get(), item.c_str());
  if (list == nullptr) list.reset(head);
}

struct EasyDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};

// What the callbacks collect during one send.
struct Exchange {
  std::string_view upload;  // SMTP message still to send
  std::string body;
  std::string retry_after;  // raw header values of the final response
  std::string date;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t bytes = size * count;
  const size_t room =
      kMaxResponseBytes - std::min(kMaxResponseBytes, exchange->body.size());
  exchange->body.append(data, std::min(bytes, room));
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t bytes = size * count;
  std::string_view line(data, bytes);
  if (line.starts_with("HTTP/")) {  // a new response (after 1xx)
    exchange->retry_after.clear();
    exchange->date.clear();
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return bytes;
  const std::string name(line.substr(0, colon));
  const std::string value(
      absl::StripAsciiWhitespace(std::string(line.substr(colon + 1))));
  if (absl::EqualsIgnoreCase(name, "Retry-After")) {
    exchange->retry_after = value;
  } else if (absl::EqualsIgnoreCase(name, "Date")) {
    exchange->date = value;
  }
  return bytes;
}

size_t OnUpload(char* buffer, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t bytes = std::min(size * count, exchange->upload.size());
  std::memcpy(buffer, exchange->upload.data(), bytes);
  exchange->upload.remove_prefix(bytes);
  return bytes;
}

// Retry-After as seconds: delta-seconds, or an HTTP-date taken relative to
// the response's own Date header (so no local clock is needed).
std::optional<double> RetryAfterSeconds(const std::string& retry_after,
                                        const std::string& date) {
  if (retry_after.empty()) return std::nullopt;
  int64_t seconds = 0;
  if (absl::SimpleAtoi(retry_after, &seconds)) {
    return static_cast<double>(std::max<int64_t>(seconds, 0));
  }
  const time_t until = curl_getdate(retry_after.c_str(), nullptr);
  const time_t sent = date.empty() ? -1 : curl_getdate(date.c_str(), nullptr);
  if (until < 0 || sent < 0) return std::nullopt;
  return static_cast<double>(std::max<time_t>(until - sent, 0));
}

class CurlTransport : public Transport {
 public:
  explicit CurlTransport(TlsFiles tls) : tls_(std::move(tls)) {}

  TransportResult Send(const OutboundRequest& request,
                       double timeout_seconds) override {
    InitCurlOnce();
    TransportResult result;
    std::unique_ptr<CURL, EasyDeleter> curl(curl_easy_init());
    if (curl == nullptr) {
      result.error = "curl_easy_init failed";
      return result;
    }
    CURL* handle = curl.get();
    Exchange exchange;
    char errbuf[CURL_ERROR_SIZE] = {};
    const long timeout_ms =
        std::max(1L, std::lround(std::max(timeout_seconds, 0.0) * 1000));
    curl_easy_setopt(handle, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(
        handle, CURLOPT_CONNECTTIMEOUT_MS,
        std::min(timeout_ms, std::lround(kMaxConnectSeconds * 1000)));
    curl_easy_setopt(handle, CURLOPT_FOLLOWLOCATION, 0L);
    if (!tls_.ca_file.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO, tls_.ca_file.c_str());
    if (!tls_.cert_file.empty()) {
      curl_easy_setopt(handle, CURLOPT_SSLCERT, tls_.cert_file.c_str());
      curl_easy_setopt(handle, CURLOPT_SSLKEY, tls_.key_file.c_str());
    }
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &exchange);
    if (!request.username.empty() || !request.password.empty()) {
      curl_easy_setopt(handle, CURLOPT_USERNAME, request.username.c_str());
      curl_easy_setopt(handle, CURLOPT_PASSWORD, request.password.c_str());
    }

    Slist headers;
    Slist recipients;
    if (request.smtp) {
      curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
      // Credentials never travel in clear text: plain smtp:// must upgrade
      // with STARTTLS when logging in, and tries to anyway.
      curl_easy_setopt(handle, CURLOPT_USE_SSL,
                       request.username.empty()
                           ? static_cast<long>(CURLUSESSL_TRY)
                           : static_cast<long>(CURLUSESSL_ALL));
      const std::string from = absl::StrCat("<", request.mail_from, ">");
      curl_easy_setopt(handle, CURLOPT_MAIL_FROM, from.c_str());
      for (const std::string& rcpt : request.mail_rcpt) {
        Append(recipients, absl::StrCat("<", rcpt, ">"));
      }
      curl_easy_setopt(handle, CURLOPT_MAIL_RCPT, recipients.get());
      exchange.upload = request.body;
      curl_easy_setopt(handle, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(handle, CURLOPT_READFUNCTION, OnUpload);
      curl_easy_setopt(handle, CURLOPT_READDATA, &exchange);
      curl_easy_setopt(handle, CURLOPT_INFILESIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
    } else {
      curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, OnHeader);
      curl_easy_setopt(handle, CURLOPT_HEADERDATA, &exchange);
      if (!request.username.empty() || !request.password.empty()) {
        curl_easy_setopt(handle, CURLOPT_HTTPAUTH,
                         static_cast<long>(CURLAUTH_BASIC));
      }
      for (const auto& [name, value] : request.headers) {
        Append(headers, absl::StrCat(name, ": ", value));
      }
      // No "Expect: 100-continue" round trip before larger bodies.
      Append(headers, "Expect:");
      curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers.get());
      if (request.method == "GET") {
        curl_easy_setopt(handle, CURLOPT_HTTPGET, 1L);
      } else {
        if (request.method != "POST") {
          curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST,
                           request.method.c_str());
        }
        curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE,
                         static_cast<curl_off_t>(request.body.size()));
        curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body.c_str());
      }
    }

    const CURLcode code = curl_easy_perform(handle);
    long status = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    result.http_status = static_cast<int>(status);
    result.body = std::move(exchange.body);
    result.retry_after_seconds =
        RetryAfterSeconds(exchange.retry_after, exchange.date);
    if (code != CURLE_OK) {
      result.error = curl_easy_strerror(code);
      if (errbuf[0] != '\0') absl::StrAppend(&result.error, ": ", errbuf);
      // Only a server's refusal counts as an answer; a failure after an
      // HTTP response or an SMTP 2xx/3xx reply is a broken exchange.
      const bool refused = request.smtp && status >= 400;
      if (!refused) result.http_status = 0;
    }
    return result;
  }

 private:
  const TlsFiles tls_;
};

}  // namespace

std::unique_ptr<Transport> NewCurlTransport(TlsFiles tls) {
  return std::make_unique<CurlTransport>(std::move(tls));
}

}  // namespace vigil
