#include "server/config/client_address.h"

#include <arpa/inet.h>

#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace vigil {
namespace {

using Bytes = std::array<uint8_t, 16>;

// An address with an optional port as proxies write it: "10.0.0.1",
// "10.0.0.1:443", "::1", "[::1]", "[::1]:443". IPv4 comes back as an
// IPv4-mapped IPv6 address, so "::ffff:10.0.0.1" and "10.0.0.1" are one.
std::optional<Bytes> ParseAddress(std::string_view text) {
  const absl::string_view stripped =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  text = std::string_view(stripped.data(), stripped.size());
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    text = text.substr(1, close - 1);
  } else if (text.find(':') != std::string_view::npos &&
             text.find(':') == text.rfind(':')) {
    text = text.substr(0, text.find(':'));  // IPv4 with a port
  }
  if (text.empty() || text.size() > 64) return std::nullopt;
  const std::string s(text);
  Bytes b{};
  in_addr v4;
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    b[10] = b[11] = 0xff;
    std::memcpy(&b[12], &v4, 4);
    return b;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(b.data(), &v6, 16);
    return b;
  }
  return std::nullopt;
}

bool IsMappedV4(const Bytes& b) {
  for (int i = 0; i < 10; ++i)
    if (b[i] != 0) return false;
  return b[10] == 0xff && b[11] == 0xff;
}

// One canonical spelling per address, so one client is one key.
std::string Format(const Bytes& b) {
  char buf[INET6_ADDRSTRLEN];
  if (IsMappedV4(b)) {
    inet_ntop(AF_INET, &b[12], buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, b.data(), buf, sizeof buf);
  }
  return buf;
}

}  // namespace

absl::StatusOr<TrustedProxies> TrustedProxies::Parse(
    const std::vector<std::string>& entries) {
  TrustedProxies proxies;
  for (const std::string& entry : entries) {
    std::string_view address = entry;
    const bool v4 = address.find(':') == std::string_view::npos;
    const int max_bits = v4 ? 32 : 128;
    int prefix = max_bits;
    if (const size_t slash = entry.find('/'); slash != std::string::npos) {
      address = std::string_view(entry).substr(0, slash);
      if (!absl::SimpleAtoi(absl::string_view(entry).substr(slash + 1), &prefix) || prefix < 0)
        return absl::InvalidArgumentError(
            absl::StrCat("trusted proxy \"", entry, "\": bad prefix length"));
    }
    // Only a bare address or a CIDR: no ports, no brackets.
    std::optional<Bytes> bytes;
    if (address.find_first_of("[]") == std::string_view::npos &&
        (address.find(':') == std::string_view::npos ||
         address.find(':') != address.rfind(':'))) {
      bytes = ParseAddress(address);
    }
    if (!bytes)
      return absl::InvalidArgumentError(absl::StrCat(
          "trusted proxy \"", entry, "\": not an IPv4 or IPv6 address or network"));
    if (prefix > max_bits)
      return absl::InvalidArgumentError(absl::StrCat(
          "trusted proxy \"", entry, "\": prefix length over ", max_bits));
    proxies.networks_.push_back({*bytes, v4 ? prefix + 96 : prefix});
  }
  return proxies;
}

bool TrustedProxies::Contains(std::string_view address) const {
  const std::optional<Bytes> b = ParseAddress(address);
  if (!b) return false;
  for (const Network& n : networks_) {
    int bits = n.prefix_bits;
    bool match = true;
    for (int i = 0; i < 16 && bits > 0 && match; ++i, bits -= 8) {
      const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
      match = ((*b)[i] & mask) == (n.bytes[i] & mask);
    }
    if (match) return true;
  }
  return false;
}

std::string TrustedProxies::ClientOf(std::string_view peer,
                                     std::string_view forwarded_for) const {
  if (networks_.empty() || forwarded_for.empty() || !Contains(peer))
    return std::string(peer);
  const std::vector<absl::string_view> hops =
      absl::StrSplit(absl::string_view(forwarded_for.data(), forwarded_for.size()), ',');
  std::string client(peer);
  for (auto hop = hops.rbegin(); hop != hops.rend(); ++hop) {
    const std::optional<Bytes> b = ParseAddress(std::string_view(hop->data(), hop->size()));
    // Beyond a malformed hop nothing is believed: the nearest trusted
    // proxy stands for the client.
    if (!b) return client;
    client = Format(*b);
    if (!Contains(client)) return client;
  }
  return client;  // every hop is a trusted proxy: the leftmost
}

}  // namespace vigil
