// This server's place in a Vigil cluster: it registers itself in etcd under
// a lease, watches the other members to know the shard map, and competes
// for its shard's leadership (only the leader pages and acts) and for the
// fleet leadership (what spans jobs). See docs/SCALING.md.
#ifndef VIGIL_SERVER_CLUSTER_CLUSTER_MEMBER_H_
#define VIGIL_SERVER_CLUSTER_CLUSTER_MEMBER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "server/cluster/etcd_client.h"
#include "server/cluster/shard_map.h"

namespace vigil::cluster {

// The "cluster" section of the server's configuration; its presence turns
// cluster mode on.
struct ClusterOptions {
  std::vector<std::string> etcd_endpoints;  // http:// or https:// URLs; required
  // https:// endpoints: the CA of etcd's certificate (empty: the system's)
  // and a client certificate and key when etcd has --client-cert-auth.
  std::string etcd_ca_file;
  std::string etcd_cert_file;
  std::string etcd_key_file;
  // etcd authentication: a user whose role may read and write `prefix`,
  // and a file holding its password.
  std::string etcd_username;
  std::string etcd_password_file;
  // A file holding the secret every server of the fleet shares, with
  // which a server vouches for its browser sessions' users when it passes
  // their requests on to another shard (WebSessionOptions::peer_secret).
  // Empty: browser sessions see and act on their own server's shard only.
  std::string peer_secret_file;
  std::string prefix = "/vigil";            // every key lives under it
  std::string shard;                        // the pair this server belongs to
  std::string replica;                      // its name within the pair
  std::string advertise_grpc;               // host:port agents reach it at
  std::string advertise_http;               // base URL of its HTTP API
  // The member lease: a server that stops renewing it leaves the map and
  // loses its leaderships this long after its last renewal.
  int lease_seconds = 5;
  // How often membership and leadership are read (and the lease renewed).
  double poll_seconds = 1.0;
  // How often the shard's leader sends the learned profiles of its jobs
  // that changed to the shard each would move to if this pair died
  // (server/cluster/profile_backups.h); 0: never. Needs peer_secret_file.
  double profile_backup_seconds = 60;
};

// kInvalidArgument naming the field when `options` cannot be used.
absl::Status ValidateClusterOptions(const ClusterOptions& options);

// What the member knows, for /api/v1/cluster and logs.
struct ClusterView {
  ShardMap map;
  bool registered = false;     // our member key is in etcd
  bool shard_leader = false;   // we page and act for our shard
  bool fleet_leader = false;   // we run what spans jobs
  std::string shard_leader_replica;  // who leads our shard ("" = nobody)
  std::string fleet_leader_shard;    // the fleet leader's shard ("" = nobody)
  std::string last_error;      // the last etcd failure, "" after a success
};

class ClusterMember {
 public:
  // kInvalidArgument for bad options, kNotFound for an unreadable
  // etcd_password_file. `clock` (not owned) times lease
  // renewals and leadership expiry; it must outlive the member.
  static absl::StatusOr<std::unique_ptr<ClusterMember>> Create(ClusterOptions options,
                                                               Clock* clock = RealClock());
  ~ClusterMember();
  ClusterMember(const ClusterMember&) = delete;
  ClusterMember& operator=(const ClusterMember&) = delete;

  // Calls `listener` (on the member's thread) after every change of the map
  // or of a leadership. Add listeners before Start.
  void AddListener(std::function<void(const ClusterView&)> listener);

  // Starts the member's thread: registers, renews, reads the map, competes
  // for leadership. etcd being down is not an error: the member keeps
  // trying, and meanwhile owns nothing and leads nothing.
  void Start();
  // Steps down (deletes its leader claims, revokes its lease so that the
  // standby takes over at once) and joins the thread. Idempotent.
  void Stop();

  // A snapshot of what the member knows.
  ClusterView view() const;
  // True while this server leads its shard. Leadership ends locally
  // lease_seconds - 1 after the last successful renewal, before etcd can
  // give it to the standby, so two members never both believe they lead.
  bool IsShardLeader() const;
  bool IsFleetLeader() const;
  const ClusterOptions& options() const { return options_; }
  // This member as it registered.
  Member self() const;

  // Records that the page with idempotency key `key` was handed to this
  // server's outbox (kept a day), so a standby taking over does not send
  // it again. Errors: the etcd client's.
  absl::Status MarkPaged(const std::string& key);
  // Every page key this shard's leaders marked (read at takeover).
  absl::StatusOr<absl::flat_hash_set<std::string>> PagedKeys();
  // Records that the automatic action of pair key `key` was sent to the
  // actuator (kept a day), so a standby taking over does not start it
  // again. Errors: the etcd client's.
  absl::Status MarkActionStarted(const std::string& key);
  // Every action key this shard's leaders marked (read at takeover).
  absl::StatusOr<absl::flat_hash_set<std::string>> StartedActions();

  // Operators' operations on incidents (acknowledge, unacknowledge,
  // resolve) are shared by both members of the pair: the member where one
  // was made stores it under the incident's key (the latest one wins), and
  // every member's round hands the shard's operations to the callback of
  // OnSharedOperations whenever one changed. Errors: the etcd client's.
  absl::Status ShareOperation(const std::string& incident_key, const std::string& operation);
  // Receives (incident key, operation) pairs on the member's thread. Set
  // before Start.
  void OnSharedOperations(
      std::function<void(const std::vector<std::pair<std::string, std::string>>&)> callback);

  // Fleet-wide safety state (silences, the remediation circuit breaker):
  // any member sets an entry (`name` such as "silences/sil-s0.a-000001" or
  // "breaker"); every member's round hands all entries, as (name, value),
  // to the callback of OnFleetState whenever one changed. An entry is
  // kept until replaced, or for `keep_seconds` (under a lease of its own)
  // when that is positive. Errors: the etcd client's.
  absl::Status ShareFleetState(const std::string& name, const std::string& value,
                               double keep_seconds = 0);
  // Receives (name, value) pairs on the member's thread. Set before Start.
  // (A WatchPrefix of "safety/fleet/".)
  void OnFleetState(
      std::function<void(const std::vector<std::pair<std::string, std::string>>&)> callback);

  // The remediation circuit breaker's count, fleet-wide: takes one of
  // `limit` slots of `kind` ("cordon", "pause") for `window_seconds`, so
  // that all servers together start at most `limit` such actions per
  // window. Each slot is a key created only if absent (an etcd
  // transaction) under a lease of the window's length. True when taken,
  // false when all `limit` are held. Errors: the etcd client's.
  absl::StatusOr<bool> TakeRemediationSlot(const std::string& kind, int limit,
                                           double window_seconds);
  // Frees every slot (an admin reset the breaker). Errors: the etcd client's.
  absl::Status ClearRemediationSlots();

  // Reads every key under `prefix` (relative to options.prefix) each round
  // and hands them, as (name relative to `prefix`, value), to `callback`
  // on the member's thread whenever one was added or changed (deletions
  // alone are not reported). Set before Start.
  void WatchPrefix(
      const std::string& prefix,
      std::function<void(const std::vector<std::pair<std::string, std::string>>&)> callback);
  // Queues `key` (relative to options.prefix) = `value`, to live
  // `ttl_seconds`, for the member's thread to write at its next round:
  // callers on hot paths never wait for etcd. A write that fails is tried
  // again next round; at most 10,000 wait (the oldest are dropped, with a
  // log line).
  void PutSoon(const std::string& key, std::string value, int ttl_seconds);

 private:
  ClusterMember(ClusterOptions options, std::unique_ptr<EtcdClient> etcd, Clock* clock);
  void Loop();
  // One round: renew or register, read the map, compete; returns the view.
  ClusterView Round();
  bool Leads(const std::string& key, const std::string& value, ClusterView* view);
  std::string Key(std::string_view suffix) const;
  // Puts `key` under a lease that lasts at least a day.
  absl::Status PutForADay(const std::string& key, const std::string& value);
  // The names under `prefix` (relative to it).
  absl::StatusOr<absl::flat_hash_set<std::string>> NamesUnder(const std::string& prefix);

  const ClusterOptions options_;
  const std::unique_ptr<EtcdClient> etcd_;
  Clock* const clock_;
  const std::string id_;  // "shard/replica"

  // Loop state (member thread only, except in Stop after the join).
  int64_t lease_ = 0;
  double last_renewal_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  ClusterView view_ ABSL_GUARDED_BY(mu_);
  double leader_until_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t marks_lease_ ABSL_GUARDED_BY(mu_) = 0;
  double marks_lease_granted_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::function<void(const ClusterView&)>> listeners_;
  // A prefix read every round; its entries go to `callback` when changed.
  struct Watch {
    std::string prefix;  // full key prefix
    std::function<void(const std::vector<std::pair<std::string, std::string>>&)> callback;
    // (highest mod revision, number of entries) last handed over; member
    // thread only.
    std::pair<int64_t, size_t> seen{0, 0};
  };
  std::vector<Watch> watches_;  // set before Start
  // Writes queued by PutSoon: (full key, value, ttl seconds).
  struct PendingPut {
    std::string key;
    std::string value;
    int ttl_seconds = 0;
  };
  std::vector<PendingPut> pending_puts_ ABSL_GUARDED_BY(mu_);
  // Writes PutSoon queued (member thread).
  void FlushPendingPuts(ClusterView* view);
  std::thread thread_;
};

}  // namespace vigil::cluster

#endif  // VIGIL_SERVER_CLUSTER_CLUSTER_MEMBER_H_
