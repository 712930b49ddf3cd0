// The server's dead-man's switch as wired by VigilServer: its config
// section, its heartbeats once the server runs, its /metrics families, and
// a start refused for an unreadable header secret.
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/config/config.h"
#include "server/server.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil {
namespace {

using testing::HttpGet;
using testing::HttpResult;
using testing::TestOptions;

// Records every request and accepts it.
class RecordingTransport : public Transport {
 public:
  TransportResult Send(const OutboundRequest& request, double) override {
    std::lock_guard<std::mutex> l(mu_);
    urls_.push_back(request.url);
    return TransportResult{200, "OK", {}, ""};
  }
  std::vector<std::string> urls() const {
    std::lock_guard<std::mutex> l(mu_);
    return urls_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> urls_;
};

TEST(WatchdogWiringTest, ConfigSection) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(
      R"({"watchdog": {"heartbeat_url": "https://hc-ping.example/x",
                       "interval_seconds": 30}})",
      &options);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(options.watchdog.heartbeat_url, "https://hc-ping.example/x");
  EXPECT_EQ(options.watchdog.interval_seconds, 30);
  EXPECT_FALSE(ServerOptions().watchdog.enabled());

  s = ParseServerConfig(
      R"({"watchdog": {"heartbeat_url": "https://x", "method": "PUT", "every": 1}})",
      &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "watchdog.every: unknown key")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "watchdog.method: must be")) << s;
}

TEST(WatchdogWiringTest, BeatsWhileRunningAndServesMetrics) {
  ServerOptions options = TestOptions();
  options.watchdog.heartbeat_url = "https://hc-ping.example/x";
  FakeClock clock;
  RecordingTransport transport;
  VigilServer server(options, &clock, nullptr, &transport);
  ASSERT_TRUE(server.Start().ok());
  // The first beat goes at once; a fake clock never brings the second.
  HttpResult metrics;
  for (int i = 0; i < 5000; ++i) {
    metrics = HttpGet(server.http_port(), "/metrics");
    if (absl::StrContains(metrics.body,
                          "vigil_watchdog_heartbeats_total{result=\"ok\"} 1\n"))
      break;
  }
  EXPECT_TRUE(absl::StrContains(
      metrics.body, "vigil_watchdog_heartbeats_total{result=\"ok\"} 1\n"))
      << metrics.body;
  EXPECT_TRUE(absl::StrContains(
      metrics.body, "vigil_watchdog_last_success_timestamp_seconds 1764000000.000"))
      << metrics.body;
  EXPECT_EQ(transport.urls(), std::vector<std::string>{"https://hc-ping.example/x"});
  EXPECT_TRUE(server.Stop().ok());
}

TEST(WatchdogWiringTest, UnreadableHeaderSecretRefusesStart) {
  ServerOptions options = TestOptions();
  options.watchdog.heartbeat_url = "https://api.opsgenie.example/v2/heartbeats/v/ping";
  options.watchdog.headers.push_back(
      {"Authorization", "", "/nonexistent/opsgenie.key", "", "GenieKey "});
  FakeClock clock;
  RecordingTransport transport;
  VigilServer server(options, &clock, nullptr, &transport);
  absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "watchdog.headers.Authorization")) << s;
  EXPECT_EQ(server.http_port(), 0);
  EXPECT_TRUE(transport.urls().empty());
}

}  // namespace
}  // namespace vigil
