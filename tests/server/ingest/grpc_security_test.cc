// TLS on the ingest listener, over real gRPC on loopback with certificates
// made by deploy/make-test-ca.sh: mTLS, the refusals, node names bound to
// certificates, bad files, and the grpc_tls / grpc_insecure config.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "server/config/config.h"
#include "tests/server/test_server.h"
#include "tests/server/tls_test_util.h"

namespace vigil::testing {
namespace {

class GrpcTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = new std::string(::testing::TempDir() + "/vigil_tls_ca." + std::to_string(getpid()));
    other_ca_ = new std::string(::testing::TempDir() + "/vigil_tls_other_ca." + std::to_string(getpid()));
    MakeTestCa(*ca_, "n001 n002");
    MakeTestCa(*other_ca_, "n001");
  }
  static void TearDownTestSuite() {
    delete ca_;
    delete other_ca_;
  }

  // The metric `reason` of vigil_ingest_rejected_total.
  static uint64_t Rejected(const VigilServer& server, RejectReason reason) {
    return server.metrics().rejected[static_cast<size_t>(reason)].load();
  }

  static std::string* ca_;
  static std::string* other_ca_;
};

std::string* GrpcTlsTest::ca_ = nullptr;
std::string* GrpcTlsTest::other_ca_ = nullptr;

TEST_F(GrpcTlsTest, MutualTlsAcceptsAnAgentCertifiedByTheCa) {
  RealTimeServer t(TlsOptions(*ca_));
  ASSERT_TRUE(t.started.ok()) << t.started;
  grpc::Status s =
      SendHello(t.server.grpc_port(), AgentTls(*ca_, *ca_, "n001"), {});
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
}

TEST_F(GrpcTlsTest, RefusesAgentsWithoutAGoodClientCertificate) {
  RealTimeServer t(TlsOptions(*ca_));
  ASSERT_TRUE(t.started.ok()) << t.started;
  const int port = t.server.grpc_port();
  struct Case {
    const char* name;
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  } cases[] = {
      {"no client certificate", AgentTls(*ca_, "", "")},
      {"certificate of another CA", AgentTls(*ca_, *other_ca_, "n001")},
      {"plaintext", grpc::InsecureChannelCredentials()},
      {"server not trusted", AgentTls(*other_ca_, *other_ca_, "n001")},
  };
  for (const Case& c : cases) {
    grpc::Status s = SendHello(port, c.credentials, {});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << c.name << ": " << s.error_message();
  }
  EXPECT_EQ(t.server.metrics().batches.load(), 0u);
}

TEST_F(GrpcTlsTest, TlsAgentToPlaintextServerFailsCleanly) {
  RealTimeServer t(TestOptions());
  ASSERT_TRUE(t.started.ok()) << t.started;
  grpc::Status s =
      SendHello(t.server.grpc_port(), AgentTls(*ca_, *ca_, "n001"), {});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(GrpcTlsTest, WithoutRequiredClientCertificatesPlainTlsIsEnough) {
  ServerOptions options = TlsOptions(*ca_);
  options.grpc_tls->require_client_cert = false;
  options.grpc_tls->client_ca_file.clear();
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  grpc::Status s = SendHello(t.server.grpc_port(), AgentTls(*ca_, "", ""), {});
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(GrpcTlsTest, NodeIdentityBindsHelloNodeToTheCertificate) {
  ServerOptions options = TlsOptions(*ca_);
  options.grpc_tls->node_identity = NodeIdentity::kCertificate;
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  const int port = t.server.grpc_port();
  EXPECT_TRUE(SendHello(port, AgentTls(*ca_, *ca_, "n001"), {}).ok());
  HelloSpec impostor;
  impostor.node = "n002";
  grpc::Status s = SendHello(port, AgentTls(*ca_, *ca_, "n001"), impostor);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("node n002: the client certificate (CN "
                                   "n001, DNS names n001) is not this node's"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(Rejected(t.server, RejectReason::kCertWrongNode), 1u);
}

TEST_F(GrpcTlsTest, RenewedCertificatesApplyWithoutARestart) {
  const std::string dir = ::testing::TempDir() + "/vigil_tls_renewed." + std::to_string(getpid());
  ASSERT_TRUE(MakeTestCa(dir, ""));
  ServerOptions options = TlsOptions(dir);
  options.grpc_tls->reload_seconds = 1;
  RealTimeServer t(options);
  ASSERT_TRUE(t.started.ok()) << t.started;
  const int port = t.server.grpc_port();
  auto renewed = AgentTls(*other_ca_, *other_ca_, "n001");
  EXPECT_FALSE(SendHello(port, renewed, {}).ok());
  // Rotate to the other CA's files, each renamed into place.
  for (const char* file : {"ca.crt", "server.key", "server.crt"}) {
    std::filesystem::copy_file(*other_ca_ + "/" + file,
                               dir + "/" + file + ".new");
    std::filesystem::rename(dir + "/" + file + ".new", dir + "/" + file);
  }
  // gRPC re-reads the files on its own timer; poll until it has.
  bool accepted = false;
  for (int i = 0; i < 200 && !accepted; ++i) {
    accepted = SendHello(port, renewed, {}).ok();
    if (!accepted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(accepted);
}

TEST_F(GrpcTlsTest, RefusesToStartWithoutTlsOrExplicitPlaintext) {
  ServerOptions options = TestOptions();
  options.grpc_insecure = false;
  RealTimeServer t(options);
  EXPECT_EQ(t.started.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.started.message().find("grpc_tls: required"), std::string::npos)
      << t.started;
  EXPECT_NE(t.started.message().find("--grpc-insecure"), std::string::npos);
}

TEST_F(GrpcTlsTest, BadTlsFilesStopTheStartNamingTheFile) {
  const std::string& ca = *ca_;
  const std::string garbage = ::testing::TempDir() + "/vigil_tls_garbage." + std::to_string(getpid()) + ".pem";
  std::ofstream(garbage) << "not a certificate\n";
  struct Case {
    const char* name;
    void (*edit)(GrpcTlsOptions&, const std::string& ca, const std::string&);
    absl::StatusCode code;
    std::string message;
  } cases[] = {
      {"missing certificate",
       [](GrpcTlsOptions& t, const std::string& ca, const std::string&) {
         t.cert_file = ca + "/missing.crt";
       },
       absl::StatusCode::kNotFound, ca + "/missing.crt: cannot read"},
      {"key of another certificate",
       [](GrpcTlsOptions& t, const std::string& ca, const std::string&) {
         t.key_file = ca + "/nodes/n001.key";
       },
       absl::StatusCode::kInvalidArgument,
       ca +
           "/nodes/n001.key: the private key does not belong to the "
           "certificate in " +
           ca + "/server.crt"},
      {"CA bundle without a certificate",
       [](GrpcTlsOptions& t, const std::string&, const std::string& bad) {
         t.client_ca_file = bad;
       },
       absl::StatusCode::kInvalidArgument, garbage + ": no PEM certificate"},
      {"certificate as key",
       [](GrpcTlsOptions& t, const std::string& ca, const std::string&) {
         t.key_file = ca + "/server.crt";
       },
       absl::StatusCode::kInvalidArgument,
       ca + "/server.crt: no usable PEM private key"},
  };
  for (const Case& c : cases) {
    ServerOptions options = TlsOptions(ca);
    c.edit(*options.grpc_tls, ca, garbage);
    RealTimeServer t(options);
    EXPECT_EQ(t.started.code(), c.code) << c.name << ": " << t.started;
    EXPECT_NE(t.started.message().find(c.message), std::string::npos)
        << c.name << ": " << t.started;
  }
}

TEST_F(GrpcTlsTest, ExpiredCertificateStopsTheStart) {
  FakeClock later(RealClock()->Now() + 400 * 86400.0);  // certificates: 365 d
  VigilServer expired(TlsOptions(*ca_), &later);
  absl::Status s = expired.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("server.crt: the certificate expired on"),
            std::string::npos)
      << s;
}

TEST(GrpcSecurityConfigTest, ParsesTlsAndTokenSections) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({
    "grpc_tls": {"cert_file": "/tls/s.crt", "key_file": "/tls/s.key",
                 "client_ca_file": "/tls/ca.crt", "require_client_cert": true,
                 "node_identity": "certificate", "reload_seconds": 30},
    "node_tokens": {"file": "/etc/vigil/node-tokens",
      "sha256": {"*": "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789"}}})",
                                     &options);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(options.grpc_tls.has_value());
  EXPECT_EQ(options.grpc_tls->cert_file, "/tls/s.crt");
  EXPECT_EQ(options.grpc_tls->key_file, "/tls/s.key");
  EXPECT_EQ(options.grpc_tls->client_ca_file, "/tls/ca.crt");
  EXPECT_EQ(options.grpc_tls->node_identity, NodeIdentity::kCertificate);
  EXPECT_EQ(options.grpc_tls->reload_seconds, 30);
  EXPECT_FALSE(options.grpc_insecure);
  EXPECT_EQ(options.node_tokens.file, "/etc/vigil/node-tokens");
  EXPECT_EQ(options.node_tokens.sha256.at("*"),
            "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
  options.memory = true;
  EXPECT_TRUE(ValidateServerOptions(options).ok());
}

// With mTLS on, the certificate names the node unless the config opts out:
// a node's certificate must not report for another node.
TEST(GrpcSecurityConfigTest, MutualTlsBindsNodesToCertificatesByDefault) {
  ServerOptions mtls;
  ASSERT_TRUE(ParseServerConfig(R"({"grpc_tls": {"cert_file": "/s.crt",
      "key_file": "/s.key", "client_ca_file": "/ca.crt"}})", &mtls).ok());
  EXPECT_EQ(mtls.grpc_tls->node_identity, NodeIdentity::kCertificate);
  ServerOptions opted_out;
  ASSERT_TRUE(ParseServerConfig(R"({"grpc_tls": {"cert_file": "/s.crt",
      "key_file": "/s.key", "client_ca_file": "/ca.crt",
      "node_identity": "none"}})", &opted_out).ok());
  EXPECT_EQ(opted_out.grpc_tls->node_identity, NodeIdentity::kNone);
  ServerOptions tls_only;
  ASSERT_TRUE(ParseServerConfig(R"({"grpc_tls": {"cert_file": "/s.crt",
      "key_file": "/s.key", "require_client_cert": false}})", &tls_only).ok());
  EXPECT_EQ(tls_only.grpc_tls->node_identity, NodeIdentity::kNone);
}

TEST(GrpcSecurityConfigTest, ReportsEveryBadKey) {
  ServerOptions options;
  absl::Status s = ParseServerConfig(R"({
    "grpc_tls": {"cert_file": 1, "node_identity": "cn", "extra": true,
                 "reload_seconds": 0},
    "grpc_insecure": "yes",
    "node_tokens": {"sha256": {"n001": "abc"}, "files": "x"}})",
                                     &options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* path :
       {"grpc_tls.extra: unknown key", "grpc_tls.cert_file: must be a string",
        "grpc_tls.reload_seconds: must be an integer in [1, 86400]",
        "grpc_tls.node_identity: must be \"none\" or \"certificate\"",
        "grpc_insecure: must be true or false",
        "node_tokens.files: unknown key",
        "node_tokens.sha256.n001: must be the 64 hex digits"}) {
    EXPECT_NE(s.message().find(path), std::string::npos) << path << "\n" << s;
  }
}

TEST(GrpcSecurityConfigTest, ValidationWantsExactlyOneTransport) {
  ServerOptions options = TestOptions();
  options.grpc_tls = GrpcTlsOptions{};
  options.grpc_tls->node_identity = NodeIdentity::kCertificate;
  options.grpc_tls->require_client_cert = false;
  absl::Status s = ValidateServerOptions(options);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const char* line :
       {"grpc_insecure: cannot be combined with grpc_tls",
        "grpc_tls.cert_file: required", "grpc_tls.key_file: required",
        "grpc_tls.node_identity: \"certificate\" needs require_client_cert"}) {
    EXPECT_NE(s.message().find(line), std::string::npos) << line << "\n" << s;
  }
  options.grpc_tls->require_client_cert = true;
  s = ValidateServerOptions(options);
  EXPECT_NE(s.message().find("grpc_tls.client_ca_file: required while "
                             "require_client_cert"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace vigil::testing
