// The agent's side of Ingest.Stream: keeps one stream open to the server
// from a background thread, sends the batches it is given, and keeps each
// one until the server acknowledges it, resending after reconnects.
#ifndef VIGIL_AGENT_STREAM_CLIENT_H_
#define VIGIL_AGENT_STREAM_CLIENT_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "agent/batch_queue.h"
#include "agent/transport_security.h"
#include "common/clock.h"
#include "common/series_key.h"
#include "vigil/v1/ingest.pb.h"

namespace grpc {
class ChannelArguments;
class ClientContext;
}  // namespace grpc

namespace vigil::agent {

// Version string sent in Hello.
inline constexpr char kAgentVersion[] = "0.1.0";

// Sets the gRPC channel arguments of an agent's ingest connection on
// `args`: a connection of its own per attempt (our backoff, not gRPC's,
// paces retries) and no bandwidth-delay-product probes (a ping for each
// ack the agent reads costs the server as much as the agent; see
// bench/RESULTS.md, "gRPC's bandwidth probe off"). Benchmarks that stand
// in for agents use it too, so they load the server as agents do.
void SetIngestChannelArguments(grpc::ChannelArguments* args);

// Configuration of a StreamClient.
struct StreamClientOptions {
  // Server address, host:port. Required unless on_owners is set (then an
  // empty server means "idle until Retarget").
  std::string server;
  // Cluster mode (docs/SCALING.md): called, on one of the client's
  // threads and with no lock held, with the gRPC addresses of the live
  // members of the shard that owns this node's job whenever a server
  // reports them (an ack's `owners`, or a FAILED_PRECONDITION refusal from
  // a server that does not own the job). It may call Retarget. Without it,
  // a refusal that names owners moves the client to the first of them.
  std::function<void(const std::vector<std::string>& owners)> on_owners;
  // How connections are secured (TLS files, or plaintext only if created
  // with insecure set; a node token). Required: there is no default, so
  // plaintext is never an accident. Consulted before every connection
  // attempt, so renewed certificates and tokens apply at the next one.
  std::shared_ptr<const TransportSecurity> security;
  // Node this agent reports for (Hello.node). Required.
  std::string node;
  // Tick interval announced in Hello.
  double interval_seconds = 1.0;
  // Reconnect backoff: starts here, doubles per failed attempt (+-20 %
  // jitter) up to the maximum, and returns to the start after a stream that
  // got at least one ack.
  double initial_backoff_seconds = 0.2;
  double max_backoff_seconds = 30.0;
  // A stream with unacknowledged batches in flight and no ack for this long
  // is abandoned and reopened.
  double ack_timeout_seconds = 60.0;
  // Bound of the default in-memory queue of unacknowledged batches; the
  // oldest are dropped (and counted) beyond it.
  size_t max_pending_bytes = 64u << 20;
  // Enqueue splits frames into batches of at most about this many bytes
  // (big frames into several frames); with the dictionary below, every
  // message stays under the server's 4 MiB limit.
  size_t max_batch_bytes = 1u << 20;
  // Upper bound of the serialized series dictionary.
  size_t max_dictionary_bytes = 2u << 20;
  // Time source for backoff and timeouts. Not owned; must outlive the client.
  Clock* clock = RealClock();
  // Seed of the jitter and of the agent instance id; 0 = random.
  uint64_t seed = 0;
};

// Counters of a StreamClient, for status lines and /metrics.
struct StreamClientStats {
  uint64_t batches_enqueued = 0;
  uint64_t batches_sent = 0;    // writes, resends included
  uint64_t batches_resent = 0;  // writes of a batch sent before
  uint64_t batches_acked = 0;
  uint64_t batches_dropped = 0;   // oldest dropped because the queue was full
  uint64_t batches_rejected = 0;  // dropped after INVALID_ARGUMENT etc.
  uint64_t streams_opened = 0;    // attempts to open a stream
  uint64_t reconnects = 0;        // attempts after the first
  uint64_t already_exists = 0;    // refusals: another agent holds the node
  uint64_t unauthorized = 0;  // refusals: UNAUTHENTICATED, PERMISSION_DENIED
  uint64_t redirects = 0;     // refusals naming the job's owners (cluster)
  // Batches dropped by Retarget(..., drop_pending): another stream carries
  // them to the only live owner.
  uint64_t batches_handed_over = 0;
  uint64_t samples_dropped_by_server = 0;  // Ack.dropped_samples, summed
  // Of those, samples of series a server limit refused (Ack.refused_samples).
  uint64_t samples_refused_by_server = 0;
  uint64_t last_seq = 0;                   // seq of the newest enqueued batch
  uint64_t acked_seq = 0;  // highest seq the server acknowledged
  size_t pending_batches = 0;
  size_t pending_bytes = 0;
  double last_ack_time = 0;    // Unix seconds; 0 = never
  double backoff_seconds = 0;  // the last reconnect wait
  bool streaming = false;      // current stream has been acked
};

// Where a collector's frames go: one stream client, or the pair of them
// that feeds both members of a shard (agent/pair_streamer.h).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // The id of `key` in this sink's dictionary (see StreamClient).
  virtual absl::StatusOr<uint32_t> RegisterSeries(SeriesKey key) = 0;
  // Queues `frames` (ids from RegisterSeries); returns the last seq.
  virtual absl::StatusOr<uint64_t> Enqueue(std::vector<v1::Frame> frames) = 0;
  // A snapshot of the counters.
  virtual StreamClientStats stats() const = 0;
};

// Sends frame batches to one server. Thread-safe: RegisterSeries, Enqueue,
// WaitForAcked and stats may be called from any thread while the
// background thread streams.
class StreamClient : public FrameSink {
 public:
  // A stopped client; kInvalidArgument if server or node is empty, security
  // is missing or a bound is zero. A queue holding an earlier process's
  // batches (BatchQueue::LeftSeries) hands over its dictionary, and seqs
  // continue after its newest batch. `queue` defaults to a MemoryBatchQueue of
  // max_pending_bytes; what it has dropped() already (batches a previous
  // agent process left in a spool that could not be resent) is reported as
  // Hello.batches_dropped_earlier, later drops as Hello.batches_dropped.
  static absl::StatusOr<std::unique_ptr<StreamClient>> Create(
      StreamClientOptions options, std::unique_ptr<BatchQueue> queue = nullptr);
  // Stops the client; batches not yet acknowledged are lost.
  ~StreamClient() override;

  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  // The dictionary id of `key` (normalized first), adding it when new.
  // kInvalidArgument for a malformed key, kResourceExhausted when the
  // dictionary would exceed max_dictionary_bytes, the queue's error when it
  // cannot keep the entry (BatchQueue::KeepSeries).
  absl::StatusOr<uint32_t> RegisterSeries(SeriesKey key) override;

  // Queues `frames` (their series_ids from RegisterSeries) as one or more
  // batches with new seqs, and returns the last seq. kInvalidArgument, with
  // nothing queued, if a frame's columns differ in length or name an
  // unregistered id, or if there are no frames.
  absl::StatusOr<uint64_t> Enqueue(std::vector<v1::Frame> frames) override;

  // Starts the background stream thread. Call once.
  void Start();

  // Waits until no batch with seq <= `seq` is pending (acked, or dropped)
  // or the clock reaches `deadline`; true in the first case.
  bool WaitForAcked(uint64_t seq, double deadline);

  // Closes the stream and joins the thread. Pending batches stay queued.
  // Idempotent.
  void Stop();

  // Streams to `server` from now on (an empty one: stays idle, keeping
  // no connection); the current stream, if to another server, is closed
  // and pending batches are resent to the new one, unless `drop_pending`
  // drops them (counted as batches_handed_over). No-op when unchanged.
  void Retarget(const std::string& server, bool drop_pending = false);
  // The server this client streams to ("" while idle).
  std::string server() const;

  // A snapshot of the counters.
  StreamClientStats stats() const override;
  // The random id of this agent instance sent in Hello.
  const std::string& agent_instance() const { return instance_; }

 private:
  struct Stream;  // one open Ingest.Stream

  StreamClient(StreamClientOptions options, std::unique_ptr<BatchQueue> queue);
  void Run();
  // Opens a stream and serves it until it ends; returns its final status
  // and whether the server acknowledged anything on it.
  // `owners`: the owners a FAILED_PRECONDITION refusal named.
  void RunStream(int* code, std::string* message, bool* acked,
                 std::vector<std::string>* owners);
  void WriteLoop(Stream* stream);
  void ReadLoop(Stream* stream);
  // Handles the end of a stream; returns how long to wait before the next.
  double AfterStream(int code, const std::string& message, bool acked,
                     const std::vector<std::string>& owners)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StreamClientOptions options_;
  std::string instance_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<BatchQueue> queue_ ABSL_GUARDED_BY(mu_);
  std::string server_ ABSL_GUARDED_BY(mu_);  // where streams go; "" = idle
  bool retargeted_ ABSL_GUARDED_BY(mu_) = false;  // the stream was moved
  std::vector<std::string> owners_seen_ ABSL_GUARDED_BY(mu_);
  // queue_->dropped() when the client was created.
  uint64_t dropped_before_start_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::SeriesDef> dictionary_ ABSL_GUARDED_BY(mu_);
  std::map<SeriesKey, uint32_t> series_ids_ ABSL_GUARDED_BY(mu_);
  size_t dictionary_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t max_sent_seq_ ABSL_GUARDED_BY(mu_) = 0;
  StreamClientStats stats_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  double backoff_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // State of the current stream.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sent_through_ ABSL_GUARDED_BY(mu_) = 0;  // highest seq written
  double last_progress_ ABSL_GUARDED_BY(mu_) = 0;   // last write/ack time
  std::string last_refused_reason_ ABSL_GUARDED_BY(mu_);  // logged last
  std::thread thread_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_STREAM_CLIENT_H_
