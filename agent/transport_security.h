// How vigil-agent secures its connection to vigil-server: TLS from PEM
// files, normally with a client certificate (mTLS), or plaintext only when
// asked for explicitly; plus an optional node token sent with every stream
// as `authorization: Bearer <token>`.
#ifndef VIGIL_AGENT_TRANSPORT_SECURITY_H_
#define VIGIL_AGENT_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "agent/agent_config.h"
#include "common/clock.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace vigil::agent {

// What one connection attempt uses.
struct ConnectionSecurity {
  // TLS or, only when the options said insecure, plaintext credentials.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The name the server's certificate must carry (AgentTransportConfig::
  // server_name); "" = the host of the server address.
  std::string server_name_override;
  // "Bearer <token>" for the authorization metadata, or "" for none.
  std::string authorization;
};

// Makes the ConnectionSecurity of every (re)connection from the transport
// part of the agent's config (agent/agent_config.h), reading the files
// afresh each time, so renewed certificates and a rotated token apply at
// the next reconnect without restarting the agent. Immutable; thread-safe.
class TransportSecurity {
 public:
  // Checks `config` and reads every file once, so a CLI can report
  // problems at start. kInvalidArgument for insecure combined with TLS
  // files, a certificate without its key (or the reverse), a bad PEM file,
  // a certificate not valid now, a key of another certificate, or an empty
  // token or one with characters other than printable ASCII without
  // spaces; kNotFound for an unreadable file. Errors name the file. `clock`
  // (not owned; must outlive the result) dates the validity checks.
  static absl::StatusOr<std::shared_ptr<const TransportSecurity>> Create(
      AgentTransportConfig config, Clock* clock = RealClock());

  // The security of a new connection, with the files re-read. Fails as
  // Create does (e.g. a certificate replaced by a bad one).
  absl::StatusOr<ConnectionSecurity> Connect() const;

  // A short description for the agent's start-up line, e.g. "mTLS (CA
  // /etc/vigil/tls/ca.crt), node token" or "PLAINTEXT".
  std::string Describe() const;

  const AgentTransportConfig& config() const { return config_; }

 private:
  TransportSecurity(AgentTransportConfig config, Clock* clock)
      : config_(std::move(config)), clock_(clock) {}

  const AgentTransportConfig config_;
  Clock* const clock_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_TRANSPORT_SECURITY_H_
