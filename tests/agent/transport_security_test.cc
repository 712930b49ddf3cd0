// TransportSecurity and StreamClient over TLS: config and file checks, mTLS
// and tokens over real gRPC on loopback (certificates made at test time by
// deploy/make-test-ca.sh), token rotation at reconnect, refusals, and the
// dropped-batch counts in Hello.
#include "agent/transport_security.h"

#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "agent/stream_client.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_ingest_server.h"

namespace vigil::agent {
namespace {

using testing::FakeIngestServer;
using testing::WaitFor;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TransportSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/vigil_agent_tls." + std::to_string(getpid()));
    std::filesystem::remove_all(*dir_);
    const std::string command = std::string(VIGIL_SOURCE_DIR) +
                                "/deploy/make-test-ca.sh " + *dir_ +
                                " n001 n002 >/dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() { delete dir_; }

  // The agent config of node n001 with mTLS, and `token_file` if set.
  static AgentTransportConfig Mtls(const std::string& token_file = "") {
    AgentTransportConfig c;
    c.ca_file = *dir_ + "/ca.crt";
    c.cert_file = *dir_ + "/nodes/n001.crt";
    c.key_file = *dir_ + "/nodes/n001.key";
    c.token_file = token_file;
    return c;
  }

  // A fake server on TLS that requires client certificates from the CA.
  static std::unique_ptr<FakeIngestServer> TlsServer() {
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = Read(*dir_ + "/ca.crt");
    ssl.pem_key_cert_pairs.push_back(
        {Read(*dir_ + "/server.key"), Read(*dir_ + "/server.crt")});
    return std::make_unique<FakeIngestServer>(0,
                                              grpc::SslServerCredentials(ssl));
  }

  // A started client of node n001 sending to `server` through `security`.
  static std::unique_ptr<StreamClient> Client(
      const std::string& server,
      std::shared_ptr<const TransportSecurity> security,
      std::unique_ptr<BatchQueue> queue = nullptr) {
    StreamClientOptions options;
    options.server = server;
    options.node = "n001";
    options.security = std::move(security);
    options.initial_backoff_seconds = 0.01;
    options.max_backoff_seconds = 0.05;
    auto client = StreamClient::Create(options, std::move(queue));
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  // Enqueues one frame of one series; returns its seq.
  static uint64_t SendOne(StreamClient& client, double ts) {
    uint32_t id = *client.RegisterSeries({"train_loss", {}});
    v1::Frame f;
    f.set_job("job");
    f.set_ts(ts);
    f.add_series_ids(id);
    f.add_values(1);
    return *client.Enqueue({f});
  }

  static std::string* dir_;
};

std::string* TransportSecurityTest::dir_ = nullptr;

TEST_F(TransportSecurityTest, RefusesBadConfigsAndFilesNamingThem) {
  const std::string& d = *dir_;
  const std::string empty_token = ::testing::TempDir() + "/vigil_empty_token." + std::to_string(getpid());
  std::ofstream(empty_token) << "  \n";
  const std::string spaced_token = ::testing::TempDir() + "/vigil_bad_token." + std::to_string(getpid());
  std::ofstream(spaced_token) << "two words\n";
  struct Case {
    const char* name;
    AgentTransportConfig config;
    absl::StatusCode code;
    std::string message;
  };
  AgentTransportConfig insecure_with_ca;
  insecure_with_ca.insecure = true;
  insecure_with_ca.ca_file = d + "/ca.crt";
  AgentTransportConfig cert_only = Mtls();
  cert_only.key_file.clear();
  AgentTransportConfig missing_ca = Mtls();
  missing_ca.ca_file = d + "/nope.crt";
  AgentTransportConfig other_key = Mtls();
  other_key.key_file = d + "/nodes/n002.key";
  Case cases[] = {
      {"insecure and TLS", insecure_with_ca, absl::StatusCode::kInvalidArgument,
       "cannot be combined"},
      {"certificate without key", cert_only, absl::StatusCode::kInvalidArgument,
       "go together"},
      {"missing CA file", missing_ca, absl::StatusCode::kNotFound,
       d + "/nope.crt: cannot read the CA bundle"},
      {"key of another node", other_key, absl::StatusCode::kInvalidArgument,
       d +
           "/nodes/n002.key: the private key does not belong to the "
           "certificate in " +
           d + "/nodes/n001.crt"},
      {"empty token", Mtls(empty_token), absl::StatusCode::kInvalidArgument,
       empty_token + ": the node token is empty"},
      {"token with a space", Mtls(spaced_token),
       absl::StatusCode::kInvalidArgument, spaced_token + ": the node token"},
      {"missing token", Mtls(d + "/no-token"), absl::StatusCode::kNotFound,
       d + "/no-token: cannot read the node token"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const TransportSecurity>> s =
        TransportSecurity::Create(c.config);
    EXPECT_EQ(s.status().code(), c.code) << c.name << ": " << s.status();
    EXPECT_NE(s.status().message().find(c.message), std::string::npos)
        << c.name << ": " << s.status();
  }
  FakeClock later(RealClock()->Now() + 400 * 86400.0);  // certificates: 365 d
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> expired =
      TransportSecurity::Create(Mtls(), &later);
  EXPECT_NE(expired.status().message().find("expired"), std::string::npos)
      << expired.status();
}

TEST_F(TransportSecurityTest, DescribesTheTransport) {
  EXPECT_EQ((*TransportSecurity::Create(Mtls()))->Describe(),
            "mTLS (CA " + *dir_ + "/ca.crt)");
  EXPECT_EQ(testing::Plaintext()->Describe(), "PLAINTEXT");
}

TEST_F(TransportSecurityTest, StreamClientNeedsSecurity) {
  StreamClientOptions options;
  options.server = "127.0.0.1:1";
  options.node = "n001";
  absl::StatusOr<std::unique_ptr<StreamClient>> client =
      StreamClient::Create(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("security is required"),
            std::string::npos);
}

TEST_F(TransportSecurityTest, MutualTlsDeliversAndTheRotatedTokenIsSent) {
  const std::string token = ::testing::TempDir() + "/vigil_agent_token." + std::to_string(getpid());
  std::ofstream(token) << "first-token\n";
  std::unique_ptr<FakeIngestServer> server = TlsServer();
  std::unique_ptr<StreamClient> client =
      Client(server->address(), *TransportSecurity::Create(Mtls(token)));
  client->Start();
  uint64_t seq = SendOne(*client, 1764000000);
  ASSERT_TRUE(client->WaitForAcked(seq, RealClock()->Now() + 20));
  EXPECT_EQ(server->received().front().authorization, "Bearer first-token");

  // A new token, written elsewhere and renamed into place, goes out on the
  // next stream without restarting the agent.
  std::ofstream(token + ".new") << "second-token\n";
  std::filesystem::rename(token + ".new", token);
  server->CancelStreams();
  seq = SendOne(*client, 1764000001);
  ASSERT_TRUE(client->WaitForAcked(seq, RealClock()->Now() + 20));
  EXPECT_EQ(server->received().back().authorization, "Bearer second-token");
  EXPECT_EQ(server->streams(), 2);
}

TEST_F(TransportSecurityTest, PlaintextAgentGetsNothingThroughToTlsServer) {
  std::unique_ptr<FakeIngestServer> server = TlsServer();
  std::unique_ptr<StreamClient> client =
      Client(server->address(), testing::Plaintext());
  client->Start();
  SendOne(*client, 1764000000);
  ASSERT_TRUE(WaitFor([&] { return client->stats().streams_opened >= 3; }));
  EXPECT_TRUE(server->received().empty());
  EXPECT_EQ(client->stats().acked_seq, 0u);
}

TEST_F(TransportSecurityTest, HelloReportsDroppedBatches) {
  // A queue that has dropped two batches and holds none, as a spool does
  // after deleting what a previous agent process left.
  auto queue = std::make_unique<MemoryBatchQueue>(1);  // keeps the newest
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    auto batch = std::make_shared<v1::FrameBatch>();
    batch->set_seq(seq);
    ASSERT_TRUE(queue->Push(batch).ok());
  }
  queue->RemoveUpTo(3);
  ASSERT_EQ(queue->dropped(), 2u);
  FakeIngestServer server;
  std::unique_ptr<StreamClient> client =
      Client(server.address(), testing::Plaintext(), std::move(queue));
  SendOne(*client, 1764000000);
  uint64_t seq = SendOne(*client, 1764000001);  // drops the first
  client->Start();
  ASSERT_TRUE(client->WaitForAcked(seq, RealClock()->Now() + 20));
  const testing::ReceivedBatch& hello = server.received().front();
  EXPECT_TRUE(hello.hello);
  EXPECT_EQ(hello.hello_batches_dropped_earlier, 2u);
  EXPECT_EQ(hello.hello_batches_dropped, 1u);
  EXPECT_EQ(client->stats().batches_dropped, 1u);
}

}  // namespace
}  // namespace vigil::agent
