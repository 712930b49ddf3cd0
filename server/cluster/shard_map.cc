#include "server/cluster/shard_map.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/stable_hash.h"
#include "nlohmann/json.hpp"

namespace vigil::cluster {
namespace {

// FNV-1a alone mixes its last bytes poorly; rendezvous scores compare
// whole 64-bit values, so finish with splitmix64's avalanche.
uint64_t Score(std::string_view shard, std::string_view space, std::string_view name) {
  uint64_t h = StableHash(absl::StrCat(std::string(shard), "\x1f", std::string(space), "\x1f",
                                      std::string(name)));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace

std::string EncodeMember(const Member& member) {
  return nlohmann::json{{"shard", member.shard},
                        {"replica", member.replica},
                        {"grpc", member.grpc},
                        {"http", member.http}}
      .dump();
}

absl::StatusOr<Member> DecodeMember(std::string_view json) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return absl::InvalidArgumentError("member record is not a JSON object");
  Member member;
  for (auto [name, field] : {std::pair{"shard", &member.shard},
                             std::pair{"replica", &member.replica},
                             std::pair{"grpc", &member.grpc},
                             std::pair{"http", &member.http}}) {
    auto it = doc.find(name);
    if (it == doc.end() || !it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("member record has no string '", name, "'"));
    }
    *field = it->get<std::string>();
  }
  if (member.shard.empty() || member.replica.empty()) {
    return absl::InvalidArgumentError("member record has an empty shard or replica");
  }
  return member;
}

ShardMap::ShardMap(std::vector<Member> members) : members_(std::move(members)) {
  auto order = [](const Member& a, const Member& b) {
    return std::tie(a.shard, a.replica, a.grpc, a.http) <
           std::tie(b.shard, b.replica, b.grpc, b.http);
  };
  std::sort(members_.begin(), members_.end(), order);
  members_.erase(std::unique(members_.begin(), members_.end()), members_.end());
  for (const Member& member : members_) {
    if (shards_.empty() || shards_.back() != member.shard) shards_.push_back(member.shard);
  }
}

std::string ShardMap::Owner(std::string_view space, std::string_view name) const {
  std::string best;
  uint64_t best_score = 0;
  for (const std::string& shard : shards_) {
    const uint64_t score = Score(shard, space, name);
    if (best.empty() || score > best_score) {
      best = shard;
      best_score = score;
    }
  }
  return best;
}

std::string ShardMap::OwnerOfFamily(std::string_view family) const {
  return Owner("family", family);
}

std::string ShardMap::OwnerOfIdleNode(std::string_view node) const {
  return Owner("node", node);
}

std::vector<Member> ShardMap::MembersOf(std::string_view shard) const {
  std::vector<Member> out;
  for (const Member& member : members_) {
    if (member.shard == shard) out.push_back(member);
  }
  return out;
}

}  // namespace vigil::cluster
