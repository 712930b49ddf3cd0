// The dead-man's switch against a recording transport and a fake clock:
// when it beats, what it sends, when it stays quiet, how it counts and logs.
#include "server/watchdog/watchdog.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr double kStart = 1764000000.0;  // 2025-11-24T16:00:00Z

// Records every request; answers from a script (default 200).
class FakeTransport : public Transport {
 public:
  TransportResult Send(const OutboundRequest& request,
                       double timeout_seconds) override {
    std::lock_guard<std::mutex> l(mu_);
    requests_.push_back(request);
    timeouts_.push_back(timeout_seconds);
    if (answers_.empty()) return TransportResult{200, "OK", {}, ""};
    TransportResult r = answers_.front();
    answers_.pop_front();
    return r;
  }
  // Answers the next send still unanswered with `r`.
  void Answer(TransportResult r) {
    std::lock_guard<std::mutex> l(mu_);
    answers_.push_back(std::move(r));
  }
  std::vector<OutboundRequest> requests() const {
    std::lock_guard<std::mutex> l(mu_);
    return requests_;
  }
  std::vector<double> timeouts() const {
    std::lock_guard<std::mutex> l(mu_);
    return timeouts_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<OutboundRequest> requests_;
  std::vector<double> timeouts_;
  std::deque<TransportResult> answers_;
};

TransportResult Refused(int status) { return TransportResult{status, "", {}, ""}; }
TransportResult Unreachable() {
  return TransportResult{0, "", {}, "Couldn't connect to server"};
}

class WatchdogTest : public ::testing::Test {
 protected:
  WatchdogTest() : clock_(kStart) {
    options_.clock = &clock_;
    options_.transport = &transport_;
    options_.health = [this]() -> absl::Status {
      std::lock_guard<std::mutex> l(mu_);
      return health_;
    };
    options_.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu_);
      logs_.push_back(line);
    };
  }

  std::unique_ptr<Watchdog> Make(const WatchdogConfig& config) {
    absl::StatusOr<std::unique_ptr<Watchdog>> w = Watchdog::Create(config, options_);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }
  void SetHealth(absl::Status s) {
    std::lock_guard<std::mutex> l(mu_);
    health_ = std::move(s);
  }
  std::vector<std::string> logs() {
    std::lock_guard<std::mutex> l(mu_);
    return logs_;
  }

  FakeClock clock_;
  FakeTransport transport_;
  WatchdogOptions options_;
  std::mutex mu_;
  absl::Status health_;
  std::vector<std::string> logs_;
};

WatchdogConfig HeartbeatConfig() {
  WatchdogConfig c;
  c.heartbeat_url = "https://hc-ping.example/abc";
  c.instance = "vigil-1";
  return c;
}

// Polls (real time, up to 20 s) until `condition` holds.
template <typename F>
bool Eventually(F condition) {
  for (int i = 0; i < 10000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return condition();
}

TEST_F(WatchdogTest, BeatsAtOnceThenEveryInterval) {
  WatchdogConfig config = HeartbeatConfig();
  config.interval_seconds = 60;
  std::unique_ptr<Watchdog> w = Make(config);
  w->Start();
  ASSERT_TRUE(Eventually([&] { return transport_.requests().size() == 1; }));
  clock_.Advance(59);
  // Not due yet: the second beat waits for the full interval.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(transport_.requests().size(), 1u);
  clock_.Advance(1);
  ASSERT_TRUE(Eventually([&] { return transport_.requests().size() == 2; }));
  clock_.Advance(60);
  ASSERT_TRUE(Eventually([&] { return transport_.requests().size() == 3; }));
  w->Stop();

  const OutboundRequest r = transport_.requests()[0];
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.url, "https://hc-ping.example/abc");
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(transport_.timeouts()[0], 10);
  WatchdogCounters c = w->counters();
  EXPECT_EQ(c.ok, 3u);
  EXPECT_EQ(c.error, 0u);
  EXPECT_EQ(c.last_success, kStart + 120);
  EXPECT_TRUE(logs().empty());
}

TEST_F(WatchdogTest, PostCarriesATextBody) {
  WatchdogConfig config = HeartbeatConfig();
  config.method = "POST";
  std::unique_ptr<Watchdog> w = Make(config);
  w->Beat();
  ASSERT_EQ(transport_.requests().size(), 1u);
  const OutboundRequest r = transport_.requests()[0];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.body, "vigil-server vigil-1 working\n");
}

TEST_F(WatchdogTest, SkipsWhileUnhealthyAndLogsOnce) {
  std::unique_ptr<Watchdog> w = Make(HeartbeatConfig());
  w->Beat();
  SetHealth(absl::UnavailableError("frame log write failed: No space left"));
  w->Beat();
  clock_.Advance(60);
  w->Beat();
  EXPECT_EQ(transport_.requests().size(), 1u);  // nothing sent while unhealthy
  SetHealth(absl::OkStatus());
  clock_.Advance(60);
  w->Beat();
  EXPECT_EQ(transport_.requests().size(), 2u);

  WatchdogCounters c = w->counters();
  EXPECT_EQ(c.ok, 2u);
  EXPECT_EQ(c.skipped_unhealthy, 2u);
  EXPECT_EQ(c.last_success, kStart + 120);
  std::vector<std::string> lines = logs();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(absl::StrContains(lines[0], "not working (frame log write failed"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "working again")) << lines[1];
}

TEST_F(WatchdogTest, SkipsWhenNotLeader) {
  bool leader = false;
  options_.is_leader = [&leader] { return leader; };
  std::unique_ptr<Watchdog> w = Make(HeartbeatConfig());
  w->Beat();
  w->Beat();
  EXPECT_TRUE(transport_.requests().empty());
  EXPECT_EQ(w->counters().skipped_not_leader, 2u);
  leader = true;
  w->Beat();
  EXPECT_EQ(transport_.requests().size(), 1u);
  EXPECT_EQ(w->counters().ok, 1u);
  std::vector<std::string> lines = logs();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(absl::StrContains(lines[0], "not the leader"));
  EXPECT_TRUE(absl::StrContains(lines[1], "leads again"));
}

TEST_F(WatchdogTest, AlertmanagerAlertLapsesAfterThreeIntervals) {
  WatchdogConfig config;
  config.alertmanager_url = "http://am.example:9093/";
  config.instance = "vigil-1";
  config.interval_seconds = 30;
  std::unique_ptr<Watchdog> w = Make(config);
  clock_.Advance(100);
  w->Beat();
  ASSERT_EQ(transport_.requests().size(), 1u);
  const OutboundRequest r = transport_.requests()[0];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.url, "http://am.example:9093/api/v2/alerts");
  Json body = Json::parse(r.body, nullptr, false);
  ASSERT_TRUE(body.is_array()) << r.body;
  ASSERT_EQ(body.size(), 1u);
  const Json& alert = body[0];
  EXPECT_EQ(alert["labels"], (Json{{"alertname", "Watchdog"},
                                  {"severity", "none"},
                                  {"source", "vigil"},
                                  {"instance", "vigil-1"}}));
  EXPECT_EQ(alert["startsAt"], "2025-11-24T16:00:00.000Z");
  // now (start + 100 s) + 3 x 30 s.
  EXPECT_EQ(alert["endsAt"], "2025-11-24T16:03:10.000Z");
  absl::Time ends;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, alert["endsAt"].get<std::string>(),
                              &ends, &error))
      << error;
  EXPECT_EQ(absl::ToUnixSeconds(ends), static_cast<int64_t>(kStart + 100 + 90));
  bool json_header = false;
  for (const auto& [name, value] : r.headers)
    json_header |= name == "Content-Type" && value == "application/json";
  EXPECT_TRUE(json_header);
}

TEST_F(WatchdogTest, SendsToBothReceiversAndHeadersOnlyToTheHeartbeat) {
  WatchdogConfig config = HeartbeatConfig();
  config.alertmanager_url = "http://am.example:9093/api/v2/alerts";
  config.headers.push_back({"X-Team", "ml-infra", "", "", ""});
  std::unique_ptr<Watchdog> w = Make(config);
  w->Beat();
  std::vector<OutboundRequest> sent = transport_.requests();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].url, "https://hc-ping.example/abc");
  EXPECT_EQ(sent[0].headers,
            (std::vector<std::pair<std::string, std::string>>{{"X-Team", "ml-infra"}}));
  EXPECT_EQ(sent[1].url, "http://am.example:9093/api/v2/alerts");
  for (const auto& [name, value] : sent[1].headers) EXPECT_NE(name, "X-Team");
}

TEST_F(WatchdogTest, ErrorsAreCountedAndLoggedOncePerDistinctError) {
  std::unique_ptr<Watchdog> w = Make(HeartbeatConfig());
  transport_.Answer(Unreachable());
  transport_.Answer(Unreachable());
  transport_.Answer(Refused(503));
  transport_.Answer(Refused(503));
  for (int i = 0; i < 5; ++i) {
    w->Beat();
    clock_.Advance(60);
  }
  WatchdogCounters c = w->counters();
  EXPECT_EQ(c.error, 4u);
  EXPECT_EQ(c.ok, 1u);
  EXPECT_EQ(c.last_success, kStart + 240);
  std::vector<std::string> lines = logs();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(absl::StrContains(lines[0],
                                "heartbeat URL: no response: Couldn't connect"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "heartbeat URL: HTTP 503")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[2], "delivered again")) << lines[2];
  // Every failed beat was retried at the next interval.
  EXPECT_EQ(transport_.requests().size(), 5u);
}

TEST_F(WatchdogTest, ChangingCurlDetailsAreOneError) {
  std::unique_ptr<Watchdog> w = Make(HeartbeatConfig());
  transport_.Answer(TransportResult{0, "", {}, "Timeout was reached: after 10001 ms"});
  transport_.Answer(TransportResult{0, "", {}, "Timeout was reached: after 10002 ms"});
  w->Beat();
  w->Beat();
  EXPECT_EQ(w->counters().error, 2u);
  ASSERT_EQ(logs().size(), 1u);
  EXPECT_TRUE(absl::StrContains(logs()[0], "after 10001 ms")) << logs()[0];
}

TEST_F(WatchdogTest, OneFailingReceiverMakesTheBeatAnError) {
  WatchdogConfig config = HeartbeatConfig();
  config.alertmanager_url = "http://am.example:9093";
  std::unique_ptr<Watchdog> w = Make(config);
  transport_.Answer(TransportResult{200, "OK", {}, ""});
  transport_.Answer(Refused(400));
  w->Beat();
  EXPECT_EQ(w->counters().error, 1u);
  EXPECT_EQ(w->counters().last_success, 0);
  ASSERT_EQ(logs().size(), 1u);
  EXPECT_TRUE(absl::StrContains(logs()[0], "Alertmanager: HTTP 400")) << logs()[0];
}

TEST_F(WatchdogTest, MetricsText) {
  std::unique_ptr<Watchdog> w = Make(HeartbeatConfig());
  w->Beat();
  transport_.Answer(Refused(500));
  w->Beat();
  SetHealth(absl::UnavailableError("read-only"));
  w->Beat();
  const std::string text = w->MetricsText();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE vigil_watchdog_heartbeats_total counter\n"));
  EXPECT_TRUE(absl::StrContains(text, "vigil_watchdog_heartbeats_total{result=\"ok\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "vigil_watchdog_heartbeats_total{result=\"error\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "vigil_watchdog_heartbeats_total{result=\"skipped_unhealthy\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "vigil_watchdog_heartbeats_total{result=\"skipped_not_leader\"} 0\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "# TYPE vigil_watchdog_last_success_timestamp_seconds gauge\n"
            "vigil_watchdog_last_success_timestamp_seconds 1764000000.000\n"))
      << text;
}

// A temporary file holding `text`, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char path[] = "/tmp/vigil-watchdog-test-XXXXXX";
    int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = path;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST_F(WatchdogTest, HeaderSecretsFromFileAndEnvironment) {
  TempFile key("0123-secret\n");
  setenv("VIGIL_WATCHDOG_TEST_TOKEN", "tok", 1);
  WatchdogConfig config = HeartbeatConfig();
  config.headers.push_back({"Authorization", "", key.path(), "", "GenieKey "});
  config.headers.push_back({"X-Token", "", "", "VIGIL_WATCHDOG_TEST_TOKEN", ""});
  std::unique_ptr<Watchdog> w = Make(config);
  unsetenv("VIGIL_WATCHDOG_TEST_TOKEN");
  w->Beat();
  ASSERT_EQ(transport_.requests().size(), 1u);
  EXPECT_EQ(transport_.requests()[0].headers,
            (std::vector<std::pair<std::string, std::string>>{
                {"Authorization", "GenieKey 0123-secret"}, {"X-Token", "tok"}}));
}

TEST_F(WatchdogTest, MissingSecretsFailCreate) {
  WatchdogConfig config = HeartbeatConfig();
  config.headers.push_back({"Authorization", "", "/nonexistent/opsgenie.key", "", ""});
  absl::StatusOr<std::unique_ptr<Watchdog>> w = Watchdog::Create(config, options_);
  ASSERT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(w.status().message(),
                                "watchdog.headers.Authorization: /nonexistent/opsgenie.key"))
      << w.status();

  TempFile empty("  \n");
  config.headers = {{"Authorization", "", empty.path(), "", ""}};
  w = Watchdog::Create(config, options_);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(w.status().message(), "empty")) << w.status();

  unsetenv("VIGIL_WATCHDOG_TEST_UNSET");
  config.headers = {{"Authorization", "", "", "VIGIL_WATCHDOG_TEST_UNSET", ""}};
  w = Watchdog::Create(config, options_);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(w.status().message(), "VIGIL_WATCHDOG_TEST_UNSET"))
      << w.status();
}

TEST_F(WatchdogTest, CreateNeedsAReceiverAndItsCollaborators) {
  EXPECT_EQ(Watchdog::Create(WatchdogConfig{}, options_).status().code(),
            absl::StatusCode::kInvalidArgument);
  WatchdogOptions no_health = options_;
  no_health.health = nullptr;
  EXPECT_EQ(Watchdog::Create(HeartbeatConfig(), no_health).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(WatchdogTest, DefaultInstanceIsTheHostName) {
  WatchdogConfig config;
  config.alertmanager_url = "http://am.example:9093";
  std::unique_ptr<Watchdog> w = Make(config);
  w->Beat();
  ASSERT_EQ(transport_.requests().size(), 1u);
  Json body = Json::parse(transport_.requests()[0].body);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(body[0]["labels"]["instance"], std::string(host));
}

}  // namespace
}  // namespace vigil
