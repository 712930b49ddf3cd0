// A small client of etcd's v3 API through its JSON gateway over HTTP
// (etcd 3.4: POST /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/lease/...;
// keys and values travel base64-encoded, 64-bit integers as strings). It
// needs no generated gRPC client and is all vigil-server uses etcd for:
// leases, keys attached to them, "create if absent" for leader election
// and prefix reads for membership. See docs/SCALING.md.
#ifndef VIGIL_SERVER_CLUSTER_ETCD_CLIENT_H_
#define VIGIL_SERVER_CLUSTER_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"

namespace vigil::cluster {

// One key as etcd holds it.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;  // 0: no lease
};

// Talks to an etcd cluster through any of its endpoints: a request that
// cannot reach one endpoint (connection refused, timeout, 5xx) is tried
// on the next, and the one that answered is used first next time.
// Thread-safe; each call is one HTTP request per endpoint tried.
//
// Errors: kUnavailable when no endpoint answered, kInternal for an answer
// that is not what the API documents, kFailedPrecondition for an etcd
// error (e.g. "requested lease not found"), kUnauthenticated when etcd
// refuses the credentials (or asks for some and none are configured).
// How to reach and authenticate to etcd.
struct EtcdClientOptions {
  // Base URLs, all http:// or all https:// ("https://10.0.0.5:2379").
  std::vector<std::string> endpoints;
  double timeout_seconds = 2.0;
  // https:// endpoints: the CA that signed etcd's certificate (empty: the
  // system's), and a client certificate and key for etcd's
  // --client-cert-auth (both or neither).
  TlsFiles tls;
  // etcd authentication (etcd's RBAC): the client gets a token with these
  // (/v3/auth/authenticate) and sends it with every request, getting a new
  // one when etcd says it expired. Empty username: none.
  std::string username;
  std::string password;
};

class EtcdClient {
 public:
  // `endpoints` are base URLs ("http://127.0.0.1:2379"); kInvalidArgument
  // when empty or not all http:// or all https://, for a client
  // certificate without its key (or the reverse), or a password without a
  // username. Requests go through `transport` (libcurl with options.tls
  // when null: unlike the gateway's other clients it reads the HTTP
  // trailers etcd sends with every error).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      EtcdClientOptions options, std::unique_ptr<Transport> transport = nullptr);
  // Plain http:// endpoints, no authentication.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      std::vector<std::string> endpoints, double timeout_seconds = 2.0,
      std::unique_ptr<Transport> transport = nullptr);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Grants a lease of `ttl_seconds`; returns its id.
  absl::StatusOr<int64_t> GrantLease(int ttl_seconds);
  // Renews `lease`; returns its new TTL. kNotFound when it has expired
  // (or was revoked): keys attached to it are gone.
  absl::StatusOr<int64_t> KeepAlive(int64_t lease);
  // Revokes `lease`, deleting its keys. Revoking an unknown lease is OK.
  absl::Status RevokeLease(int64_t lease);

  // Sets `key` to `value`, attached to `lease` when not 0.
  absl::Status Put(std::string_view key, std::string_view value, int64_t lease = 0);
  // Creates `key` only if it does not exist; true when this call created
  // it. The election primitive: the first to create a leased key leads
  // until the lease ends.
  absl::StatusOr<bool> CreateIfAbsent(std::string_view key, std::string_view value,
                                      int64_t lease);
  // Deletes `key` only while it holds `value`; true when deleted (a leader
  // stepping down removes only its own claim).
  absl::StatusOr<bool> DeleteIfValue(std::string_view key, std::string_view value);
  // The key, or nullopt when absent.
  absl::StatusOr<std::optional<KeyValue>> Get(std::string_view key);
  // Every key starting with `prefix`, in key order.
  absl::StatusOr<std::vector<KeyValue>> GetPrefix(std::string_view prefix);
  // Deletes `key` (absent is OK).
  absl::Status Delete(std::string_view key);
  // Deletes every key starting with `prefix` (none is OK).
  absl::Status DeletePrefix(std::string_view prefix);

  // The endpoints, as given.
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  EtcdClient(EtcdClientOptions options, std::unique_ptr<Transport> transport);
  // POSTs `body` to `path` on the first endpoint that answers, with the
  // auth token (getting one first, and again once when etcd says it is no
  // longer valid).
  absl::StatusOr<nlohmann::json> Call(std::string_view path, const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> CallLocked(std::string_view path, const nlohmann::json& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gets a new token_ with the username and password.
  absl::Status AuthenticateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<std::string> endpoints_;
  const double timeout_seconds_;
  const std::string username_;
  const std::string password_;
  const std::unique_ptr<Transport> transport_;
  std::mutex mu_;
  size_t preferred_ ABSL_GUARDED_BY(mu_) = 0;
  std::string token_ ABSL_GUARDED_BY(mu_);
};

// The smallest key greater than every key starting with `prefix` (etcd's
// range_end for a prefix read).
std::string PrefixEnd(std::string_view prefix);

}  // namespace vigil::cluster

#endif  // VIGIL_SERVER_CLUSTER_ETCD_CLIENT_H_
