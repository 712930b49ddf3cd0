#include "server/ingest/grpc_security.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/tls_files.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "notify/signing.h"

namespace vigil {
namespace {

constexpr std::string_view kBearer = "Bearer ";

bool IsSha256Hex(std::string_view hex) {
  return hex.size() == 64 &&
         hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
}

// The values of auth-context property `name`.
std::vector<std::string> Property(const grpc::ServerContextBase& context,
                                  const char* name) {
  std::vector<std::string> out;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return out;
  for (const grpc::string_ref& v : auth->FindPropertyValues(name))
    out.emplace_back(v.data(), v.size());
  return out;
}

// The stamp of a file from its stat.
template <typename Stamp>
Stamp StampOf(const struct stat& st) {
  return Stamp{static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                   st.st_mtim.tv_nsec,
               static_cast<uint64_t>(st.st_size),
               static_cast<uint64_t>(st.st_ino)};
}

StreamRefusal Refuse(RejectReason reason, grpc::StatusCode code,
                     std::string message) {
  return StreamRefusal{reason, grpc::Status(code, std::move(message))};
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
IngestServerCredentials(const ServerOptions& options, double now) {
  if (options.grpc_insecure) return grpc::InsecureServerCredentials();
  if (!options.grpc_tls.has_value())
    return absl::FailedPreconditionError(
        "grpc_tls: required unless grpc_insecure is set");
  const GrpcTlsOptions& tls = *options.grpc_tls;
  // gRPC reads the files itself, but reports bad ones only in its own log
  // when a handshake fails; check them here to refuse to start instead.
  absl::StatusOr<std::string> cert = ReadCertificateFile(tls.cert_file, now);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      ReadPrivateKeyFile(tls.key_file, *cert, tls.cert_file);
  if (!key.ok()) return key.status();
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadCaBundleFile(tls.client_ca_file, now);
    if (!ca.ok()) return ca.status();
  }
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          tls.key_file, tls.cert_file, tls.client_ca_file,
          static_cast<unsigned int>(tls.reload_seconds));
  grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
  tls_options.watch_identity_key_cert_pairs();
  if (!tls.client_ca_file.empty()) tls_options.watch_root_certs();
  tls_options.set_cert_request_type(
      tls.require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
      : tls.client_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(tls_options);
}

absl::StatusOr<std::unique_ptr<StreamAuthenticator>>
StreamAuthenticator::Create(const NodeTokenOptions& tokens,
                            NodeIdentity identity) {
  std::unique_ptr<StreamAuthenticator> auth(
      new StreamAuthenticator(tokens, identity));
  FileStamp stamp;
  absl::StatusOr<std::shared_ptr<const Tokens>> loaded = auth->Load(&stamp);
  if (!loaded.ok()) return loaded.status();
  std::lock_guard<std::mutex> l(auth->mu_);
  auth->tokens_ = *std::move(loaded);
  auth->stamp_ = stamp;
  return auth;
}

StreamAuthenticator::StreamAuthenticator(NodeTokenOptions options,
                                         NodeIdentity identity)
    : options_(std::move(options)), identity_(identity) {}

absl::StatusOr<std::shared_ptr<const StreamAuthenticator::Tokens>>
StreamAuthenticator::Load(FileStamp* stamp) const {
  auto tokens = std::make_shared<Tokens>();
  for (const auto& [node, hash] : options_.sha256)
    tokens->by_node[node] = absl::AsciiStrToLower(hash);
  if (!options_.file.empty()) {
    const std::string& path = options_.file;
    struct stat st;
    std::ifstream in(path);
    if (!in || stat(path.c_str(), &st) != 0)
      return absl::NotFoundError(
          absl::StrCat(path, ": cannot read the node token file"));
    *stamp = StampOf<FileStamp>(st);
    std::vector<std::string> errors;
    std::map<std::string, int> line_of;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::string_view text(line);
      text = text.substr(0, text.find('#'));
      std::vector<std::string> fields =
          absl::StrSplit(absl::string_view(text.data(), text.size()),
                         absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
      if (fields.empty()) continue;
      const std::string where = absl::StrCat(path, ":", n, ": ");
      if (fields.size() != 2 || !IsSha256Hex(fields[1])) {
        errors.push_back(absl::StrCat(
            where,
            "expected \"NODE SHA256HEX\" (the node, or * for every "
            "node, and the 64 hex digits of its token's SHA-256)"));
        continue;
      }
      std::string node(fields[0]);
      if (auto [it, fresh] = line_of.emplace(node, n); !fresh) {
        errors.push_back(absl::StrCat(where, "node ", node,
                                      " is listed twice (also line ",
                                      it->second, ")"));
      } else if (options_.sha256.count(node)) {
        errors.push_back(absl::StrCat(where, "node ", node,
                                      " also has a token in the config "
                                      "(node_tokens.sha256)"));
      }
      tokens->by_node[node] = absl::AsciiStrToLower(fields[1]);
    }
    if (!errors.empty())
      return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  for (const auto& [node, hash] : tokens->by_node)
    tokens->node_by_hash[hash] = node;
  return std::shared_ptr<const Tokens>(std::move(tokens));
}

std::shared_ptr<const StreamAuthenticator::Tokens>
StreamAuthenticator::CurrentTokens() {
  std::lock_guard<std::mutex> l(mu_);
  if (options_.file.empty()) return tokens_;
  struct stat st;
  if (stat(options_.file.c_str(), &st) != 0) return tokens_;
  const FileStamp now = StampOf<FileStamp>(st);
  if (now == stamp_ || now == failed_stamp_) return tokens_;
  FileStamp read;
  absl::StatusOr<std::shared_ptr<const Tokens>> loaded = Load(&read);
  if (!loaded.ok()) {
    failed_stamp_ = now;
    std::fprintf(stderr,
                 "vigil-server: node tokens: keeping the previous %zu "
                 "entries; the changed file is bad:\n%s\n",
                 tokens_->by_node.size(),
                 std::string(loaded.status().message()).c_str());
    return tokens_;
  }
  tokens_ = *std::move(loaded);
  stamp_ = read;
  std::fprintf(stderr, "vigil-server: node tokens: %zu entries from %s\n",
               tokens_->by_node.size(), options_.file.c_str());
  return tokens_;
}

std::optional<StreamRefusal> StreamAuthenticator::Check(
    const grpc::ServerContextBase& context, const std::string& node) {
  if (std::optional<StreamRefusal> r = CheckCertificate(context, node))
    return r;
  if (options_.enabled()) return CheckToken(context, node);
  return std::nullopt;
}

std::optional<StreamRefusal> StreamAuthenticator::CheckBeforeHello(
    const grpc::ServerContextBase& context) {
  if (identity_ == NodeIdentity::kCertificate &&
      Property(context, GRPC_X509_CN_PROPERTY_NAME).empty() &&
      Property(context, GRPC_PEER_DNS_PROPERTY_NAME).empty())
    return Refuse(RejectReason::kCertWrongNode,
                  grpc::StatusCode::PERMISSION_DENIED,
                  "the client certificate names no node (no CN, no DNS "
                  "name); the server binds node names to certificates "
                  "(grpc_tls.node_identity)");
  if (!options_.enabled()) return std::nullopt;
  // CheckToken with a node that has no entry: only a known token passes
  // (as the wildcard's, or as another node's, refused later by Check).
  std::optional<StreamRefusal> r = CheckToken(context, "");
  if (r.has_value() && r->reason == RejectReason::kTokenWrongNode)
    return std::nullopt;
  return r;
}

std::optional<StreamRefusal> StreamAuthenticator::CheckCertificate(
    const grpc::ServerContextBase& context, const std::string& node) const {
  if (identity_ != NodeIdentity::kCertificate) return std::nullopt;
  std::vector<std::string> cn = Property(context, GRPC_X509_CN_PROPERTY_NAME);
  std::vector<std::string> dns = Property(context, GRPC_PEER_DNS_PROPERTY_NAME);
  for (const std::vector<std::string>* names : {&cn, &dns}) {
    for (const std::string& name : *names) {
      if (name == node) return std::nullopt;
    }
  }
  return Refuse(
      RejectReason::kCertWrongNode, grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat("node ", node, ": the client certificate (CN ",
                   cn.empty() ? "none" : absl::StrJoin(cn, ","), ", DNS names ",
                   dns.empty() ? "none" : absl::StrJoin(dns, ","),
                   ") is not this node's; the server binds node names to "
                   "certificates (grpc_tls.node_identity)"));
}

std::optional<StreamRefusal> StreamAuthenticator::CheckToken(
    const grpc::ServerContextBase& context, const std::string& node) {
  const auto& metadata = context.client_metadata();
  auto header = metadata.find("authorization");
  if (header == metadata.end())
    return Refuse(RejectReason::kUnauthenticated,
                  grpc::StatusCode::UNAUTHENTICATED,
                  "this server requires node tokens: send the metadata "
                  "'authorization: Bearer <token>' (vigil-agent --token-file)");
  std::string_view value(header->second.data(), header->second.size());
  if (!absl::StartsWith(absl::string_view(value.data(), value.size()),
                        absl::string_view(kBearer.data(), kBearer.size())) ||
      value.size() == kBearer.size())
    return Refuse(RejectReason::kUnauthenticated,
                  grpc::StatusCode::UNAUTHENTICATED,
                  "malformed authorization metadata: expected "
                  "\"Bearer <token>\"");
  const std::string hash = HexEncode(Sha256(value.substr(kBearer.size())));
  std::shared_ptr<const Tokens> tokens = CurrentTokens();
  auto own = tokens->by_node.find(node);
  if (own == tokens->by_node.end()) own = tokens->by_node.find("*");
  if (own != tokens->by_node.end() && ConstantTimeEquals(hash, own->second))
    return std::nullopt;
  auto holder = tokens->node_by_hash.find(hash);
  if (holder == tokens->node_by_hash.end())
    return Refuse(RejectReason::kUnauthenticated,
                  grpc::StatusCode::UNAUTHENTICATED,
                  node.empty() ? std::string("unknown token")
                               : absl::StrCat("node ", node, ": unknown token"));
  return Refuse(
      RejectReason::kTokenWrongNode, grpc::StatusCode::PERMISSION_DENIED,
      own == tokens->by_node.end()
          ? absl::StrCat("node ", node, " has no token configured")
          : absl::StrCat("node ", node, ": the token is not this node's"));
}

}  // namespace vigil
