// The "remote_write" section of the server config, through
// ParseServerConfig: defaults, every key, and the errors an operator sees.
#include <string>

#include "gtest/gtest.h"
#include "server/config/config.h"

namespace vigil {
namespace {

absl::Status Parse(const std::string& text, ServerOptions* options) {
  return ParseServerConfig(text, options);
}

TEST(RemoteWriteConfig, AbsentMeansOff) {
  ServerOptions o;
  ASSERT_TRUE(Parse(R"({"memory": true})", &o).ok());
  EXPECT_FALSE(o.remote_write.has_value());
}

TEST(RemoteWriteConfig, UrlAloneTakesTheDefaults) {
  ServerOptions o;
  ASSERT_TRUE(
      Parse(R"({"remote_write": {"url": "http://vm:8428/api/v1/write"}})", &o).ok());
  ASSERT_TRUE(o.remote_write.has_value());
  EXPECT_EQ(o.remote_write->url, "http://vm:8428/api/v1/write");
  EXPECT_EQ(o.remote_write->batch_samples, 5000);
  EXPECT_EQ(o.remote_write->max_pending_samples, 1'000'000u);
  EXPECT_EQ(o.remote_write->grace_seconds, 10);
  EXPECT_TRUE(o.remote_write->raw_metrics.empty());
}

TEST(RemoteWriteConfig, EveryKey) {
  ServerOptions o;
  const absl::Status s = Parse(R"({"remote_write": {
      "url": "https://vm.example/api/v1/write", "raw_metrics": ["^gpu_xid.*", "nic_.*"],
      "batch_samples": 2000, "flush_seconds": 2, "max_pending_samples": 50000,
      "timeout_seconds": 10, "grace_seconds": 15, "retry_base_seconds": 0.5,
      "retry_max_seconds": 60, "shutdown_flush_seconds": 3,
      "basic_auth": {"username": "vigil", "password_file": "/etc/vigil/vm.pw"}}})",
                               &o);
  ASSERT_TRUE(s.ok()) << s;
  const RemoteWriteOptions& rw = *o.remote_write;
  EXPECT_EQ(rw.raw_metrics.size(), 2u);
  EXPECT_EQ(rw.batch_samples, 2000);
  EXPECT_EQ(rw.flush_seconds, 2);
  EXPECT_EQ(rw.max_pending_samples, 50000u);
  EXPECT_EQ(rw.timeout_seconds, 10);
  EXPECT_EQ(rw.grace_seconds, 15);
  EXPECT_EQ(rw.retry_base_seconds, 0.5);
  EXPECT_EQ(rw.retry_max_seconds, 60);
  EXPECT_EQ(rw.shutdown_flush_seconds, 3);
  EXPECT_EQ(rw.basic_auth_username, "vigil");
  EXPECT_EQ(rw.basic_auth_password_file, "/etc/vigil/vm.pw");
}

TEST(RemoteWriteConfig, ErrorsNameTheirKeys) {
  struct Case {
    const char* config;
    const char* error;
  };
  const Case cases[] = {
      {R"({"remote_write": {}})", "remote_write.url: required"},
      {R"({"remote_write": {"url": "vm:8428"}})",
       "remote_write.url: must start with http:// or https://"},
      {R"({"remote_write": {"url": "http://vm", "bogus": 1}})",
       "remote_write.bogus: unknown key"},
      {R"({"remote_write": {"url": "http://vm", "raw_metrics": ["gpu_(xid"]}})",
       "remote_write.raw_metrics[0]: not a valid regex"},
      {R"({"remote_write": {"url": "http://vm", "raw_metrics": "gpu_.*"}})",
       "remote_write.raw_metrics"},
      {R"({"remote_write": {"url": "http://vm", "batch_samples": 0}})",
       "remote_write.batch_samples"},
      {R"({"remote_write": {"url": "http://vm", "batch_samples": 100,
                            "max_pending_samples": 10}})",
       "remote_write.max_pending_samples: must be at least batch_samples"},
      {R"({"remote_write": {"url": "http://vm", "flush_seconds": -1}})",
       "remote_write.flush_seconds"},
      {R"({"remote_write": {"url": "http://vm", "retry_base_seconds": 10,
                            "retry_max_seconds": 5}})",
       "remote_write.retry_max_seconds: must not be below retry_base_seconds"},
      {R"({"remote_write": {"url": "http://vm", "bearer_token_file": "/t",
                            "basic_auth": {"username": "u", "password_file": "/p"}}})",
       "remote_write.bearer_token_file: cannot be combined with basic_auth"},
      {R"({"remote_write": {"url": "http://vm", "basic_auth": {"username": "u"}}})",
       "remote_write.basic_auth: needs both username and password_file"},
      {R"({"remote_write": {"url": "http://vm", "basic_auth": {"user": "u"}}})",
       "remote_write.basic_auth.user: unknown key"},
      {R"({"remote_write": "http://vm"})", "remote_write: must be a JSON object"},
  };
  for (const Case& c : cases) {
    ServerOptions o;
    const absl::Status s = Parse(c.config, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.config;
    EXPECT_NE(s.message().find(c.error), absl::string_view::npos)
        << c.config << "\n  got: " << s.message();
    EXPECT_FALSE(o.remote_write.has_value());
  }
}

}  // namespace
}  // namespace vigil
