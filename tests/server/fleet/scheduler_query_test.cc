// SchedulerQuery, the server's client of vigil-actuator's POST
// /v1/jobs/query: signed round trips against a real in-process actuator
// (Slurm backend over a fake squeue, and noop), and a fake HTTP server
// giving malformed, cut-off and failing answers.
#include "server/fleet/scheduler_query.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "actuator/actuator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "notify/signing.h"
#include "server/config/config.h"

namespace vigil {
namespace {

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSecret[] = "query-secret";

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/vigil_query_XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& text, bool executable = false) {
  std::ofstream(path) << text;
  if (executable) chmod(path.c_str(), 0755);
}

std::string Describe(const SchedulerJobStatus& s) {
  std::string nodes;
  for (const std::string& node : s.nodes) nodes += (nodes.empty() ? "" : ",") + node;
  return s.job + " -> " + s.job_id + " " + std::string(SchedulerJobStateName(s.state)) + " " +
         s.scheduler_state + " [" + nodes + "] name=" + s.name + " user=" + s.user +
         (s.end_time ? " end=" + std::to_string(static_cast<int64_t>(*s.end_time)) : "");
}

std::vector<std::string> Describe(const absl::StatusOr<std::vector<SchedulerJobStatus>>& got) {
  if (!got.ok()) return {got.status().ToString()};
  std::vector<std::string> lines;
  for (const SchedulerJobStatus& status : *got) lines.push_back(Describe(status));
  return lines;
}

TEST(JobQueryUrlTest, IsTheActionUrlsOriginPlusTheQueryPath) {
  struct Case {
    const char* actions_url;
    const char* query_url;
  };
  const Case kCases[] = {
      {"http://127.0.0.1:9191/v1/actions", "http://127.0.0.1:9191/v1/jobs/query"},
      {"https://actuator.example:8443/prefix/v1/actions?x=1",
       "https://actuator.example:8443/v1/jobs/query"},
      {"HTTP://Actuator:80", "http://Actuator:80/v1/jobs/query"},
      {" http://[::1]:9191/v1/actions ", "http://[::1]:9191/v1/jobs/query"},
      {"http://h#frag", "http://h/v1/jobs/query"},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<std::string> url = JobQueryUrl(c.actions_url);
    ASSERT_TRUE(url.ok()) << c.actions_url << ": " << url.status();
    EXPECT_EQ(*url, c.query_url);
  }
  for (const char* bad : {"", "127.0.0.1:9191/v1/actions", "ftp://h/v1/actions", "http://",
                          "http:///v1/actions"}) {
    EXPECT_EQ(JobQueryUrl(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SchedulerQueryOptionsTest, ComeFromTheServersActuatorSettings) {
  TempDir dir;
  ActuatorOptions actuator;  // the server's (server/config/config.h)
  EXPECT_THAT(std::string(SchedulerQueryOptionsFrom(actuator).status().message()),
              HasSubstr("no actuator url"));
  actuator.url = "http://127.0.0.1:9191/v1/actions";
  actuator.secret = "given";
  absl::StatusOr<SchedulerQueryOptions> options = SchedulerQueryOptionsFrom(actuator);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->actions_url, actuator.url);
  EXPECT_EQ(options->url, "");
  EXPECT_EQ(options->secret, "given");

  actuator.secret = "";
  actuator.secret_file = dir.File("secret");
  EXPECT_THAT(std::string(SchedulerQueryOptionsFrom(actuator).status().message()),
              HasSubstr("cannot read the actuator secret file"));
  WriteFile(actuator.secret_file, "  \n");
  EXPECT_THAT(std::string(SchedulerQueryOptionsFrom(actuator).status().message()),
              HasSubstr("secret is empty"));
  WriteFile(actuator.secret_file, "  from-file\n");
  EXPECT_EQ(SchedulerQueryOptionsFrom(actuator).value().secret, "from-file");
}

TEST(SchedulerQueryOptionsTest, CreateRefusesUnusableOptions) {
  FakeClock clock;
  SchedulerQueryOptions options;
  options.actions_url = "http://127.0.0.1:9191/v1/actions";
  EXPECT_THAT(std::string(SchedulerQuery::Create(options, clock).status().message()),
              HasSubstr("secret is empty"));
  options.secret = kSecret;
  absl::StatusOr<std::unique_ptr<SchedulerQuery>> made = SchedulerQuery::Create(options, clock);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->url(), "http://127.0.0.1:9191/v1/jobs/query");
  options.url = "http://10.0.0.7:9292/custom/query";
  EXPECT_EQ(SchedulerQuery::Create(options, clock).value()->url(), options.url);
  options.url = "10.0.0.7:9292";
  EXPECT_EQ(SchedulerQuery::Create(options, clock).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.url = "";
  options.actions_url = "";
  EXPECT_EQ(SchedulerQuery::Create(options, clock).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.actions_url = "http://127.0.0.1:9191/v1/actions";
  for (size_t bad : {size_t{0}, size_t{1001}}) {
    options.max_jobs_per_request = bad;
    EXPECT_EQ(SchedulerQuery::Create(options, clock).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  options.max_jobs_per_request = 1;
  EXPECT_EQ(SchedulerQuery::Create(options, clock).value()->Query({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A real vigil-actuator in this process, its Slurm backend running a fake
// squeue that prints `rows` (and fails when `squeue.fail` exists).
class ActuatorRoundTripTest : public ::testing::Test {
 protected:
  ActuatorRoundTripTest() {
    WriteFile(dir_.File("secret"), std::string(kSecret) + "\n");
    mkdir(dir_.File("ckpt").c_str(), 0755);
    WriteFile(dir_.File("squeue"),
              "#!/bin/sh\n"
              "printf '%s\\n' \"$*\" >> '" + dir_.File("squeue.log") + "'\n"
              "if [ -f '" + dir_.File("squeue.fail") + "' ]; then\n"
              "  echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1\n"
              "fi\n"
              "case \"$*\" in\n"
              "  *--jobs=*) cat '" + dir_.File("rows.ids") + "' ;;\n"
              "  *--name=*) cat '" + dir_.File("rows.names") + "' ;;\n"
              "esac\n",
              /*executable=*/true);
    WriteFile(dir_.File("rows.ids"),
              "101|101|N/A|101|RUNNING|1764000000|NONE|alice|gpu[001-002]|llama-70b\n"
              "102|102|N/A|102|NODE_FAIL|1764000000|1764000900|bob|gpu009|eval\n");
    WriteFile(dir_.File("rows.names"),
              "101|101|N/A|101|RUNNING|1764000000|NONE|alice|gpu[001-002]|llama-70b\n");
    options_.listen = "127.0.0.1:0";
    options_.secret_file = dir_.File("secret");
    options_.backend = "slurm";
    options_.audit_log = dir_.File("audit.jsonl");
    options_.echo_audit = false;
    options_.slurm.checkpoint_dir = dir_.File("ckpt");
    options_.slurm.squeue = dir_.File("squeue");
    options_.slurm.scontrol = "/bin/true";
    options_.slurm.scancel = "/bin/true";
  }

  std::unique_ptr<actuator::Actuator> StartActuator() {
    absl::StatusOr<std::unique_ptr<actuator::Actuator>> started =
        actuator::Actuator::Start(options_, clock_);
    EXPECT_TRUE(started.ok()) << started.status();
    return started.ok() ? std::move(*started) : nullptr;
  }
  std::unique_ptr<SchedulerQuery> Client(int port, const std::string& secret = kSecret) {
    ActuatorOptions server_side;
    server_side.url = "http://127.0.0.1:" + std::to_string(port) + "/v1/actions";
    server_side.secret = secret;
    absl::StatusOr<SchedulerQueryOptions> options = SchedulerQueryOptionsFrom(server_side);
    EXPECT_TRUE(options.ok()) << options.status();
    options->timeout_seconds = 5;
    absl::StatusOr<std::unique_ptr<SchedulerQuery>> client =
        SchedulerQuery::Create(*options, clock_);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  TempDir dir_;
  FakeClock clock_{1764000100};
  actuator::ActuatorOptions options_;
};

TEST_F(ActuatorRoundTripTest, ASignedQueryComesBackParsed) {
  std::unique_ptr<actuator::Actuator> actuator = StartActuator();
  ASSERT_NE(actuator, nullptr);
  std::unique_ptr<SchedulerQuery> client = Client(actuator->port());
  EXPECT_THAT(Describe(client->Query({"101", "llama-70b", "102", "999"})),
              ElementsAre("101 -> 101 running RUNNING [gpu001,gpu002] name=llama-70b user=alice",
                          "llama-70b -> 101 running RUNNING [gpu001,gpu002] name=llama-70b "
                          "user=alice",
                          "102 -> 102 ended NODE_FAIL [gpu009] name=eval user=bob end=1764000900",
                          "999 ->  not_found  [] name= user="));
  actuator::JobQueryCounters counters = actuator->job_queries();
  EXPECT_EQ(counters.answered, 1u);
  EXPECT_EQ(counters.jobs_answered, 4u);
}

TEST_F(ActuatorRoundTripTest, RefusalsAndFailuresBecomeStatuses) {
  std::unique_ptr<actuator::Actuator> actuator = StartActuator();
  ASSERT_NE(actuator, nullptr);
  int port = actuator->port();

  absl::StatusOr<std::vector<SchedulerJobStatus>> forged =
      Client(port, "guessed")->Query({"101"});
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(forged.status().message()), HasSubstr("does not match"));
  // Clocks 10 minutes apart: the request is outside the replay window.
  FakeClock late(clock_.Now() + 600);
  SchedulerQueryOptions options;
  options.actions_url = "http://127.0.0.1:" + std::to_string(port) + "/v1/actions";
  options.secret = kSecret;
  EXPECT_EQ(SchedulerQuery::Create(options, late).value()->Query({"101"}).status().code(),
            absl::StatusCode::kUnauthenticated);

  absl::StatusOr<std::vector<SchedulerJobStatus>> unsafe = Client(port)->Query({"101", "a b"});
  EXPECT_EQ(unsafe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unsafe.status().message()), HasSubstr("not a valid Slurm name"));
  // Refused requests never reached squeue.
  EXPECT_FALSE(std::filesystem::exists(dir_.File("squeue.log")));

  WriteFile(dir_.File("squeue.fail"), "");
  absl::StatusOr<std::vector<SchedulerJobStatus>> failed = Client(port)->Query({"101"});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("answered HTTP 502: $ " + dir_.File("squeue")));
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("Unable to contact slurm controller"));

  actuator->Stop();
  absl::StatusOr<std::vector<SchedulerJobStatus>> gone = Client(port)->Query({"101"});
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("no answer"));
}

TEST_F(ActuatorRoundTripTest, TheNoopBackendIsUnimplemented) {
  options_.backend = "noop";
  std::unique_ptr<actuator::Actuator> actuator = StartActuator();
  ASSERT_NE(actuator, nullptr);
  absl::StatusOr<std::vector<SchedulerJobStatus>> answers =
      Client(actuator->port())->Query({"101"});
  EXPECT_EQ(answers.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(answers.status().message()), HasSubstr("no scheduler"));
}

// Answers POST /v1/jobs/query with whatever `answer` says, after checking
// the signature; records every request's jobs.
class FakeActuator {
 public:
  using Answer = std::function<void(const std::vector<std::string>& jobs, httplib::Response&)>;

  FakeActuator() {
    server_.Post("/v1/jobs/query", [this](const httplib::Request& req, httplib::Response& res) {
      absl::Status signed_ok =
          VerifyWebhook(kSecret, req.get_header_value("X-Vigil-Timestamp"),
                        req.get_header_value("X-Vigil-Signature"), req.body, clock.Now(), 300);
      json body = json::parse(req.body, nullptr, false);
      std::vector<std::string> jobs;
      if (body.is_object() && body["jobs"].is_array()) jobs = body["jobs"];
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(jobs);
        if (!signed_ok.ok()) ++unsigned_;
        if (req.get_header_value("Content-Type") != "application/json") ++untyped_;
      }
      Answer answer;
      {
        std::lock_guard<std::mutex> lock(mu_);
        answer = answer_;
      }
      answer(jobs, res);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      stopped_ = true;
    });
  }
  ~FakeActuator() {
    while (!server_.is_running() && !stopped_) std::this_thread::yield();
    server_.stop();
    thread_.join();
  }

  void Set(Answer answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(answer);
  }
  // Answers with `body` as it is, status 200.
  void SetBody(const std::string& body) {
    Set([body](const std::vector<std::string>&, httplib::Response& res) {
      res.set_content(body, "application/json");
    });
  }
  std::vector<std::vector<std::string>> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  int unsigned_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return unsigned_ + untyped_;
  }
  std::unique_ptr<SchedulerQuery> Client(size_t per_request = 100) {
    SchedulerQueryOptions options;
    options.url = "http://127.0.0.1:" + std::to_string(port_) + "/v1/jobs/query";
    options.secret = kSecret;
    options.timeout_seconds = 5;
    options.max_jobs_per_request = per_request;
    return SchedulerQuery::Create(options, clock).value();
  }

  FakeClock clock;

 private:
  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> stopped_ = false;
  int port_ = 0;
  std::mutex mu_;
  Answer answer_;
  std::vector<std::vector<std::string>> requests_;
  int unsigned_ = 0;
  int untyped_ = 0;
};

// A well-formed answer: every job running on `nodes`.
json Running(const std::vector<std::string>& jobs, const std::vector<std::string>& nodes) {
  json listed = json::array();
  for (const std::string& job : jobs) {
    listed.push_back({{"job", job}, {"job_id", job}, {"name", "n-" + job},
                      {"state", "running"}, {"scheduler_state", "RUNNING"},
                      {"nodes", nodes}, {"user", "alice"}, {"end_time", nullptr}});
  }
  return {{"scheduler", "slurm"}, {"as_of", 1764000000.5}, {"jobs", listed}};
}

TEST(SchedulerQueryAnswerTest, MalformedAnswersAreErrorsNeverExceptions) {
  FakeActuator fake;
  std::unique_ptr<SchedulerQuery> client = fake.Client();
  json good = Running({"1"}, {"n1"});
  auto with = [&](const std::function<void(json&)>& change) {
    json body = good;
    change(body);
    return body.dump();
  };
  struct Case {
    std::string body;
    const char* says;
  };
  const Case kCases[] = {
      {"", "not JSON"},
      {"{\"jobs\": [", "not JSON"},
      {"[]", "not a JSON object"},
      {"null", "not a JSON object"},
      {with([](json& b) { b.erase("jobs"); }), "jobs is missing"},
      {with([](json& b) { b.erase("scheduler"); }), "scheduler is missing"},
      {with([](json& b) { b["scheduler"] = 1; }), "scheduler is not a string"},
      {with([](json& b) { b["as_of"] = "now"; }), "as_of is not a number"},
      {with([](json& b) { b["jobs"] = "1"; }), "jobs is not an array"},
      {with([](json& b) { b["jobs"] = json::array(); }), "0 jobs for 1 asked"},
      {with([](json& b) { b["jobs"].push_back(b["jobs"][0]); }), "2 jobs for 1 asked"},
      {with([](json& b) { b["jobs"][0] = "1"; }), "jobs[0] is not an object"},
      {with([](json& b) { b["jobs"][0]["job"] = "2"; }), "jobs[0] answers for '2', not '1'"},
      {with([](json& b) { b["jobs"][0].erase("job"); }), "jobs[0].job is missing"},
      {with([](json& b) { b["jobs"][0]["job"] = 1; }), "jobs[0].job is not a string"},
      {with([](json& b) { b["jobs"][0].erase("state"); }), "jobs[0].state is missing"},
      {with([](json& b) { b["jobs"][0]["state"] = 3; }), "jobs[0].state is not a string"},
      {with([](json& b) { b["jobs"][0]["job_id"] = 1; }), "jobs[0].job_id is not a string"},
      {with([](json& b) { b["jobs"][0]["name"] = true; }), "jobs[0].name is not a string"},
      {with([](json& b) { b["jobs"][0]["user"] = json::array(); }),
       "jobs[0].user is not a string"},
      {with([](json& b) { b["jobs"][0]["scheduler_state"] = 1.5; }),
       "jobs[0].scheduler_state is not a string"},
      {with([](json& b) { b["jobs"][0]["nodes"] = "n1"; }), "jobs[0].nodes is not an array"},
      {with([](json& b) { b["jobs"][0]["nodes"] = {"n1", 2}; }),
       "jobs[0].nodes has an entry that is not a string"},
      {with([](json& b) { b["jobs"][0]["end_time"] = "yesterday"; }),
       "jobs[0].end_time is not a number"},
  };
  for (const Case& c : kCases) {
    fake.SetBody(c.body);
    absl::StatusOr<std::vector<SchedulerJobStatus>> answers = client->Query({"1"});
    EXPECT_EQ(answers.status().code(), absl::StatusCode::kInternal) << c.body;
    EXPECT_THAT(std::string(answers.status().message()), HasSubstr(c.says)) << c.body;
  }
  EXPECT_EQ(fake.unsigned_requests(), 0);
}

TEST(SchedulerQueryAnswerTest, OptionalFieldsMayBeAbsentAndNewStatesAreUnknown) {
  FakeActuator fake;
  fake.SetBody(R"({"scheduler": "slurm", "as_of": 1, "jobs": [
      {"job": "1", "state": "migrating"},
      {"job": "2", "state": "ended", "end_time": 1764000000.25, "nodes": null},
      {"job": "3", "state": "not_found", "end_time": null}]})");
  absl::StatusOr<std::vector<SchedulerJobStatus>> answers = fake.Client()->Query({"1", "2", "3"});
  ASSERT_TRUE(answers.ok()) << answers.status();
  EXPECT_EQ((*answers)[0].state, SchedulerJobState::kUnknown);
  EXPECT_EQ((*answers)[1].state, SchedulerJobState::kEnded);
  EXPECT_EQ((*answers)[1].end_time, 1764000000.25);
  EXPECT_EQ((*answers)[2].state, SchedulerJobState::kNotFound);
  EXPECT_FALSE((*answers)[2].end_time);
  for (SchedulerJobState state :
       {SchedulerJobState::kRunning, SchedulerJobState::kSuspended, SchedulerJobState::kPending,
        SchedulerJobState::kEnded, SchedulerJobState::kNotFound, SchedulerJobState::kUnknown}) {
    std::string name(SchedulerJobStateName(state));
    fake.SetBody(json({{"scheduler", "x"}, {"as_of", 1},
                       {"jobs", {{{"job", "1"}, {"state", name}}}}}).dump());
    EXPECT_EQ(fake.Client()->Query({"1"}).value()[0].state, state) << name;
  }
}

TEST(SchedulerQueryAnswerTest, ErrorStatusesCarryTheActuatorsError) {
  FakeActuator fake;
  std::unique_ptr<SchedulerQuery> client = fake.Client();
  struct Case {
    int status;
    std::string body;
    absl::StatusCode code;
    const char* says;
  };
  const Case kCases[] = {
      {400, R"({"error": "jobs[0]: must be a string"})", absl::StatusCode::kInvalidArgument,
       "refused the query: jobs[0]: must be a string"},
      {401, R"({"error": "signature refused: too old"})", absl::StatusCode::kUnauthenticated,
       "refused the signature: signature refused: too old"},
      {501, R"({"error": "no scheduler"})", absl::StatusCode::kUnimplemented, "no scheduler"},
      {502, R"({"error": "$ squeue\nexit status 1"})", absl::StatusCode::kUnavailable,
       "answered HTTP 502: $ squeue\nexit status 1"},
      {503, "<html>busy</html>", absl::StatusCode::kUnavailable,
       "answered HTTP 503: <html>busy</html>"},
      {404, R"({"error": "HTTP 404"})", absl::StatusCode::kUnavailable, "HTTP 404"},
  };
  for (const Case& c : kCases) {
    fake.Set([&c](const std::vector<std::string>&, httplib::Response& res) {
      res.status = c.status;
      res.set_content(c.body, "application/json");
    });
    absl::StatusOr<std::vector<SchedulerJobStatus>> answers = client->Query({"1"});
    EXPECT_EQ(answers.status().code(), c.code) << c.status;
    EXPECT_THAT(std::string(answers.status().message()), HasSubstr(c.says)) << c.status;
  }
}

TEST(SchedulerQueryAnswerTest, LongListsGoInSeveralSignedRequestsInOrder) {
  FakeActuator fake;
  fake.Set([](const std::vector<std::string>& jobs, httplib::Response& res) {
    res.set_content(Running(jobs, {"n1"}).dump(), "application/json");
  });
  absl::StatusOr<std::vector<SchedulerJobStatus>> answers =
      fake.Client(/*per_request=*/2)->Query({"a", "b", "c", "d", "e"});
  ASSERT_TRUE(answers.ok()) << answers.status();
  std::vector<std::string> jobs;
  for (const SchedulerJobStatus& status : *answers) jobs.push_back(status.job);
  EXPECT_THAT(jobs, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(fake.requests(), ElementsAre(ElementsAre("a", "b"), ElementsAre("c", "d"),
                                           ElementsAre("e")));
  EXPECT_EQ(fake.unsigned_requests(), 0);
}

TEST(SchedulerQueryAnswerTest, AnAnswerCutOffByTheTransportIsAskedForInHalves) {
  FakeActuator fake;
  // ~2 KB per job: 100 jobs do not fit in the transport's 64 KiB, 25 do.
  std::vector<std::string> nodes;
  for (int i = 0; i < 128; ++i) nodes.push_back("gpu-node-" + std::to_string(1000 + i));
  fake.Set([&nodes](const std::vector<std::string>& jobs, httplib::Response& res) {
    res.set_content(Running(jobs, nodes).dump(), "application/json");
  });
  std::vector<std::string> asked;
  for (int i = 0; i < 100; ++i) asked.push_back(std::to_string(i));
  absl::StatusOr<std::vector<SchedulerJobStatus>> answers = fake.Client()->Query(asked);
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 100u);
  for (size_t i = 0; i < asked.size(); ++i) {
    EXPECT_EQ((*answers)[i].job, asked[i]);
    EXPECT_EQ((*answers)[i].nodes.size(), 128u);
  }
  std::vector<size_t> sizes;
  for (const std::vector<std::string>& request : fake.requests()) sizes.push_back(request.size());
  EXPECT_THAT(sizes, ElementsAre(100, 50, 25, 25, 50, 25, 25));

  // One job whose answer alone is too long.
  nodes.resize(5000, "gpu-node-with-a-long-name");
  absl::StatusOr<std::vector<SchedulerJobStatus>> huge = fake.Client()->Query({"1"});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("answer for job '1' is longer"));
}

TEST(SchedulerQueryAnswerTest, ConcurrentQueriesShareNothing) {
  FakeActuator fake;
  fake.Set([](const std::vector<std::string>& jobs, httplib::Response& res) {
    res.set_content(Running(jobs, {"n1"}).dump(), "application/json");
  });
  std::unique_ptr<SchedulerQuery> client = fake.Client();
  std::atomic<int> good = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        std::string job = std::to_string(t) + "-" + std::to_string(i);
        absl::StatusOr<std::vector<SchedulerJobStatus>> answers = client->Query({job});
        if (answers.ok() && answers->size() == 1 && (*answers)[0].job == job) ++good;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(good, 40);
}

}  // namespace
}  // namespace vigil
