// Helpers for the tests of the ingest listener's security: certificates
// made at test time with deploy/make-test-ca.sh, a server on a clock at the
// real time (the certificates are checked against it), and one Hello over
// chosen credentials.
#ifndef VIGIL_TESTS_SERVER_TLS_TEST_UTIL_H_
#define VIGIL_TESTS_SERVER_TLS_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"

namespace vigil::testing {

// Runs deploy/make-test-ca.sh into a fresh `dir` for the space-separated
// `nodes`; false (after a test failure) if it fails.
bool MakeTestCa(const std::string& dir, const std::string& nodes);

// The text of `path` ("" if unreadable).
std::string ReadTextFile(const std::string& path);

// TestOptions() with TLS from the CA in `dir` instead of plaintext.
ServerOptions TlsOptions(const std::string& dir);

// TLS credentials trusting the CA in `ca_dir`, with the client certificate
// of `node` from `cert_dir` unless `node` is empty.
std::shared_ptr<grpc::ChannelCredentials> AgentTls(const std::string& ca_dir,
                                                   const std::string& cert_dir,
                                                   const std::string& node);

// What a test agent says in its Hello.
struct HelloSpec {
  std::string node = "n001";
  std::string instance = "i1";
  std::string token;  // sent as "Bearer <token>" unless empty
  uint64_t batches_dropped = 0;
  uint64_t batches_dropped_earlier = 0;
};

// Opens a stream to 127.0.0.1:`port`, sends a batch with `hello`, and
// returns OK once it is acked, or the status that ended the stream.
grpc::Status SendHello(int port,
                       std::shared_ptr<grpc::ChannelCredentials> credentials,
                       const HelloSpec& hello);

// A started VigilServer whose fake clock starts at the real time.
struct RealTimeServer {
  explicit RealTimeServer(const ServerOptions& options);
  FakeClock clock;
  VigilServer server;
  absl::Status started;
};

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_SERVER_TLS_TEST_UTIL_H_
