#include "server/api/web_sessions.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
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
  if (RoleAllows(who.role, needed)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      who.name, " has the ", std::string(RoleName(who.role)),
      " role; this call needs ", std::string(RoleName(needed))));
}

// What kOnBehalfOfHeader signs: "v1.<expiry>.<role>.<name>.<server>",
// the last two web-safe base64.
std::string DelegationText(int64_t expiry, Role role, std::string_view name,
                           std::string_view server) {
  return absl::StrCat("v1.", expiry, ".", std::string(RoleName(role)), ".",
                      absl::WebSafeBase64Escape(std::string(name)), ".",
                      absl::WebSafeBase64Escape(std::string(server)));
}

// A shared session record: {"name", "role", "csrf", "created", "token"
// (the SHA-256 hex of the token that signed in)}, or {"ended": true} once
// signed out.
std::string SessionRecord(const Identity& who, std::string_view csrf, double created,
                          std::string_view token_sha256) {
  return nlohmann::json{{"name", who.name},
                        {"role", std::string(RoleName(who.role))},
                        {"csrf", std::string(csrf)},
                        {"created", created},
                        {"token", std::string(token_sha256)}}
      .dump();
}
constexpr char kEndedRecord[] = R"({"ended":true})";

bool IsHex(std::string_view s, size_t size) {
  if (s.size() != size) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
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
  const std::string key = SessionKey(*id);
  const std::string token_sha256 = HexEncode(Sha256(token));
  {
    std::lock_guard<std::mutex> l(mu_);
    PurgeExpired(now);
    if (sessions_.size() >= options_.max_sessions && !sessions_.empty()) {
      auto oldest = std::min_element(
          sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
            return a.second.last_used < b.second.last_used;
          });
      sessions_.erase(oldest);
    }
    sessions_[key] = Session{*who, *csrf, now, now, token_sha256};
  }
  if (options_.share)
    options_.share(key, SessionRecord(*who, *csrf, now, token_sha256), options_.max_seconds);
  return NewSession{*std::move(id), *std::move(csrf), *std::move(who)};
}

void RequestAuthorizer::SignOut(std::string_view cookie_header) {
  const std::string_view id = CookieValue(cookie_header, kSessionCookie);
  if (id.empty()) return;
  const std::string key = SessionKey(id);
  {
    std::lock_guard<std::mutex> l(mu_);
    sessions_.erase(key);
    shared_.erase(key);
  }
  // The fleet forgets it too; the mark outlives any copy of the record.
  if (options_.share) options_.share(key, kEndedRecord, options_.max_seconds);
}

int RequestAuthorizer::AdoptSharedSessions(
    const std::vector<std::pair<std::string, std::string>>& records) {
  absl::flat_hash_map<std::string, Session> shared;
  std::vector<std::string> ended;
  int malformed = 0;
  for (const auto& [key, text] : records) {
    const nlohmann::json r = nlohmann::json::parse(text, nullptr, false);
    if (!IsHex(key, 64) || !r.is_object()) {
      ++malformed;
      continue;
    }
    if (r.value("ended", false)) {
      ended.push_back(key);
      continue;
    }
    const auto name = r.find("name");
    const auto role = r.find("role");
    const auto csrf = r.find("csrf");
    const auto created = r.find("created");
    const auto token = r.find("token");
    std::optional<Role> parsed;
    if (role != r.end() && role->is_string()) parsed = ParseRole(role->get<std::string>());
    if (name == r.end() || !name->is_string() || name->get<std::string>().empty() ||
        !parsed.has_value() || csrf == r.end() || !csrf->is_string() ||
        !IsHex(csrf->get<std::string>(), 2 * kSecretBytes) || created == r.end() ||
        !created->is_number() ||
        (token != r.end() && (!token->is_string() || !IsHex(token->get<std::string>(), 64)))) {
      ++malformed;
      continue;
    }
    const double at = created->get<double>();
    shared[key] = Session{Identity{name->get<std::string>(), *parsed},
                          csrf->get<std::string>(), at, at,
                          token != r.end() ? token->get<std::string>() : std::string()};
  }
  std::lock_guard<std::mutex> l(mu_);
  for (const std::string& key : ended) {
    sessions_.erase(key);
    shared.erase(key);
  }
  shared_ = std::move(shared);
  return malformed;
}

std::string RequestAuthorizer::Delegate(const Identity& who, std::string_view server) const {
  if (options_.peer_secret.empty()) return "";
  const auto expiry = static_cast<int64_t>(clock_->Now() + options_.delegation_seconds);
  const std::string text = DelegationText(expiry, who.role, who.name, server);
  return absl::StrCat(text, ".", HexEncode(HmacSha256(options_.peer_secret, text)));
}

absl::StatusOr<RequestIdentity> RequestAuthorizer::Delegated(std::string_view header,
                                                             Role needed) const {
  if (options_.peer_secret.empty())
    return absl::UnauthenticatedError(absl::StrCat(
        kOnBehalfOfHeader, ": a request passed on for another server's session, but this "
        "server has no cluster.peer_secret_file to check it with"));
  const std::vector<std::string> parts = absl::StrSplit(std::string(header), '.');
  auto refuse = [](const char* why) {
    return absl::UnauthenticatedError(absl::StrCat(kOnBehalfOfHeader, ": ", why));
  };
  if (parts.size() != 6 || parts[0] != "v1") return refuse("not a v1 signed identity");
  int64_t expiry = 0;
  std::optional<Role> role = ParseRole(parts[2]);
  std::string name, server;
  if (!absl::SimpleAtoi(parts[1], &expiry) || !role.has_value() ||
      !absl::WebSafeBase64Unescape(parts[3], &name) ||
      !absl::WebSafeBase64Unescape(parts[4], &server) || name.empty())
    return refuse("malformed");
  const std::string text = DelegationText(expiry, *role, name, server);
  if (!ConstantTimeEquals(HexEncode(HmacSha256(options_.peer_secret, text)), parts[5]))
    return refuse("the signature does not match (a different cluster.peer_secret_file?)");
  const double now = clock_->Now();
  // Clocks of two servers may differ a little; a longer life was not made
  // by a server of ours.
  if (expiry < now || expiry > now + 2 * options_.delegation_seconds)
    return refuse("expired, or dated too far ahead (are the servers' clocks in sync?)");
  Identity who{absl::StrCat(name, " (via ", server, ")"), *role};
  if (absl::Status role_ok = RoleCheck(who, needed); !role_ok.ok()) return role_ok;
  return RequestIdentity{std::move(who), "delegated", ""};
}

absl::StatusOr<RequestIdentity> RequestAuthorizer::Authorize(
    const RequestCredentials& request, Role needed) {
  if (auth_ == nullptr) return RequestIdentity{{"local", Role::kAdmin}, "token", ""};
  // A bearer token wins; then another server's signed identity; then the
  // session cookie.
  if (request.authorization.empty() && !request.on_behalf_of.empty())
    return Delegated(request.on_behalf_of, needed);
  const std::string_view id = CookieValue(request.cookie, kSessionCookie);
  if (!request.authorization.empty() || id.empty()) {
    absl::StatusOr<Identity> who = auth_->Authorize(request.authorization, needed);
    if (!who.ok()) return who.status();
    const bool anonymous = request.authorization.empty();
    return RequestIdentity{*std::move(who), anonymous ? "anonymous" : "token", ""};
  }
  const double now = clock_->Now();
  const std::string key = SessionKey(id);
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) {
    // Opened on another server of the fleet: taken at its first use here.
    if (auto shared = shared_.find(key); shared != shared_.end()) {
      Session adopted = shared->second;
      adopted.last_used = now;
      if (!Expired(adopted, now)) it = sessions_.emplace(key, std::move(adopted)).first;
    }
  }
  // A session ends when it idles or ages out, and when the token that
  // opened it is no longer configured (a reload revoked it); otherwise it
  // carries the token's role as configured now.
  std::optional<Identity> holder;
  bool revoked = false;
  if (it != sessions_.end() && !it->second.token_sha256.empty()) {
    holder = auth_->Holder(it->second.token_sha256);
    revoked = !holder.has_value();
  }
  if (it == sessions_.end() || Expired(it->second, now) || revoked) {
    if (it != sessions_.end()) sessions_.erase(it);
    // A page left open across a restart may still read anonymously.
    if (!Mutating(request.method)) {
      absl::StatusOr<Identity> anonymous = auth_->Authorize("", needed);
      if (anonymous.ok()) return RequestIdentity{*std::move(anonymous), "anonymous", ""};
    }
    return absl::UnauthenticatedError(
        revoked ? "the token this session signed in with is no longer configured: sign in again"
                : "session expired or unknown: sign in again");
  }
  Session& session = it->second;
  if (holder.has_value()) session.who = *std::move(holder);
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
