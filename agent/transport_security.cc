#include "agent/transport_security.h"

#include <grpcpp/security/credentials.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/tls_files.h"

namespace vigil::agent {
namespace {

// The token in `path`, without surrounding whitespace. kNotFound if the
// file cannot be read; kInvalidArgument if the token is empty or holds a
// character that may not appear in gRPC metadata (or a space).
absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the node token"));
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the node token is empty"));
  for (char c : token) {
    if (c <= ' ' || c > '~')
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": the node token must be one word of printable ASCII"));
  }
  return token;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TransportSecurity>>
TransportSecurity::Create(AgentTransportConfig config, Clock* clock) {
  if (clock == nullptr) return absl::InvalidArgumentError("no clock");
  const bool any_tls = !config.ca_file.empty() || !config.cert_file.empty() ||
                       !config.key_file.empty() || !config.server_name.empty();
  if (config.insecure && any_tls)
    return absl::InvalidArgumentError(
        "transport: insecure (plaintext) cannot be combined with TLS "
        "settings (ca_file, cert_file, key_file, server_name)");
  if (config.cert_file.empty() != config.key_file.empty())
    return absl::InvalidArgumentError(
        "transport: cert_file and key_file go together (the client "
        "certificate and its private key)");
  std::shared_ptr<const TransportSecurity> security(
      new TransportSecurity(std::move(config), clock));
  absl::StatusOr<ConnectionSecurity> first = security->Connect();
  if (!first.ok()) return first.status();
  return security;
}

absl::StatusOr<ConnectionSecurity> TransportSecurity::Connect() const {
  ConnectionSecurity out;
  if (!config_.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadToken(config_.token_file);
    if (!token.ok()) return token.status();
    out.authorization = absl::StrCat("Bearer ", *token);
  }
  if (config_.insecure) {
    out.credentials = grpc::InsecureChannelCredentials();
    return out;
  }
  const double now = clock_->Now();
  grpc::SslCredentialsOptions ssl;
  if (!config_.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadCaBundleFile(config_.ca_file, now);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!config_.cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadCertificateFile(config_.cert_file, now);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPrivateKeyFile(config_.key_file, *cert, config_.cert_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  out.credentials = grpc::SslCredentials(ssl);
  out.server_name_override = config_.server_name;
  return out;
}

std::string TransportSecurity::Describe() const {
  std::string text;
  if (config_.insecure) {
    text = "PLAINTEXT";
  } else {
    text = absl::StrCat(
        config_.cert_file.empty() ? "TLS" : "mTLS", " (CA ",
        config_.ca_file.empty() ? "system roots" : config_.ca_file);
    if (!config_.server_name.empty())
      absl::StrAppend(&text, ", server name ", config_.server_name);
    text += ")";
  }
  if (!config_.token_file.empty()) text += ", node token";
  return text;
}

}  // namespace vigil::agent
