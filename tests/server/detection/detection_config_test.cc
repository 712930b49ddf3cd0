// The "detection" section of the server config.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "server/config/config.h"
#include "server/server.h"

namespace vigil {
namespace {

TEST(DetectionConfigTest, DefaultsRunTheCatalogue) {
  ServerOptions options;
  ASSERT_TRUE(ParseServerConfig("{}", &options).ok());
  EXPECT_TRUE(options.detection_enabled);
  EXPECT_TRUE(options.rules_file.empty());
  EXPECT_EQ(options.detector.baseline.learn_steps, 1000);
  EXPECT_EQ(options.detector.baseline.k_sigma, 3.0);
}

TEST(DetectionConfigTest, AppliesEveryKey) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({"detection": {
    "enabled": false, "rules_file": "/etc/vigil/rules.json",
    "learn_steps": 500, "k_sigma": 4.5}})",
                                     &options);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(options.detection_enabled);
  EXPECT_EQ(options.rules_file, "/etc/vigil/rules.json");
  EXPECT_EQ(options.detector.baseline.learn_steps, 500);
  EXPECT_EQ(options.detector.baseline.k_sigma, 4.5);
}

TEST(DetectionConfigTest, ReportsEveryError) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({"detection": {
    "enabled": 1, "rules_file": 2, "learn_steps": 0, "k_sigma": -3,
    "sigma": 3}})",
                                     &options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* key :
       {"detection.enabled:", "detection.rules_file:", "detection.learn_steps:",
        "detection.k_sigma:", "detection.sigma: unknown key"}) {
    EXPECT_NE(s.message().find(key), std::string::npos) << key << "\n" << s;
  }
  EXPECT_TRUE(options.detection_enabled);
}

TEST(DetectionConfigTest, KSigmaMustBeAboveTheClearBand) {
  ServerOptions options;
  options.memory = true;
  ASSERT_TRUE(ParseServerConfig(R"({"detection": {"k_sigma": 1.5}})", &options).ok());
  absl::Status s = ValidateServerOptions(options);
  EXPECT_NE(s.message().find("detection.k_sigma"), std::string::npos) << s;
}

TEST(DetectionConfigTest, MissingRuleFileIsNotFound) {
  ServerOptions options;
  options.rules_file = "/nonexistent/rules.json";
  absl::StatusOr<RuleSet> rules = LoadServerRules(options);
  EXPECT_EQ(rules.status().code(), absl::StatusCode::kNotFound);
}

TEST(DetectionConfigTest, ReopenWindowMustEndBeforeEscalationForgets) {
  const std::string path = ::testing::TempDir() + "/reopen_rules.json";
  std::ofstream(path) << R"({"settings": {"reopen_window_s": 700000}})";
  ServerOptions options;
  options.memory = true;
  options.grpc_listen = "127.0.0.1:0";
  options.http_listen = "127.0.0.1:0";
  options.rules_file = path;
  options.grpc_insecure = true;
  VigilServer server(options);
  absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("reopen_window_s must be below"), std::string::npos) << s;
}

}  // namespace
}  // namespace vigil
