// Security of the gRPC ingest listener: its credentials (TLS from the
// grpc_tls files, or plaintext only when configured so), and the check of
// who a stream comes from — the node token it carries and, optionally, the
// node named by its client certificate.
#ifndef VIGIL_SERVER_INGEST_GRPC_SECURITY_H_
#define VIGIL_SERVER_INGEST_GRPC_SECURITY_H_

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/config/config.h"
#include "server/ingest/ingest_metrics.h"

namespace vigil {

// The credentials of the ingest listener. With grpc_tls: TLS whose files
// are checked now (certificates valid at Unix time `now`, the key matching
// the certificate) and re-read every reload_seconds by gRPC. With
// grpc_insecure: plaintext. kNotFound naming an unreadable file,
// kInvalidArgument naming a bad one, kFailedPrecondition when neither is
// configured.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
IngestServerCredentials(const ServerOptions& options, double now);

// Why a stream was refused: the metrics reason and the status ending it.
struct StreamRefusal {
  RejectReason reason;
  grpc::Status status;
};

// Decides whether a stream may report for the node of its Hello. Tokens
// are compared by their SHA-256, in constant time, and never logged.
// Thread-safe.
class StreamAuthenticator {
 public:
  // An authenticator for `tokens` (the file read now) and `identity`.
  // kNotFound if the token file cannot be read; kInvalidArgument listing
  // its bad lines ("FILE:LINE: ...") or an entry in both the file and the
  // config.
  static absl::StatusOr<std::unique_ptr<StreamAuthenticator>> Create(
      const NodeTokenOptions& tokens, NodeIdentity identity);

  // Nullopt if the stream of `context` may report for `node`. Otherwise
  // UNAUTHENTICATED when tokens are required and the stream carries none,
  // a malformed one or an unknown one; PERMISSION_DENIED when its token
  // belongs to another node, or when the client certificate does not name
  // `node` (NodeIdentity::kCertificate). Re-reads the token file first if
  // it changed since it was last read (a bad new version is logged and
  // the previous one kept).
  std::optional<StreamRefusal> Check(const grpc::ServerContextBase& context,
                                     const std::string& node);

  // What can be checked before the stream's first message is read, so an
  // unauthenticated peer never holds a stream: nullopt if the stream's
  // token (metadata) is one of the configured tokens of any node and, with
  // certificate-bound node names, its client certificate names some node.
  // The refusals are Check()'s.
  std::optional<StreamRefusal> CheckBeforeHello(
      const grpc::ServerContextBase& context);

 private:
  // Token hashes: node (or "*") -> lower-case hex SHA-256, and the set of
  // all of them.
  struct Tokens {
    std::map<std::string, std::string, std::less<>> by_node;
    std::map<std::string, std::string, std::less<>> node_by_hash;
  };
  // The file's identity: a change of any part triggers a reload.
  struct FileStamp {
    int64_t mtime_ns = 0;
    uint64_t size = 0;
    uint64_t inode = 0;
    bool operator==(const FileStamp&) const = default;
  };

  StreamAuthenticator(NodeTokenOptions options, NodeIdentity identity);
  // Reads the file into a Tokens with the inline entries; `stamp` is set
  // to the file read.
  absl::StatusOr<std::shared_ptr<const Tokens>> Load(FileStamp* stamp) const;
  // The current tokens, reloaded first when the file changed.
  std::shared_ptr<const Tokens> CurrentTokens();
  std::optional<StreamRefusal> CheckCertificate(
      const grpc::ServerContextBase& context, const std::string& node) const;
  std::optional<StreamRefusal> CheckToken(const grpc::ServerContextBase& context,
                                          const std::string& node);

  const NodeTokenOptions options_;
  const NodeIdentity identity_;
  std::mutex mu_;
  std::shared_ptr<const Tokens> tokens_ ABSL_GUARDED_BY(mu_);
  FileStamp stamp_ ABSL_GUARDED_BY(mu_);
  // The stamp of the last file version that failed to load (logged once).
  FileStamp failed_stamp_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_GRPC_SECURITY_H_
