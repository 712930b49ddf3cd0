// Browser sessions of the web UI. Signing in with an API token creates an
// opaque session id (sent back as an HttpOnly, SameSite=Strict cookie) and a
// CSRF token that the page must echo in X-CSRF-Token on every mutating
// request, so another site can neither read the session nor act with it.
// Sessions live in memory: a server restart signs everyone out, except in
// cluster mode, where every server shares them through etcd
// (WebSessionOptions::share, AdoptSharedSessions).
//
// RequestAuthorizer is the one place that decides who made an HTTP request:
// a bearer token (scripts, vigilctl), else the session cookie (browsers),
// else anonymous reads when the config allows them.
#ifndef VIGIL_SERVER_API_WEB_SESSIONS_H_
#define VIGIL_SERVER_API_WEB_SESSIONS_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "server/config/auth.h"

namespace vigil {

// The cookie that carries the session id.
inline constexpr char kSessionCookie[] = "vigil_session";
// The header that carries the CSRF token.
inline constexpr char kCsrfHeader[] = "X-CSRF-Token";

struct WebSessionOptions {
  // A session unused this long ends.
  double idle_seconds = 12 * 3600.0;
  // A session ends this long after sign-in, used or not.
  double max_seconds = 7 * 86400.0;
  // Most live sessions; signing in beyond it ends the least recently used.
  size_t max_sessions = 10'000;
  // Failed sign-ins allowed per client address, and from all clients
  // together, per sign_in_window_seconds; more are refused before the token
  // is even checked, so tokens cannot be guessed at speed.
  int max_failed_sign_ins_per_client = 10;
  int max_failed_sign_ins = 1000;
  double sign_in_window_seconds = 60;
  // Cluster mode: the secret every server of the fleet shares
  // (cluster.peer_secret_file). A server that passes on a request of a
  // browser session to another shard's server sends the session's
  // identity signed with it (kOnBehalfOfHeader), since the session is
  // known only where it was opened. Empty: no such identity is sent, and
  // one received is refused.
  std::string peer_secret;
  // How long a signed identity is good for.
  double delegation_seconds = 60;
  // Cluster mode: receives each session this server opens or ends, as
  // (session key: SHA-256 hex of its id, record), to store where every
  // server of the fleet reads it (AdoptSharedSessions), so a browser
  // behind a load balancer stays signed in whichever server answers, and
  // after its server died. The record is to live `keep_seconds`. Called
  // without the authorizer's lock; must not block. Null: sessions are this
  // server's alone.
  std::function<void(const std::string& key, const std::string& record,
                     double keep_seconds)>
      share;
};

// The header carrying an identity signed by another server of the fleet:
// "v1.<expiry unix s>.<role>.<base64 name>.<base64 server>.<hex HMAC-SHA256
// of what precedes it, under WebSessionOptions::peer_secret>".
inline constexpr char kOnBehalfOfHeader[] = "X-Vigil-On-Behalf-Of";

// What a request presents, as raw header values ("" when absent).
struct RequestCredentials {
  std::string_view method;         // "GET", "POST", ...
  std::string_view authorization;  // Authorization header
  std::string_view cookie;         // Cookie header
  std::string_view csrf;           // X-CSRF-Token header
  std::string_view on_behalf_of;   // kOnBehalfOfHeader
};

// Who made a request and how.
struct RequestIdentity {
  Identity who;
  // "token", "session", "anonymous" or "delegated" (another server of the
  // fleet passed it on for one of its sessions).
  std::string via;
  // The session's CSRF token; empty unless via == "session".
  std::string csrf;
};

// A new session: `id` goes into the cookie, `csrf` to the page.
struct NewSession {
  std::string id;
  std::string csrf;
  Identity who;
};

// Sessions and request authorization. Thread-safe.
class RequestAuthorizer {
 public:
  // `auth` and `clock` are not owned and must outlive this.
  RequestAuthorizer(const Authenticator* auth, Clock* clock,
                    WebSessionOptions options = WebSessionOptions());

  // Checks API token `token`, presented by `client` (its address), and
  // opens a session for its holder. kUnauthenticated for an empty or
  // unknown token; kResourceExhausted when `client`, or everyone together,
  // failed too often within the window (see WebSessionOptions);
  // kUnavailable if no random bytes could be drawn.
  absl::StatusOr<NewSession> SignIn(std::string_view token,
                                    std::string_view client = "");

  // Ends the session whose cookie `cookie_header` carries. No-op when none.
  void SignOut(std::string_view cookie_header);

  // Who made the request, checked to hold at least `needed`. A bearer
  // token wins, then another server's signed identity (kOnBehalfOfHeader:
  // kUnauthenticated when it does not check out), then the cookie. A request that is not GET/HEAD and rides on
  // the session cookie must carry its CSRF token. A read with an ended
  // session passes as anonymous when anonymous reads are allowed. kUnauthenticated when no
  // valid token or session is presented (and anonymous reads do not
  // apply); kPermissionDenied when the role is too low or the CSRF token is
  // missing or wrong.
  absl::StatusOr<RequestIdentity> Authorize(const RequestCredentials& request,
                                            Role needed);

  // The kOnBehalfOfHeader value that lets the other servers of the fleet
  // take a request passed on from `server` as made by `who`, for
  // delegation_seconds; "" when no peer secret is set.
  std::string Delegate(const Identity& who, std::string_view server) const;

  // Live sessions (expired ones are dropped lazily).
  size_t session_count() const;

  // Cluster mode: every session record the fleet's servers shared (all of
  // them each time, as (key, record) from WebSessionOptions::share). A
  // cookie this server does not know is then taken if the fleet opened
  // it and has not ended it (its idle time counts from its first use
  // here); one ended elsewhere ends here too. Malformed records are
  // skipped (counted in the return value). The records are as trusted as
  // etcd: docs/SCALING.md "Securing etcd".
  int AdoptSharedSessions(const std::vector<std::pair<std::string, std::string>>& records);

 private:
  struct Session {
    Identity who;
    std::string csrf;
    double created = 0;
    double last_used = 0;
    // Lower-case hex SHA-256 of the token that signed in: the session
    // ends once no configured token has it (a reload removed it), and
    // takes the token's role as configured now. Empty in records shared
    // by older servers (not checked).
    std::string token_sha256;
  };
  // The identity another server signed (kOnBehalfOfHeader `header`).
  absl::StatusOr<RequestIdentity> Delegated(std::string_view header, Role needed) const;
  // Drops expired sessions (mu_ held).
  void PurgeExpired(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Expired(const Session& session, double now) const;
  // Drops failures older than the window (mu_ held).
  void ForgetOldFailures(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Authenticator* const auth_;
  Clock* const clock_;
  const WebSessionOptions options_;
  mutable std::mutex mu_;
  // SHA-256 hex of the session id -> session: a dump of memory does not
  // hand out live cookies.
  absl::flat_hash_map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // Cluster mode: sessions other servers opened (AdoptSharedSessions), by
  // the same key; taken into sessions_ at their first use here.
  absl::flat_hash_map<std::string, Session> shared_ ABSL_GUARDED_BY(mu_);
  // Times of failed sign-ins within the window, oldest first: per client,
  // and of everyone.
  absl::flat_hash_map<std::string, std::deque<double>> failures_
      ABSL_GUARDED_BY(mu_);
  std::deque<double> all_failures_ ABSL_GUARDED_BY(mu_);
};

// The value of cookie `name` in Cookie header `header`, or "" when absent.
std::string_view CookieValue(std::string_view header, std::string_view name);

}  // namespace vigil

#endif  // VIGIL_SERVER_API_WEB_SESSIONS_H_
