// The agent's /metrics endpoint over a real loopback socket.
#include "agent/agent_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

// Sends `request` to 127.0.0.1:`port` and returns everything answered.
std::string Ask(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  std::string answer;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) answer.append(buffer, n);
  close(fd);
  return answer;
}

TEST(MetricsEndpointTest, ServesMetricsAndRefusesTheRest) {
  int renders = 0;
  MetricsEndpoint endpoint([&renders] {
    ++renders;
    return std::string("vigil_agent_ticks_total 7\n");
  });
  absl::StatusOr<int> port = endpoint.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  std::string ok = Ask(*port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Length: 26\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\r\n\r\nvigil_agent_ticks_total 7\n"), std::string::npos);
  EXPECT_EQ(Ask(*port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Ask(*port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0),
            0u);
  // Headers that never end are cut off; the endpoint keeps serving.
  EXPECT_EQ(Ask(*port, std::string(9000, 'x')), "");
  EXPECT_EQ(Ask(*port, "GET /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
  EXPECT_EQ(renders, 2);
  endpoint.Stop();
  endpoint.Stop();  // idempotent
}

TEST(AgentMetricsTest, TimesKeepTheirPrecision) {
  StreamClientStats client;
  client.last_ack_time = 1764000123.25;
  const std::string text =
      RenderAgentMetrics(client, CollectRunnerStats(), ProcessUsage());
  EXPECT_NE(text.find("vigil_agent_last_ack_timestamp_seconds 1764000123.25\n"),
            std::string::npos)
      << text;
}

TEST(MetricsEndpointTest, BadAddressesAreRefused) {
  MetricsEndpoint endpoint([] { return std::string(); });
  for (const char* bad : {"localhost:9465", "127.0.0.1", "127.0.0.1:99999",
                          ":9465", "1.2.3:80"}) {
    EXPECT_EQ(endpoint.Start(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  MetricsEndpoint first([] { return std::string(); });
  absl::StatusOr<int> port = first.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  EXPECT_EQ(endpoint.Start("127.0.0.1:" + std::to_string(*port)).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace vigil::agent
