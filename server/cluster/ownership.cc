#include "server/cluster/ownership.h"

#include <algorithm>
#include <utility>

namespace vigil::cluster {
namespace {

// Cached answers beyond this are dropped wholesale (jobs come and go).
constexpr size_t kMaxCachedJobs = 100000;
// Earlier maps remembered for PreviousOwnersHttp: a job moved by one change
// is still found after a few more (a member restarting, say).
constexpr size_t kMapHistory = 4;

}  // namespace

Ownership::Ownership(std::string self, const std::string& family_pattern)
    : self_(std::move(self)), families_(family_pattern) {}

void Ownership::SetMap(const ShardMap& map) {
  std::lock_guard<std::mutex> lock(mu_);
  if (map == map_) return;
  if (!map_.shards().empty()) {
    previous_.insert(previous_.begin(), map_);
    if (previous_.size() > kMapHistory) previous_.pop_back();
  }
  map_ = map;
  std::vector<Member> others;
  for (const Member& member : map_.members()) {
    if (member.shard != self_) others.push_back(member);
  }
  without_us_ = ShardMap(std::move(others));
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

std::vector<std::string> Ownership::PreviousOwnersHttp(std::string_view job) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  std::string family = families_.FamilyOf(job);
  const std::string_view name = family.empty() ? job : std::string_view(family);
  // Who owns it when this shard is left out: where a job that came to a
  // joining shard was (rendezvous hashing moves only what the newcomer
  // wins), even for a server that never saw the map without itself.
  std::vector<ShardMap> candidates = {without_us_};
  candidates.insert(candidates.end(), previous_.begin(), previous_.end());
  for (const ShardMap& before : candidates) {
    const std::string owner = before.OwnerOfFamily(name);
    if (owner.empty() || owner == self_) continue;
    for (const Member& member : map_.MembersOf(owner)) {
      if (std::find(out.begin(), out.end(), member.http) == out.end())
        out.push_back(member.http);
    }
  }
  return out;
}

std::vector<std::string> Ownership::SuccessorsHttp(std::string_view job) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string family = families_.FamilyOf(job);
  std::vector<std::string> out;
  const std::string successor =
      without_us_.OwnerOfFamily(family.empty() ? job : std::string_view(family));
  if (successor.empty()) return out;
  for (const Member& member : without_us_.MembersOf(successor)) out.push_back(member.http);
  return out;
}

uint64_t Ownership::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

}  // namespace vigil::cluster
