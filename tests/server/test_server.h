// Helpers for the server tests: an in-process server on 127.0.0.1:0 with a
// fake clock, a raw gRPC ingest client, batch builders and an HTTP GET.
#ifndef VIGIL_TESTS_SERVER_TEST_SERVER_H_
#define VIGIL_TESTS_SERVER_TEST_SERVER_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace vigil::testing {

// Options for an in-memory server on ephemeral loopback ports, plaintext
// gRPC (grpc_insecure).
ServerOptions TestOptions();

// A started VigilServer with a FakeClock (at FakeClock's default start).
struct TestServer {
  explicit TestServer(const ServerOptions& options = TestOptions(),
                      FrameObserver* observer = nullptr);
  FakeClock clock;
  VigilServer server;
};

// One Ingest.Stream from the test's side. Not thread-safe.
class IngestClient {
 public:
  explicit IngestClient(int grpc_port);
  // Opens a new stream (the previous one, if any, is abandoned).
  void Open();
  // Writes `batch` and reads the ack. The ack, or nullopt when the server
  // ended the stream instead (then Finish() gives its status).
  std::optional<v1::Ack> Send(const v1::FrameBatch& batch);
  // Half-closes the stream and returns the server's final status.
  grpc::Status Finish();
  // A trailing metadata value of the finished stream ("" when absent).
  std::string Trailer(const std::string& key) const;

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ingest::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::FrameBatch, v1::Ack>> stream_;
};

// A SeriesDef with the given id, metric and labels.
v1::SeriesDef Def(uint32_t id, const std::string& metric,
                  const std::vector<std::pair<std::string, std::string>>& labels);
// A frame of `job` at `ts` with the given columns.
v1::Frame Frame(const std::string& job, double ts, std::vector<uint32_t> ids,
                std::vector<double> values);
// A batch with `seq`; with a hello for (`node`, `instance`) when node is set.
v1::FrameBatch Batch(uint64_t seq, const std::string& node = "",
                     const std::string& instance = "");

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_SERVER_TEST_SERVER_H_
