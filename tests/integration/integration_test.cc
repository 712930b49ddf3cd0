// The foundation's end-to-end promise: every sample an agent was acked for
// comes back from the query API — from a live server, after a clean restart,
// and after the server process is killed with SIGKILL mid-stream.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <httplib.h>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/integration/cluster_fixture.h"

namespace vigil {
namespace {

using testing_util::FetchNode;
using testing_util::SameSamples;
using testing_util::SentSamples;
using testing_util::SimulatedAgent;

constexpr int kNodes = 4;
constexpr int kTicks = 90;

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("vigil_integration_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string NodeName(int i) {
  char name[16];
  std::snprintf(name, sizeof(name), "n%03d", i + 1);
  return name;
}

// Every series each agent sent is returned with exactly the samples sent.
void ExpectAllStored(int http_port,
                     const std::vector<std::unique_ptr<SimulatedAgent>>& agents,
                     double from, double to) {
  for (int i = 0; i < static_cast<int>(agents.size()); ++i) {
    SentSamples stored = FetchNode(http_port, NodeName(i), from, to);
    const SentSamples& sent = agents[i]->sent();
    ASSERT_EQ(stored.size(), sent.size()) << NodeName(i);
    size_t samples = 0;
    for (const auto& [name, expected] : sent) {
      auto it = stored.find(name);
      ASSERT_NE(it, stored.end()) << name;
      EXPECT_TRUE(SameSamples(it->second, expected))
          << name << ": stored " << it->second.size() << " sent "
          << expected.size();
      samples += expected.size();
    }
    EXPECT_GT(samples, 200u * kTicks / 2);
  }
}

ServerOptions OptionsFor(const std::string& dir) {
  ServerOptions options;
  options.data_dir = dir;
  options.grpc_listen = "127.0.0.1:0";
  options.http_listen = "127.0.0.1:0";
  options.grpc_insecure = true;
  return options;
}

TEST(IntegrationTest, FourAgentsAllAckedSamplesQueryableAlsoAfterRestart) {
  std::string dir = TempDir("restart");
  double start = std::floor(RealClock()->Now()) - kTicks - 60;
  std::vector<std::unique_ptr<SimulatedAgent>> agents;
  {
    VigilServer server(OptionsFor(dir));
    ASSERT_TRUE(server.Start().ok());
    std::string address = "127.0.0.1:" + std::to_string(server.grpc_port());
    for (int i = 0; i < kNodes; ++i) {
      agents.push_back(std::make_unique<SimulatedAgent>(
          NodeName(i), "llama-70b", i + 1, address));
    }
    for (auto& a : agents) a->EnqueueTicks(start, kTicks);
    for (auto& a : agents) ASSERT_TRUE(a->WaitAllAcked(60));
    ExpectAllStored(server.http_port(), agents, start - 1, start + kTicks + 1);
    for (auto& a : agents) a->client().Stop();
    ASSERT_TRUE(server.Stop().ok());
  }
  VigilServer reopened(OptionsFor(dir));
  ASSERT_TRUE(reopened.Start().ok());
  ExpectAllStored(reopened.http_port(), agents, start - 1, start + kTicks + 1);
  ASSERT_TRUE(reopened.Stop().ok());
  std::filesystem::remove_all(dir);
}

// A loopback port nobody listens on right now.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Runs the vigil-server binary (with `config` when not empty); returns its
// pid once /healthz answers.
pid_t SpawnServer(const std::string& dir, int grpc_port, int http_port,
                  const std::string& config = "") {
  pid_t pid = fork();
  if (pid == 0) {
    std::string data = "--data-dir=" + dir;
    std::string g = "--grpc-listen=127.0.0.1:" + std::to_string(grpc_port);
    std::string h = "--http-listen=127.0.0.1:" + std::to_string(http_port);
    std::string c = "--config=" + config;
    if (config.empty()) {
      execl(VIGIL_SERVER_BINARY, VIGIL_SERVER_BINARY, data.c_str(), g.c_str(),
            h.c_str(), "--grpc-insecure", static_cast<char*>(nullptr));
    } else {
      execl(VIGIL_SERVER_BINARY, VIGIL_SERVER_BINARY, data.c_str(), g.c_str(),
            h.c_str(), "--grpc-insecure", c.c_str(), static_cast<char*>(nullptr));
    }
    _exit(127);
  }
  httplib::Client http("127.0.0.1", http_port);
  for (int i = 0; i < 300; ++i) {
    auto r = http.Get("/healthz");
    if (r && r->status == 200) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "server did not come up";
  return pid;
}

TEST(IntegrationTest, ServerKilledMidStreamLosesAndDuplicatesNothing) {
  std::string dir = TempDir("kill");
  int grpc_port = FreePort();
  int http_port = FreePort();
  pid_t server = SpawnServer(dir, grpc_port, http_port);
  std::string address = "127.0.0.1:" + std::to_string(grpc_port);
  double start = std::floor(RealClock()->Now()) - 2 * kTicks - 60;

  std::vector<std::unique_ptr<SimulatedAgent>> agents;
  for (int i = 0; i < kNodes; ++i) {
    agents.push_back(std::make_unique<SimulatedAgent>(NodeName(i), "gpt-moe",
                                                      i + 11, address));
  }
  // First half acked, then more enqueued and the server killed while they
  // are in flight; the agents keep the unacked ones and resend after restart.
  for (auto& a : agents) a->EnqueueTicks(start, kTicks);
  for (auto& a : agents) ASSERT_TRUE(a->WaitAllAcked(60));
  for (auto& a : agents) a->EnqueueTicks(start + kTicks, kTicks / 2);
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  for (auto& a : agents) a->EnqueueTicks(start + kTicks + kTicks / 2, kTicks / 2);

  server = SpawnServer(dir, grpc_port, http_port);
  for (auto& a : agents) ASSERT_TRUE(a->WaitAllAcked(60));
  ExpectAllStored(http_port, agents, start - 1, start + 2 * kTicks + 1);

  for (auto& a : agents) a->client().Stop();
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  std::filesystem::remove_all(dir);
}

// A value of the server's /metrics, -1 when absent.
double Metric(int http_port, const std::string& name) {
  httplib::Client http("127.0.0.1", http_port);
  auto r = http.Get("/metrics");
  if (!r || r->status != 200) return -1;
  size_t at = r->body.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::atof(r->body.c_str() + at + name.size() + 2);
}

nlohmann::json GetJson(int http_port, const std::string& path) {
  httplib::Client http("127.0.0.1", http_port);
  auto r = http.Get(path.c_str());
  if (!r || r->status != 200) return nullptr;
  return nlohmann::json::parse(r->body, nullptr, false);
}

// A job that learned its baselines before the server was killed with
// SIGKILL starts from them again: a 20 % slowdown that begins 50 steps after
// the restart is reported within a minute. A server that had to learn
// again would still be in its re-warm and early learning then, and would
// learn the slowdown as normal.
TEST(IntegrationTest, BaselinesSurviveSigkill) {
  std::string dir = TempDir("baselines");
  const std::string config = dir + "/../vigil_integration_baselines_" +
                             std::to_string(getpid()) + ".json";
  {
    std::ofstream(config)
        << R"({"detection": {"learn_steps": 300, "snapshot_seconds": 1,
                             "rewarm_seconds": 30}})";
  }
  int grpc_port = FreePort();
  int http_port = FreePort();
  pid_t server = SpawnServer(dir, grpc_port, http_port, config);
  // A failed assertion returns early: never leave the server behind.
  struct Reaper {
    pid_t* pid;
    ~Reaper() {
      if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, nullptr, 0);
      }
    }
  } reaper{&server};
  std::string address = "127.0.0.1:" + std::to_string(grpc_port);
  constexpr int kLearnTicks = 1000;  // warm-up (200 steps) + 300 steps
  constexpr int kAfterTicks = 85;    // 50 steps of 1.7 s
  constexpr int kFaultTicks = 120;
  const double start =
      std::floor(RealClock()->Now()) - kLearnTicks - kAfterTicks - kFaultTicks - 60;
  std::vector<std::unique_ptr<SimulatedAgent>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<SimulatedAgent>(
        NodeName(i), "gpt-13b", 21, address, "throughput_drop_20",
        kLearnTicks + kAfterTicks));
  }
  for (auto& a : agents) a->EnqueueTicks(start, kLearnTicks);
  for (auto& a : agents) ASSERT_TRUE(a->WaitAllAcked(120));
  // The tokens/s baseline is learned, and a snapshot taken after that.
  nlohmann::json series = GetJson(
      http_port, "/api/v1/series?node=n001&metric=train_tokens_per_second");
  ASSERT_TRUE(series.is_object()) << series;
  ASSERT_EQ(series["series"].size(), 1u) << series;
  const std::string tokens =
      std::to_string(series["series"][0]["id"].get<uint32_t>());
  nlohmann::json baseline = GetJson(http_port, "/api/v1/baseline?series=" + tokens);
  ASSERT_EQ(baseline["learned"], true) << baseline;
  const double snapshots = Metric(http_port, "vigil_detection_snapshots_total");
  for (int i = 0; i < 100 && Metric(http_port, "vigil_detection_snapshots_total") <
                                 snapshots + 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);

  server = SpawnServer(dir, grpc_port, http_port, config);
  EXPECT_EQ(Metric(http_port, "vigil_detection_restored"), 1);
  for (auto& a : agents) a->EnqueueTicks(start + kLearnTicks, kAfterTicks + kFaultTicks);
  for (auto& a : agents) ASSERT_TRUE(a->WaitAllAcked(120));
  baseline = GetJson(http_port, "/api/v1/baseline?series=" + tokens);
  EXPECT_EQ(baseline["learned"], true) << baseline;
  nlohmann::json incidents = GetJson(http_port, "/api/v1/incidents?state=all");
  ASSERT_TRUE(incidents.is_object());
  const double fault_ts = start + kLearnTicks + kAfterTicks;
  double first = -1;
  for (const auto& inc : incidents["incidents"]) {
    const std::string kind = inc["kind"];
    EXPECT_NE(inc["severity"], "P0") << inc.dump();
    if (kind == "throughput_drop" || kind == "throughput_drop_severe") {
      first = inc["ts"].get<double>();
    }
  }
  ASSERT_GT(first, 0) << incidents.dump(1);
  EXPECT_LE(first - fault_ts, 60) << incidents.dump(1);

  for (auto& a : agents) a->client().Stop();
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  server = -1;
  std::filesystem::remove_all(dir);
  std::filesystem::remove(config);
}

}  // namespace
}  // namespace vigil
