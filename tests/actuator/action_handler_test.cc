// The webhook logic: signature and replay window, body validation,
// idempotency (in memory, across a restart, and for concurrent repeats),
// the status of each outcome and the audit log, with a fake scheduler and
// a fake clock.
#include "actuator/action_handler.h"

#include <atomic>
#include <thread>

#include "actuator/audit_log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "notify/signing.h"
#include "tests/actuator/test_util.h"

namespace vigil::actuator {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;
using testing::ReadLines;
using testing::ScratchDir;

constexpr char kSecret[] = "test-secret";

// Records what it is asked and answers with `result`; can hold an action
// until released.
class FakeScheduler : public Scheduler {
 public:
  std::string_view Name() const override { return "fake"; }
  absl::StatusOr<ActionOutcome> CheckpointThenPause(const ActionRequest& r) override {
    return Record(r);
  }
  absl::StatusOr<ActionOutcome> Pause(const ActionRequest& r) override { return Record(r); }
  absl::StatusOr<ActionOutcome> Cordon(const ActionRequest& r) override { return Record(r); }
  absl::StatusOr<ActionOutcome> Uncordon(const ActionRequest& r) override { return Record(r); }
  absl::StatusOr<ActionOutcome> Report(const ActionRequest& r) override { return Record(r); }
  absl::StatusOr<std::vector<JobStatus>> QueryJobs(
      const std::vector<std::string>& jobs) override {
    std::lock_guard<std::mutex> lock(mu_);
    queried_.insert(queried_.end(), jobs.begin(), jobs.end());
    if (!status_.ok()) return status_.status();
    std::vector<JobStatus> out;
    for (const std::string& job : jobs) {
      JobStatus s = *status_;
      s.job = job;
      out.push_back(s);
    }
    return out;
  }
  // What QueryJobs answers for any job (default: unimplemented, as noop).
  void SetJobStatus(absl::StatusOr<JobStatus> status) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
  }
  std::vector<std::string> queried() {
    std::lock_guard<std::mutex> lock(mu_);
    return queried_;
  }

  void SetResult(absl::StatusOr<ActionOutcome> result) {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(result);
  }
  // Actions block in the scheduler until Release().
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    changed_.notify_all();
  }
  // Waits until `n` actions have entered the scheduler.
  void AwaitCalls(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return static_cast<int>(seen_.size()) >= n; });
  }
  std::vector<ActionRequest> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  absl::StatusOr<ActionOutcome> Record(const ActionRequest& request) {
    std::unique_lock<std::mutex> lock(mu_);
    seen_.push_back(request);
    changed_.notify_all();
    changed_.wait(lock, [&] { return !held_; });
    absl::StatusOr<ActionOutcome> result = result_;
    if (result.ok() && request.type == ActionType::kCheckpointThenPause) {
      result->checkpoint = "confirmed";
    }
    return result;
  }

  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<ActionRequest> seen_;
  bool held_ = false;
  absl::StatusOr<ActionOutcome> result_ = ActionOutcome{"did it", ""};
  absl::StatusOr<JobStatus> status_ = absl::UnimplementedError("no queries here");
  std::vector<std::string> queried_;
};

JobStatus RunningOn(std::vector<std::string> nodes, JobState state = JobState::kRunning) {
  JobStatus s;
  s.job_id = "4242";
  s.name = "llm";
  s.state = state;
  s.scheduler_state = "RUNNING";
  s.nodes = std::move(nodes);
  return s;
}

json CordonBody(const std::string& id = "act-000001") {
  return {{"id", id},
          {"action", "cordon_node"},
          {"incident_id", "inc-7"},
          {"severity", "P1"},
          {"job", ""},
          {"node", "gpu-node-3"},
          {"reason", "XID 79 on GPU 3"},
          {"requested_by", "policy:p1-xid"}};
}

class ActionHandlerTest : public ::testing::Test {
 protected:
  ActionHandlerTest() { OpenHandler(); }

  void OpenHandler() {
    handler_.reset();
    audit_.reset();
    absl::StatusOr<std::unique_ptr<AuditLog>> audit = AuditLog::Open(audit_path());
    ASSERT_TRUE(audit.ok()) << audit.status();
    audit_ = std::move(*audit);
    ActionHandlerOptions options;
    options.secret = kSecret;
    options.replay_window_seconds = 300;
    options.default_checkpoint_timeout_seconds = 120;
    handler_ = std::make_unique<ActionHandler>(options, scheduler_, *audit_, clock_);
  }

  std::string audit_path() const { return dir_.File("audit.jsonl"); }

  // `body` signed now (or `timestamp`).
  WebhookRequest Signed(const std::string& body, std::optional<int64_t> timestamp = {}) {
    int64_t ts = timestamp.value_or(static_cast<int64_t>(clock_.Now()));
    WebhookRequest request;
    request.timestamp = std::to_string(ts);
    request.signature = SignWebhook(kSecret, ts, body);
    request.idempotency_key = "outbox-key-1";
    request.content_type = "application/json";
    request.body = body;
    request.remote = "127.0.0.1:40000";
    return request;
  }
  WebhookReply Send(const json& body) { return handler_->Handle(Signed(body.dump())); }

  std::vector<json> AuditRecords() {
    std::vector<json> records;
    for (const std::string& line : ReadLines(audit_path())) {
      records.push_back(json::parse(line));
    }
    return records;
  }

  ScratchDir dir_;
  FakeClock clock_{1764000000.25};
  FakeScheduler scheduler_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<ActionHandler> handler_;
};

TEST_F(ActionHandlerTest, SignedActionIsPerformedAndAnswered) {
  WebhookReply reply = Send(CordonBody());
  EXPECT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.body, json({{"id", "act-000001"}, {"status", "done"}, {"detail", "did it"}}));
  EXPECT_FALSE(reply.replayed);
  ASSERT_EQ(scheduler_.seen().size(), 1u);
  const ActionRequest& seen = scheduler_.seen()[0];
  EXPECT_EQ(seen.type, ActionType::kCordon);
  EXPECT_EQ(seen.node, "gpu-node-3");
  EXPECT_EQ(seen.incident_id, "inc-7");
  EXPECT_EQ(seen.reason, "XID 79 on GPU 3");
  EXPECT_EQ(seen.requested_by, "policy:p1-xid");
  EXPECT_EQ(seen.received_at, clock_.Now());
}

// The node's claim that it runs a job is checked with the scheduler before
// the job is paused, and only that one job id is paused (not every job
// sharing its name).
TEST_F(ActionHandlerTest, AutomaticPausesActOnlyOnAJobRunningOnTheirNode) {
  scheduler_.SetJobStatus(RunningOn({"n1", "n2"}));
  json body = {{"id", "act-1"}, {"action", "pause_job"}, {"job", "llm"},
               {"node", "n2"}, {"requested_by", "vigil"}};
  WebhookReply reply = Send(body);
  ASSERT_EQ(reply.http_status, 200) << reply.body.dump();
  EXPECT_THAT(reply.body["detail"].get<std::string>(),
              HasSubstr("checked: job llm is fake job 4242, running on n2"));
  ASSERT_EQ(scheduler_.seen().size(), 1u);
  EXPECT_EQ(scheduler_.seen()[0].job, "4242");

  body["id"] = "act-2";
  body["node"] = "n9";  // a node that does not run it claims it does
  reply = Send(body);
  EXPECT_EQ(reply.http_status, 422);
  EXPECT_THAT(reply.body["detail"].get<std::string>(),
              HasSubstr("does not run on node n9 (the scheduler says running on n1,n2)"));
  EXPECT_EQ(scheduler_.seen().size(), 1u) << "nothing paused";

  scheduler_.SetJobStatus(RunningOn({"n2"}, JobState::kEnded));
  body["id"] = "act-3";
  body["node"] = "n2";
  body["action"] = "checkpoint_then_pause_job";
  EXPECT_EQ(Send(body).http_status, 422);
  EXPECT_EQ(scheduler_.seen().size(), 1u);
}

TEST_F(ActionHandlerTest, AutomaticPausesMustNameTheirNode) {
  scheduler_.SetJobStatus(RunningOn({"n1"}));
  json body = {{"id", "act-1"}, {"action", "pause_job"}, {"job", "llm"},
               {"requested_by", "vigil"}};
  WebhookReply reply = Send(body);
  EXPECT_EQ(reply.http_status, 422);
  EXPECT_THAT(reply.body["detail"].get<std::string>(), HasSubstr("names no node"));
  EXPECT_TRUE(scheduler_.seen().empty());
  // An operator's approved pause is the operator's call.
  body["id"] = "act-2";
  body["requested_by"] = "carol";
  EXPECT_EQ(Send(body).http_status, 200);
  ASSERT_EQ(scheduler_.seen().size(), 1u);
  EXPECT_EQ(scheduler_.seen()[0].job, "llm");
  EXPECT_TRUE(scheduler_.queried().empty());
}

TEST_F(ActionHandlerTest, ASchedulerThatCannotAnswerMeansRetryNotAct) {
  scheduler_.SetJobStatus(absl::UnavailableError("slurmctld is down"));
  json body = {{"id", "act-1"}, {"action", "pause_job"}, {"job", "llm"},
               {"node", "n1"}, {"requested_by", "vigil"}};
  WebhookReply reply = Send(body);
  EXPECT_EQ(reply.http_status, 502);
  EXPECT_THAT(reply.body["detail"].get<std::string>(), HasSubstr("slurmctld is down"));
  EXPECT_TRUE(scheduler_.seen().empty());
}

TEST_F(ActionHandlerTest, CheckpointAnswerCarriesTheCheckpointAndTimeout) {
  json body = {{"id", "act-2"}, {"action", "checkpoint_then_pause_job"}, {"job", "4242"}};
  WebhookReply reply = Send(body);
  EXPECT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.body["checkpoint"], "confirmed");
  body["id"] = "act-3";
  body["checkpoint_timeout_seconds"] = 7.5;
  EXPECT_EQ(Send(body).http_status, 200);
  ASSERT_EQ(scheduler_.seen().size(), 2u);
  EXPECT_EQ(scheduler_.seen()[0].checkpoint_timeout_seconds, 120);  // the default
  EXPECT_EQ(scheduler_.seen()[1].checkpoint_timeout_seconds, 7.5);
}

TEST_F(ActionHandlerTest, BadSignaturesAreRefusedWith401) {
  std::string body = CordonBody().dump();
  struct Case {
    const char* name;
    WebhookRequest request;
    const char* error;
  };
  WebhookRequest missing = Signed(body);
  missing.signature = "";
  WebhookRequest wrong_secret = Signed(body);
  wrong_secret.signature = SignWebhook("other-secret", std::stoll(wrong_secret.timestamp), body);
  WebhookRequest tampered = Signed(body);
  tampered.body = CordonBody("act-999").dump();
  WebhookRequest no_timestamp = Signed(body);
  no_timestamp.timestamp = "";
  WebhookRequest stale = Signed(body, static_cast<int64_t>(clock_.Now()) - 301);
  WebhookRequest future = Signed(body, static_cast<int64_t>(clock_.Now()) + 302);
  for (const Case& c : std::vector<Case>{
           {"missing", missing, "X-Vigil-Signature"},
           {"wrong secret", wrong_secret, "does not match"},
           {"tampered body", tampered, "does not match"},
           {"no timestamp", no_timestamp, "X-Vigil-Timestamp"},
           {"stale", stale, "replay window"},
           {"future", future, "replay window"},
       }) {
    WebhookReply reply = handler_->Handle(c.request);
    EXPECT_EQ(reply.http_status, 401) << c.name;
    EXPECT_THAT(reply.body.value("error", ""), HasSubstr(c.error)) << c.name;
  }
  EXPECT_TRUE(scheduler_.seen().empty());
  std::vector<json> records = AuditRecords();
  ASSERT_EQ(records.size(), 6u);
  for (const json& record : records) {
    EXPECT_EQ(record["result"], "refused");
    EXPECT_EQ(record["http_status"], 401);
    EXPECT_EQ(record["verified"], false);
  }
}

// Anyone who reaches the port can send unsigned requests: past the
// per-minute audit limit they are counted, and one summary record follows,
// so a flood cannot fill the disk. Signed requests are always audited.
TEST_F(ActionHandlerTest, RefusalsOfUnsignedRequestsAreAuditedAtALimitedRate) {
  std::string body = CordonBody().dump();
  for (int i = 0; i < 100; ++i) {
    WebhookRequest forged = Signed(body);
    forged.signature = "sha256=00";
    EXPECT_EQ(handler_->Handle(forged).http_status, 401);
  }
  EXPECT_EQ(AuditRecords().size(), 60u);
  clock_.Advance(60);  // the next minute: the summary, then this refusal
  WebhookRequest forged = Signed(body);
  forged.signature = "sha256=00";
  EXPECT_EQ(handler_->Handle(forged).http_status, 401);
  std::vector<json> records = AuditRecords();
  ASSERT_EQ(records.size(), 62u);
  EXPECT_EQ(records[60]["result"], "refused_unaudited");
  EXPECT_EQ(records[60]["count"], 40);
  EXPECT_EQ(records[61]["result"], "refused");
  // A signed request is audited whatever the count.
  for (int i = 0; i < 100; ++i) {
    WebhookRequest more = Signed(body);
    more.signature = "sha256=00";
    (void)handler_->Handle(more);
  }
  const size_t before = AuditRecords().size();
  EXPECT_EQ(Send(CordonBody("act-2")).http_status, 200);
  EXPECT_GT(AuditRecords().size(), before);
}

TEST_F(ActionHandlerTest, TimestampJustInsideTheWindowIsAccepted) {
  int64_t now = static_cast<int64_t>(clock_.Now());
  EXPECT_EQ(handler_->Handle(Signed(CordonBody("a1").dump(), now - 299)).http_status, 200);
  EXPECT_EQ(handler_->Handle(Signed(CordonBody("a2").dump(), now + 299)).http_status, 200);
}

TEST_F(ActionHandlerTest, BadBodiesAreRefusedWith400) {
  struct Case {
    std::string body;
    const char* error;
  };
  json pause_without_job = {{"id", "a"}, {"action", "pause_job"}};
  json checkpoint_without_job = {{"id", "a"}, {"action", "checkpoint_then_pause_job"}, {"node", "n"}};
  json cordon_without_node = {{"id", "a"}, {"action", "cordon_node"}, {"job", "1"}};
  json uncordon_without_node = {{"id", "a"}, {"action", "uncordon_node"}};
  json report_without_target = {{"id", "a"}, {"action", "diagnostic_report"}};
  json unknown_action = {{"id", "a"}, {"action", "reboot_node"}, {"node", "n"}};
  json no_action = {{"id", "a"}, {"node", "n"}};
  json no_id = {{"action", "cordon_node"}, {"node", "n"}};
  json bad_id = {{"id", "a b"}, {"action", "cordon_node"}, {"node", "n"}};
  json node_not_string = {{"id", "a"}, {"action", "cordon_node"}, {"node", 7}};
  json negative_timeout = {{"id", "a"}, {"action", "pause_job"}, {"job", "1"},
                           {"checkpoint_timeout_seconds", -1}};
  json string_timeout = {{"id", "a"}, {"action", "pause_job"}, {"job", "1"},
                         {"checkpoint_timeout_seconds", "60"}};
  json long_reason = {{"id", "a"}, {"action", "cordon_node"}, {"node", "n"},
                      {"reason", std::string(2000, 'x')}};
  for (const Case& c : std::vector<Case>{
           {"{\"id\": ", "not valid JSON: line 1"},
           {"[1, 2]", "must be a JSON object"},
           {"", "not valid JSON"},
           {pause_without_job.dump(), "job: required for pause_job"},
           {checkpoint_without_job.dump(), "job: required for checkpoint_then_pause_job"},
           {cordon_without_node.dump(), "node: required for cordon_node"},
           {uncordon_without_node.dump(), "node: required for uncordon_node"},
           {report_without_target.dump(), "diagnostic_report needs one"},
           {unknown_action.dump(), "action: unknown 'reboot_node'"},
           {no_action.dump(), "action: required"},
           {no_id.dump(), "id: required"},
           {bad_id.dump(), "id: must be 1 to 128 of"},
           {node_not_string.dump(), "node: must be a string"},
           {negative_timeout.dump(), "checkpoint_timeout_seconds"},
           {string_timeout.dump(), "checkpoint_timeout_seconds"},
           {long_reason.dump(), "reason: longer than 1024 bytes"},
       }) {
    WebhookReply reply = handler_->Handle(Signed(c.body));
    EXPECT_EQ(reply.http_status, 400) << c.body;
    EXPECT_THAT(reply.body.value("error", ""), HasSubstr(c.error)) << c.body;
  }
  EXPECT_TRUE(scheduler_.seen().empty());
}

TEST_F(ActionHandlerTest, NonJsonContentTypeIsRefused) {
  WebhookRequest request = Signed(CordonBody().dump());
  request.content_type = "text/plain";
  WebhookReply reply = handler_->Handle(request);
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_THAT(reply.body["error"].get<std::string>(), HasSubstr("Content-Type"));
  request.content_type = "application/json; charset=utf-8";
  EXPECT_EQ(handler_->Handle(request).http_status, 200);
}

TEST_F(ActionHandlerTest, RepeatOfADoneIdReturnsTheStoredAnswerWithoutActing) {
  WebhookReply first = Send(CordonBody());
  clock_.Advance(60);
  scheduler_.SetResult(ActionOutcome{"would differ", ""});
  WebhookReply again = Send(CordonBody());
  EXPECT_EQ(again.http_status, 200);
  EXPECT_EQ(again.body, first.body);
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(scheduler_.seen().size(), 1u);
  // Key order and spacing do not make a different request.
  std::string reordered =
      R"({"node": "gpu-node-3", "id": "act-000001", "action": "cordon_node",
          "incident_id": "inc-7", "severity": "P1", "job": "", "reason": "XID 79 on GPU 3",
          "requested_by": "policy:p1-xid"})";
  EXPECT_EQ(handler_->Handle(Signed(reordered)).http_status, 200);
  EXPECT_EQ(scheduler_.seen().size(), 1u);
}

TEST_F(ActionHandlerTest, SameIdWithADifferentBodyIsAConflict) {
  ASSERT_EQ(Send(CordonBody()).http_status, 200);
  json other = CordonBody();
  other["node"] = "gpu-node-4";
  WebhookReply reply = Send(other);
  EXPECT_EQ(reply.http_status, 409);
  EXPECT_THAT(reply.body["error"].get<std::string>(), HasSubstr("act-000001"));
  EXPECT_EQ(scheduler_.seen().size(), 1u);
}

TEST_F(ActionHandlerTest, SchedulerFailuresMapToStatuses) {
  struct Case {
    absl::Status status;
    int http_status;
  };
  int n = 0;
  for (const Case& c : std::vector<Case>{
           {absl::UnavailableError("$ scontrol suspend 1\nstderr: boom"), 502},
           {absl::DeadlineExceededError("scontrol ran longer than 30 s"), 502},
           {absl::NotFoundError("no Slurm job named train"), 422},
           {absl::FailedPreconditionError("job 1 is COMPLETED"), 422},
           {absl::InvalidArgumentError("node 'a;b' is not a valid Slurm name"), 400},
       }) {
    scheduler_.SetResult(c.status);
    std::string id = "fail-" + std::to_string(++n);
    WebhookReply reply = Send(CordonBody(id));
    EXPECT_EQ(reply.http_status, c.http_status) << c.status;
    EXPECT_EQ(reply.body["id"], id);
    if (c.http_status == 400) {
      EXPECT_EQ(reply.body["error"], std::string(c.status.message()));
    } else {
      EXPECT_EQ(reply.body["status"], "failed");
      EXPECT_EQ(reply.body["detail"], std::string(c.status.message()));
    }
  }
}

TEST_F(ActionHandlerTest, AFailedActionIsPerformedAgainOnRetry) {
  scheduler_.SetResult(absl::UnavailableError("slurmctld down"));
  EXPECT_EQ(Send(CordonBody()).http_status, 502);
  scheduler_.SetResult(ActionOutcome{"drained", ""});
  WebhookReply retry = Send(CordonBody());
  EXPECT_EQ(retry.http_status, 200);
  EXPECT_FALSE(retry.replayed);
  EXPECT_EQ(scheduler_.seen().size(), 2u);
  EXPECT_TRUE(Send(CordonBody()).replayed);
  EXPECT_EQ(scheduler_.seen().size(), 2u);
}

TEST_F(ActionHandlerTest, ARepeatArrivingMidActionWaitsForItsAnswer) {
  scheduler_.Hold();
  WebhookReply first;
  std::thread in_flight([&] { first = Send(CordonBody()); });
  scheduler_.AwaitCalls(1);
  WebhookReply second;
  std::thread repeat([&] { second = Send(CordonBody()); });
  scheduler_.Release();
  in_flight.join();
  repeat.join();
  EXPECT_EQ(first.http_status, 200);
  EXPECT_EQ(second.http_status, 200);
  EXPECT_EQ(second.body, first.body);
  EXPECT_TRUE(second.replayed);
  EXPECT_EQ(scheduler_.seen().size(), 1u);
}

TEST_F(ActionHandlerTest, AuditLogRecordsEveryRequestAndItsResult) {
  ASSERT_EQ(Send(CordonBody()).http_status, 200);
  ASSERT_EQ(Send(CordonBody()).http_status, 200);
  WebhookRequest unsigned_request = Signed(CordonBody("act-2").dump());
  unsigned_request.signature = "v1=00";
  ASSERT_EQ(handler_->Handle(unsigned_request).http_status, 401);

  std::vector<json> records = AuditRecords();
  ASSERT_EQ(records.size(), 4u);
  std::vector<std::string> results;
  for (const json& r : records) results.push_back(r["result"]);
  EXPECT_EQ(results, (std::vector<std::string>{"started", "done", "replayed", "refused"}));
  const json& done = records[1];
  EXPECT_EQ(done["time"], "2025-11-24T16:00:00.250Z");
  EXPECT_EQ(done["ts"], 1764000000.25);
  EXPECT_EQ(done["remote"], "127.0.0.1:40000");
  EXPECT_EQ(done["idempotency_key"], "outbox-key-1");
  EXPECT_EQ(done["id"], "act-000001");
  EXPECT_EQ(done["action"], "cordon_node");
  EXPECT_EQ(done["node"], "gpu-node-3");
  EXPECT_EQ(done["job"], "");
  EXPECT_EQ(done["incident_id"], "inc-7");
  EXPECT_EQ(done["requested_by"], "policy:p1-xid");
  EXPECT_EQ(done["http_status"], 200);
  EXPECT_EQ(done["verified"], true);
  EXPECT_EQ(done["response"]["detail"], "did it");
  EXPECT_EQ(done["body_sha256"].get<std::string>().size(), 64u);
  // A refused request is audited with what it claimed to be.
  EXPECT_EQ(records[3]["id"], "act-2");
  EXPECT_THAT(records[3]["error"].get<std::string>(), HasSubstr("does not match"));
}

TEST_F(ActionHandlerTest, IdempotencySurvivesARestart) {
  ASSERT_EQ(Send(CordonBody()).http_status, 200);
  scheduler_.SetResult(absl::UnavailableError("down"));
  ASSERT_EQ(Send(CordonBody("act-failed")).http_status, 502);
  OpenHandler();  // a new process reading the same audit log

  EXPECT_EQ(handler_->remembered_answers(), 1u);
  WebhookReply again = Send(CordonBody());
  EXPECT_EQ(again.http_status, 200);
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.body["detail"], "did it");
  json other = CordonBody();
  other["node"] = "elsewhere";
  EXPECT_EQ(Send(other).http_status, 409);
  json other_failed = CordonBody("act-failed");
  other_failed["reason"] = "changed";
  EXPECT_EQ(Send(other_failed).http_status, 409);
  // Failed actions were not done: their retry acts.
  scheduler_.SetResult(ActionOutcome{"now", ""});
  EXPECT_EQ(Send(CordonBody("act-failed")).http_status, 200);
  EXPECT_EQ(scheduler_.seen().size(), 3u);
}

TEST(AuditLogTest, SkipsTornLinesAndStartsTheNextRecordOnANewLine) {
  ScratchDir dir;
  std::string path = dir.File("audit.jsonl");
  testing::WriteFile(path, "{\"id\": \"a\", \"result\": \"done\"}\nnot json\n[1]\n{\"id\": \"b\", \"res");
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->existing_records().size(), 1u);
  EXPECT_EQ((*log)->skipped_lines(), 3);
  ASSERT_TRUE((*log)->Append({{"id", "c"}}).ok());
  EXPECT_EQ(ReadLines(path).back(), R"({"id":"c"})");
  EXPECT_EQ(AuditLog::Open(path).value()->existing_records().size(), 2u);
}

TEST(AuditLogTest, BadPathsAreErrors) {
  EXPECT_EQ(AuditLog::Open("").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<AuditLog>> missing_dir =
      AuditLog::Open("/nonexistent-vigil-dir/audit.jsonl");
  EXPECT_EQ(missing_dir.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(missing_dir.status().message()), HasSubstr("/nonexistent-vigil-dir"));
  ScratchDir dir;
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(dir.File("a.jsonl"));
  ASSERT_TRUE(log.ok());
  EXPECT_EQ((*log)->Append(json::array()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vigil::actuator
