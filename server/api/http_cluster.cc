// The cluster's endpoints (docs/SCALING.md): GET /api/v1/cluster, the
// fan-out that makes the lists of any server show the whole fleet, and the
// forwarding of one incident's or action's requests to its shard.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/api/http_api.h"
#include "server/api/http_reply.h"
#include "server/cluster/fanout.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

// Set on a request one server sends on to another: never sent on again.
constexpr char kForwardedHeader[] = "X-Vigil-Forwarded-By";

Json MemberJson(const cluster::Member& member) {
  return {{"shard", member.shard},
          {"replica", member.replica},
          {"grpc", member.grpc},
          {"http", member.http}};
}

// The request's query with local=1 (the other shards answer for
// themselves only).
std::string LocalQuery(const httplib::Request& req) {
  std::string query = "local=1";
  for (const auto& [name, value] : req.params) {
    if (name == "local") continue;
    absl::StrAppend(&query, "&", httplib::detail::encode_query_param(name), "=",
                    httplib::detail::encode_query_param(value));
  }
  return query;
}

}  // namespace

void HttpApi::InstallClusterHandlers() {
  const HttpApiOptions& o = options_;
  server_->Get("/api/v1/cluster", [&o](const httplib::Request& req, httplib::Response& res) {
    if (o.cluster == nullptr) return Reply(res, 200, Json{{"mode", "single"}});
    const cluster::ClusterView view = o.cluster->view();
    Json members = Json::array();
    for (const cluster::Member& member : view.map.members()) members.push_back(MemberJson(member));
    Json shards = Json::array();
    for (const std::string& shard : view.map.shards()) {
      Json replicas = Json::array();
      for (const cluster::Member& member : view.map.MembersOf(shard))
        replicas.push_back(member.replica);
      shards.push_back({{"shard", shard}, {"replicas", std::move(replicas)}});
    }
    const cluster::Member self = o.cluster->self();
    Json body = {{"mode", "cluster"},
                 {"shard", self.shard},
                 {"replica", self.replica},
                 {"registered", view.registered},
                 {"shard_leader", o.cluster->IsShardLeader()},
                 {"fleet_leader", o.cluster->IsFleetLeader()},
                 {"shard_leader_replica", view.shard_leader_replica},
                 {"fleet_leader_shard", view.fleet_leader_shard},
                 {"last_error", view.last_error},
                 {"members", std::move(members)},
                 {"shards", std::move(shards)}};
    if (o.ownership != nullptr && (req.has_param("job") || req.has_param("node"))) {
      const cluster::Ownership::Answer owner =
          o.ownership->Owner(req.get_param_value("job"), req.get_param_value("node"));
      body["owner"] = {{"shard", owner.shard}, {"owners", owner.owners}};
    }
    Reply(res, 200, body);
  });
  // What this server learned of a job (Detector::ExportProfiles), for the
  // shard that takes the job over: a viewer may read it, and so may another
  // server of the fleet that signs its request with the peer secret.
  server_->Get(cluster::kProfilesPath, [&o](const httplib::Request& req,
                                               httplib::Response& res) {
    const std::string job = req.get_param_value("job");
    if (job.empty()) return ReplyError(res, 400, "parameter 'job': required");
    if (req.has_header(cluster::kPeerSignatureHeader)) {
      absl::Status peer = cluster::VerifyPeerRequest(
          o.sessions.peer_secret, req.get_header_value(cluster::kPeerTimestampHeader),
          req.get_header_value(cluster::kPeerSignatureHeader), "GET", cluster::ProfilesTarget(job), "",
          o.clock->Now());
      if (!peer.ok()) return ReplyStatus(res, peer);
    }
    const std::string data = o.detection->ExportProfiles(job);
    Reply(res, 200, Json{{"job", job}, {"profiles", absl::Base64Escape(data)}});
  });
  // A copy of what another shard learned of a job that would move here if
  // that shard's pair died (server/cluster/profile_backups.h). The body is
  // the export itself; only a server of the fleet may send one.
  server_->Post(cluster::kProfilesPath, [&o](const httplib::Request& req,
                                                httplib::Response& res) {
    const std::string job = req.get_param_value("job");
    if (job.empty()) return ReplyError(res, 400, "parameter 'job': required");
    absl::Status peer = cluster::VerifyPeerRequest(
        o.sessions.peer_secret, req.get_header_value(cluster::kPeerTimestampHeader),
        req.get_header_value(cluster::kPeerSignatureHeader), "POST", cluster::ProfilesTarget(job), req.body,
        o.clock->Now());
    if (!peer.ok()) return ReplyStatus(res, peer);
    if (o.profile_backups == nullptr)
      return ReplyError(res, 404, "this server keeps no profile copies (not in cluster mode)");
    if (absl::Status held = o.profile_backups->Hold(job, req.body); !held.ok())
      return ReplyStatus(res, held);
    Reply(res, 200, Json{{"job", job}, {"bytes", req.body.size()}});
  });
}

std::vector<std::pair<std::string, std::string>> HttpApi::PassOnCredentials(
    const httplib::Request& req) const {
  std::vector<std::pair<std::string, std::string>> out;
  if (req.has_header("Authorization")) {
    out.emplace_back("Authorization", req.get_header_value("Authorization"));
    return out;
  }
  // A browser session is known only here: vouch for its holder.
  absl::StatusOr<RequestIdentity> caller = authorizer_.Authorize(CredentialsOf(req), Role::kViewer);
  if (!caller.ok() || caller->via != "session" || options_.cluster == nullptr) return out;
  const cluster::Member self = options_.cluster->self();
  std::string vouched = authorizer_.Delegate(caller->who, absl::StrCat(self.shard, "/", self.replica));
  if (!vouched.empty()) out.emplace_back(kOnBehalfOfHeader, std::move(vouched));
  return out;
}

bool HttpApi::ForwardToShardOf(const std::string& id, const httplib::Request& req,
                               httplib::Response& res) const {
  const HttpApiOptions& o = options_;
  if (o.cluster == nullptr || o.transport == nullptr || req.has_header(kForwardedHeader))
    return false;
  const cluster::Member self = o.cluster->self();
  const std::string shard = cluster::ShardNamedBy(id);
  if (shard.empty() || shard == self.shard) return false;
  const std::vector<cluster::Member> members = o.cluster->view().map.MembersOf(shard);
  if (members.empty()) {
    ReplyError(res, 503, absl::StrCat(id, " belongs to shard ", shard,
                                      ", which has no live member in the cluster now"));
    return true;
  }
  OutboundRequest out;
  out.method = req.method;
  out.headers = PassOnCredentials(req);
  if (!req.body.empty()) {
    out.headers.emplace_back("Content-Type", "application/json");
    out.body = req.body;
  }
  out.headers.emplace_back(kForwardedHeader, absl::StrCat(self.shard, "/", self.replica));
  std::string query;
  for (const auto& [name, value] : req.params) {
    absl::StrAppend(&query, query.empty() ? "?" : "&", httplib::detail::encode_query_param(name),
                    "=", httplib::detail::encode_query_param(value));
  }
  TransportResult last;
  std::string errors;
  for (const cluster::Member& member : members) {
    out.url = absl::StrCat(member.http, req.path, query);
    TransportResult result = o.transport->Send(out, o.fan_out_timeout_seconds);
    if (result.http_status == 0) {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", member.replica, ": ", result.error);
      continue;
    }
    // Not there (an action lives on the shard's leader) or failing: the
    // next member may have it.
    if (result.http_status == 404 || result.http_status >= 500) {
      last = std::move(result);
      continue;
    }
    res.status = result.http_status;
    res.set_content(result.body, "application/json");
    return true;
  }
  if (last.http_status != 0) {
    res.status = last.http_status;
    res.set_content(last.body, "application/json");
  } else {
    ReplyError(res, 502, absl::StrCat("no member of shard ", shard, " (which holds ", id,
                                      ") answered: ", errors));
  }
  return true;
}

void HttpApi::ReplyFleetWide(const httplib::Request& req, httplib::Response& res, Json local,
                             const char* list_key, bool newest_first) const {
  Reply(res, 200, MergeFleetWide(req, std::move(local), list_key, newest_first));
}

Json HttpApi::MergeFleetWide(const httplib::Request& req, Json local, const char* list_key,
                             bool newest_first, const char* map_key) const {
  const HttpApiOptions& o = options_;
  if (o.cluster == nullptr || o.transport == nullptr || req.get_param_value("local") == "1")
    return local;
  const cluster::ClusterView view = o.cluster->view();
  const std::string self = o.cluster->self().shard;
  Json& list = local[list_key];
  for (Json& item : list) item["shard"] = self;
  Json shards = Json::array({{{"shard", self}, {"ok", true}, {"member", o.cluster->self().replica}}});
  for (cluster::ShardReply& reply :
       cluster::FanOut(view.map, self, absl::StrCat(req.path, "?", LocalQuery(req)),
                       PassOnCredentials(req), *o.transport, o.fan_out_timeout_seconds)) {
    Json status = {{"shard", reply.shard}, {"ok", reply.ok}, {"member", reply.member}};
    if (!reply.ok) status["error"] = reply.error;
    shards.push_back(std::move(status));
    if (!reply.ok) continue;
    if (map_key != nullptr && reply.body.contains(map_key) && reply.body[map_key].is_object()) {
      Json& merged = local[map_key];
      for (auto& [name, value] : reply.body[map_key].items()) {
        if (!merged.contains(name)) merged[name] = std::move(value);
      }
    }
    if (!reply.body.contains(list_key) || !reply.body[list_key].is_array()) continue;
    for (Json& item : reply.body[list_key]) {
      item["shard"] = reply.shard;
      list.push_back(std::move(item));
    }
  }
  if (newest_first) {
    std::stable_sort(list.begin(), list.end(), [](const Json& a, const Json& b) {
      return a.value("ts", 0.0) > b.value("ts", 0.0);
    });
    size_t limit = 100;  // the local list's default
    if (req.has_param("limit")) (void)absl::SimpleAtoi(req.get_param_value("limit"), &limit);
    if (limit > 0 && list.size() > limit) {
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(limit), list.end());
    }
  }
  local["shards"] = std::move(shards);
  return local;
}

}  // namespace vigil
