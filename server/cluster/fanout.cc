#include "server/cluster/fanout.h"

#include <future>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vigil::cluster {
namespace {

ShardReply AskShard(const std::string& shard, const std::vector<Member>& members,
                    const std::string& path_and_query,
                    const std::vector<std::pair<std::string, std::string>>& credentials,
                    Transport& transport, double timeout_seconds) {
  ShardReply reply;
  reply.shard = shard;
  reply.error = "no live member";
  for (const Member& member : members) {
    OutboundRequest request;
    request.method = "GET";
    request.url = absl::StrCat(member.http, path_and_query);
    request.headers = credentials;
    reply.member = member.replica;
    const TransportResult result = transport.Send(request, timeout_seconds);
    if (result.http_status != 200) {
      reply.error = result.http_status == 0
                        ? absl::StrCat(member.replica, ": ", result.error)
                        : absl::StrCat(member.replica, ": HTTP ", result.http_status);
      continue;
    }
    nlohmann::json body = nlohmann::json::parse(result.body, nullptr, false);
    if (!body.is_object()) {
      reply.error = absl::StrCat(member.replica, ": answer is not a JSON object");
      continue;
    }
    reply.ok = true;
    reply.error.clear();
    reply.body = std::move(body);
    return reply;
  }
  return reply;
}

}  // namespace

std::vector<ShardReply> FanOut(const ShardMap& map, const std::string& self_shard,
                               const std::string& path_and_query,
                               const std::vector<std::pair<std::string, std::string>>& credentials,
                               Transport& transport, double timeout_seconds) {
  std::vector<std::future<ShardReply>> pending;
  for (const std::string& shard : map.shards()) {
    if (shard == self_shard) continue;
    pending.push_back(std::async(std::launch::async, [&, shard] {
      return AskShard(shard, map.MembersOf(shard), path_and_query, credentials, transport,
                      timeout_seconds);
    }));
  }
  std::vector<ShardReply> replies;
  for (auto& reply : pending) replies.push_back(reply.get());
  return replies;
}

std::string ShardNamedBy(std::string_view id) {
  std::string_view rest;
  for (std::string_view prefix : {"inc-", "act-"}) {
    if (id.substr(0, prefix.size()) == prefix) rest = id.substr(prefix.size());
  }
  const size_t dash = rest.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == rest.size()) return "";
  for (char c : rest.substr(dash + 1)) {
    if (c < '0' || c > '9') return "";
  }
  // Action ids name the member after the shard ("act-s0~a-000001").
  return std::string(rest.substr(0, std::min(dash, rest.find('~'))));
}

}  // namespace vigil::cluster
