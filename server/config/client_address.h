// Which address an HTTP request comes from when the server sits behind
// reverse proxies (nginx, a load balancer): the per-client request cap and
// the sign-in rate limit count clients, not the proxy in front of them.
//
// Only a connection from a trusted proxy may name its client, through the
// X-Forwarded-For header; from anyone else the header is ignored, so a
// client cannot dodge its cap by inventing addresses. Pure: no I/O.
#ifndef VIGIL_SERVER_CONFIG_CLIENT_ADDRESS_H_
#define VIGIL_SERVER_CONFIG_CLIENT_ADDRESS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil {

// A set of addresses and networks (IPv4 and IPv6, in CIDR notation or as
// single addresses) whose X-Forwarded-For headers are believed.
class TrustedProxies {
 public:
  // No proxy is trusted: every request's address is its connection's.
  TrustedProxies() = default;

  // Parses entries such as "127.0.0.1", "10.0.0.0/8", "::1", "fd00::/8".
  // kInvalidArgument naming the entry when one is not an address or its
  // prefix length is out of range.
  static absl::StatusOr<TrustedProxies> Parse(const std::vector<std::string>& entries);

  // True when `address` (as a connection reports it) is one of the trusted
  // proxies. Unparseable addresses are not trusted.
  bool Contains(std::string_view address) const;

  // The client a request stands for. `peer` is the connection's address;
  // `forwarded_for` is its X-Forwarded-For header ("" when absent). When the
  // peer is trusted, the header is read from the right (each proxy appends
  // the address it received from) and the first address that is not a
  // trusted proxy is the client; if every entry is trusted, the leftmost.
  // Anything else (an untrusted peer, no header, a malformed last hop)
  // gives `peer`.
  std::string ClientOf(std::string_view peer, std::string_view forwarded_for) const;

 private:
  struct Network {
    std::array<uint8_t, 16> bytes;  // IPv4 as IPv4-mapped IPv6
    int prefix_bits;                // of the 128
  };
  std::vector<Network> networks_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_CONFIG_CLIENT_ADDRESS_H_
