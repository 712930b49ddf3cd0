// JSON replies shared by the HTTP handlers of vigil-server.
#ifndef VIGIL_SERVER_API_HTTP_REPLY_H_
#define VIGIL_SERVER_API_HTTP_REPLY_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/api/web_sessions.h"

namespace vigil {

// Sets `status` and `body` (application/json) on `res`.
inline void Reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

// Replies {"error": what}.
inline void ReplyError(httplib::Response& res, int status, const std::string& what) {
  Reply(res, status, nlohmann::json{{"error", what}});
}

// Deepest nesting a request body may have; no route needs more than 3.
inline constexpr int kMaxBodyDepth = 32;

// Parses a request body. Returns a discarded value (is_discarded()) when it
// is not JSON or nests deeper than kMaxBodyDepth: the deeper parts are
// dropped as they are read, never built.
inline nlohmann::json ParseBody(std::string_view body) {
  bool too_deep = false;
  nlohmann::json parsed = nlohmann::json::parse(
      body,
      [&too_deep](int depth, nlohmann::json::parse_event_t,
                  nlohmann::json&) {
        if (depth > kMaxBodyDepth) too_deep = true;
        return !too_deep;
      },
      /*allow_exceptions=*/false);
  return too_deep ? nlohmann::json(nlohmann::json::value_t::discarded)
                  : parsed;
}

// The HTTP status of a failed call: 400 invalid argument, 401
// unauthenticated, 403 permission denied, 404 not found, 409 failed
// precondition / already exists, 503 unavailable, else 500.
inline int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

// The credentials `req` presents; views into `req`.
inline RequestCredentials CredentialsOf(const httplib::Request& req) {
  auto header = [&req](const char* name) -> std::string_view {
    auto it = req.headers.find(name);
    return it == req.headers.end() ? std::string_view() : std::string_view(it->second);
  };
  return RequestCredentials{req.method, header("Authorization"), header("Cookie"),
                            header(kCsrfHeader), header(kOnBehalfOfHeader)};
}

// Replies the error of a failed call with its HTTP status.
inline void ReplyStatus(httplib::Response& res, const absl::Status& status) {
  ReplyError(res, HttpStatusOf(status), std::string(status.message()));
}

}  // namespace vigil

#endif  // VIGIL_SERVER_API_HTTP_REPLY_H_
