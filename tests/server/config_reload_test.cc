// A config reload as VigilServer wires it (POST /-/reload; SIGHUP calls the
// same Reload): tokens, on-call schedules and receivers change at once,
// other keys are listed as waiting for a restart, a bad config changes
// nothing, and /metrics and the audit log say what happened. The pure
// parts (which keys changed, which a running server takes, the file
// checks) are tested on their own below.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "notify/signing.h"
#include "server/config/reload.h"
#include "server/server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using testing::HttpCall;
using testing::HttpGet;
using testing::HttpResult;
using testing::TestOptions;

constexpr char kAdminToken[] = "admin-token";
constexpr char kOperatorToken[] = "operator-token";

// Accepts every request.
class NullTransport : public Transport {
 public:
  TransportResult Send(const OutboundRequest&, double) override {
    return TransportResult{200, "OK", {}, ""};
  }
};

// A config with an admin and an operator token, `on_call` as the primary
// on-call, a Slack receiver for the "im" channel, and `extra` merged in.
Json Config(const std::string& on_call, const Json& extra = Json::object()) {
  Json config = {
      {"auth",
       {{"tokens",
         {{{"name", "ada"}, {"role", "admin"}, {"sha256", HexEncode(Sha256(kAdminToken))}},
          {{"name", "olga"},
           {"role", "operator"},
           {"sha256", HexEncode(Sha256(kOperatorToken))}}}}}},
      {"escalation",
       {{"users", {{{"name", "alice"}}, {{"name", "bob"}}}},
        {"schedules",
         {{{"name", "primary"}, {"layers", {{{"start", 1700000000}, {"users", {on_call}}}}}}}}}},
      {"notifications",
       {{"receivers", {{{"name", "slack"}, {"type", "slack"},
                        {"settings", {{"url", "http://slack.test/hook"}}}}}},
        {"channels", {{"im", {{"receivers", {"slack"}}}}}}}}};
  config.merge_patch(extra);
  return config;
}

class ConfigReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // ctest runs each test on its own, in parallel: one file each.
    path_ = absl::StrCat(::testing::TempDir(), "/vigil_reload_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".json");
    Write(Config("alice"));
    source_.base = TestOptions();
    source_.file = path_;
    absl::StatusOr<LoadedConfig> loaded = LoadConfig(source_);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    server_ = std::make_unique<VigilServer>(loaded->options, &clock_, nullptr, &transport_);
    server_->EnableReload(source_, *loaded);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { EXPECT_TRUE(server_->Stop().ok()); }

  void Write(const Json& config) { Write(config.dump(2)); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }

  HttpResult Reload(const std::string& token) {
    return HttpCall(server_->http_port(), "POST", "/-/reload", "", token);
  }
  std::string OnCall() {
    const Json oncall = Json::parse(HttpGet(server_->http_port(), "/api/v1/oncall").body);
    return oncall["schedules"][0]["user"].is_string()
               ? oncall["schedules"][0]["user"].get<std::string>()
               : "";
  }
  std::string Metrics() { return HttpGet(server_->http_port(), "/metrics").body; }

  std::string path_;
  ConfigSource source_;
  FakeClock clock_;
  NullTransport transport_;
  std::unique_ptr<VigilServer> server_;
};

TEST_F(ConfigReloadTest, TokensSchedulesAndReceiversChangeAtOnceTheRestWaitsForARestart) {
  EXPECT_EQ(OnCall(), "alice");
  Json next = Config("bob", {{"storage", {{"block_samples", 360}}}});
  next["auth"]["tokens"].erase(1);  // olga's
  next["notifications"]["receivers"][0]["settings"]["url"] = "http://chat.test/hook";
  Write(next);

  EXPECT_EQ(Reload(kOperatorToken).status, 403) << "an admin's call";
  EXPECT_EQ(Reload("").status, 401);
  const HttpResult reloaded = Reload(kAdminToken);
  ASSERT_EQ(reloaded.status, 200) << reloaded.body;
  const Json body = Json::parse(reloaded.body);
  EXPECT_EQ(body["applied"],
            Json({"auth.tokens", "escalation.schedules", "notifications.receivers"}));
  EXPECT_EQ(body["restart_required"], Json({"storage.block_samples"}));

  EXPECT_EQ(OnCall(), "bob");
  EXPECT_EQ(HttpCall(server_->http_port(), "GET", "/api/v1/whoami", "", kOperatorToken).status,
            401)
      << "olga's token was removed";
  const std::string metrics = Metrics();
  EXPECT_TRUE(absl::StrContains(metrics, "vigil_config_reloads_total{result=\"ok\"} 1\n"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "vigil_config_last_reload_successful 1\n"));
  EXPECT_TRUE(absl::StrContains(metrics, "vigil_config_restart_required_keys 1\n"));

  // Reloading the same file again applies nothing new; the restart is
  // still owed.
  const Json again = Json::parse(Reload(kAdminToken).body);
  EXPECT_EQ(again["applied"], Json::array());
  EXPECT_EQ(again["restart_required"], Json({"storage.block_samples"}));

  const Json audit =
      Json::parse(HttpCall(server_->http_port(), "GET", "/api/v1/audit", "", kAdminToken).body);
  ASSERT_GE(audit["entries"].size(), 2u);
  EXPECT_EQ(audit["entries"][1]["action"], "reload_config");
  EXPECT_EQ(audit["entries"][1]["who"], "ada");
  EXPECT_TRUE(absl::StrContains(audit["entries"][1]["detail"].get<std::string>(),
                                "applied: auth.tokens, escalation.schedules"))
      << audit.dump(1);
}

// Node `node` of job `job`: five healthy frames, then GPU 3's double-bit
// ECC counter goes up (a red line), stamped with `clock`; returns once
// detection has run on them.
void RaiseEccFault(int grpc_port, FakeClock& clock, const std::string& job,
                   const std::string& node) {
  testing::IngestClient client(grpc_port);
  client.Open();
  uint64_t seq = 0;
  v1::FrameBatch hello = testing::Batch(++seq, node, "a");
  *hello.add_series() = testing::Def(1, "gpu_ecc_dbe_total", {{"gpu", "3"}});
  ASSERT_TRUE(client.Send(hello).has_value());
  for (int i = 0; i < 6; ++i) {
    v1::FrameBatch batch = testing::Batch(++seq);
    v1::Frame frame = testing::Frame(job, clock.Now(), {1}, {i < 5 ? 0.0 : 1.0});
    frame.set_step(i);
    *batch.add_frames() = frame;
    ASSERT_TRUE(client.Send(batch).has_value());
    clock.Advance(1);
  }
  ASSERT_TRUE(client.Send(testing::Batch(++seq)).has_value());
}

// The severity of `job`'s incident.
std::string SeverityOf(int http_port, const std::string& job) {
  const Json list =
      Json::parse(HttpGet(http_port, "/api/v1/incidents?state=all&job=" + job).body);
  return list["incidents"].empty() ? "none" : list["incidents"][0]["severity"].get<std::string>();
}

// A rules file named anew, then edited in place, applies to the next fault
// at each reload.
TEST_F(ConfigReloadTest, AReloadedRulesFileAppliesToTheNextFault) {
  const std::string rules = path_ + ".rules.json";
  std::ofstream(rules) << R"({"rules": [{"name": "ecc_double_bit", "severity": "P1"}]})";
  Write(Config("alice", {{"detection", {{"rules_file", rules}}}}));
  HttpResult reloaded = Reload(kAdminToken);
  ASSERT_EQ(reloaded.status, 200) << reloaded.body;
  EXPECT_EQ(Json::parse(reloaded.body)["applied"], Json({"detection.rules_file"}));
  RaiseEccFault(server_->grpc_port(), clock_, "llm-a", "n1");
  EXPECT_EQ(SeverityOf(server_->http_port(), "llm-a"), "P1");

  std::ofstream(rules) << R"({"rules": [{"name": "ecc_double_bit", "severity": "P2"}]})";
  reloaded = Reload(kAdminToken);
  ASSERT_EQ(reloaded.status, 200) << reloaded.body;
  EXPECT_EQ(Json::parse(reloaded.body)["applied"], Json({"detection.rules_file (content)"}));
  RaiseEccFault(server_->grpc_port(), clock_, "llm-b", "n2");
  EXPECT_EQ(SeverityOf(server_->http_port(), "llm-b"), "P2");
  EXPECT_EQ(SeverityOf(server_->http_port(), "llm-a"), "P1") << "open incidents keep theirs";

  // A reopen window escalation would outlive is refused like any error.
  std::ofstream(rules) << R"({"settings": {"reopen_window_s": 700000}})";
  const HttpResult refused = Reload(kAdminToken);
  EXPECT_EQ(refused.status, 400);
  EXPECT_TRUE(absl::StrContains(refused.body, "reopen_window_s must be below")) << refused.body;
}

TEST_F(ConfigReloadTest, ABadConfigChangesNothing) {
  // Not JSON; an unknown user in a schedule; an unreadable secret file; a
  // rules file with an error: each is refused whole, naming the problem.
  const std::string rules = ::testing::TempDir() + "/vigil_reload_bad_rules.json";
  std::ofstream(rules) << R"({"rules": [{"name": 1}]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not valid JSON"},
       {Config("mallory").dump(), "unknown user \\\"mallory\\\""},
       {Config("bob", {{"actuator", {{"url", "http://127.0.0.1:1/"},
                                      {"secret_file", "/nonexistent/actuator.secret"}}}})
            .dump(),
        "actuator.secret_file: cannot read /nonexistent/actuator.secret"},
       {Config("bob", {{"detection", {{"rules_file", rules}}}}).dump(),
        "detection.rules_file"}};
  for (const auto& [text, expected] : cases) {
    Write(text);
    const HttpResult refused = Reload(kAdminToken);
    EXPECT_EQ(refused.status, 400) << text;
    EXPECT_TRUE(absl::StrContains(refused.body, "nothing changed")) << refused.body;
    EXPECT_TRUE(absl::StrContains(refused.body, expected)) << expected << "\n" << refused.body;
    EXPECT_EQ(OnCall(), "alice");
  }
  const std::string metrics = Metrics();
  EXPECT_TRUE(absl::StrContains(metrics, "vigil_config_last_reload_successful 0\n")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "vigil_config_reloads_total{result=\"error\"} 4\n"));
  EXPECT_EQ(HttpCall(server_->http_port(), "GET", "/api/v1/whoami", "", kOperatorToken).status,
            200);
}

TEST(ConfigReloadKeysTest, ChangedKeysNameTheDeepestObjectKeyAndTheRulesContent) {
  LoadedConfig before, after;
  before.document = {{"storage", {{"block_samples", 720}, {"sync_frame_log", false}}},
                     {"escalation", {{"users", Json::array()}}}};
  after.document = {{"storage", {{"block_samples", 360}, {"sync_frame_log", false}}},
                    {"escalation", {{"users", {{{"name", "bob"}}}}}},
                    {"http", {{"threads", 8}}}};
  before.options.rules_file = after.options.rules_file = "/etc/vigil/rules.json";
  before.rules_sha256 = "aa";
  after.rules_sha256 = "bb";
  EXPECT_THAT(ChangedKeys(before, after),
              ElementsAre("escalation.users", "http.threads", "storage.block_samples",
                          "detection.rules_file (content)"));
  EXPECT_TRUE(ChangedKeys(before, before).empty());

  EXPECT_TRUE(ReloadableKey("auth"));
  EXPECT_TRUE(ReloadableKey("escalation.users"));
  EXPECT_TRUE(ReloadableKey("notifications.channels"));
  EXPECT_FALSE(ReloadableKey("notifications.retry_base_seconds"));
  EXPECT_FALSE(ReloadableKey("notifications"));
  EXPECT_FALSE(ReloadableKey("authx"));
  EXPECT_TRUE(ReloadableKey("detection.rules_file"));
  EXPECT_TRUE(ReloadableKey("detection.rules_file (content)"));
  EXPECT_FALSE(ReloadableKey("detection.rules_files"));
  EXPECT_FALSE(ReloadableKey("detection.k_sigma"));
  EXPECT_FALSE(ReloadableKey("storage.block_samples"));
}

TEST(ConfigReloadKeysTest, CheckConfigFilesListsEveryUnreadableFile) {
  LoadedConfig config;
  config.document = {
      {"grpc_tls", {{"cert_file", "/nonexistent/server.crt"}, {"key_file", ""}}},
      {"node_tokens", {{"file", "/nonexistent/tokens"}}},
      {"watchdog", {{"headers", {{"Authorization", {{"file", "/nonexistent/key"}}}}}}}};
  absl::Status s = CheckConfigFiles(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "grpc_tls.cert_file: cannot read /nonexistent/server.crt\n"
            "node_tokens.file: cannot read /nonexistent/tokens\n"
            "watchdog.headers.Authorization.file: cannot read /nonexistent/key");
  EXPECT_TRUE(CheckConfigFiles(LoadedConfig()).ok());
}

}  // namespace
}  // namespace vigil
