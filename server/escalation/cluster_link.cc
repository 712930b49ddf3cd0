#include "server/escalation/cluster_link.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace vigil {

EscalationServiceOptions::PairGate PairGateOf(cluster::ClusterMember* member) {
  EscalationServiceOptions::PairGate pair;
  pair.leading = [member] { return member->IsShardLeader(); };
  pair.delivered = [member](const std::string& key) {
    if (absl::Status s = member->MarkPaged(key); !s.ok())
      std::fprintf(stderr, "vigil-server: cluster: cannot mark page %s delivered: %s\n",
                   key.c_str(), std::string(s.message()).c_str());
  };
  pair.delivered_keys = [member] { return member->PagedKeys(); };
  pair.action_started = [member](const std::string& key) {
    if (absl::Status s = member->MarkActionStarted(key); !s.ok())
      std::fprintf(stderr, "vigil-server: cluster: cannot mark action %s started: %s\n",
                   key.c_str(), std::string(s.message()).c_str());
  };
  pair.started_actions = [member] { return member->StartedActions(); };
  pair.share_operation = [member](const std::string& key, const nlohmann::json& op) {
    if (absl::Status s = member->ShareOperation(key, op.dump()); !s.ok())
      std::fprintf(stderr, "vigil-server: cluster: cannot share %s of %s with the pair: %s\n",
                   op.value("verb", "").c_str(), key.c_str(), std::string(s.message()).c_str());
  };
  pair.self = absl::StrCat(member->options().shard, "/", member->options().replica);
  return pair;
}

EscalationServiceOptions::FleetSafety FleetSafetyOf(cluster::ClusterMember* member) {
  EscalationServiceOptions::FleetSafety fleet;
  fleet.share = [member](const std::string& name, const std::string& value,
                         double keep_seconds) {
    return member->ShareFleetState(name, value, keep_seconds);
  };
  fleet.take_slot = [member](const std::string& kind, int limit, double window_seconds) {
    return member->TakeRemediationSlot(kind, limit, window_seconds);
  };
  fleet.clear_slots = [member] { return member->ClearRemediationSlots(); };
  fleet.self = absl::StrCat(member->options().shard, "/", member->options().replica);
  return fleet;
}

void ConnectToMember(cluster::ClusterMember* member, EscalationService* service) {
  using Entries = std::vector<std::pair<std::string, std::string>>;
  member->OnSharedOperations([service](const Entries& ops) { service->ApplySharedOperations(ops); });
  member->OnFleetState([service](const Entries& entries) { service->ApplyFleetState(entries); });
}

}  // namespace vigil
