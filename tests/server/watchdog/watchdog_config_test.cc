// The "watchdog" config section: every key, and every error with its path.
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "server/watchdog/watchdog.h"

namespace vigil {
namespace {

// Reads `text` as the section; returns the errors.
std::vector<std::string> Read(const std::string& text, WatchdogConfig* out) {
  JsonConfigReader reader;
  ReadWatchdogConfig(nlohmann::json::parse(text), reader, out);
  return reader.errors();
}

TEST(WatchdogConfigTest, ReadsEveryKey) {
  WatchdogConfig c;
  std::vector<std::string> errors = Read(R"({
    "heartbeat_url": "https://api.opsgenie.com/v2/heartbeats/vigil/ping",
    "method": "post",
    "headers": {"Authorization": {"env": "OPSGENIE_KEY", "prefix": "GenieKey "},
                "X-Key": {"file": "/etc/vigil/key"}, "X-Team": "ml"},
    "alertmanager_url": "http://am:9093", "instance": "vigil-a",
    "interval_seconds": 30, "timeout_seconds": 5})",
                                         &c);
  ASSERT_TRUE(errors.empty()) << absl::StrJoin(errors, "\n");
  EXPECT_EQ(c.heartbeat_url, "https://api.opsgenie.com/v2/heartbeats/vigil/ping");
  EXPECT_EQ(c.method, "POST");
  EXPECT_EQ(c.alertmanager_url, "http://am:9093");
  EXPECT_EQ(c.instance, "vigil-a");
  EXPECT_EQ(c.interval_seconds, 30);
  EXPECT_EQ(c.timeout_seconds, 5);
  ASSERT_EQ(c.headers.size(), 3u);
  // nlohmann orders object keys by name.
  EXPECT_EQ(c.headers[0].name, "Authorization");
  EXPECT_EQ(c.headers[0].env, "OPSGENIE_KEY");
  EXPECT_EQ(c.headers[0].prefix, "GenieKey ");
  EXPECT_EQ(c.headers[1].name, "X-Key");
  EXPECT_EQ(c.headers[1].file, "/etc/vigil/key");
  EXPECT_EQ(c.headers[2].name, "X-Team");
  EXPECT_EQ(c.headers[2].value, "ml");
  EXPECT_TRUE(c.enabled());
}

TEST(WatchdogConfigTest, Defaults) {
  WatchdogConfig c;
  ASSERT_TRUE(Read(R"({"alertmanager_url": "http://am:9093"})", &c).empty());
  EXPECT_EQ(c.method, "GET");
  EXPECT_EQ(c.interval_seconds, 60);
  EXPECT_EQ(c.timeout_seconds, 10);
  EXPECT_TRUE(c.heartbeat_url.empty());
  EXPECT_FALSE(WatchdogConfig{}.enabled());
}

struct BadCase {
  const char* text;
  const char* error;
};
// Names a case by the error it expects (in test listings).
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.error; }

class WatchdogConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(WatchdogConfigErrorTest, NamesTheKey) {
  WatchdogConfig c;
  std::vector<std::string> errors = Read(GetParam().text, &c);
  EXPECT_NE(std::find(errors.begin(), errors.end(), GetParam().error), errors.end())
      << "got:\n" << absl::StrJoin(errors, "\n");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, WatchdogConfigErrorTest,
    ::testing::Values(
        BadCase{R"([])", "watchdog: must be a JSON object"},
        BadCase{R"({"heartbeat_url": "https://x", "url": "y"})",
                "watchdog.url: unknown key"},
        BadCase{R"({})", "watchdog: needs heartbeat_url, alertmanager_url or both"},
        BadCase{R"({"heartbeat_url": "hc-ping.com/x"})",
                "watchdog.heartbeat_url: must start with http:// or https://"},
        BadCase{R"({"alertmanager_url": "am:9093"})",
                "watchdog.alertmanager_url: must start with http:// or https://"},
        BadCase{R"({"heartbeat_url": "https://x", "method": "PUT"})",
                "watchdog.method: must be \"GET\" or \"POST\""},
        BadCase{R"({"heartbeat_url": "https://x", "interval_seconds": 0})",
                "watchdog.interval_seconds: must be a number > 0 and <= 86400"},
        BadCase{R"({"heartbeat_url": "https://x", "interval_seconds": 5,
                    "timeout_seconds": 10})",
                "watchdog.timeout_seconds: must not exceed interval_seconds (5)"},
        BadCase{R"({"heartbeat_url": "https://x", "headers": ["a"]})",
                "watchdog.headers: must be an object of header name -> value"},
        BadCase{R"({"heartbeat_url": "https://x", "headers": {"Bad Name": "v"}})",
                "watchdog.headers.Bad Name: not a valid HTTP header name"},
        BadCase{R"({"heartbeat_url": "https://x", "headers": {"X": "a\r\nY: b"}})",
                "watchdog.headers.X: must not contain line breaks"},
        BadCase{R"({"heartbeat_url": "https://x", "headers": {"X": 5}})",
                "watchdog.headers.X: must be a string, {\"file\": PATH} or "
                "{\"env\": NAME}"},
        BadCase{R"({"heartbeat_url": "https://x",
                    "headers": {"X": {"file": "/a", "env": "B"}}})",
                "watchdog.headers.X: needs exactly one of \"file\" and \"env\""},
        BadCase{R"({"heartbeat_url": "https://x",
                    "headers": {"X": {"path": "/a"}}})",
                "watchdog.headers.X.path: unknown key"},
        BadCase{R"({"alertmanager_url": "http://am:9093",
                    "headers": {"X": "v"}})",
                "watchdog.headers: go with the heartbeat URL: set heartbeat_url"}));

}  // namespace
}  // namespace vigil
