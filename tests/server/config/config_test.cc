#include "server/config/config.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(ConfigTest, EmptyObjectKeepsDefaults) {
  ServerOptions options;
  ASSERT_TRUE(ParseServerConfig("{}", &options).ok());
  EXPECT_EQ(options.raw_retention_seconds, 7 * 86400.0);
  EXPECT_EQ(options.max_future_skew_seconds, 300);
  EXPECT_EQ(options.max_message_bytes, 4 << 20);
  EXPECT_FALSE(options.grpc_bdp_probe);
  EXPECT_FALSE(options.memory);
}

TEST(ConfigTest, AppliesEveryKey) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({
    "data_dir": "/var/lib/vigil", "memory": true,
    "grpc_listen": "0.0.0.0:7000", "http_listen": "127.0.0.1:9000",
    "web_dir": "/usr/share/vigil/web",
    "storage": {"raw_retention_days": 2, "rollup_retention_days": 30,
                "sync_frame_log": true, "block_samples": 100,
                "block_seconds": 600, "max_series": 5000,
                "frame_log_checkpoint_mb": 8, "memtable_mb": 16,
                "idle_block_seconds": 0},
    "ingest": {"max_future_skew_seconds": 60, "max_message_mb": 2,
               "grpc_bdp_probe": true},
    "http": {"max_points": 1000, "threads": 3}})",
                                     &options);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(options.data_dir, "/var/lib/vigil");
  EXPECT_TRUE(options.memory);
  EXPECT_EQ(options.grpc_listen, "0.0.0.0:7000");
  EXPECT_EQ(options.http_listen, "127.0.0.1:9000");
  EXPECT_EQ(options.web_dir, "/usr/share/vigil/web");
  EXPECT_EQ(options.raw_retention_seconds, 2 * 86400.0);
  EXPECT_EQ(options.rollup_retention_seconds, 30 * 86400.0);
  EXPECT_TRUE(options.sync_frame_log);
  EXPECT_EQ(options.block_samples, 100u);
  EXPECT_EQ(options.block_seconds, 600);
  EXPECT_EQ(options.max_series, 5000u);
  EXPECT_EQ(options.frame_log_checkpoint_bytes, 8u << 20);
  EXPECT_EQ(options.memtable_budget_bytes, 16u << 20);
  EXPECT_EQ(options.idle_block_seconds, 0);
  EXPECT_EQ(options.max_future_skew_seconds, 60);
  EXPECT_EQ(options.max_message_bytes, 2 << 20);
  EXPECT_TRUE(options.grpc_bdp_probe);
  EXPECT_EQ(options.max_query_points, 1000u);
  EXPECT_EQ(options.http_threads, 3);
}

TEST(ConfigTest, DetectionKeys) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({"detection": {
    "enabled": false, "snapshot_seconds": 30, "scheduler_poll_seconds": 5,
    "await_scheduler_seconds": 10, "restart_resolve_seconds": 600}})",
                                     &options);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(options.detection_enabled);
  EXPECT_EQ(options.detection_snapshot_seconds, 30);
  EXPECT_EQ(options.scheduler_poll_seconds, 5);
  EXPECT_EQ(options.await_scheduler_seconds, 10);
  EXPECT_EQ(options.restart_resolve_seconds, 600);
  s = ParseServerConfig(R"({"detection": {"restart_resolve_seconds": 0}})", &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("detection.restart_resolve_seconds"),
            std::string::npos)
      << s;
}

TEST(ConfigTest, WorkerLinger) {
  ServerOptions options;
  EXPECT_EQ(options.detection_worker_linger_ms, 0);
  ASSERT_TRUE(ParseServerConfig(R"({"detection": {"worker_linger_ms": 5}})", &options).ok());
  EXPECT_EQ(options.detection_worker_linger_ms, 5);
  absl::Status s = ParseServerConfig(R"({"detection": {"worker_linger_ms": 101}})", &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("detection.worker_linger_ms"), std::string::npos)
      << s;
}

TEST(ConfigTest, WarmupKeys) {
  ServerOptions options;
  ASSERT_TRUE(ParseServerConfig(R"({"detection": {"warmup_steps": 5, "warmup_max_seconds": 10}})",
                                &options)
                  .ok());
  EXPECT_EQ(options.detector.baseline.warmup_steps, 5);
  EXPECT_EQ(options.detector.baseline.warmup_max_s, 10);
  absl::Status s = ParseServerConfig(R"({"detection": {"warmup_steps": -1}})", &options);
  EXPECT_NE(std::string(s.message()).find("detection.warmup_steps"), std::string::npos) << s;
}

// The cluster section: read as given (flags may complete it), checked as a
// whole by ValidateServerOptions; bad keys and values name their path.
TEST(ConfigTest, RemoteWriteReceiverSection) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({
    "auth": {"tokens": [{"name": "prom", "role": "remote_write",
                         "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}]},
    "remote_write_receiver": {
      "job_labels": [{"label": "pod", "regex": "^(.+)-[0-9]+$"}],
      "frame_grace_seconds": 4, "idle_job": "free", "max_open_frames": 1000,
      "metrics": [{"from": "my_gpu_watts", "to": "gpu_power_watts", "labels": {"gpu": "minor"}}]}})",
                                     &options);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(options.remote_write_receiver.has_value());
  EXPECT_EQ(options.auth.tokens[0].role, Role::kRemoteWrite);
  EXPECT_EQ(options.remote_write_receiver->frame_grace_seconds, 4);
  EXPECT_EQ(options.remote_write_receiver->idle_job, "free");
  EXPECT_EQ(options.remote_write_receiver->max_open_frames, 1000u);
  EXPECT_EQ(options.remote_write_receiver->mapping.job_labels[0].label, "pod");
  ASSERT_EQ(options.remote_write_receiver->mapping.metrics.size(), 1u);
  // Every problem with its key path; the mapping's own checks too.
  ServerOptions bad;
  s = ParseServerConfig(R"({"remote_write_receiver": {
      "frame_grace_seconds": -1, "colour": "blue",
      "job_labels": [{"label": "pod", "regex": "^.*$"}]}})",
                        &bad);
  const std::string m(s.message());
  EXPECT_NE(m.find("remote_write_receiver.frame_grace_seconds"), std::string::npos) << m;
  EXPECT_NE(m.find("remote_write_receiver.colour"), std::string::npos) << m;
  EXPECT_NE(m.find("capture group"), std::string::npos) << m;
  EXPECT_FALSE(bad.remote_write_receiver.has_value());
}

TEST(ConfigTest, ClusterSection) {
  ServerOptions options;
  options.memory = true;
  options.grpc_insecure = true;
  absl::Status s = ParseServerConfig(R"({"cluster": {
    "etcd_endpoints": ["http://127.0.0.1:2379"], "prefix": "/v", "shard": "s0",
    "replica": "a", "advertise_grpc": "h:7070", "advertise_http": "http://h:8080",
    "lease_seconds": 6, "poll_seconds": 2, "profile_backup_seconds": 30}})",
                                     &options);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(options.cluster.has_value());
  EXPECT_EQ(options.cluster->shard, "s0");
  EXPECT_EQ(options.cluster->lease_seconds, 6);
  EXPECT_EQ(options.cluster->poll_seconds, 2);
  EXPECT_EQ(options.cluster->profile_backup_seconds, 30);
  ServerOptions bad_backup;
  s = ParseServerConfig(R"({"cluster": {"profile_backup_seconds": -5}})", &bad_backup);
  EXPECT_NE(std::string(s.message()).find("cluster.profile_backup_seconds"), std::string::npos)
      << s;
  EXPECT_TRUE(ValidateServerOptions(options).ok()) << ValidateServerOptions(options);

  // etcd over TLS, with a client certificate and a user.
  ServerOptions secure;
  secure.memory = true;
  secure.grpc_insecure = true;
  s = ParseServerConfig(R"({"cluster": {
    "etcd_endpoints": ["https://etcd-0:2379", "https://etcd-1:2379"],
    "etcd_ca_file": "/etc/vigil/etcd-ca.pem", "etcd_cert_file": "/etc/vigil/etcd.pem",
    "etcd_key_file": "/etc/vigil/etcd-key.pem", "etcd_username": "vigil",
    "etcd_password_file": "/etc/vigil/etcd-password", "shard": "s0", "replica": "a",
    "peer_secret_file": "/etc/vigil/peer-secret",
    "advertise_grpc": "h:7070", "advertise_http": "http://h:8080"}})",
                        &secure);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(secure.cluster->etcd_ca_file, "/etc/vigil/etcd-ca.pem");
  EXPECT_EQ(secure.cluster->etcd_key_file, "/etc/vigil/etcd-key.pem");
  EXPECT_EQ(secure.cluster->etcd_username, "vigil");
  EXPECT_EQ(secure.cluster->etcd_password_file, "/etc/vigil/etcd-password");
  EXPECT_EQ(secure.cluster->peer_secret_file, "/etc/vigil/peer-secret");
  EXPECT_TRUE(ValidateServerOptions(secure).ok()) << ValidateServerOptions(secure);
  secure.cluster->etcd_key_file.clear();
  s = ValidateServerOptions(secure);
  EXPECT_NE(std::string(s.message()).find("etcd_key_file"), std::string::npos) << s;

  ServerOptions bad;
  s = ParseServerConfig(R"({"cluster": {"lease_seconds": 1, "shard": 7, "etcd": []}})", &bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* path : {"cluster.lease_seconds", "cluster.shard", "cluster.etcd"}) {
    EXPECT_NE(std::string(s.message()).find(path), std::string::npos) << path << ": " << s;
  }
  // Without shard and replica (no flags gave them) the server refuses.
  ServerOptions incomplete;
  incomplete.memory = true;
  incomplete.grpc_insecure = true;
  ASSERT_TRUE(
      ParseServerConfig(R"({"cluster": {"etcd_endpoints": ["http://e:2379"]}})", &incomplete)
          .ok());
  s = ValidateServerOptions(incomplete);
  EXPECT_NE(std::string(s.message()).find("cluster.shard"), std::string::npos) << s;
}

TEST(ConfigTest, ReportsEveryErrorWithItsPath) {
  ServerOptions options;
  options.data_dir = "/keep";
  absl::Status s = ParseServerConfig(R"({
    "data_dir": 5, "colour": "blue",
    "storage": {"raw_retention_days": -1, "block_samples": 1.5,
                "sync_frame_log": "yes", "bogus": 1, "idle_block_seconds": -5},
    "ingest": {"max_future_skew_seconds": "300"},
    "http": []})",
                                     &options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> lines = absl::StrSplit(s.message(), '\n');
  std::vector<std::string> paths;
  for (const std::string& line : lines) {
    paths.push_back(line.substr(0, line.find(':')));
  }
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "colour", "data_dir", "storage.bogus",
                       "storage.raw_retention_days", "storage.sync_frame_log",
                       "storage.block_samples", "storage.idle_block_seconds",
                       "ingest.max_future_skew_seconds", "http"}))
      << s.message();
  EXPECT_EQ(options.data_dir, "/keep") << "options untouched on error";
}

TEST(ConfigTest, TrustedProxiesAreCheckedWhenParsed) {
  ServerOptions options;
  ASSERT_TRUE(ParseServerConfig(R"({"http": {"trusted_proxies": ["10.0.0.0/8", "::1"]}})",
                                &options)
                  .ok());
  EXPECT_EQ(options.http_trusted_proxies, (std::vector<std::string>{"10.0.0.0/8", "::1"}));
  absl::Status s = ParseServerConfig(
      R"({"http": {"trusted_proxies": ["10.0.0.0/40", 7, "proxy.example"]}})", &options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("http.trusted_proxies[0]: trusted proxy \"10.0.0.0/40\": prefix"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("http.trusted_proxies[1]: must be a string"), std::string::npos);
  EXPECT_NE(s.message().find("http.trusted_proxies[2]"), std::string::npos);
  EXPECT_FALSE(ParseServerConfig(R"({"http": {"trusted_proxies": "10.0.0.1"}})", &options).ok());
}

TEST(ConfigTest, SyntaxErrorIsReported) {
  ServerOptions options;
  absl::Status s = ParseServerConfig("{\"memory\": tru}", &options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not valid JSON"), std::string::npos);
}

TEST(ConfigTest, MissingFileIsNotFound) {
  ServerOptions options;
  EXPECT_EQ(LoadServerConfigFile("/nonexistent/vigil.json", &options).code(),
            absl::StatusCode::kNotFound);
}

TEST(ConfigTest, ValidateRequiresDataDirAndAddresses) {
  ServerOptions options;
  options.grpc_listen = "nohost";
  options.http_listen = "127.0.0.1:99999";
  absl::Status s = ValidateServerOptions(options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data_dir:"), std::string::npos);
  EXPECT_NE(s.message().find("grpc_listen:"), std::string::npos);
  EXPECT_NE(s.message().find("http_listen:"), std::string::npos);
  options.memory = true;
  options.grpc_listen = "127.0.0.1:0";
  options.http_listen = "[::1]:8080";
  options.grpc_insecure = true;
  EXPECT_TRUE(ValidateServerOptions(options).ok());
}

}  // namespace
}  // namespace vigil

namespace vigil {
namespace {

TEST(EscalationConfigSectionsTest, ShippedExampleLoads) {
  ServerOptions options;
  absl::Status s = LoadServerConfigFile(
      std::string(VIGIL_SOURCE_DIR) + "/deploy/examples/vigil-escalation.json", &options);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(options.auth.anonymous_read);
  ASSERT_EQ(options.auth.tokens.size(), 3u);
  EXPECT_EQ(options.auth.tokens[1].role, Role::kOperator);
  EXPECT_EQ(options.notifications.receivers.size(), 11u);
  EXPECT_TRUE(options.notifications.channels.at("sms").failover);
  EXPECT_EQ(options.notifications.channels.at("im").receivers.size(), 4u);
  EXPECT_EQ(options.escalation.schedules.size(), 2u);
  EXPECT_EQ(options.actuator.secret_file, "/etc/vigil/actuator.secret");
}

// The sizing examples of deploy/examples/README.md load as they are; the
// 10,000-GPU one needs only its pair's flags (--shard, --replica, the
// advertised addresses) to be complete.
TEST(EscalationConfigSectionsTest, SizingExamplesLoad) {
  for (const char* name : {"lab-100-gpus.json", "cluster-10000-gpus.json"}) {
    ServerOptions options;
    absl::Status s = LoadServerConfigFile(
        std::string(VIGIL_SOURCE_DIR) + "/deploy/examples/" + name, &options);
    ASSERT_TRUE(s.ok()) << name << ": " << s;
    if (options.cluster.has_value()) {
      options.cluster->shard = "s0";
      options.cluster->replica = "a";
      options.cluster->advertise_grpc = "vigil-s0-a:7070";
      options.cluster->advertise_http = "http://vigil-s0-a:8080";
    }
    EXPECT_TRUE(ValidateServerOptions(options).ok()) << name << ": "
                                                     << ValidateServerOptions(options);
  }
}

TEST(EscalationConfigSectionsTest, ReportsEveryErrorWithItsPath) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({
    "auth": {"tokens": [{"name": "", "role": "god", "sha256": "abc"}], "x": 1},
    "escalation": {"policies": {"P0": {"steps": [{"targets": ["user:nobody"], "channels": ["fax"]}]}}},
    "notifications": {"receivers": [{"name": "s", "type": "slack", "settings": {}},
                                    {"name": "s", "type": "pigeon"}],
                      "channels": {"im": {"receivers": ["s", "missing"]}, "telex": {}}},
    "actuator": {"url": 7}
  })", &options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string m(s.message());
  for (const char* expected :
       {"auth.x: unknown key", "auth.tokens[0].name: required",
        "auth.tokens[0].role: must be viewer, operator, admin or remote_write",
        "auth.tokens[0].sha256: must be the 64 hex digits",
        "escalation: policies.P0.steps[0]", "notifications.receivers[0]",
        "notifications.receivers[1].name: duplicate receiver \"s\"",
        "notifications.channels.im.receivers: unknown receiver \"missing\"",
        "notifications.channels.telex: unknown key", "actuator.url: must be a string"}) {
    EXPECT_NE(m.find(expected), std::string::npos) << expected << " not in:\n" << m;
  }
  EXPECT_TRUE(options.notifications.receivers.empty());
}

}  // namespace
}  // namespace vigil
