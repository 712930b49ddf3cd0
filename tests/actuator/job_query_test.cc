// The job-state query: Slurm state mapping, host list expansion, body
// validation, and the handler (signature first, statuses, counters) with a
// fake scheduler and a fake clock.
#include <atomic>

#include "actuator/hostlist.h"
#include "actuator/job_query_handler.h"
#include "actuator/noop_scheduler.h"
#include "actuator/slurm_scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "notify/signing.h"

namespace vigil::actuator {
namespace {

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kSecret[] = "query-secret";

TEST(JobStateTest, WireNames) {
  EXPECT_EQ(JobStateName(JobState::kRunning), "running");
  EXPECT_EQ(JobStateName(JobState::kSuspended), "suspended");
  EXPECT_EQ(JobStateName(JobState::kPending), "pending");
  EXPECT_EQ(JobStateName(JobState::kEnded), "ended");
  EXPECT_EQ(JobStateName(JobState::kNotFound), "not_found");
  EXPECT_EQ(JobStateName(JobState::kUnknown), "unknown");
}

TEST(SlurmJobStateTest, EveryStateIsMappedExplicitly) {
  struct Case {
    const char* slurm;
    JobState state;
  };
  const Case kCases[] = {
      {"RUNNING", JobState::kRunning},       {"CONFIGURING", JobState::kRunning},
      {"RESIZING", JobState::kRunning},      {"SIGNALING", JobState::kRunning},
      {"SUSPENDED", JobState::kSuspended},   {"STOPPED", JobState::kSuspended},
      {"PENDING", JobState::kPending},       {"REQUEUED", JobState::kPending},
      {"REQUEUE_HOLD", JobState::kPending},  {"REQUEUE_FED", JobState::kPending},
      {"RESV_DEL_HOLD", JobState::kPending}, {"COMPLETING", JobState::kEnded},
      {"STAGE_OUT", JobState::kEnded},       {"COMPLETED", JobState::kEnded},
      {"CANCELLED", JobState::kEnded},       {"FAILED", JobState::kEnded},
      {"TIMEOUT", JobState::kEnded},         {"PREEMPTED", JobState::kEnded},
      {"NODE_FAIL", JobState::kEnded},       {"OUT_OF_MEMORY", JobState::kEnded},
      {"BOOT_FAIL", JobState::kEnded},       {"DEADLINE", JobState::kEnded},
      {"SPECIAL_EXIT", JobState::kEnded},    {"REVOKED", JobState::kEnded},
      // Not Slurm's, or not as %T prints them: no conclusion.
      {"running", JobState::kUnknown},       {"R", JobState::kUnknown},
      {"", JobState::kUnknown},              {"LAUNCH_FAILED", JobState::kUnknown},
  };
  for (const Case& c : kCases) {
    EXPECT_EQ(SlurmJobState(c.slurm), c.state) << c.slurm;
  }
}

TEST(HostlistTest, ExpandsRangesListsAndPadding) {
  struct Case {
    const char* hostlist;
    std::vector<std::string> names;
  };
  const Case kCases[] = {
      {"", {}},
      {"gpu7", {"gpu7"}},
      {"n[001-003]", {"n001", "n002", "n003"}},
      {"n[1-2,5],gpu7", {"n1", "n2", "n5", "gpu7"}},
      {"n[08-10]", {"n08", "n09", "n10"}},
      {"n[9-11]", {"n9", "n10", "n11"}},
      {"r[1-2]n[01-02]", {"r1n01", "r1n02", "r2n01", "r2n02"}},
      {"n[3]-ib", {"n3-ib"}},
      {"a.b-c_d[0-1].x", {"a.b-c_d0.x", "a.b-c_d1.x"}},
      {"vigil-n001,vigil-n002", {"vigil-n001", "vigil-n002"}},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<std::vector<std::string>> names = ExpandHostlist(c.hostlist);
    ASSERT_TRUE(names.ok()) << c.hostlist << ": " << names.status();
    EXPECT_EQ(*names, c.names) << c.hostlist;
  }
}

TEST(HostlistTest, RefusesMalformedLists) {
  for (const char* bad :
       {"n[1-", "n]1", "n[3-1]", "n[a-b]", "n[1-2]]", ",n1", "n1,,n2", "n1,", "n[]",
        "n[1-2,]", "n[[1]]", "n[1 -2]", "n 1", "n[-1]", "n[1--2]", "n[0-70000]",
        "n[0-300]m[0-300]", "n[99999999999999999999]"}) {
    absl::StatusOr<std::vector<std::string>> names = ExpandHostlist(bad);
    EXPECT_EQ(names.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ExpandHostlist("n[0-70000]").status().message()),
              HasSubstr("more than 65536 names"));
  // Exactly the limit is fine.
  EXPECT_EQ(ExpandHostlist("n[1-65536]").value().size(), kMaxHostlistNames);
}

TEST(ParseJobQueryTest, TakesOneToAThousandNonEmptyStringsInOrder) {
  EXPECT_THAT(ParseJobQuery(R"({"jobs": ["12345", "llama-70b", "12345"]})").value(),
              ElementsAre("12345", "llama-70b", "12345"));
  EXPECT_THAT(ParseJobQuery(R"({"jobs": ["1"], "other": {"ignored": true}})").value(),
              ElementsAre("1"));
  json thousand = {{"jobs", std::vector<std::string>(kMaxQueryJobs, "j")}};
  EXPECT_EQ(ParseJobQuery(thousand.dump()).value().size(), kMaxQueryJobs);
  json longest = {{"jobs", {std::string(kMaxQueryJobBytes, 'x')}}};
  EXPECT_TRUE(ParseJobQuery(longest.dump()).ok());
}

TEST(ParseJobQueryTest, RefusesEveryMalformedBodyWithTheReason) {
  struct Case {
    std::string body;
    const char* says;
  };
  const Case kCases[] = {
      {"", "not valid JSON"},
      {"{\"jobs\": [\"1\"", "not valid JSON"},
      {"[\"1\"]", "must be a JSON object"},
      {"\"1\"", "must be a JSON object"},
      {"{}", "jobs: required"},
      {R"({"jobs": "123"})", "jobs: must be an array"},
      {R"({"jobs": {"a": 1}})", "jobs: must be an array"},
      {R"({"jobs": null})", "jobs: must be an array"},
      {R"({"jobs": []})", "must name 1 to 1000 jobs, not 0"},
      {json({{"jobs", std::vector<std::string>(kMaxQueryJobs + 1, "j")}}).dump(),
       "must name 1 to 1000 jobs, not 1001"},
      {R"({"jobs": ["1", 2]})", "jobs[1]: must be a string"},
      {R"({"jobs": [null]})", "jobs[0]: must be a string"},
      {R"({"jobs": [["1"]]})", "jobs[0]: must be a string"},
      {R"({"jobs": [true]})", "jobs[0]: must be a string"},
      {R"({"jobs": ["1", ""]})", "jobs[1]: must be 1 to 256 bytes"},
      {json({{"jobs", {std::string(kMaxQueryJobBytes + 1, 'x')}}}).dump(),
       "jobs[0]: must be 1 to 256 bytes"},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<std::vector<std::string>> jobs = ParseJobQuery(c.body);
    EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(std::string(jobs.status().message()), HasSubstr(c.says)) << c.body;
  }
}

// Records the queries it gets and answers with `result` (or, when unset,
// "running on n1" for every job).
class FakeQueryScheduler : public Scheduler {
 public:
  std::string_view Name() const override { return "fake"; }
  absl::StatusOr<ActionOutcome> CheckpointThenPause(const ActionRequest&) override {
    return absl::InternalError("not an action test");
  }
  absl::StatusOr<ActionOutcome> Pause(const ActionRequest&) override {
    return absl::InternalError("not an action test");
  }
  absl::StatusOr<ActionOutcome> Cordon(const ActionRequest&) override {
    return absl::InternalError("not an action test");
  }
  absl::StatusOr<ActionOutcome> Uncordon(const ActionRequest&) override {
    return absl::InternalError("not an action test");
  }
  absl::StatusOr<ActionOutcome> Report(const ActionRequest&) override {
    return absl::InternalError("not an action test");
  }
  absl::StatusOr<std::vector<JobStatus>> QueryJobs(const std::vector<std::string>& jobs) override {
    calls.push_back(jobs);
    if (result) return *result;
    std::vector<JobStatus> answers;
    for (const std::string& job : jobs) {
      JobStatus status;
      status.job = job;
      status.job_id = "id-" + job;
      status.name = "name-" + job;
      status.state = JobState::kRunning;
      status.scheduler_state = "RUNNING";
      status.nodes = {"n1", "n2"};
      status.user = "alice";
      answers.push_back(status);
    }
    return answers;
  }

  std::vector<std::vector<std::string>> calls;
  std::optional<absl::StatusOr<std::vector<JobStatus>>> result;
};

class JobQueryHandlerTest : public ::testing::Test {
 protected:
  JobQueryHandlerTest() : handler_(Options(), scheduler_, clock_) {}

  JobQueryHandlerOptions Options() {
    JobQueryHandlerOptions options;
    options.secret = kSecret;
    options.replay_window_seconds = 300;
    options.on_failure = [this](const std::string& line) { failures_.push_back(line); };
    return options;
  }
  // `body` signed with `secret` at clock time + `skew`.
  WebhookRequest Signed(const std::string& body, const std::string& secret = kSecret,
                        double skew = 0) {
    int64_t ts = static_cast<int64_t>(clock_.Now() + skew);
    WebhookRequest request;
    request.timestamp = std::to_string(ts);
    request.signature = SignWebhook(secret, ts, body);
    request.content_type = "application/json";
    request.body = body;
    request.remote = "10.0.0.5:40412";
    return request;
  }

  FakeClock clock_{1764000000.5};
  FakeQueryScheduler scheduler_;
  std::vector<std::string> failures_;
  JobQueryHandler handler_;
};

TEST_F(JobQueryHandlerTest, AnswersEveryJobInRequestOrder) {
  WebhookReply reply = handler_.Handle(Signed(R"({"jobs": ["12345", "llama-70b"]})"));
  ASSERT_EQ(reply.http_status, 200) << reply.body;
  EXPECT_EQ(reply.body["scheduler"], "fake");
  EXPECT_EQ(reply.body["as_of"], 1764000000.5);
  ASSERT_EQ(reply.body["jobs"].size(), 2u);
  EXPECT_EQ(reply.body["jobs"][0], json::parse(R"({
      "job": "12345", "job_id": "id-12345", "name": "name-12345", "state": "running",
      "scheduler_state": "RUNNING", "nodes": ["n1", "n2"], "user": "alice",
      "end_time": null})"));
  EXPECT_EQ(reply.body["jobs"][1]["job"], "llama-70b");
  EXPECT_THAT(scheduler_.calls, ElementsAre(ElementsAre("12345", "llama-70b")));
  JobQueryCounters counters = handler_.counters();
  EXPECT_EQ(counters.answered, 1u);
  EXPECT_EQ(counters.jobs_answered, 2u);
  EXPECT_THAT(failures_, IsEmpty());
}

TEST_F(JobQueryHandlerTest, EndTimeIsANumberWhenKnown) {
  JobStatus ended;
  ended.job = "7";
  ended.job_id = "7";
  ended.state = JobState::kEnded;
  ended.scheduler_state = "NODE_FAIL";
  ended.end_time = 1764000000;
  scheduler_.result = std::vector<JobStatus>{ended};
  WebhookReply reply = handler_.Handle(Signed(R"({"jobs": ["7"]})"));
  ASSERT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.body["jobs"][0]["state"], "ended");
  EXPECT_EQ(reply.body["jobs"][0]["scheduler_state"], "NODE_FAIL");
  EXPECT_EQ(reply.body["jobs"][0]["end_time"], 1764000000.0);
  EXPECT_EQ(reply.body["jobs"][0]["nodes"], json::array());
}

TEST_F(JobQueryHandlerTest, RefusedSignaturesNeverReachTheScheduler) {
  const std::string body = R"({"jobs": ["12345"]})";
  WebhookRequest unsigned_request = Signed(body);
  unsigned_request.timestamp.clear();
  unsigned_request.signature.clear();
  WebhookRequest no_signature = Signed(body);
  no_signature.signature.clear();
  WebhookRequest garbled = Signed(body);
  garbled.signature = "v1=zz";
  WebhookRequest tampered = Signed(body);
  tampered.body = R"({"jobs": ["99999"]})";
  struct Case {
    const char* what;
    WebhookRequest request;
    const char* says;
  };
  const Case kCases[] = {
      {"unsigned", unsigned_request, "signature refused"},
      {"no signature", no_signature, "signature refused"},
      {"garbled", garbled, "signature refused"},
      {"wrong secret", Signed(body, "guessed"), "does not match"},
      {"tampered body", tampered, "does not match"},
      {"too old", Signed(body, kSecret, -301), "signature refused"},
      {"from the future", Signed(body, kSecret, 301), "signature refused"},
  };
  for (const Case& c : kCases) {
    WebhookReply reply = handler_.Handle(c.request);
    EXPECT_EQ(reply.http_status, 401) << c.what;
    EXPECT_THAT(reply.body["error"].get<std::string>(), HasSubstr(c.says)) << c.what;
  }
  // Within the window is fine.
  EXPECT_EQ(handler_.Handle(Signed(body, kSecret, -299)).http_status, 200);
  EXPECT_EQ(scheduler_.calls.size(), 1u);
  EXPECT_EQ(handler_.counters().unauthorized, std::size(kCases));
  ASSERT_EQ(failures_.size(), std::size(kCases));
  EXPECT_THAT(failures_[0], HasSubstr("job query from 10.0.0.5:40412: HTTP 401: signature"));
}

TEST_F(JobQueryHandlerTest, BadBodiesAre400AndNeverReachTheScheduler) {
  for (const std::string& body :
       {std::string("not json"), std::string("[]"), std::string(R"({"jobs": "1"})"),
        std::string(R"({"jobs": []})"), std::string(R"({"jobs": [1]})"),
        std::string(R"({"jobs": [""]})")}) {
    WebhookReply reply = handler_.Handle(Signed(body));
    EXPECT_EQ(reply.http_status, 400) << body;
    EXPECT_TRUE(reply.body["error"].is_string()) << body;
  }
  WebhookRequest text = Signed(R"({"jobs": ["1"]})");
  text.content_type = "text/plain";
  WebhookReply reply = handler_.Handle(text);
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_THAT(reply.body["error"].get<std::string>(), HasSubstr("Content-Type"));
  EXPECT_THAT(scheduler_.calls, IsEmpty());
  EXPECT_EQ(handler_.counters().bad_request, 7u);
}

TEST_F(JobQueryHandlerTest, SchedulerErrorsBecomeTheirStatuses) {
  struct Case {
    absl::Status error;
    int http_status;
  };
  const Case kCases[] = {
      {absl::InvalidArgumentError("job 'a b' is not a valid Slurm name"), 400},
      {absl::UnimplementedError("the noop backend has no scheduler"), 501},
      {absl::UnavailableError("$ squeue ...\nstderr: Unable to contact slurm controller"), 502},
      {absl::DeadlineExceededError("squeue ran longer than 30 s"), 502},
      {absl::InternalError("squeue printed an unexpected line"), 502},
  };
  for (const Case& c : kCases) {
    scheduler_.result = c.error;
    WebhookReply reply = handler_.Handle(Signed(R"({"jobs": ["1"]})"));
    EXPECT_EQ(reply.http_status, c.http_status) << c.error;
    EXPECT_EQ(reply.body, json({{"error", std::string(c.error.message())}})) << c.error;
  }
  JobQueryCounters counters = handler_.counters();
  EXPECT_EQ(counters.bad_request, 1u);
  EXPECT_EQ(counters.unimplemented, 1u);
  EXPECT_EQ(counters.failed, 3u);
  EXPECT_EQ(counters.answered, 0u);
  // All but the 501 (noop's standing answer) are reported.
  ASSERT_EQ(failures_.size(), 4u);
  EXPECT_THAT(failures_[0], HasSubstr("HTTP 400: job 'a b'"));
  EXPECT_THAT(failures_[1], HasSubstr("HTTP 502: $ squeue"));
}

TEST_F(JobQueryHandlerTest, AnAnswerOfAnotherLengthIsAFailure) {
  scheduler_.result = std::vector<JobStatus>{};
  WebhookReply reply = handler_.Handle(Signed(R"({"jobs": ["1", "2"]})"));
  EXPECT_EQ(reply.http_status, 502);
  EXPECT_THAT(reply.body["error"].get<std::string>(),
              HasSubstr("the fake backend answered 0 of 2 jobs"));
}

TEST(NoopQueryTest, TheNoopBackendHasNoSourceOfTruth) {
  FakeClock clock;
  NoopScheduler noop;
  EXPECT_EQ(noop.QueryJobs({"1"}).status().code(), absl::StatusCode::kUnimplemented);
  JobQueryHandlerOptions options;
  options.secret = kSecret;
  JobQueryHandler handler(options, noop, clock);
  std::string body = R"({"jobs": ["1"]})";
  WebhookRequest request;
  request.timestamp = std::to_string(static_cast<int64_t>(clock.Now()));
  request.signature = SignWebhook(kSecret, static_cast<int64_t>(clock.Now()), body);
  request.body = body;
  WebhookReply reply = handler.Handle(request);
  EXPECT_EQ(reply.http_status, 501);
  EXPECT_THAT(reply.body["error"].get<std::string>(), HasSubstr("no scheduler"));
}

}  // namespace
}  // namespace vigil::actuator
