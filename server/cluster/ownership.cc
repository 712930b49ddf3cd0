#include "server/cluster/ownership.h"

#include <algorithm>
#include <utility>

namespace vigil::cluster {
namespace {

// Cached answers beyond this are dropped wholesale (jobs come and go).
constexpr size_t kMaxCachedJobs = 100000;

}  // namespace

Ownership::Ownership(std::string self, const std::string& family_pattern)
    : self_(std::move(self)), families_(family_pattern) {}

void Ownership::SetMap(const ShardMap& map) {
  std::lock_guard<std::mutex> lock(mu_);
  if (map == map_) return;
  map_ = map;
  const std::vector<std::string>& shards = map_.shards();
  self_in_map_ = std::find(shards.begin(), shards.end(), self_) != shards.end();
  by_job_.clear();
  ++version_;
}

Ownership::Answer Ownership::Compute(std::string_view job, std::string_view node) const {
  Answer answer;
  if (!self_in_map_) return answer;
  if (job.empty()) {
    answer.shard = map_.OwnerOfIdleNode(node);
  } else {
    std::string family = families_.FamilyOf(job);
    answer.shard = map_.OwnerOfFamily(family.empty() ? job : std::string_view(family));
  }
  answer.ours = answer.shard == self_;
  for (const Member& member : map_.MembersOf(answer.shard)) answer.owners.push_back(member.grpc);
  return answer;
}

Ownership::Answer Ownership::Owner(std::string_view job, std::string_view node) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (job.empty()) return Compute(job, node);
  auto it = by_job_.find(absl::string_view(job.data(), job.size()));
  if (it != by_job_.end()) return it->second;
  if (by_job_.size() >= kMaxCachedJobs) by_job_.clear();
  return by_job_.emplace(std::string(job), Compute(job, node)).first->second;
}

std::vector<std::string> Ownership::OwnMembers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const Member& member : map_.MembersOf(self_)) out.push_back(member.grpc);
  return out;
}

uint64_t Ownership::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

}  // namespace vigil::cluster
