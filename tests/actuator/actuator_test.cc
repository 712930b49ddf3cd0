// vigil-actuator's flags and the assembled service over real HTTP on
// 127.0.0.1:0 (noop backend, fake clock).
#include "actuator/actuator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "notify/signing.h"
#include "tests/actuator/test_util.h"

namespace vigil::actuator {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::ScratchDir;
using testing::WriteFile;

std::vector<std::string> Args(std::initializer_list<const char*> extra) {
  std::vector<std::string> args = {"--secret-file", "/s", "--backend", "noop",
                                   "--audit-log", "/a.jsonl"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(ActuatorFlagsTest, DefaultsAndEveryFlag) {
  absl::StatusOr<ActuatorOptions> defaults = ParseActuatorFlags(Args({}));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->listen, "127.0.0.1:9191");
  EXPECT_EQ(defaults->backend, "noop");
  EXPECT_EQ(defaults->replay_window_seconds, 300);
  EXPECT_EQ(defaults->checkpoint_timeout_seconds, 300);
  EXPECT_EQ(defaults->slurm.checkpoint_signal, "USR1");
  EXPECT_EQ(defaults->slurm.scontrol, "scontrol");
  EXPECT_EQ(defaults->kubernetes.default_namespace, "default");
  EXPECT_TRUE(defaults->echo_audit);

  absl::StatusOr<ActuatorOptions> all = ParseActuatorFlags(
      {"--listen=127.0.0.1:0", "--secret-file", "/etc/vigil/secret", "--backend", "slurm",
       "--audit-log", "/var/log/a.jsonl", "--replay-window-seconds", "60",
       "--checkpoint-timeout-seconds=90", "--checkpoint-poll-seconds", "0.5",
       "--checkpoint-dir", "/ckpt", "--checkpoint-signal", "sigusr2",
       "--scontrol", "/opt/slurm/bin/scontrol", "--scancel", "/x/scancel", "--squeue", "/x/squeue",
       "--command-timeout-seconds", "12", "--k8s-api", "https://10.0.0.1:6443",
       "--k8s-token-file", "/t", "--k8s-ca-file=", "--k8s-namespace", "ml",
       "--k8s-timeout-seconds", "4", "--quiet"});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->listen, "127.0.0.1:0");
  EXPECT_EQ(all->secret_file, "/etc/vigil/secret");
  EXPECT_EQ(all->audit_log, "/var/log/a.jsonl");
  EXPECT_EQ(all->replay_window_seconds, 60);
  EXPECT_EQ(all->checkpoint_timeout_seconds, 90);
  EXPECT_EQ(all->slurm.checkpoint_poll_seconds, 0.5);
  EXPECT_EQ(all->kubernetes.checkpoint_poll_seconds, 0.5);
  EXPECT_EQ(all->slurm.checkpoint_dir, "/ckpt");
  EXPECT_EQ(all->slurm.checkpoint_signal, "USR2");
  EXPECT_EQ(all->slurm.scontrol, "/opt/slurm/bin/scontrol");
  EXPECT_EQ(all->slurm.scancel, "/x/scancel");
  EXPECT_EQ(all->slurm.squeue, "/x/squeue");
  EXPECT_EQ(all->slurm.command_timeout_seconds, 12);
  EXPECT_EQ(all->kubernetes.api_url, "https://10.0.0.1:6443");
  EXPECT_EQ(all->kubernetes.token_file, "/t");
  EXPECT_EQ(all->kubernetes.ca_file, "");
  EXPECT_EQ(all->kubernetes.default_namespace, "ml");
  EXPECT_EQ(all->kubernetes.request_timeout_seconds, 4);
  EXPECT_FALSE(all->echo_audit);
}

TEST(ActuatorFlagsTest, BadFlagsAreNamed) {
  struct Case {
    std::vector<std::string> args;
    const char* error;
  };
  for (const Case& c : std::vector<Case>{
           {Args({"--bogus", "1"}), "unknown flag --bogus"},
           {Args({"stray"}), "unexpected argument 'stray'"},
           {Args({"--listen"}), "--listen needs a value"},
           {Args({"--listen", "9191"}), "not host:port"},
           {Args({"--listen", "h:99999"}), "no valid port"},
           {{"--backend", "noop", "--audit-log", "/a"}, "--secret-file is required"},
           {{"--secret-file", "/s", "--audit-log", "/a"}, "--backend is required"},
           {{"--secret-file", "/s", "--backend", "noop"}, "--audit-log is required"},
           {Args({"--backend", "pbs"}), "'pbs' is not slurm, kubernetes or noop"},
           {Args({"--replay-window-seconds", "soon"}), "--replay-window-seconds: 'soon'"},
           {Args({"--checkpoint-timeout-seconds", "0"}), "not a positive number"},
           {Args({"--checkpoint-poll-seconds", "-1"}), "not a positive number"},
           {Args({"--checkpoint-signal", "KILLME"}), "not a signal name"},
           {Args({"--backend", "slurm"}), "--checkpoint-dir is required with --backend slurm"},
           {Args({"--backend", "kubernetes"}), "--k8s-api is required"},
       }) {
    absl::StatusOr<ActuatorOptions> options = ParseActuatorFlags(c.args);
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_THAT(std::string(options.status().message()), HasSubstr(c.error));
  }
  EXPECT_EQ(ParseActuatorFlags({"--help"}).status().code(), absl::StatusCode::kCancelled);
}

TEST(ActuatorFlagsTest, BackendSettingsAreCheckedWhenBuilt) {
  FakeClock clock;
  ScratchDir dir;
  ActuatorOptions options;
  options.backend = "slurm";
  options.slurm.checkpoint_dir = dir.File("missing");
  EXPECT_THAT(std::string(MakeScheduler(options, clock).status().message()),
              HasSubstr("is not a directory"));
  options.slurm.checkpoint_dir = dir.path();
  options.slurm.scontrol = dir.File("scontrol");
  EXPECT_THAT(std::string(MakeScheduler(options, clock).status().message()),
              HasSubstr("--scontrol: '" + dir.File("scontrol") + "' is not an executable"));
  options.slurm.scontrol = "scontrol";
  ASSERT_TRUE(MakeScheduler(options, clock).ok());
  EXPECT_EQ(MakeScheduler(options, clock).value()->Name(), "slurm");
  options.backend = "kubernetes";
  options.kubernetes.api_url = "https://127.0.0.1:6443";
  options.kubernetes.token_file = dir.File("token");
  EXPECT_EQ(MakeScheduler(options, clock).status().code(), absl::StatusCode::kInvalidArgument);
}

class ActuatorServiceTest : public ::testing::Test {
 protected:
  ActuatorServiceTest() {
    WriteFile(dir_.File("secret"), "  shared-secret\n");
    options_.listen = "127.0.0.1:0";
    options_.secret_file = dir_.File("secret");
    options_.backend = "noop";
    options_.audit_log = dir_.File("audit.jsonl");
  }

  httplib::Result Post(int port, const std::string& body, const std::string& secret,
                       const std::string& path = "/v1/actions") {
    int64_t ts = static_cast<int64_t>(clock_.Now());
    httplib::Client client("127.0.0.1", port);
    httplib::Headers headers = {{"X-Vigil-Timestamp", std::to_string(ts)},
                                {"X-Vigil-Signature", SignWebhook(secret, ts, body)},
                                {"Idempotency-Key", "k1"}};
    return client.Post(path.c_str(), headers, body, "application/json");
  }

  ScratchDir dir_;
  FakeClock clock_;
  ActuatorOptions options_;
};

TEST_F(ActuatorServiceTest, ServesSignedActionsOverHttp) {
  absl::StatusOr<std::unique_ptr<Actuator>> actuator = Actuator::Start(options_, clock_);
  ASSERT_TRUE(actuator.ok()) << actuator.status();
  int port = (*actuator)->port();
  ASSERT_GT(port, 0);
  std::string body = json({{"id", "act-1"}, {"action", "checkpoint_then_pause_job"},
                           {"job", "123"}, {"incident_id", "inc-1"}})
                         .dump();

  httplib::Result done = Post(port, body, "shared-secret");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200);
  json answer = json::parse(done->body);
  EXPECT_EQ(answer["status"], "done");
  EXPECT_EQ(answer["checkpoint"], "skipped");
  EXPECT_THAT(answer["detail"].get<std::string>(), HasSubstr("dry run: would ask job 123"));
  EXPECT_FALSE(done->has_header("Idempotent-Replayed"));

  httplib::Result again = Post(port, body, "shared-secret");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(again->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(json::parse(again->body), answer);

  httplib::Result forged = Post(port, body, "guessed");
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 401);
  EXPECT_THAT(json::parse(forged->body)["error"].get<std::string>(), HasSubstr("does not match"));

  httplib::Client client("127.0.0.1", port);
  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body),
            json::parse(R"({"status": "ok", "backend": "noop", "remembered_answers": 1,
                "job_queries": {"answered": 0, "jobs_answered": 0, "unauthorized": 0,
                                "bad_request": 0, "unimplemented": 0, "failed": 0}})"));
  httplib::Result missing = client.Get("/v2/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"], "HTTP 404");

  (*actuator)->Stop();
  absl::StatusOr<std::unique_ptr<Actuator>> restarted = Actuator::Start(options_, clock_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ((*restarted)->remembered_answers(), 1u);
  httplib::Result after_restart = Post((*restarted)->port(), body, "shared-secret");
  ASSERT_TRUE(after_restart);
  EXPECT_EQ(after_restart->get_header_value("Idempotent-Replayed"), "true");
}

TEST_F(ActuatorServiceTest, ServesSignedJobQueriesOverHttp) {
  absl::StatusOr<std::unique_ptr<Actuator>> actuator = Actuator::Start(options_, clock_);
  ASSERT_TRUE(actuator.ok()) << actuator.status();
  int port = (*actuator)->port();
  std::string body = R"({"jobs": ["12345", "llama-70b"]})";
  // The noop backend has no scheduler to ask.
  httplib::Result noop = Post(port, body, "shared-secret", "/v1/jobs/query");
  ASSERT_TRUE(noop);
  EXPECT_EQ(noop->status, 501);
  EXPECT_EQ(noop->get_header_value("Content-Type"), "application/json");
  EXPECT_THAT(json::parse(noop->body)["error"].get<std::string>(), HasSubstr("no scheduler"));
  httplib::Result forged = Post(port, body, "guessed", "/v1/jobs/query");
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 401);
  httplib::Result malformed = Post(port, R"({"jobs": [12345]})", "shared-secret",
                                   "/v1/jobs/query");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  EXPECT_EQ(json::parse(malformed->body)["error"], "jobs[0]: must be a string");
  JobQueryCounters counters = (*actuator)->job_queries();
  EXPECT_EQ(counters.unimplemented, 1u);
  EXPECT_EQ(counters.unauthorized, 1u);
  EXPECT_EQ(counters.bad_request, 1u);
  // Queries are not actions: nothing in the audit log.
  EXPECT_EQ(testing::ReadFile(options_.audit_log), "");
}

TEST_F(ActuatorServiceTest, UnusableSettingsStopTheStart) {
  options_.secret_file = dir_.File("no-secret");
  EXPECT_THAT(std::string(Actuator::Start(options_, clock_).status().message()),
              HasSubstr("cannot read the secret file"));
  WriteFile(dir_.File("empty-secret"), "\n");
  options_.secret_file = dir_.File("empty-secret");
  EXPECT_THAT(std::string(Actuator::Start(options_, clock_).status().message()),
              HasSubstr("is empty"));
  options_.secret_file = dir_.File("secret");
  options_.audit_log = dir_.File("no-dir/audit.jsonl");
  EXPECT_EQ(Actuator::Start(options_, clock_).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace vigil::actuator
