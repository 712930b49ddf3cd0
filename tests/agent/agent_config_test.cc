// The agent's JSON config: every key, every error at once, validation.
#include "agent/agent_config.h"

#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

TEST(AgentConfigTest, DefaultsAreSafe) {
  AgentConfig c;
  EXPECT_FALSE(c.transport.insecure);
  EXPECT_EQ(c.spool_max_mb, 256u);
  EXPECT_TRUE(c.metrics_listen.empty());
  EXPECT_TRUE(c.nvml.enabled && c.infiniband.enabled && c.disk.enabled &&
              c.cpu.enabled && c.training.enabled);
  EXPECT_EQ(c.nvml.library, "libnvidia-ml.so.1");
  EXPECT_EQ(c.training.socket, "/run/vigil/train.sock");
  // Rank job claims are checked with the scheduler unless turned off.
  EXPECT_EQ(c.training.verify_jobs, "scheduler");
  EXPECT_FALSE(c.training.refuse_unverified);
}

TEST(AgentConfigTest, ParsesEveryKey) {
  AgentConfig c;
  absl::Status s = ParseAgentConfig(R"({
    "server": "vigil.example:7070", "node": "gpu-a17", "idle_job": "none",
    "interval_seconds": 0.5,
    "transport": {"ca_file": "/etc/vigil/tls/ca.pem",
                  "cert_file": "/etc/vigil/tls/node.pem",
                  "key_file": "/etc/vigil/tls/node.key",
                  "server_name": "vigil", "token_file": "/etc/vigil/token"},
    "spool_dir": "/var/lib/vigil-agent/spool", "spool_max_mb": 512,
    "metrics_listen": "127.0.0.1:9465",
    "sysfs_root": "/host/sys", "proc_root": "/host/proc",
    "collectors": {
      "nvml": {"enabled": true, "library": "/usr/lib/libnvidia-ml.so.1",
               "events": false},
      "infiniband": {"enabled": false},
      "disk": {"devices": ["nvme0n1", "nvme1n1"]},
      "cpu": {"enabled": false},
      "training": {"socket": "/run/vigil/t.sock", "stale_seconds": 120,
                   "verify_jobs": "off", "refuse_unverified": true}
    }})",
                                    &c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.server, "vigil.example:7070");
  EXPECT_EQ(c.node, "gpu-a17");
  EXPECT_EQ(c.idle_job, "none");
  EXPECT_DOUBLE_EQ(c.interval_seconds, 0.5);
  EXPECT_EQ(c.transport.key_file, "/etc/vigil/tls/node.key");
  EXPECT_EQ(c.transport.server_name, "vigil");
  EXPECT_EQ(c.transport.token_file, "/etc/vigil/token");
  EXPECT_EQ(c.spool_max_mb, 512u);
  EXPECT_EQ(c.proc_root, "/host/proc");
  EXPECT_FALSE(c.nvml.events);
  EXPECT_FALSE(c.infiniband.enabled);
  EXPECT_EQ(c.disk.devices.size(), 2u);
  EXPECT_FALSE(c.cpu.enabled);
  EXPECT_DOUBLE_EQ(c.training.stale_seconds, 120);
  EXPECT_EQ(c.training.verify_jobs, "off");
  EXPECT_TRUE(c.training.refuse_unverified);
  EXPECT_TRUE(ValidateAgentConfig(c).ok());
}

TEST(AgentConfigTest, ReportsEveryProblemAndChangesNothing) {
  AgentConfig c;
  c.server = "keep:1";
  absl::Status s = ParseAgentConfig(R"({
    "server": 7070, "spool_max_mb": 0, "colectors": {},
    "transport": {"insecure": "yes"},
    "collectors": {"nvml": {"libary": "x"}, "gpu": {},
                   "disk": {"devices": "sda"},
                   "training": {"verify_jobs": "trust"}}})",
                                    &c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  std::string m(s.message());
  for (const char* want :
       {"server: must be a string", "spool_max_mb: must be an integer",
        "colectors: unknown key", "transport.insecure: must be true or false",
        "collectors.nvml.libary: unknown key", "collectors.gpu: unknown key",
        "collectors.disk.devices: must be an array of strings",
        "collectors.training.verify_jobs: must be \"scheduler\" or \"off\""}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << " in\n" << m;
  }
  EXPECT_EQ(c.server, "keep:1");
}

TEST(AgentConfigTest, ServerUnreachableKeys) {
  AgentConfig c;
  EXPECT_EQ(c.unreachable_after_seconds, 300);
  EXPECT_TRUE(c.status_file.empty());
  absl::Status s = ParseAgentConfig(R"({"unreachable_after_seconds": 120,
    "status_file": "/var/lib/node_exporter/textfile_collector/vigil_agent.prom"})",
                                    &c);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.unreachable_after_seconds, 120);
  EXPECT_EQ(c.status_file, "/var/lib/node_exporter/textfile_collector/vigil_agent.prom");
  s = ParseAgentConfig(R"({"unreachable_after_seconds": 0, "status_file": 1})", &c);
  std::string m(s.message());
  for (const char* want : {"unreachable_after_seconds: must be a number > 0",
                           "status_file: must be a string"})
    EXPECT_NE(m.find(want), std::string::npos) << want << " in\n" << m;
}

TEST(AgentConfigTest, ExporterCollectorKeys) {
  AgentConfig c;
  EXPECT_FALSE(c.exporter.enabled);  // off unless asked for
  ASSERT_TRUE(ParseAgentConfig(R"({"collectors": {"exporter": {
      "enabled": true, "urls": ["http://127.0.0.1:9400/metrics"], "timeout_seconds": 2,
      "passthrough": ["^DCGM_FI_PROF_.*"]}}})",
                               &c)
                  .ok());
  EXPECT_TRUE(c.exporter.enabled);
  EXPECT_EQ(c.exporter.urls, (std::vector<std::string>{"http://127.0.0.1:9400/metrics"}));
  EXPECT_EQ(c.exporter.timeout_seconds, 2);
  EXPECT_EQ(c.exporter.mapping.passthrough, (std::vector<std::string>{"^DCGM_FI_PROF_.*"}));
  AgentConfig bad;
  absl::Status s = ParseAgentConfig(R"({"collectors": {"exporter": {"enabled": true,
      "colour": 1}}})",
                                    &bad);
  EXPECT_NE(s.message().find("collectors.exporter.colour"), std::string::npos) << s;
  EXPECT_NE(s.message().find("collectors.exporter.urls"), std::string::npos) << s;
  // The node and the job are the agent's own: keys that would name them
  // from labels are refused rather than ignored.
  s = ParseAgentConfig(R"({"collectors": {"exporter": {"urls": ["http://127.0.0.1:9400"],
      "node_labels": ["Hostname"], "job_labels": [{"label": "job_id"}]}}})",
                       &bad);
  EXPECT_NE(s.message().find("collectors.exporter.node_labels"), std::string::npos) << s;
  EXPECT_NE(s.message().find("collectors.exporter.job_labels"), std::string::npos) << s;
  EXPECT_TRUE(EnableOnlyCollectors("exporter,training", &c).ok());
  EXPECT_TRUE(c.exporter.enabled);
  EXPECT_FALSE(c.nvml.enabled);
}

TEST(AgentConfigTest, SyntaxErrorNamesLineAndColumn) {
  AgentConfig c;
  absl::Status s = ParseAgentConfig("{\n  \"server\": \"a:1\",,\n}", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("line 2"), std::string::npos) << s;
}

TEST(AgentConfigTest, LoadFileNamesTheFile) {
  AgentConfig c;
  absl::Status missing = LoadAgentConfigFile("/nonexistent/agent.json", &c);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  std::string path = ::testing::TempDir() + "/agent_config_test.json";
  std::ofstream(path) << R"({"node": 3})";
  absl::Status bad = LoadAgentConfigFile(path, &c);
  EXPECT_NE(std::string(bad.message()).find(path), std::string::npos) << bad;
}

TEST(AgentConfigTest, EnableOnlyCollectors) {
  AgentConfig c;
  ASSERT_TRUE(EnableOnlyCollectors("training,disk", &c).ok());
  EXPECT_TRUE(c.training.enabled && c.disk.enabled);
  EXPECT_FALSE(c.nvml.enabled || c.infiniband.enabled || c.cpu.enabled);
  ASSERT_TRUE(EnableOnlyCollectors("none", &c).ok());
  EXPECT_FALSE(c.training.enabled || c.disk.enabled);
  absl::Status s = EnableOnlyCollectors("nvml,gpus", &c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("\"gpus\""), std::string::npos);
}

TEST(AgentConfigTest, Validate) {
  AgentConfig ok;
  ok.server = "vigil:7070";
  ok.node = "n1";
  ok.transport.insecure = true;
  EXPECT_TRUE(ValidateAgentConfig(ok).ok());
  struct Case {
    const char* name;
    void (*mutate)(AgentConfig*);
  } cases[] = {
      {"no server", [](AgentConfig* c) { c->server.clear(); }},
      {"server not host:port", [](AgentConfig* c) { c->server = "vigil"; }},
      {"port out of range", [](AgentConfig* c) { c->server = "v:70000"; }},
      {"no node", [](AgentConfig* c) { c->node.clear(); }},
      {"empty idle job", [](AgentConfig* c) { c->idle_job.clear(); }},
      {"zero interval", [](AgentConfig* c) { c->interval_seconds = 0; }},
      {"bad metrics address", [](AgentConfig* c) { c->metrics_listen = "x"; }},
  };
  for (const Case& tc : cases) {
    AgentConfig c = ok;
    tc.mutate(&c);
    EXPECT_EQ(ValidateAgentConfig(c).code(), absl::StatusCode::kInvalidArgument)
        << tc.name;
  }
}

TEST(AgentConfigTest, ReferenceHasEveryKeyWithTheConfigsDefaults) {
  absl::StatusOr<nlohmann::json> reference = AgentConfigReference();
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ((*reference)["program"], "vigil-agent");
  std::map<std::string, nlohmann::json> keys;
  for (const nlohmann::json& key : (*reference)["keys"]) keys[key["path"]] = key;
  const AgentConfig c;
  for (const char* path :
       {"server", "transport.token_file", "collectors.nvml.library", "collectors.infiniband",
        "collectors.exporter.metrics[].scale", "collectors.training.verify_jobs"}) {
    ASSERT_TRUE(keys.count(path)) << path;
    EXPECT_FALSE(keys[path]["meaning"].get<std::string>().empty()) << path;
  }
  EXPECT_EQ(keys["interval_seconds"]["default"], c.interval_seconds);
  EXPECT_EQ(keys["spool_max_mb"]["default"], 256);
  EXPECT_EQ(keys["spool_max_mb"]["range"], "[1, 1048576]");
  EXPECT_EQ(keys["collectors.nvml.library"]["default"], c.nvml.library);
  EXPECT_EQ(keys["collectors.exporter.enabled"]["default"], false);
  EXPECT_EQ(keys["collectors.training.enabled"]["default"], true);
  EXPECT_EQ(keys["collectors.exporter.timeout_seconds"]["default"], 0.5);
  EXPECT_EQ(keys["collectors.training.verify_jobs"]["range"], "\"scheduler\", \"off\"");
}

}  // namespace
}  // namespace vigil::agent
