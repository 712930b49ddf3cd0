// vigilctl end to end: RunVigilCtl with the real HTTP transport against a
// recording loopback server, at a fixed time.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ctl/ctl.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/ctl/recording_server.h"

namespace vigil::ctl {
namespace {

using Args = std::vector<std::string>;
using Json = nlohmann::json;
using vigil::testing::RecordedRequest;
using vigil::testing::RecordingServer;

// FakeClock's default start: 2025-11-24T16:00:00Z.
constexpr double kNow = 1764000000.0;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class RunTest : public ::testing::Test {
 protected:
  // Runs vigilctl against `server_` (unless `args` names another) with
  // token "tok" (unless `env` says otherwise).
  Result Run(Args args, Environment env = {}) {
    if (!env.server) env.server = server_.url();
    if (!env.token) env.token = "tok";
    Dependencies deps;
    deps.clock = &clock_;
    std::ostringstream out, err;
    Result result;
    result.exit_code = RunVigilCtl(args, env, deps, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  // The only request the server got.
  RecordedRequest OnlyRequest() {
    std::vector<RecordedRequest> requests = server_.requests();
    EXPECT_EQ(requests.size(), 1u);
    return requests.empty() ? RecordedRequest{} : requests.front();
  }

  FakeClock clock_{kNow};
  RecordingServer server_;
};

struct RequestCase {
  Args args;
  std::string method;
  std::string target;  // raw, as sent
  const char* body;    // JSON, or nullptr for no body
};

class RequestTest : public RunTest,
                    public ::testing::WithParamInterface<RequestCase> {};

TEST_P(RequestTest, SendsTheContractRequest) {
  const RequestCase& c = GetParam();
  const std::string path = c.target.substr(0, c.target.find('?'));
  server_.Answer(c.method, path, c.method == "POST" ? 201 : 200, "{}");
  Result result = Run(c.args);
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  RecordedRequest request = OnlyRequest();
  EXPECT_EQ(request.method, c.method);
  EXPECT_EQ(request.target, c.target);
  EXPECT_EQ(request.authorization, "Bearer tok");
  if (c.body == nullptr) {
    EXPECT_EQ(request.body, "");
  } else {
    EXPECT_EQ(request.content_type, "application/json");
    EXPECT_EQ(Json::parse(request.body, nullptr, false), Json::parse(c.body))
        << request.body;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Commands, RequestTest,
    ::testing::Values(
        RequestCase{{"incidents"}, "GET", "/api/v1/incidents", nullptr},
        RequestCase{{"incidents", "--state", "all", "--severity", "p0,P1",
                     "--job", "llama 70b", "--node", "n1", "--limit", "5"},
                    "GET",
                    "/api/v1/incidents?state=all&severity=P0%2CP1&job=llama%"
                    "2070b&node=n1&limit=5",
                    nullptr},
        RequestCase{
            {"incident", "inc/1"}, "GET", "/api/v1/incidents/inc%2F1", nullptr},
        RequestCase{{"ack", "inc-1", "--comment", "on it"},
                    "POST",
                    "/api/v1/incidents/inc-1/ack",
                    R"({"comment": "on it"})"},
        RequestCase{
            {"unack", "inc-1"}, "POST", "/api/v1/incidents/inc-1/unack", "{}"},
        RequestCase{{"resolve", "inc-1", "--comment", "fixed"},
                    "POST",
                    "/api/v1/incidents/inc-1/resolve",
                    R"({"comment": "fixed"})"},
        RequestCase{{"silences"}, "GET", "/api/v1/silences", nullptr},
        RequestCase{{"silence", "add", "--match", "job=llama", "--match",
                     "node=gpu-node-1*", "--duration", "1h30m", "--comment",
                     "NCCL upgrade"},
                    "POST",
                    "/api/v1/silences",
                    R"({"matchers": [{"name": "job", "value": "llama"},
                                     {"name": "node", "value": "gpu-node-1*"}],
                        "duration_minutes": 90, "comment": "NCCL upgrade"})"},
        RequestCase{{"silence", "add", "--match", "severity=p2", "--start",
                     "2025-11-24T17:00:00Z", "--until",
                     "2025-11-24T18:00:00+00:00", "--comment", "window"},
                    "POST",
                    "/api/v1/silences",
                    R"({"matchers": [{"name": "severity", "value": "P2"}],
                        "starts_at": 1764003600, "ends_at": 1764007200,
                        "comment": "window"})"},
        RequestCase{{"silence", "expire", "s-1"},
                    "DELETE",
                    "/api/v1/silences/s-1",
                    nullptr},
        RequestCase{{"deliveries"}, "GET", "/api/v1/deliveries", nullptr},
        RequestCase{{"deliveries", "--incident", "inc-1"},
                    "GET",
                    "/api/v1/deliveries?incident=inc-1",
                    nullptr},
        RequestCase{{"actions", "--incident", "inc-1"},
                    "GET",
                    "/api/v1/actions?incident=inc-1",
                    nullptr},
        RequestCase{
            {"action", "run", "cordon_node", "--job", "llama", "--node",
             "gpu-node-17", "--incident", "inc-1", "--reason", "XID 79"},
            "POST",
            "/api/v1/actions",
            R"({"action": "cordon_node", "job": "llama",
                        "node": "gpu-node-17", "incident_id": "inc-1",
                        "reason": "XID 79"})"},
        RequestCase{{"action", "run", "pause_job", "--job", "llama", "--reason",
                     "loss NaN"},
                    "POST",
                    "/api/v1/actions",
                    R"({"action": "pause_job", "job": "llama", "node": "",
                        "reason": "loss NaN"})"},
        RequestCase{{"approve", "act-7"},
                    "POST",
                    "/api/v1/actions/act-7/approve",
                    "{}"},
        RequestCase{{"remediation"}, "GET", "/api/v1/remediation", nullptr},
        RequestCase{{"remediation", "reset"},
                    "POST",
                    "/api/v1/remediation/reset",
                    "{}"},
        RequestCase{{"reload"}, "POST", "/-/reload", "{}"},
        RequestCase{{"audit", "--limit", "20"},
                    "GET",
                    "/api/v1/audit?limit=20",
                    nullptr},
        RequestCase{{"oncall"}, "GET", "/api/v1/oncall", nullptr},
        RequestCase{{"whoami"}, "GET", "/api/v1/whoami", nullptr}));

TEST_F(RunTest, PrintsATableByDefaultAndTheServersJsonWithJson) {
  const std::string body =
      R"({"incidents":[{"id":"inc-1","severity":"P1","kind":"xid",)"
      R"("job":"llama","node":"n1","gpu":0,"ts":1763999820,)"
      R"("lifecycle":"firing","summary":"XID 48"}]})";
  server_.Answer("GET", "/api/v1/incidents", 200, body);
  Result table = Run({"incidents"});
  ASSERT_EQ(table.exit_code, kExitOk) << table.err;
  EXPECT_EQ(table.out,
            "SEV  ID     AGE  STATE   KIND  JOB    NODE  GPU  SUMMARY\n"
            "P1   inc-1  3m   firing  xid   llama  n1    0    XID 48\n");
  EXPECT_EQ(table.err, "");
  Result json = Run({"--json", "incidents"});
  ASSERT_EQ(json.exit_code, kExitOk) << json.err;
  EXPECT_EQ(json.out, body + "\n");
}

TEST_F(RunTest, HttpErrorsExitOneWithTheServersMessageAndStatus) {
  server_.Answer("POST", "/api/v1/incidents/inc-9/ack", 404,
                 R"({"error": "unknown incident \"inc-9\""})");
  Result result = Run({"ack", "inc-9"});
  EXPECT_EQ(result.exit_code, kExitServerError);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err,
            "vigilctl: POST /api/v1/incidents/inc-9/ack: HTTP 404: unknown "
            "incident \"inc-9\"\n");
}

TEST_F(RunTest, ConflictAndForbiddenAndUnauthorizedExplainThemselves) {
  server_.Answer("POST", "/api/v1/incidents/inc-1/ack", 409,
                 R"({"error": "already acknowledged"})");
  Result conflict = Run({"ack", "inc-1"});
  EXPECT_EQ(conflict.exit_code, kExitServerError);
  EXPECT_NE(conflict.err.find("HTTP 409: already acknowledged"),
            std::string::npos)
      << conflict.err;

  server_.Answer("POST", "/api/v1/remediation/reset", 403,
                 R"({"error": "role operator is below admin"})");
  Result forbidden = Run({"remediation", "reset"});
  EXPECT_EQ(forbidden.exit_code, kExitServerError);
  EXPECT_NE(forbidden.err.find("HTTP 403: role operator is below admin\n"
                               "(your token's role may not do this"),
            std::string::npos)
      << forbidden.err;

  server_.Answer("GET", "/api/v1/whoami", 401,
                 R"({"error": "missing or invalid token"})");
  Result unauthorized = Run({"whoami"}, {.token = ""});
  EXPECT_EQ(unauthorized.exit_code, kExitServerError);
  EXPECT_NE(unauthorized.err.find("HTTP 401: missing or invalid token\n"
                                  "(give a valid token: --token"),
            std::string::npos)
      << unauthorized.err;
  EXPECT_EQ(server_.requests().back().authorization, "");
}

TEST_F(RunTest, NonJsonAnswersAreQuoted) {
  server_.Answer("GET", "/api/v1/oncall", 502, "  <html>bad gateway</html>\n");
  Result error = Run({"oncall"});
  EXPECT_EQ(error.exit_code, kExitServerError);
  EXPECT_EQ(error.err,
            "vigilctl: GET /api/v1/oncall: HTTP 502: <html>bad "
            "gateway</html>\n");

  server_.Answer("GET", "/api/v1/whoami", 200, "alice");
  Result garbled = Run({"whoami"});
  EXPECT_EQ(garbled.exit_code, kExitServerError);
  EXPECT_EQ(garbled.err,
            "vigilctl: GET /api/v1/whoami: HTTP 200 but the body is not "
            "JSON: alice\n");
}

TEST_F(RunTest, NoServerReachableIsAClearErrorWithExitOne) {
  std::string url;
  {
    RecordingServer gone;
    url = gone.url();
  }
  Result result = Run({"incidents", "--server", url});
  EXPECT_EQ(result.exit_code, kExitServerError);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err,
            "vigilctl: cannot reach " + url +
                ": connection refused or host unreachable; is vigil-server "
                "running there?\n");
}

TEST_F(RunTest, BadServerUrlIsAUsageError) {
  for (const char* url :
       {"127.0.0.1:8080", "ftp://host", "http://", "http://host:99999",
        "http://host:x", "http://[::1", "http://host/api?x=1"}) {
    Result result = Run({"whoami", "--server", url});
    EXPECT_EQ(result.exit_code, kExitUsage) << url;
    EXPECT_NE(result.err.find("--server: bad server URL"), std::string::npos)
        << url << ": " << result.err;
  }
}

TEST(NewHttpTransportTest, AcceptsHttpAndHttpsUrls) {
  for (const char* url :
       {"http://127.0.0.1:8080", "https://vigil.example.com",
        "https://vigil.example.com:8443/ops/", "http://[::1]:8080"}) {
    TransportOptions options;
    options.base_url = url;
    absl::StatusOr<std::unique_ptr<HttpTransport>> transport =
        NewHttpTransport(options);
    EXPECT_TRUE(transport.ok()) << url << ": " << transport.status();
  }
}

TEST_F(RunTest, BaseUrlPathIsAPrefix) {
  server_.Answer("GET", "/vigil/api/v1/whoami", 200,
                 R"({"name": "alice", "role": "viewer"})");
  Result result = Run({"whoami"}, {.server = server_.url() + "/vigil/"});
  ASSERT_EQ(result.exit_code, kExitOk) << result.err;
  EXPECT_EQ(result.out, "alice (viewer)\n");
}

TEST_F(RunTest, TokenFromFlagThenEnvironmentThenFile) {
  server_.Answer("GET", "/api/v1/whoami", 200, "{}");
  const std::string file = ::testing::TempDir() + "/vigilctl_token";
  std::ofstream(file) << "  from-file \nsecond line\n";

  ASSERT_EQ(
      Run({"whoami", "--token", "flag", "--token-file", file}, {.token = "env"})
          .exit_code,
      kExitOk);
  ASSERT_EQ(Run({"whoami", "--token-file", file}, {.token = "env"}).exit_code,
            kExitOk);
  ASSERT_EQ(Run({"whoami", "--token-file", file}, {.token = ""}).exit_code,
            kExitOk);
  std::vector<RecordedRequest> requests = server_.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].authorization, "Bearer flag");
  EXPECT_EQ(requests[1].authorization, "Bearer env");
  EXPECT_EQ(requests[2].authorization, "Bearer from-file");
}

TEST_F(RunTest, UnreadableOrEmptyTokenFileIsAUsageError) {
  const std::string missing = ::testing::TempDir() + "/no_such_token_file";
  Result result = Run({"whoami", "--token-file", missing}, {.token = ""});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_NE(result.err.find("--token-file " + missing + ": cannot read it"),
            std::string::npos)
      << result.err;
  const std::string empty = ::testing::TempDir() + "/vigilctl_empty_token";
  std::ofstream(empty) << "\n";
  result = Run({"whoami", "--token-file", empty}, {.token = ""});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_NE(result.err.find("its first line is empty"), std::string::npos)
      << result.err;
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(RunTest, UsageErrorsExitTwoAndSendNothing) {
  for (const Args& args : {Args{"frobnicate"}, Args{"ack"},
                           Args{"silence", "add", "--match", "job=a",
                                "--duration", "2x", "--comment", "c"},
                           Args{"silence", "add", "--match", "pod=a",
                                "--duration", "2h", "--comment", "c"},
                           // Valid syntax, but the end lies before "now".
                           Args{"silence", "add", "--match", "job=a", "--until",
                                "2025-11-24T15:00:00Z", "--comment", "c"}}) {
    Result result = Run(args);
    EXPECT_EQ(result.exit_code, kExitUsage) << ::testing::PrintToString(args);
    EXPECT_EQ(result.err.rfind("vigilctl: ", 0), 0u) << result.err;
    EXPECT_EQ(result.out, "");
  }
  EXPECT_TRUE(server_.requests().empty());
  Result past = Run({"silence", "add", "--match", "job=a", "--until",
                     "2025-11-24T15:00:00Z", "--comment", "c"});
  EXPECT_NE(past.err.find("--until 2025-11-24T15:00:00Z lies in the past"),
            std::string::npos)
      << past.err;
}

TEST_F(RunTest, NoArgumentsPrintsTheOverviewAsAUsageError) {
  Result result = Run({});
  EXPECT_EQ(result.exit_code, kExitUsage);
  EXPECT_NE(result.err.find("usage: vigilctl"), std::string::npos);
}

TEST_F(RunTest, HelpPrintsUsageAndSendsNothing) {
  Result result = Run({"silence", "add", "--help"});
  EXPECT_EQ(result.exit_code, kExitOk);
  EXPECT_EQ(result.out, UsageText("silence add"));
  EXPECT_TRUE(server_.requests().empty());
}

}  // namespace
}  // namespace vigil::ctl
