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
#include <thread>

#include <httplib.h>

#include "common/clock.h"
#include "gtest/gtest.h"
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

// Runs the vigil-server binary; returns its pid once /healthz answers.
pid_t SpawnServer(const std::string& dir, int grpc_port, int http_port) {
  pid_t pid = fork();
  if (pid == 0) {
    std::string data = "--data-dir=" + dir;
    std::string g = "--grpc-listen=127.0.0.1:" + std::to_string(grpc_port);
    std::string h = "--http-listen=127.0.0.1:" + std::to_string(http_port);
    execl(VIGIL_SERVER_BINARY, VIGIL_SERVER_BINARY, data.c_str(), g.c_str(),
          h.c_str(), "--grpc-insecure", static_cast<char*>(nullptr));
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

}  // namespace
}  // namespace vigil
