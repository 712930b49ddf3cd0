// Node tokens on ingest streams (inline, from a file that is re-read when it
// changes, over mTLS), and the dropped-batch counts of Hello in /metrics.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "notify/signing.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"
#include "tests/server/tls_test_util.h"

namespace vigil::testing {
namespace {

std::string Hash(const std::string& token) { return HexEncode(Sha256(token)); }

uint64_t Rejected(const VigilServer& server, RejectReason reason) {
  return server.metrics().rejected[static_cast<size_t>(reason)].load();
}

HelloSpec As(const std::string& node, const std::string& token) {
  HelloSpec hello;
  hello.node = node;
  hello.token = token;
  return hello;
}

TEST(NodeTokenTest, MissingWrongRightAndAnotherNodesToken) {
  ServerOptions options = TestOptions();
  options.node_tokens.sha256 = {{"n001", Hash("t1")}, {"n002", Hash("t2")}};
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  const int port = t.server.grpc_port();
  auto plaintext = grpc::InsecureChannelCredentials();
  struct Case {
    HelloSpec hello;
    grpc::StatusCode code;
    std::string message;
  } cases[] = {
      {As("n001", ""), grpc::StatusCode::UNAUTHENTICATED,
       "this server requires node tokens"},
      {As("n001", "nope"), grpc::StatusCode::UNAUTHENTICATED,
       "node n001: unknown token"},
      {As("n001", "t2"), grpc::StatusCode::PERMISSION_DENIED,
       "node n001: the token is not this node's"},
      {As("n003", "t1"), grpc::StatusCode::PERMISSION_DENIED,
       "node n003 has no token configured"},
      {As("n001", "t1"), grpc::StatusCode::OK, ""},
  };
  for (const Case& c : cases) {
    grpc::Status s = SendHello(port, plaintext, c.hello);
    EXPECT_EQ(s.error_code(), c.code) << c.hello.node << "/" << c.hello.token;
    EXPECT_NE(s.error_message().find(c.message), std::string::npos)
        << s.error_message();
    if (!c.hello.token.empty())
      EXPECT_EQ(s.error_message().find(c.hello.token), std::string::npos)
          << "the token is never echoed: " << s.error_message();
  }
  EXPECT_EQ(Rejected(t.server, RejectReason::kUnauthenticated), 2u);
  EXPECT_EQ(Rejected(t.server, RejectReason::kTokenWrongNode), 2u);
  HttpResult metrics = HttpGet(t.server.http_port(), "/metrics");
  EXPECT_NE(metrics.body.find(
                "vigil_ingest_rejected_total{reason=\"unauthenticated\"} 2"),
            std::string::npos);
  EXPECT_NE(metrics.body.find(
                "vigil_ingest_rejected_total{reason=\"token_wrong_node\"} 2"),
            std::string::npos);
}

TEST(NodeTokenTest, FleetTokenServesNodesWithoutTheirOwn) {
  ServerOptions options = TestOptions();
  options.node_tokens.sha256 = {{"*", Hash("fleet")}, {"n001", Hash("t1")}};
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  const int port = t.server.grpc_port();
  auto plaintext = grpc::InsecureChannelCredentials();
  EXPECT_TRUE(SendHello(port, plaintext, As("n777", "fleet")).ok());
  EXPECT_TRUE(SendHello(port, plaintext, As("n001", "t1")).ok());
  EXPECT_EQ(SendHello(port, plaintext, As("n001", "fleet")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST(NodeTokenTest, TokenFileIsReloadedWhenItChangesAndABadVersionIgnored) {
  const std::string path = ::testing::TempDir() + "/vigil_node_tokens." + std::to_string(getpid());
  std::ofstream(path) << "# node token hashes\n"
                      << "n001 " << Hash("t1") << "  # rack 1\n\n";
  ServerOptions options = TestOptions();
  options.node_tokens.file = path;
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  const int port = t.server.grpc_port();
  auto plaintext = grpc::InsecureChannelCredentials();
  EXPECT_TRUE(SendHello(port, plaintext, As("n001", "t1")).ok());
  EXPECT_FALSE(SendHello(port, plaintext, As("n002", "t2")).ok());

  // Written elsewhere and renamed into place, as an operator should.
  std::ofstream(path + ".new") << "n001 " << Hash("t1") << "\n"
                               << "n002 " << Hash("t2") << "\n";
  std::filesystem::rename(path + ".new", path);
  EXPECT_TRUE(SendHello(port, plaintext, As("n002", "t2")).ok());

  std::ofstream(path + ".new") << "n003 not-a-hash\n";
  std::filesystem::rename(path + ".new", path);
  EXPECT_TRUE(SendHello(port, plaintext, As("n002", "t2")).ok())
      << "a bad new version keeps the previous tokens";
}

TEST(NodeTokenTest, BadTokenFileStopsTheStartNamingTheLine) {
  const std::string path = ::testing::TempDir() + "/vigil_bad_node_tokens." + std::to_string(getpid());
  std::ofstream(path) << "n001 " << Hash("t1") << "\n"
                      << "n002\n"
                      << "n001 " << Hash("t9") << "\n";
  ServerOptions options = TestOptions();
  options.node_tokens.file = path;
  RealTimeServer t(options);
  EXPECT_EQ(t.started.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.started.message().find(path + ":2: expected \"NODE SHA256HEX\""),
            std::string::npos)
      << t.started;
  EXPECT_NE(t.started.message().find(
                path + ":3: node n001 is listed twice (also line 1)"),
            std::string::npos)
      << t.started;

  options.node_tokens.file = path + ".missing";
  RealTimeServer missing(options);
  EXPECT_EQ(missing.started.code(), absl::StatusCode::kNotFound);
}

TEST(NodeTokenTest, TokensOverMutualTls) {
  const std::string ca = ::testing::TempDir() + "/vigil_token_ca." + std::to_string(getpid());
  ASSERT_TRUE(MakeTestCa(ca, "n001"));
  ServerOptions options = TlsOptions(ca);
  options.node_tokens.sha256 = {{"n001", Hash("t1")}};
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  auto tls = AgentTls(ca, ca, "n001");
  EXPECT_TRUE(SendHello(t.server.grpc_port(), tls, As("n001", "t1")).ok());
  EXPECT_EQ(SendHello(t.server.grpc_port(), tls, As("n001", "")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST(AgentDropsTest, HelloDropCountsReachMetrics) {
  RealTimeServer t(TestOptions());
  ASSERT_TRUE(t.started.ok()) << t.started;
  const int port = t.server.grpc_port();
  auto plaintext = grpc::InsecureChannelCredentials();
  HelloSpec quiet = As("n000", "");
  ASSERT_TRUE(SendHello(port, plaintext, quiet).ok());
  HelloSpec hello = As("n001", "");
  hello.batches_dropped = 5;
  hello.batches_dropped_earlier = 2;
  ASSERT_TRUE(SendHello(port, plaintext, hello).ok());
  hello.batches_dropped = 9;  // the same instance, on its next stream
  ASSERT_TRUE(SendHello(port, plaintext, hello).ok());
  std::string body = HttpGet(t.server.http_port(), "/metrics").body;
  EXPECT_NE(body.find("vigil_ingest_agent_dropped_batches_total{node=\"n001\","
                      "cause=\"queue_full\"} 9\n"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("vigil_ingest_agent_dropped_batches_total{node=\"n001\","
                      "cause=\"previous_process\"} 2\n"),
            std::string::npos);
  EXPECT_EQ(body.find("node=\"n000\""), std::string::npos)
      << "nodes that dropped nothing add no series";
}

}  // namespace
}  // namespace vigil::testing
