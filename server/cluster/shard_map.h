// Which shard owns what: the rendezvous ("highest random weight") map of
// job families and idle nodes over the shards that have a live member.
// Pure: every server computes the same map from the same membership, so
// the map needs no writer of its own (docs/SCALING.md).
#ifndef VIGIL_SERVER_CLUSTER_SHARD_MAP_H_
#define VIGIL_SERVER_CLUSTER_SHARD_MAP_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::cluster {

// One live server, as it registered itself.
struct Member {
  std::string shard;    // the pair it belongs to, e.g. "s0"
  std::string replica;  // its name within the pair, e.g. "a" or a pod name
  std::string grpc;     // host:port agents stream to
  std::string http;     // base URL of its HTTP API
  bool operator==(const Member& other) const {
    return shard == other.shard && replica == other.replica && grpc == other.grpc &&
           http == other.http;
  }
};

// The member record's JSON form ({"shard", "replica", "grpc", "http"}) and
// back; kInvalidArgument when a field is missing or not a string.
std::string EncodeMember(const Member& member);
absl::StatusOr<Member> DecodeMember(std::string_view json);

class ShardMap {
 public:
  // An empty map: owns nothing.
  ShardMap() = default;
  // From the live members (any order; duplicates ignored).
  explicit ShardMap(std::vector<Member> members);

  // The shard that owns `family` (a job's family, or the job's name when it
  // has none); "" when no shard is live. Adding a shard moves only the
  // families it wins; removing one moves only its own.
  std::string OwnerOfFamily(std::string_view family) const;
  // The shard that watches `node` while it runs no job.
  std::string OwnerOfIdleNode(std::string_view node) const;
  // The live members of `shard`, by replica name.
  std::vector<Member> MembersOf(std::string_view shard) const;
  // Live shards, sorted.
  const std::vector<std::string>& shards() const { return shards_; }
  // Every live member, sorted by (shard, replica).
  const std::vector<Member>& members() const { return members_; }

  bool operator==(const ShardMap& other) const { return members_ == other.members_; }

 private:
  std::string Owner(std::string_view space, std::string_view name) const;

  std::vector<Member> members_;
  std::vector<std::string> shards_;
};

}  // namespace vigil::cluster

#endif  // VIGIL_SERVER_CLUSTER_SHARD_MAP_H_
