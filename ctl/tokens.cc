#include "ctl/tokens.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "notify/signing.h"

namespace vigil::ctl {

std::string TokenSha256Hex(std::string_view token) {
  return HexEncode(Sha256(token));
}

std::string EncodeToken(std::string_view random) {
  std::string token = Base64Encode(random);
  while (!token.empty() && token.back() == '=') token.pop_back();
  for (char& c : token) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return token;
}

std::string TokenConfigEntry(std::string_view name, std::string_view role,
                             std::string_view sha256_hex) {
  // Quoted and escaped by nlohmann; laid out by hand for readability.
  const auto quote = [](std::string_view text) {
    return nlohmann::json(std::string(text)).dump();
  };
  return absl::StrCat("{\"name\": ", quote(name), ", \"role\": ", quote(role),
                      ", \"sha256\": ", quote(sha256_hex), "}");
}

absl::StatusOr<std::string> ReadUrandom(size_t count) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string bytes(count, '\0');
  if (!urandom.read(bytes.data(), static_cast<std::streamsize>(count))) {
    return absl::UnavailableError(
        absl::StrCat("cannot read /dev/urandom: ", std::strerror(errno)));
  }
  return bytes;
}

}  // namespace vigil::ctl
