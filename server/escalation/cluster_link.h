// How EscalationService works with a cluster member (docs/SCALING.md): the
// pair's gate (who leads, page marks, shared operations) and the fleet's
// safety state (silences, the remediation breaker) through etcd.
#ifndef VIGIL_SERVER_ESCALATION_CLUSTER_LINK_H_
#define VIGIL_SERVER_ESCALATION_CLUSTER_LINK_H_

#include "server/cluster/cluster_member.h"
#include "server/escalation/escalation_service.h"

namespace vigil {

// The pair gate of `member` (not owned; must outlive the service): leads
// while the member leads its shard, marks delivered pages and shares
// operators' operations in etcd. Failures to store are logged.
EscalationServiceOptions::PairGate PairGateOf(cluster::ClusterMember* member);

// The fleet's safety state through `member` (not owned; must outlive the
// service).
EscalationServiceOptions::FleetSafety FleetSafetyOf(cluster::ClusterMember* member);

// Hands what the member reads back from etcd (the pair's operations, the
// fleet's safety entries) to `service` (not owned; must outlive the
// member's thread). Call before the member starts.
void ConnectToMember(cluster::ClusterMember* member, EscalationService* service);

}  // namespace vigil

#endif  // VIGIL_SERVER_ESCALATION_CLUSTER_LINK_H_
