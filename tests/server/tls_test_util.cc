#include "tests/server/tls_test_util.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/server/test_server.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace vigil::testing {

bool MakeTestCa(const std::string& dir, const std::string& nodes) {
  std::filesystem::remove_all(dir);
  const std::string command = std::string(VIGIL_SOURCE_DIR) +
                              "/deploy/make-test-ca.sh " + dir + " " + nodes +
                              " >/dev/null";
  int rc = std::system(command.c_str());
  EXPECT_EQ(rc, 0) << command;
  return rc == 0;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ServerOptions TlsOptions(const std::string& dir) {
  ServerOptions options = TestOptions();
  options.grpc_insecure = false;
  GrpcTlsOptions tls;
  tls.cert_file = dir + "/server.crt";
  tls.key_file = dir + "/server.key";
  tls.client_ca_file = dir + "/ca.crt";
  options.grpc_tls = tls;
  return options;
}

std::shared_ptr<grpc::ChannelCredentials> AgentTls(const std::string& ca_dir,
                                                   const std::string& cert_dir,
                                                   const std::string& node) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadTextFile(ca_dir + "/ca.crt");
  if (!node.empty()) {
    ssl.pem_cert_chain = ReadTextFile(cert_dir + "/nodes/" + node + ".crt");
    ssl.pem_private_key = ReadTextFile(cert_dir + "/nodes/" + node + ".key");
  }
  return grpc::SslCredentials(ssl);
}

grpc::Status SendHello(int port,
                       std::shared_ptr<grpc::ChannelCredentials> credentials,
                       const HelloSpec& hello) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // no shared connection
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                           credentials, args);
  auto stub = v1::Ingest::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  if (!hello.token.empty())
    context.AddMetadata("authorization", "Bearer " + hello.token);
  auto stream = stub->Stream(&context);
  v1::FrameBatch batch = Batch(1, hello.node, hello.instance);
  batch.mutable_hello()->set_batches_dropped(hello.batches_dropped);
  batch.mutable_hello()->set_batches_dropped_earlier(
      hello.batches_dropped_earlier);
  v1::Ack ack;
  if (stream->Write(batch) && stream->Read(&ack)) {
    stream->WritesDone();
    while (stream->Read(&ack)) {
    }
  }
  return stream->Finish();
}

RealTimeServer::RealTimeServer(const ServerOptions& options)
    : clock(RealClock()->Now()), server(options, &clock) {
  started = server.Start();
}

}  // namespace vigil::testing
