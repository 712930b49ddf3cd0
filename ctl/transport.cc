// httplib.h is costly to compile and lives in this file alone.
#include "ctl/transport.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace vigil::ctl {
namespace {

// Why no answer came, in words an operator can act on.
std::string DescribeError(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "connection refused or host unreachable; is vigil-server "
             "running there?";
    case httplib::Error::ConnectionTimeout:
      return "timed out connecting";
    case httplib::Error::Read:
      return "no answer (read failed or timed out)";
    case httplib::Error::Write:
      return "could not send the request";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the CA certificates (--ca-cert)";
    case httplib::Error::SSLServerVerification:
      return "the server's certificate is not trusted (--ca-cert)";
    default:
      return absl::StrCat("request failed (", httplib::to_string(error), ")");
  }
}

class HttplibTransport : public HttpTransport {
 public:
  HttplibTransport(const TransportOptions& options, std::string origin,
                   std::string prefix)
      : base_url_(options.base_url),
        prefix_(std::move(prefix)),
        client_(origin) {
    const auto seconds = static_cast<time_t>(options.timeout_seconds);
    const auto micros =
        static_cast<time_t>(std::fmod(options.timeout_seconds, 1.0) * 1e6);
    client_.set_connection_timeout(seconds, micros);
    client_.set_read_timeout(seconds, micros);
    client_.set_write_timeout(seconds, micros);
    // Targets arrive encoded; httplib must not encode them again.
    client_.set_url_encode(false);
    if (!options.ca_cert_file.empty()) {
      client_.set_ca_cert_path(options.ca_cert_file);
    }
  }

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    httplib::Request out;
    out.method = request.method;
    out.path = prefix_ + request.target;
    out.headers.emplace("Accept", "application/json");
    out.headers.emplace("User-Agent", "vigilctl");
    if (!request.bearer_token.empty()) {
      out.headers.emplace("Authorization",
                          absl::StrCat("Bearer ", request.bearer_token));
    }
    if (!request.body.empty()) {
      out.headers.emplace("Content-Type", "application/json");
      out.body = request.body;
    }
    httplib::Result result = client_.send(out);
    if (!result) {
      return absl::UnavailableError(absl::StrCat(
          "cannot reach ", base_url_, ": ", DescribeError(result.error())));
    }
    return HttpResponse{result->status, result->body};
  }

 private:
  const std::string base_url_;
  const std::string prefix_;
  httplib::Client client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpTransport>> NewHttpTransport(
    const TransportOptions& options) {
  const std::string& url = options.base_url;
  const auto bad = [&url](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad server URL \"", url, "\": ", std::string(why),
                     " (want http://host[:port] or https://host[:port])"));
  };
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return bad("no http:// or https://");
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return bad(absl::StrCat("unsupported scheme \"", scheme, "\""));
  }
  const size_t authority_start = scheme_end + 3;
  size_t path_start = url.find('/', authority_start);
  if (path_start == std::string::npos) path_start = url.size();
  const std::string authority =
      url.substr(authority_start, path_start - authority_start);
  if (authority.empty()) return bad("no host");
  if (authority.find_first_of("@?# ") != std::string::npos) {
    return bad("unexpected character in host");
  }
  size_t host_end = std::min(authority.find(':'), authority.size());
  if (authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unclosed [ in host");
    host_end = close + 1;
  }
  if (host_end == 0 || authority.substr(0, host_end) == "[]") {
    return bad("no host");
  }
  if (host_end < authority.size()) {
    const std::string port = authority.substr(host_end);
    int number = 0;
    const bool digits =
        port.size() > 1 && port[0] == ':' &&
        port.find_first_not_of("0123456789", 1) == std::string::npos;
    if (!digits || !absl::SimpleAtoi(port.substr(1), &number) || number < 1 ||
        number > 65535) {
      return bad(absl::StrCat("bad port \"", port, "\""));
    }
  }
  std::string prefix = url.substr(path_start);
  if (prefix.find_first_of("?# ") != std::string::npos) {
    return bad("a query or fragment has no place in it");
  }
  while (absl::EndsWith(prefix, "/")) prefix.pop_back();
  const std::string origin = absl::StrCat(scheme, "://", authority);
  auto transport =
      std::make_unique<HttplibTransport>(options, origin, std::move(prefix));
  return transport;
}

}  // namespace vigil::ctl
