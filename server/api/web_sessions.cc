#include "server/api/web_sessions.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "notify/signing.h"
#include "openssl/rand.h"

namespace vigil {
namespace {

// Bytes of randomness in a session id and in a CSRF token.
constexpr int kSecretBytes = 32;

absl::StatusOr<std::string> RandomHex() {
  unsigned char bytes[kSecretBytes];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1)
    return absl::UnavailableError("no random bytes for a session");
  return HexEncode(std::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes)));
}

std::string SessionKey(std::string_view id) { return HexEncode(Sha256(id)); }

bool Mutating(std::string_view method) {
  return method != "GET" && method != "HEAD";
}

absl::Status RoleCheck(const Identity& who, Role needed) {
  if (who.role >= needed) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      who.name, " has the ", std::string(RoleName(who.role)),
      " role; this call needs ", std::string(RoleName(needed))));
}

}  // namespace

std::string_view CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t end = std::min(header.find(';'), header.size());
    std::string_view pair = header.substr(0, end);
    header.remove_prefix(std::min(end + 1, header.size()));
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name)
      return pair.substr(eq + 1);
  }
  return {};
}

RequestAuthorizer::RequestAuthorizer(const Authenticator* auth, Clock* clock,
                                     WebSessionOptions options)
    : auth_(auth), clock_(clock), options_(options) {}

void RequestAuthorizer::ForgetOldFailures(double now) {
  const double since = now - options_.sign_in_window_seconds;
  while (!all_failures_.empty() && all_failures_.front() <= since)
    all_failures_.pop_front();
  if (all_failures_.empty()) {
    failures_.clear();
    return;
  }
  for (auto it = failures_.begin(); it != failures_.end();) {
    std::deque<double>& times = it->second;
    while (!times.empty() && times.front() <= since) times.pop_front();
    if (times.empty()) {
      failures_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<NewSession> RequestAuthorizer::SignIn(std::string_view token,
                                                     std::string_view client) {
  if (auth_ == nullptr)
    return absl::FailedPreconditionError(
        "this server checks no tokens, so there is nothing to sign in to");
  {
    const double now = clock_->Now();
    std::lock_guard<std::mutex> l(mu_);
    ForgetOldFailures(now);
    auto it = failures_.find(std::string(client));
    const bool client_over =
        it != failures_.end() &&
        static_cast<int>(it->second.size()) >= options_.max_failed_sign_ins_per_client;
    const bool all_over =
        static_cast<int>(all_failures_.size()) >= options_.max_failed_sign_ins;
    if (client_over || all_over) {
      const double oldest =
          client_over ? it->second.front() : all_failures_.front();
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many failed sign-ins", client_over ? " from this address" : "",
          "; try again in ",
          static_cast<int>(oldest + options_.sign_in_window_seconds - now) + 1,
          " s"));
    }
  }
  absl::StatusOr<Identity> who =
      token.empty() ? absl::UnauthenticatedError("token is empty")
                    : auth_->Authorize(absl::StrCat("Bearer ", std::string(token)),
                                       Role::kViewer);
  if (!who.ok()) {
    const double now = clock_->Now();
    std::lock_guard<std::mutex> l(mu_);
    all_failures_.push_back(now);
    failures_[std::string(client)].push_back(now);
    return who.status();
  }
  absl::StatusOr<std::string> id = RandomHex();
  if (!id.ok()) return id.status();
  absl::StatusOr<std::string> csrf = RandomHex();
  if (!csrf.ok()) return csrf.status();

  const double now = clock_->Now();
  std::lock_guard<std::mutex> l(mu_);
  PurgeExpired(now);
  if (sessions_.size() >= options_.max_sessions && !sessions_.empty()) {
    auto oldest = std::min_element(
        sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
          return a.second.last_used < b.second.last_used;
        });
    sessions_.erase(oldest);
  }
  sessions_[SessionKey(*id)] = Session{*who, *csrf, now, now};
  return NewSession{*std::move(id), *std::move(csrf), *std::move(who)};
}

void RequestAuthorizer::SignOut(std::string_view cookie_header) {
  const std::string_view id = CookieValue(cookie_header, kSessionCookie);
  if (id.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  sessions_.erase(SessionKey(id));
}

absl::StatusOr<RequestIdentity> RequestAuthorizer::Authorize(
    const RequestCredentials& request, Role needed) {
  if (auth_ == nullptr) return RequestIdentity{{"local", Role::kAdmin}, "token", ""};
  const std::string_view id = CookieValue(request.cookie, kSessionCookie);
  if (!request.authorization.empty() || id.empty()) {
    absl::StatusOr<Identity> who = auth_->Authorize(request.authorization, needed);
    if (!who.ok()) return who.status();
    const bool anonymous = request.authorization.empty();
    return RequestIdentity{*std::move(who), anonymous ? "anonymous" : "token", ""};
  }
  const double now = clock_->Now();
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(SessionKey(id));
  if (it == sessions_.end() || Expired(it->second, now)) {
    if (it != sessions_.end()) sessions_.erase(it);
    // A page left open across a restart may still read anonymously.
    if (!Mutating(request.method)) {
      absl::StatusOr<Identity> anonymous = auth_->Authorize("", needed);
      if (anonymous.ok()) return RequestIdentity{*std::move(anonymous), "anonymous", ""};
    }
    return absl::UnauthenticatedError("session expired or unknown: sign in again");
  }
  Session& session = it->second;
  if (Mutating(request.method) &&
      !ConstantTimeEquals(request.csrf, session.csrf))
    return absl::PermissionDeniedError(absl::StrCat(
        "missing or wrong ", kCsrfHeader,
        " header: requests that change something must carry the CSRF token "
        "of the session"));
  if (absl::Status role = RoleCheck(session.who, needed); !role.ok()) return role;
  session.last_used = now;
  return RequestIdentity{session.who, "session", session.csrf};
}

size_t RequestAuthorizer::session_count() const {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.size();
}

void RequestAuthorizer::PurgeExpired(double now) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (Expired(it->second, now)) {
      sessions_.erase(it++);
    } else {
      ++it;
    }
  }
}

bool RequestAuthorizer::Expired(const Session& session, double now) const {
  return now - session.last_used > options_.idle_seconds ||
         now - session.created > options_.max_seconds;
}

}  // namespace vigil
