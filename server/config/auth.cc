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
    : anonymous_read_(options.anonymous_read) {
  for (ApiToken& token : options.tokens) {
    std::string key = absl::AsciiStrToLower(token.sha256_hex);
    by_hash_.emplace(std::move(key), std::move(token));
  }
}

absl::StatusOr<Identity> Authenticator::Authorize(std::string_view authorization,
                                                  Role needed) const {
  if (authorization.empty()) {
    if (anonymous_read_ && needed == Role::kViewer)
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
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return absl::UnauthenticatedError("unknown token");
  const ApiToken& token = it->second;
  if (!RoleAllows(token.role, needed))
    return absl::PermissionDeniedError(absl::StrCat(
        token.name, " has the ", std::string(RoleName(token.role)),
        " role; this call needs ", std::string(RoleName(needed))));
  return Identity{token.name, token.role};
}

}  // namespace vigil
