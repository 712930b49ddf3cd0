// Which frames this server takes in a cluster: those of the jobs whose
// family the shard map gives to this server's shard, and those of idle
// nodes it places here. Used by ingest on every batch, so answers are
// cached per job until the map changes.
#ifndef VIGIL_SERVER_CLUSTER_OWNERSHIP_H_
#define VIGIL_SERVER_CLUSTER_OWNERSHIP_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "detector/detector.h"
#include "server/cluster/shard_map.h"

namespace vigil::cluster {

class Ownership {
 public:
  // `self` is this server's shard; `family_pattern` the detection's
  // (a job's family decides its shard, so a resumed job finds its
  // baseline where it was learned).
  Ownership(std::string self, const std::string& family_pattern);

  // Replaces the map (from ClusterMember's listener).
  void SetMap(const ShardMap& map);

  struct Answer {
    bool ours = true;
    std::string shard;                // the owner ("" while no map is known)
    std::vector<std::string> owners;  // its members' gRPC addresses, by replica
  };
  // Who owns `job` (or, when `job` is empty, the idle `node`). While no
  // map is known, or this server's shard is missing from it (etcd
  // unreachable since start, or our registration lapsed), everything is
  // ours: better to take frames than to turn agents away.
  Answer Owner(std::string_view job, std::string_view node) const;
  // This server's shard's members' gRPC addresses (for Ack.owners), and a
  // number that changes whenever they may have.
  std::vector<std::string> OwnMembers() const;
  // Where `job` was watched before it came here: the HTTP base URLs of the
  // live members of the shard that would own it without this one, then of
  // those that owned it under the last few maps, when that is not this
  // server's shard. Empty when the old owners are gone (a lost pair).
  std::vector<std::string> PreviousOwnersHttp(std::string_view job) const;
  // Where `job` goes if this server's shard is lost: the HTTP base URLs of
  // the members of the shard that would own it without this one (with
  // rendezvous hashing, the shard the job moves to when this pair dies).
  // Empty when no other shard is known.
  std::vector<std::string> SuccessorsHttp(std::string_view job) const;
  uint64_t version() const;
  const std::string& self() const { return self_; }

 private:
  Answer Compute(std::string_view job, std::string_view node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string self_;
  const JobFamilyMatcher families_;
  mutable std::mutex mu_;
  ShardMap map_ ABSL_GUARDED_BY(mu_);
  // map_ without this server's shard (who would own what if it were lost).
  ShardMap without_us_ ABSL_GUARDED_BY(mu_);
  // The maps before map_, newest first (at most kMapHistory).
  std::vector<ShardMap> previous_ ABSL_GUARDED_BY(mu_);
  bool self_in_map_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::flat_hash_map<std::string, Answer> by_job_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::cluster

#endif  // VIGIL_SERVER_CLUSTER_OWNERSHIP_H_
