// Node tokens on ingest streams (inline, from a file that is re-read when it
// changes, over mTLS), and the dropped-batch counts of Hello in /metrics.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/time/clock.h"
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
       "unknown token"},
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

// Opens a stream with `token` and sends nothing; returns how the server
// ended it.
grpc::Status OpenAndWait(int port, const std::string& token) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Ingest::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  auto stream = stub->Stream(&context);
  v1::Ack ack;
  EXPECT_FALSE(stream->Read(&ack));
  return stream->Finish();
}

// An unknown token is refused before anything is read: the peer never
// holds the stream's thread waiting for its first message.
TEST(NodeTokenTest, UnknownTokensAreRefusedBeforeTheFirstMessage) {
  ServerOptions options = TestOptions();
  options.node_tokens.sha256 = {{"n001", Hash("t1")}};
  options.first_batch_seconds = 20;  // longer than the test could wait
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  const absl::Time start = absl::Now();
  EXPECT_EQ(OpenAndWait(t.server.grpc_port(), "nope").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(OpenAndWait(t.server.grpc_port(), "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_EQ(Rejected(t.server, RejectReason::kUnauthenticated), 2u);
}

// A stream that never sends its first batch is cancelled after
// first_batch_seconds; a valid token does not exempt it.
TEST(NodeTokenTest, AStreamWithoutAFirstBatchIsCancelled) {
  ServerOptions options = TestOptions();
  options.node_tokens.sha256 = {{"n001", Hash("t1")}};
  options.first_batch_seconds = 10;
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  std::atomic<bool> waiting = true;
  std::thread ticker([&] {  // moves the server's clock past the deadline
    while (waiting) {
      t.clock.Advance(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  grpc::Status s = OpenAndWait(t.server.grpc_port(), "t1");
  waiting = false;
  ticker.join();
  // Cancelled by the server: the client sees CANCELLED.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  EXPECT_EQ(Rejected(t.server, RejectReason::kNoFirstBatch), 1u);
  // A prompt agent is not affected.
  EXPECT_TRUE(SendHello(t.server.grpc_port(), grpc::InsecureChannelCredentials(),
                        As("n001", "t1")).ok());
}

// Past max_streams a new stream is refused with UNAVAILABLE (the agent
// keeps its spool and retries), not RESOURCE_EXHAUSTED (which makes an
// agent drop its batch).
TEST(NodeTokenTest, StreamsPastTheCapAreRefusedAsUnavailable) {
  ServerOptions options = TestOptions();
  options.max_streams = 1;
  options.first_batch_seconds = 5;
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(t.server.grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Ingest::NewStub(channel);
  grpc::ClientContext holder;
  auto held = stub->Stream(&holder);  // holds the only slot until cancelled
  absl::SleepFor(absl::Milliseconds(200));
  grpc::Status s = SendHello(t.server.grpc_port(), grpc::InsecureChannelCredentials(),
                             As("n002", ""));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(Rejected(t.server, RejectReason::kTooManyStreams), 1u);
  holder.TryCancel();
  (void)held->Finish();
  // The slot is free again once the first stream ended.
  bool ok = false;
  for (int i = 0; i < 50 && !ok; ++i) {
    ok = SendHello(t.server.grpc_port(), grpc::InsecureChannelCredentials(),
                   As("n002", "")).ok();
    if (!ok) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(ok);
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
