// EtcdClient and ClusterMember against an etcd that wants TLS with client
// certificates, and against one with authentication (RBAC) on: both real,
// started by the tests (skipped without etcd).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/cluster/cluster_member.h"
#include "server/cluster/etcd_client.h"
#include "tests/server/cluster/etcd_process.h"

namespace vigil::cluster {
namespace {

using Json = nlohmann::json;

TEST(EtcdTlsTest, MutualTlsWithTheRightCertificatesOnly) {
  if (!EtcdProcess::Available()) GTEST_SKIP() << "etcd is not installed";
  EtcdProcess etcd(/*tls=*/true);
  ASSERT_FALSE(etcd.url().empty()) << "etcd with TLS did not start";
  ASSERT_EQ(etcd.url().rfind("https://", 0), 0u);
  EtcdClientOptions options;
  options.endpoints = {etcd.url()};
  options.tls = {etcd.ca_file(), etcd.client_cert_file(), etcd.client_key_file()};
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("/t/k", "v").ok());
  EXPECT_EQ((*(*client)->Get("/t/k"))->value, "v");

  // Without the CA, etcd's certificate is not trusted.
  EtcdClientOptions no_ca = options;
  no_ca.tls.ca_file.clear();
  absl::Status refused = (*EtcdClient::Create(no_ca))->Put("/t/k", "x");
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  // Without a client certificate, etcd refuses the connection.
  EtcdClientOptions no_cert = options;
  no_cert.tls.cert_file.clear();
  no_cert.tls.key_file.clear();
  refused = (*EtcdClient::Create(no_cert))->Put("/t/k", "x");
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ((*(*client)->Get("/t/k"))->value, "v") << "nothing written by the refused";

  // Options that cannot work are refused up front.
  EtcdClientOptions half = options;
  half.tls.key_file.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create(half).status()));
  EtcdClientOptions mixed = options;
  mixed.endpoints.push_back("http://127.0.0.1:1");
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create(mixed).status()));

  // A member registers and leads over TLS.
  ClusterOptions member_options;
  member_options.etcd_endpoints = {etcd.url()};
  member_options.etcd_ca_file = etcd.ca_file();
  member_options.etcd_cert_file = etcd.client_cert_file();
  member_options.etcd_key_file = etcd.client_key_file();
  member_options.shard = "s0";
  member_options.replica = "a";
  member_options.advertise_grpc = "a:50051";
  member_options.advertise_http = "http://a:8080";
  member_options.lease_seconds = 3;
  member_options.poll_seconds = 0.2;
  absl::StatusOr<std::unique_ptr<ClusterMember>> member = ClusterMember::Create(member_options);
  ASSERT_TRUE(member.ok()) << member.status();
  (*member)->Start();
  for (int i = 0; i < 50 && !(*member)->IsShardLeader(); ++i) usleep(100'000);
  EXPECT_TRUE((*member)->IsShardLeader()) << (*member)->view().last_error;
  (*member)->Stop();
}

class EtcdAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdProcess::Available()) GTEST_SKIP() << "etcd is not installed";
    etcd_ = std::make_unique<EtcdProcess>();
    ASSERT_FALSE(etcd_->url().empty()) << "etcd did not start";
    // Users root and vigil (read-write on /test/ only), then auth on.
    transport_ = NewCurlTransport();
    Admin("/v3/auth/user/add", {{"name", "root"}, {"password", "root-pw"}});
    Admin("/v3/auth/user/grant", {{"user", "root"}, {"role", "root"}});
    Admin("/v3/auth/role/add", {{"name", "vigil"}});
    Admin("/v3/auth/role/grant",
          {{"name", "vigil"},
           {"perm", {{"permType", "READWRITE"},
                     {"key", absl::Base64Escape(std::string("/test/"))},
                     {"range_end", absl::Base64Escape(std::string("/test0"))}}}});
    Admin("/v3/auth/user/add", {{"name", "vigil"}, {"password", "vigil-pw"}});
    Admin("/v3/auth/user/grant", {{"user", "vigil"}, {"role", "vigil"}});
    Admin("/v3/auth/enable", Json::object());
  }

  void Admin(const std::string& path, const Json& body) {
    OutboundRequest request;
    request.url = etcd_->url() + path;
    request.headers = {{"Content-Type", "application/json"}};
    request.body = body.dump();
    TransportResult result = transport_->Send(request, 5);
    ASSERT_EQ(result.http_status, 200) << path << ": " << result.body << result.error;
  }

  std::unique_ptr<EtcdClient> Client(const std::string& user, const std::string& password) {
    EtcdClientOptions options;
    options.endpoints = {etcd_->url()};
    options.username = user;
    options.password = password;
    absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<Transport> transport_;
};

TEST_F(EtcdAuthTest, OnlyTheRightUserWritesAndOnlyItsPrefix) {
  std::unique_ptr<EtcdClient> vigil = Client("vigil", "vigil-pw");
  ASSERT_TRUE(vigil->Put("/test/k", "v").ok());
  EXPECT_EQ((*vigil->Get("/test/k"))->value, "v");
  absl::StatusOr<int64_t> lease = vigil->GrantLease(5);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(vigil->CreateIfAbsent("/test/leader", "me", *lease).value_or(false));
  // Outside its prefix: refused by etcd's RBAC.
  absl::Status outside = vigil->Put("/other/k", "v");
  EXPECT_FALSE(outside.ok());
  EXPECT_NE(std::string(outside.message()).find("permission denied"), std::string::npos)
      << outside;
  // No credentials, or a wrong password: unauthenticated.
  absl::StatusOr<std::unique_ptr<EtcdClient>> anonymous = EtcdClient::Create({etcd_->url()});
  ASSERT_TRUE(anonymous.ok());
  absl::Status none = (*anonymous)->Put("/test/k", "x");
  EXPECT_TRUE(absl::IsUnauthenticated(none)) << none;
  absl::Status wrong = Client("vigil", "guess")->Put("/test/k", "x");
  EXPECT_TRUE(absl::IsUnauthenticated(wrong)) << wrong;
  EXPECT_NE(std::string(wrong.message()).find("authentication as 'vigil'"), std::string::npos)
      << wrong;
  EXPECT_EQ((*vigil->Get("/test/k"))->value, "v");
}

TEST_F(EtcdAuthTest, AMemberAuthenticatesWithItsPasswordFile) {
  const std::string password_file = ::testing::TempDir() + "/etcd-password";
  {
    std::ofstream out(password_file);
    out << "vigil-pw\n";
  }
  ClusterOptions options;
  options.etcd_endpoints = {etcd_->url()};
  options.etcd_username = "vigil";
  options.etcd_password_file = password_file;
  options.prefix = "/test";
  options.shard = "s0";
  options.replica = "a";
  options.advertise_grpc = "a:50051";
  options.advertise_http = "http://a:8080";
  options.lease_seconds = 3;
  options.poll_seconds = 0.2;
  absl::StatusOr<std::unique_ptr<ClusterMember>> member = ClusterMember::Create(options);
  ASSERT_TRUE(member.ok()) << member.status();
  (*member)->Start();
  for (int i = 0; i < 50 && !(*member)->IsShardLeader(); ++i) usleep(100'000);
  EXPECT_TRUE((*member)->IsShardLeader()) << (*member)->view().last_error;
  (*member)->Stop();
  // A username without its password file, or an unreadable one, is refused.
  options.etcd_password_file.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(ClusterMember::Create(options).status()));
  options.etcd_password_file = "/nonexistent/etcd-password";
  EXPECT_TRUE(absl::IsNotFound(ClusterMember::Create(options).status()));
  std::remove(password_file.c_str());
}

}  // namespace
}  // namespace vigil::cluster
