// API tokens as vigil-server stores them: the server config keeps only the
// SHA-256 of each token, so vigilctl makes tokens and their hashes locally.
#ifndef VIGIL_CTL_TOKENS_H_
#define VIGIL_CTL_TOKENS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace vigil::ctl {

// Bytes of randomness in a generated token (256 bits).
inline constexpr size_t kTokenBytes = 32;

// Lower-case hex SHA-256 of `token`.
std::string TokenSha256Hex(std::string_view token);

// A token made of `random`: unpadded base64url ("-" and "_" instead of
// "+" and "/"), safe in headers, URLs and shells; 43 characters for 32
// bytes.
std::string EncodeToken(std::string_view random);

// The server config entry of a token with hash `sha256_hex`:
// {"name": "<name>", "role": "<role>", "sha256": "<sha256_hex>"}.
std::string TokenConfigEntry(std::string_view name, std::string_view role,
                             std::string_view sha256_hex);

// `count` bytes from /dev/urandom. kUnavailable when it cannot be read.
absl::StatusOr<std::string> ReadUrandom(size_t count);

}  // namespace vigil::ctl

#endif  // VIGIL_CTL_TOKENS_H_
