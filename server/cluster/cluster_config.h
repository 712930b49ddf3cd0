// Reading the "cluster" section of vigil-server's JSON config:
//   "cluster": {"etcd_endpoints": ["http://etcd-0:2379", ...],
//               "prefix": "/vigil", "shard": "s0", "replica": "a",
//               "advertise_grpc": "host:7070",
//               "advertise_http": "http://host:8080",
//               "lease_seconds": 5, "poll_seconds": 1}
// Its presence turns cluster mode on (docs/SCALING.md). shard, replica and
// the advertised addresses may come from flags instead (--shard,
// --replica, --advertise-grpc, --advertise-http, --etcd), so the whole is
// checked by ValidateClusterOptions once flags are applied.
#ifndef VIGIL_SERVER_CLUSTER_CLUSTER_CONFIG_H_
#define VIGIL_SERVER_CLUSTER_CLUSTER_CONFIG_H_

#include <optional>

#include "common/json_reader.h"
#include "nlohmann/json.hpp"
#include "server/cluster/cluster_member.h"

namespace vigil::cluster {

// Fills `*out` from `section`, recording type and range errors (and unknown
// keys) in `r`.
void ParseClusterSection(const nlohmann::json& section, JsonConfigReader& r,
                         std::optional<ClusterOptions>* out);

}  // namespace vigil::cluster

#endif  // VIGIL_SERVER_CLUSTER_CLUSTER_CONFIG_H_
