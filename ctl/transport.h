// The HTTP seam of vigilctl: commands build an HttpRequest and hand it to
// an HttpTransport, so tests can swap the network for a fake. The real
// transport (cpp-httplib, http:// and https://) is the only code of ctl/
// that includes httplib.h.
#ifndef VIGIL_CTL_TRANSPORT_H_
#define VIGIL_CTL_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace vigil::ctl {

// One API call.
struct HttpRequest {
  std::string method;  // "GET", "POST" or "DELETE"
  // Path under the server's base URL, with any query already encoded:
  // "/api/v1/incidents?state=firing".
  std::string target;
  std::string body;  // JSON text; empty: no body
  // Sent as "Authorization: Bearer <token>"; empty: no Authorization header.
  std::string bearer_token;
};

// What the server answered (any status, 2xx or not).
struct HttpResponse {
  int status = 0;
  std::string body;
};

// Sends requests to one server. Implementations need not be thread-safe.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // The server's answer to `request`, whatever its status. kUnavailable
  // when no answer came (connection refused, timeout, TLS failure), with a
  // message naming the server.
  virtual absl::StatusOr<HttpResponse> Send(const HttpRequest& request) = 0;
};

// How to reach the server.
struct TransportOptions {
  // "http://host[:port][/prefix]" or "https://...". Required.
  std::string base_url;
  // PEM file of CAs that verify an https:// server; empty: the system's.
  std::string ca_cert_file;
  // Limit for connecting and for each read and write. Default 10 s.
  double timeout_seconds = 10;
};

// A cpp-httplib transport to `options.base_url`. kInvalidArgument when the
// URL is not http(s)://host[:port][/prefix].
absl::StatusOr<std::unique_ptr<HttpTransport>> NewHttpTransport(
    const TransportOptions& options);

}  // namespace vigil::ctl

#endif  // VIGIL_CTL_TRANSPORT_H_
