// One view of the fleet from any server: a read of the HTTP API is sent to
// one member of every other shard (the next member when one does not
// answer), in parallel, and the answers come back per shard so the caller
// can merge them and mark the shards that did not answer.
#ifndef VIGIL_SERVER_CLUSTER_FANOUT_H_
#define VIGIL_SERVER_CLUSTER_FANOUT_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "server/cluster/shard_map.h"

namespace vigil::cluster {

// What one shard answered.
struct ShardReply {
  std::string shard;
  bool ok = false;
  std::string member;    // the replica that answered (or was tried last)
  nlohmann::json body;   // its JSON answer when ok
  std::string error;     // why not, when !ok
};

// GETs `path_and_query` (e.g. "/api/v1/incidents?local=1") from every shard
// of `map` except `self_shard`, with `credentials` (the headers that carry
// the caller's identity; may be none) and a `timeout_seconds` per request.
// Never fails: a shard that does not answer with a JSON object comes back
// !ok with the reason.
std::vector<ShardReply> FanOut(const ShardMap& map, const std::string& self_shard,
                               const std::string& path_and_query,
                               const std::vector<std::pair<std::string, std::string>>& credentials,
                               Transport& transport, double timeout_seconds);

// The shard an id names: "inc-<shard>-<digits>" (incidents) or
// "act-<shard>~<replica>-<digits>" (actions) of cluster mode; "" for any
// other id (a single server's "inc-000012", or none of these).
std::string ShardNamedBy(std::string_view id);

}  // namespace vigil::cluster

#endif  // VIGIL_SERVER_CLUSTER_FANOUT_H_
