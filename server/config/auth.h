// API tokens and roles. Mutating API calls need the operator role, admin
// calls the admin role; reads need a viewer token unless anonymous reads
// are allowed. Tokens live in the config only as the lower-case hex
// SHA-256 of the token (`vigilctl hash-token` prints it).
#ifndef VIGIL_SERVER_CONFIG_AUTH_H_
#define VIGIL_SERVER_CONFIG_AUTH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace vigil {

// Viewer, operator and admin are ordered: a higher role may do everything
// a lower one may. kRemoteWrite stands apart: it may only send samples to
// POST /api/v1/write (a Prometheus' or vmagent's credential), and no other
// role may send them.
enum class Role : uint8_t { kViewer, kOperator, kAdmin, kRemoteWrite };

// "viewer", "operator", "admin", "remote_write".
std::string_view RoleName(Role role);
// Whether a holder of `has` may make a call that needs `needed`.
bool RoleAllows(Role has, Role needed);
// The role named `name`, or nullopt.
std::optional<Role> ParseRole(std::string_view name);

// One configured token.
struct ApiToken {
  std::string name;        // who holds it; shown in timelines and the audit log
  Role role = Role::kViewer;
  std::string sha256_hex;  // lower-case hex SHA-256 of the token
};

struct AuthOptions {
  std::vector<ApiToken> tokens;
  // Let requests without a token read (GET) as "anonymous" viewers.
  bool anonymous_read = true;
};

// Who made a request.
struct Identity {
  std::string name;
  Role role = Role::kViewer;
};

// Checks bearer tokens. Immutable after construction; thread-safe.
class Authenticator {
 public:
  explicit Authenticator(AuthOptions options);

  // The identity behind the Authorization header value `authorization`
  // ("Bearer <token>"), checked to hold at least `needed`. A missing header
  // passes as "anonymous" viewer when anonymous reads are allowed and
  // `needed` is kViewer. kUnauthenticated for a missing, malformed or
  // unknown token; kPermissionDenied when the role is too low.
  absl::StatusOr<Identity> Authorize(std::string_view authorization,
                                     Role needed) const;

  // Who holds the token whose lower-case hex SHA-256 is `sha256_hex`, as
  // configured now; nullopt when no token has it (any more).
  std::optional<Identity> Holder(std::string_view sha256_hex) const;

  // Takes `options` in place of the tokens and the anonymous-read setting
  // (a config reload): every later Authorize() and Holder() sees only
  // them. Safe while other threads authorize.
  void Replace(AuthOptions options);

 private:
  struct Tokens {
    bool anonymous_read = true;
    // sha256 hex -> token.
    std::map<std::string, ApiToken, std::less<>> by_hash;
  };
  static std::shared_ptr<const Tokens> MakeTokens(AuthOptions options);
  std::shared_ptr<const Tokens> tokens() const;

  mutable absl::Mutex mu_;
  std::shared_ptr<const Tokens> tokens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil

#endif  // VIGIL_SERVER_CONFIG_AUTH_H_
