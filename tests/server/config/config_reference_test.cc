// The server's config reference (ServerConfigReference, printed by
// vigil-server --config-reference): every key, with the defaults the code
// applies.
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/config/config.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// The reference's keys by path.
std::map<std::string, Json> Keys() {
  absl::StatusOr<Json> reference = ServerConfigReference();
  EXPECT_TRUE(reference.ok()) << reference.status();
  std::map<std::string, Json> keys;
  if (!reference.ok()) return keys;
  EXPECT_EQ((*reference)["program"], "vigil-server");
  for (const Json& key : (*reference)["keys"]) keys[key["path"]] = key;
  return keys;
}

TEST(ServerConfigReferenceTest, IsCompleteAndEveryKeyIsDescribed) {
  const std::map<std::string, Json> keys = Keys();
  EXPECT_GT(keys.size(), 150u);
  for (const auto& [path, key] : keys) {
    EXPECT_FALSE(key["type"].get<std::string>().empty()) << path;
    EXPECT_FALSE(key["meaning"].get<std::string>().empty()) << path;
  }
  // Every section of the file, and keys inside arrays, maps and the
  // escalation section (read by its own parser).
  for (const char* path :
       {"grpc_tls", "node_tokens", "storage", "ingest", "http", "detection", "auth",
        "escalation", "notifications", "actuator", "watchdog", "remote_write",
        "remote_write_receiver", "alertmanager", "cluster", "auth.tokens[].role",
        "node_tokens.sha256", "http.trusted_proxies", "notifications.receivers[].settings",
        "notifications.channels.<channel>.receivers", "watchdog.headers.<name>.env",
        "escalation.schedules[].layers[].rotation",
        "escalation.policies.<severity>.steps[].wait_minutes",
        "remote_write_receiver.metrics[].labels", "alertmanager.intake.rules[].responses",
        "cluster.profile_backup_seconds"}) {
    EXPECT_TRUE(keys.count(path)) << path;
  }
}

TEST(ServerConfigReferenceTest, DefaultsAreTheOptionsDefaultsInTheKeysUnits) {
  const std::map<std::string, Json> keys = Keys();
  ASSERT_FALSE(keys.empty());
  const ServerOptions o;
  auto default_of = [&](const std::string& path) {
    auto it = keys.find(path);
    return it == keys.end() ? Json() : it->second["default"];
  };
  EXPECT_EQ(default_of("grpc_listen"), o.grpc_listen);
  EXPECT_EQ(default_of("storage.raw_retention_days"), o.raw_retention_seconds / 86400);
  EXPECT_EQ(default_of("storage.raw_retention_days"), 7);
  EXPECT_EQ(default_of("storage.rollup_retention_days"), 183);
  EXPECT_EQ(default_of("storage.memtable_mb"), o.memtable_budget_bytes >> 20);
  EXPECT_EQ(default_of("storage.frame_log_checkpoint_mb"), 96);
  EXPECT_EQ(default_of("storage.idle_block_seconds"), o.idle_block_seconds);
  EXPECT_EQ(default_of("storage.idle_block_seconds"), 900);
  EXPECT_EQ(default_of("ingest.max_message_mb"), o.max_message_bytes >> 20);
  EXPECT_EQ(default_of("http.threads"), o.http_threads);
  EXPECT_EQ(default_of("detection.learn_steps"), o.detector.baseline.learn_steps);
  EXPECT_EQ(default_of("detection.family_pattern"), o.detector.lifecycle.family_pattern);
  EXPECT_EQ(default_of("notifications.retry_max_seconds"), 300);
  EXPECT_EQ(default_of("watchdog.interval_seconds"), 60);
  EXPECT_EQ(default_of("remote_write.batch_samples"), 5000);
  EXPECT_EQ(default_of("cluster.prefix"), "/vigil");
  EXPECT_EQ(default_of("alertmanager.intake.node_labels"),
            Json::array({"Hostname", "node", "instance"}));
  // A default that depends on another key's default.
  EXPECT_EQ(default_of("grpc_tls.node_identity"), "certificate");
  // The escalation defaults: P0 pages the primary twice, 5 minutes apart.
  const Json policies = default_of("escalation.policies");
  ASSERT_TRUE(policies.contains("P0")) << policies;
  EXPECT_EQ(policies["P0"]["steps"].size(), 2u);
  EXPECT_EQ(policies["P0"]["steps"][0]["wait_minutes"], 5);
  EXPECT_EQ(policies["P0"]["steps"][0]["repeat"], 2);
  EXPECT_EQ(policies["P3"]["steps"], Json::array());
  EXPECT_EQ(default_of("escalation.interlocks.approval_severities"), Json::array({"P1"}));
  // A required key has none.
  EXPECT_TRUE(default_of("escalation.users[].name").is_null());
  EXPECT_EQ(keys.at("escalation.users[].name")["required"], true);
  EXPECT_TRUE(default_of("grpc_tls.cert_file").is_null());
  EXPECT_EQ(keys.at("grpc_tls.cert_file")["required"], true);
  EXPECT_EQ(keys.at("grpc_tls.client_ca_file")["required"], false);
}

TEST(ServerConfigReferenceTest, RangesComeFromTheParser) {
  const std::map<std::string, Json> keys = Keys();
  ASSERT_FALSE(keys.empty());
  EXPECT_EQ(keys.at("storage.block_samples")["range"], "[1, 1000000]");
  EXPECT_EQ(keys.at("storage.raw_retention_days")["range"], "(0, 3660]");
  EXPECT_EQ(keys.at("detection.learn_max_seconds")["range"], "(0, 2592000]");
  EXPECT_EQ(keys.at("notifications.channels")["range"],
            "keys: email, im, pagerduty, phone, sms, ticket, webhook");
  // Receiver types and their settings come from notify's table.
  EXPECT_THAT(keys.at("notifications.receivers[].type")["range"].get<std::string>(),
              HasSubstr("slack"));
  EXPECT_THAT(keys.at("notifications.receivers[].settings")["range"].get<std::string>(),
              HasSubstr("slack {url}"));
  EXPECT_THAT(keys.at("alertmanager.intake.rules[].responses")["range"].get<std::string>(),
              HasSubstr("cordon_node"));
}

TEST(ServerConfigReferenceTest, DescribingLeavesParsingAlone) {
  ASSERT_TRUE(ServerConfigReference().ok());
  ServerOptions options;
  ASSERT_TRUE(ParseServerConfig("{}", &options).ok());
  EXPECT_FALSE(options.grpc_tls.has_value());
  EXPECT_FALSE(options.remote_write_receiver.has_value());
  EXPECT_FALSE(options.cluster.has_value());
  EXPECT_FALSE(options.alertmanager.intake);
  EXPECT_TRUE(options.auth.tokens.empty());
}

}  // namespace
}  // namespace vigil
