#include "server/config/auth.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "notify/signing.h"

namespace vigil {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kOperator: return "operator";
    case Role::kAdmin: return "admin";
    case Role::kRemoteWrite: return "remote_write";
  }
  return "viewer";
}

bool RoleAllows(Role has, Role needed) {
  if (has == Role::kRemoteWrite || needed == Role::kRemoteWrite) return has == needed;
  return has >= needed;
}

std::optional<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kViewer, Role::kOperator, Role::kAdmin, Role::kRemoteWrite}) {
    if (RoleName(r) == name) return r;
  }
  return std::nullopt;
}

Authenticator::Authenticator(AuthOptions options)
    : tokens_(MakeTokens(std::move(options))) {}

std::shared_ptr<const Authenticator::Tokens> Authenticator::MakeTokens(AuthOptions options) {
  auto tokens = std::make_shared<Tokens>();
  tokens->anonymous_read = options.anonymous_read;
  for (ApiToken& token : options.tokens) {
    std::string key = absl::AsciiStrToLower(token.sha256_hex);
    tokens->by_hash.emplace(std::move(key), std::move(token));
  }
  return tokens;
}

std::shared_ptr<const Authenticator::Tokens> Authenticator::tokens() const {
  absl::MutexLock l(&mu_);
  return tokens_;
}

void Authenticator::Replace(AuthOptions options) {
  std::shared_ptr<const Tokens> next = MakeTokens(std::move(options));
  absl::MutexLock l(&mu_);
  tokens_.swap(next);
}

absl::StatusOr<Identity> Authenticator::Authorize(std::string_view authorization,
                                                  Role needed) const {
  const std::shared_ptr<const Tokens> tokens = this->tokens();
  if (authorization.empty()) {
    if (tokens->anonymous_read && needed == Role::kViewer)
      return Identity{"anonymous", Role::kViewer};
    return absl::UnauthenticatedError(
        "this call needs a token: send Authorization: Bearer <token>");
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (!absl::StartsWithIgnoreCase(absl::string_view(authorization.data(), authorization.size()),
                                  absl::string_view(kBearer.data(), kBearer.size())) ||
      authorization.size() == kBearer.size())
    return absl::UnauthenticatedError(
        "malformed Authorization header: expected \"Bearer <token>\"");
  const std::string hash = HexEncode(Sha256(authorization.substr(kBearer.size())));
  auto it = tokens->by_hash.find(hash);
  if (it == tokens->by_hash.end()) return absl::UnauthenticatedError("unknown token");
  const ApiToken& token = it->second;
  if (!RoleAllows(token.role, needed))
    return absl::PermissionDeniedError(absl::StrCat(
        token.name, " has the ", std::string(RoleName(token.role)),
        " role; this call needs ", std::string(RoleName(needed))));
  return Identity{token.name, token.role};
}

std::optional<Identity> Authenticator::Holder(std::string_view sha256_hex) const {
  const std::shared_ptr<const Tokens> tokens = this->tokens();
  auto it = tokens->by_hash.find(sha256_hex);
  if (it == tokens->by_hash.end()) return std::nullopt;
  return Identity{it->second.name, it->second.role};
}

}  // namespace vigil
