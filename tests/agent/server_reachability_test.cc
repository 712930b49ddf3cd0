// ServerReachability: the unreachable threshold with a fake clock and
// scripted client counters, the status file's content and its atomic
// replacement, and a real StreamClient whose server stops acknowledging.
#include "agent/server_reachability.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_ingest_server.h"

namespace vigil::agent {
namespace {

using testing::FakeIngestServer;
using testing::WaitFor;

constexpr double kStart = 1764000000.0;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A temporary directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/vigil-reach-test-XXXXXX";
    EXPECT_NE(mkdtemp(path), nullptr);
    path_ = path;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class ServerReachabilityTest : public ::testing::Test {
 protected:
  ServerReachabilityTest() : clock_(kStart) {}

  std::unique_ptr<ServerReachability> Make(const std::string& status_file = "") {
    ServerReachabilityOptions o;
    o.stats = [this] {
      std::lock_guard<std::mutex> l(mu_);
      return stats_;
    };
    o.server = "vigil:7070";
    o.unreachable_after_seconds = 300;
    o.status_file = status_file;
    o.clock = &clock_;
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu_);
      logs_.push_back(line);
    };
    return std::make_unique<ServerReachability>(std::move(o));
  }
  void Ack(size_t pending) {
    std::lock_guard<std::mutex> l(mu_);
    stats_.last_ack_time = clock_.Now();
    stats_.pending_batches = pending;
  }
  void Pending(size_t pending) {
    std::lock_guard<std::mutex> l(mu_);
    stats_.pending_batches = pending;
  }
  std::vector<std::string> logs() {
    std::lock_guard<std::mutex> l(mu_);
    return logs_;
  }

  FakeClock clock_;
  std::mutex mu_;
  StreamClientStats stats_;
  std::vector<std::string> logs_;
};

TEST_F(ServerReachabilityTest, CrossesTheThresholdAndRecoversWithOneLineEach) {
  std::unique_ptr<ServerReachability> r = Make();
  Ack(0);
  clock_.Advance(299);
  ASSERT_TRUE(r->Check().ok());
  EXPECT_TRUE(logs().empty());
  EXPECT_TRUE(absl::StrContains(r->MetricsText(), "vigil_agent_server_unreachable 0\n"));

  Pending(42);
  clock_.Advance(2);
  ASSERT_TRUE(r->Check().ok());
  clock_.Advance(60);
  ASSERT_TRUE(r->Check().ok());  // still out: no second line
  ASSERT_EQ(logs().size(), 1u);
  EXPECT_EQ(logs()[0],
            "no ack from server vigil:7070 for 301 s (unreachable after 300 s); "
            "42 batches waiting to be sent");
  const std::string text = r->MetricsText();
  EXPECT_TRUE(absl::StrContains(text, "vigil_agent_server_unreachable 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "vigil_agent_seconds_since_last_ack 361.000\n"))
      << text;

  clock_.Advance(39);
  Ack(40);  // 400 s after the last ack before the outage
  ASSERT_TRUE(r->Check().ok());
  ASSERT_EQ(logs().size(), 2u);
  EXPECT_EQ(logs()[1],
            "server vigil:7070 acknowledging again after 400 s without acks; 40 "
            "batches still spooled");
  EXPECT_TRUE(absl::StrContains(r->MetricsText(), "vigil_agent_server_unreachable 0\n"));
  EXPECT_TRUE(absl::StrContains(r->MetricsText(),
                                "vigil_agent_seconds_since_last_ack 0.000\n"));
}

TEST_F(ServerReachabilityTest, NoAckEverCountsFromStart) {
  std::unique_ptr<ServerReachability> r = Make();
  clock_.Advance(300);
  ASSERT_TRUE(r->Check().ok());
  ASSERT_EQ(logs().size(), 1u);
  EXPECT_TRUE(absl::StrContains(logs()[0], "for 300 s")) << logs()[0];
  EXPECT_TRUE(absl::StrContains(r->MetricsText(),
                                "vigil_agent_seconds_since_last_ack 300.000\n"));
}

TEST_F(ServerReachabilityTest, StatusFileHoldsBothGaugesAndIsReplacedWhole) {
  TempDir dir;
  const std::string path = dir.path() + "/vigil_agent.prom";
  std::unique_ptr<ServerReachability> r = Make(path);
  Ack(0);
  clock_.Advance(12.5);
  ASSERT_TRUE(r->Check().ok());
  EXPECT_EQ(ReadFile(path),
            "# HELP vigil_agent_server_unreachable 1 while no server has "
            "acknowledged a batch for unreachable_after_seconds.\n"
            "# TYPE vigil_agent_server_unreachable gauge\n"
            "vigil_agent_server_unreachable 0\n"
            "# HELP vigil_agent_seconds_since_last_ack Seconds since a server "
            "last acknowledged a batch (since the agent started, if none has).\n"
            "# TYPE vigil_agent_seconds_since_last_ack gauge\n"
            "vigil_agent_seconds_since_last_ack 12.500\n");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const ino_t first = st.st_ino;
  clock_.Advance(300);
  const mode_t umask_before = umask(027);  // the systemd unit's
  ASSERT_TRUE(r->Check().ok());
  umask(umask_before);
  const std::string text = ReadFile(path);
  EXPECT_TRUE(absl::StrContains(text, "vigil_agent_server_unreachable 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "vigil_agent_seconds_since_last_ack 312.500\n"))
      << text;
  // Replaced by rename (a new inode), never rewritten in place; no temp
  // file left behind.
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_NE(st.st_ino, first);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // node_exporter's user reads it
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"vigil_agent.prom"});
}

TEST_F(ServerReachabilityTest, UnwritableStatusFileIsReportedOnce) {
  std::unique_ptr<ServerReachability> r = Make("/nonexistent-dir/vigil_agent.prom");
  absl::Status s = r->Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(s.message(), "/nonexistent-dir/vigil_agent.prom.tmp"))
      << s;
  EXPECT_FALSE(r->Check().ok());
  ASSERT_EQ(logs().size(), 1u);
  EXPECT_TRUE(absl::StrContains(logs()[0], "cannot write status file")) << logs()[0];
}

TEST_F(ServerReachabilityTest, ThreadChecksEveryInterval) {
  TempDir dir;
  const std::string path = dir.path() + "/vigil_agent.prom";
  std::unique_ptr<ServerReachability> r = Make(path);
  r->Start();
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(path); }));
  clock_.Advance(301);
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(ReadFile(path), "vigil_agent_server_unreachable 1\n");
  }));
  r->Stop();
  EXPECT_EQ(logs().size(), 1u);
}

// A real stream client whose server stops acknowledging, then resumes.
TEST(ServerReachabilityClientTest, FollowsTheStreamClientsAcks) {
  FakeClock clock(kStart);
  FakeIngestServer server;
  StreamClientOptions options;
  options.server = server.address();
  options.node = "n003";
  options.security = testing::Plaintext();
  options.clock = &clock;
  absl::StatusOr<std::unique_ptr<StreamClient>> made = StreamClient::Create(options);
  ASSERT_TRUE(made.ok()) << made.status();
  StreamClient& client = **made;
  uint32_t id = *client.RegisterSeries({"train_loss", {}});
  auto send = [&](int i) {
    v1::Frame f;
    f.set_ts(kStart + i);
    f.add_series_ids(id);
    f.add_values(i);
    ASSERT_TRUE(client.Enqueue({f}).ok());
  };
  std::vector<std::string> logs;
  std::mutex logs_mu;
  ServerReachabilityOptions reach_options;
  reach_options.stats = [&client] { return client.stats(); };
  reach_options.server = server.address();
  reach_options.unreachable_after_seconds = 300;
  reach_options.clock = &clock;
  reach_options.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> l(logs_mu);
    logs.push_back(line);
  };
  ServerReachability reach(std::move(reach_options));

  client.Start();
  send(1);
  ASSERT_TRUE(WaitFor([&] { return client.stats().acked_seq == 1; }));
  server.HoldAcks(true);
  send(2);
  send(3);
  ASSERT_TRUE(WaitFor([&] { return server.received().size() >= 3; }));
  clock.Advance(301);
  ASSERT_TRUE(reach.Check().ok());
  {
    std::lock_guard<std::mutex> l(logs_mu);
    ASSERT_EQ(logs.size(), 1u);
    EXPECT_TRUE(absl::StrContains(logs[0], "2 batches waiting")) << logs[0];
  }
  EXPECT_TRUE(absl::StrContains(reach.MetricsText(), "vigil_agent_server_unreachable 1\n"));

  // The client gave up on the silent stream; acks resume on a new one.
  server.HoldAcks(false);
  ASSERT_TRUE(WaitFor([&] {
    clock.Advance(1);
    return client.stats().acked_seq == 3;
  }));
  ASSERT_TRUE(reach.Check().ok());
  {
    std::lock_guard<std::mutex> l(logs_mu);
    ASSERT_EQ(logs.size(), 2u);
    EXPECT_TRUE(absl::StrContains(logs[1], "acknowledging again")) << logs[1];
    EXPECT_TRUE(absl::StrContains(logs[1], "0 batches still spooled")) << logs[1];
  }
  client.Stop();
}

}  // namespace
}  // namespace vigil::agent
