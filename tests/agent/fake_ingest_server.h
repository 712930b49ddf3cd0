// An in-process Ingest service for agent tests: checks the wire protocol
// (Hello first, ids from this stream's dictionary), records what it accepts,
// and can misbehave on request. Thread-safe.
#ifndef VIGIL_TESTS_AGENT_FAKE_INGEST_SERVER_H_
#define VIGIL_TESTS_AGENT_FAKE_INGEST_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/transport_security.h"

namespace grpc {
class ServerCredentials;
}  // namespace grpc

namespace vigil::agent::testing {

// One batch as the fake server read it.
struct ReceivedBatch {
  int stream = 0;  // 1 for the first stream, ...
  uint64_t seq = 0;
  bool hello = false;
  std::string hello_node, hello_instance, hello_version;
  double hello_interval = 0;
  uint64_t hello_batches_dropped = 0;
  uint64_t hello_batches_dropped_earlier = 0;
  std::string authorization;  // the stream's authorization metadata
  int series = 0;  // dictionary entries carried
  int frames = 0;
  size_t bytes = 0;  // serialized size
};

class FakeIngestServer {
 public:
  // Serves on 127.0.0.1:`port` (0 picks a free one) with `credentials`
  // (null: plaintext). Aborts the test binary if the port cannot be bound.
  explicit FakeIngestServer(
      int port = 0,
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);
  ~FakeIngestServer();

  int port() const;
  std::string address() const;

  // Every batch read, duplicates included, in arrival order.
  std::vector<ReceivedBatch> received() const;
  // Seqs accepted once each (duplicates of acked seqs are skipped).
  std::vector<uint64_t> accepted() const;
  // Samples in the accepted batches.
  uint64_t accepted_samples() const;
  // Streams opened so far.
  int streams() const;

  // Ends the stream with INVALID_ARGUMENT when batch `seq` arrives (once).
  void RejectSeq(uint64_t seq);
  // Refuses the next `n` streams with ALREADY_EXISTS after their Hello.
  void RefuseStreams(int n);
  // While true, batches are recorded but not acked (nor accepted).
  void HoldAcks(bool hold);
  // Cancels every open stream.
  void CancelStreams();
  // Cluster mode: each stream's first ack names `owners`; with `redirect`,
  // every stream is refused at its first batch with FAILED_PRECONDITION and
  // the owners in the trailing metadata "vigil-owners" instead.
  void SetOwners(std::vector<std::string> owners, bool redirect);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Security for a StreamClient talking plaintext to a FakeIngestServer.
std::shared_ptr<const TransportSecurity> Plaintext();

// Polls `condition` every 2 ms for up to `timeout_seconds`; true if it held.
bool WaitFor(const std::function<bool()>& condition,
             double timeout_seconds = 20);

}  // namespace vigil::agent::testing

#endif  // VIGIL_TESTS_AGENT_FAKE_INGEST_SERVER_H_
