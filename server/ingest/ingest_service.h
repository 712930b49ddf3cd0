// The gRPC Ingest.Stream implementation: validates batches from agents,
// appends them to the store, hands accepted frames to the frame workers
// (detection) and acks them once those have seen them.
#ifndef VIGIL_SERVER_INGEST_INGEST_SERVICE_H_
#define VIGIL_SERVER_INGEST_INGEST_SERVICE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/clock.h"
#include "grpcpp/server_builder.h"
#include "server/frame_observer.h"
#include "server/cluster/ownership.h"
#include "server/ingest/frame_assembler.h"
#include "server/ingest/first_batch_watchdog.h"
#include "server/ingest/frame_workers.h"
#include "server/ingest/grpc_security.h"
#include "server/ingest/ingest_metrics.h"
#include "server/ingest/series_budget.h"
#include "storage/series_store.h"
#include "vigil/v1/ingest.grpc.pb.h"

namespace vigil {

// What IngestService needs. Pointers are not owned and must outlive it.
struct IngestOptions {
  SeriesStore* store = nullptr;         // required
  Clock* clock = nullptr;               // required
  IngestMetrics* metrics = nullptr;     // required
  // Optional: detection and the other frame observers, run on one worker
  // thread per shard (server/ingest/frame_workers.h).
  ShardedFrameObserver* observer = nullptr;
  // Batches one worker's queue may hold; past it a batch of its shard is
  // refused unapplied with UNAVAILABLE (the agent keeps it and resends).
  // A stream has one batch in flight, so this bounds only servers with
  // more streams than that on one shard.
  size_t worker_queue_batches = 10'000;
  // While batches come more often than this, a worker takes them in
  // bursts this far apart rather than waking for each
  // (FrameWorkersOptions::linger); detection and acks wait up to this
  // much longer.
  std::chrono::microseconds worker_linger{0};
  // Optional: decides whether a stream may report for its Hello.node
  // (node tokens, certificate-bound node names).
  StreamAuthenticator* authenticator = nullptr;
  // Cluster mode (docs/SCALING.md): which jobs' frames this server takes.
  // A batch whose first frame is of a job another shard owns (unless it
  // carries the end of a job owned here) is refused before anything is
  // stored: FAILED_PRECONDITION, the owners' addresses in the trailing
  // metadata "vigil-owners", and the node handed over by detection as a
  // node that moved away (not silent). Acks carry this shard's members
  // (Ack.owners) on a stream's first ack and when they change. Null: every
  // batch is taken.
  const cluster::Ownership* ownership = nullptr;
  // Frames stamped further ahead of clock->Now() are refused.
  double max_future_skew_seconds = 300;
  // Frames older than this (the raw retention) are refused.
  double raw_retention_seconds = 7 * 86400.0;
  // Series one stream may define (its dictionary); 0: no limit. Past it,
  // new definitions are left out and their samples dropped; the stream and
  // its known series carry on.
  uint32_t max_series_per_stream = 50'000;
  // New series per node and per job over a window (server/ingest/series_budget.h).
  SeriesBudgetOptions series_budget;
  // Streams served at once; past it a new stream is refused with
  // UNAVAILABLE (the agent keeps its spool and retries).
  int max_streams = 10'000;
  // A stream whose first batch has not arrived this many seconds (of
  // `clock`) after it opened is cancelled (the peer sees CANCELLED), so idle or
  // slow peers cannot hold stream slots. Tokens and certificates are checked
  // before that read.
  double first_batch_seconds = 10;
  // Threads serving the streams, each with a completion queue of its own
  // (values below 1 mean 1).
  int threads = 1;
};

// Serves Ingest.Stream with gRPC's asynchronous API: no thread per
// stream; `threads` threads each poll one completion queue, on which a
// batch is validated and stored; it is then run through the frame
// observers on the worker of its shard, and acked when they are done. A
// stream has one batch in flight: the next is read after the ack. (gRPC's
// callback API polls one queue with two threads and hands each event from
// one to the other: ~6 context switches per batch against ~3, and 18 %
// more server CPU at 1,250 paced agents; bench/RESULTS.md.)
//
// Per stream: the token and certificate (if required) are checked before
// anything is read; at most max_streams streams are served at once; the
// first batch must arrive within first_batch_seconds and carry a Hello,
// and the stream must pass the authenticator (if any) for its node; the dropped-batch counts in the
// Hello go to the metrics, and a line is logged when they grew since the
// node's previous stream. A node has at most one
// live stream: another agent instance is refused with ALREADY_EXISTS, the
// same instance replaces (cancels) its old stream. Each batch is validated
// whole before anything is stored; a bad batch ends the stream with
// INVALID_ARGUMENT "batch SEQ frame I: reason", and everything acked before
// stays stored. A batch whose seq was already applied for this node and
// agent instance (a resend after a lost ack) is acked again without being
// re-applied. Thread-safe.
//
// Use: AddTo(builder) before builder.BuildAndStart(), Start() once the
// server runs, and after grpc::Server::Shutdown() returned, Shutdown() (or
// the destructor).
class IngestService final {
 public:
  explicit IngestService(const IngestOptions& options);
  // Shutdown(), then runs what the frame workers hold.
  ~IngestService();

  // Registers the service with `builder` and adds the completion queues
  // its threads poll. Call once, before builder.BuildAndStart().
  void AddTo(grpc::ServerBuilder& builder);
  // Starts the threads and takes calls; once the server built with AddTo
  // runs.
  void Start();
  // Waits for the streams to end and joins the threads; ApplyLocal and
  // DeliverLocal still work. The gRPC server must be shut down first (it
  // cancels the streams; a live one would be waited for). Idempotent.
  void Shutdown();

  // Batches queued or running on each frame worker now (for /metrics).
  std::vector<size_t> WorkerQueues() const;

  // --- Frames of in-process sources (no agent stream) ---
  // The Prometheus remote-write receiver (server/ingest/
  // remote_write_receiver.h) feeds nodes that have no agent through these:
  // ApplyLocal stores the pieces of frames as they come, and DeliverLocal
  // hands the frames to detection once they are whole (FrameAssembler).

  // One frame (or piece of one) of a local source: samples[i] is the value
  // of keys[slots[i]] (keys as ApplyLocal's; no job or node label).
  struct LocalFrame {
    std::string job;
    double ts = 0;
    std::vector<uint32_t> slots;
    std::vector<double> values;
    // A job that ended on the node before this frame; empty: none.
    std::string ended_job;
    std::string end_reason;
  };
  // What ApplyLocal stored.
  struct LocalResult {
    // Per frame of the call, in order: the stored series ids and values
    // (samples a series limit refused are left out).
    std::vector<std::vector<uint32_t>> ids;
    std::vector<std::vector<double>> values;
    uint64_t dropped_samples = 0;  // duplicate, out of order, or refused
    uint64_t refused_samples = 0;  // of those: refused by a series limit
    std::string refused_reason;    // the first refusal, or ""
  };
  // Validates and stores `frames` of `node` from the local source `source`
  // (e.g. "prometheus-remote-write"; shown as the node's agent instance),
  // with the checks, limits and metrics of an agent's batch. Frames must be
  // in time order. Nothing is stored on error: kAlreadyExists when an agent
  // streams `node` now (it wins); kFailedPrecondition, in cluster mode,
  // when another shard owns the first frame's job; kInvalidArgument naming the frame and
  // reason for bad input; kUnavailable when detection is behind; storage
  // errors as the store reports them. Thread-safe; calls for one node are
  // serialized.
  absl::Status ApplyLocal(std::string_view source, const std::string& node,
                          const std::vector<SeriesKey>& keys,
                          const std::vector<LocalFrame>& frames, LocalResult* result);
  // Hands frames of `node` applied by ApplyLocal (ids as it returned them),
  // in time order, to the frame workers of their jobs' shards. Waits while a
  // worker's queue is full. `claimed_node`: the node's identity is only
  // what the source's labels say (FrameView::claimed_node).
  void DeliverLocal(const std::string& node, std::vector<AssembledFrame> frames,
                    bool claimed_node);

 private:
  struct NodeSession;
  struct StreamState;
  class Stream;

  // Posts a new Stream waiting for a call on `cq`, unless shutting down.
  void RequestNextStream(grpc::ServerCompletionQueue* cq);
  // Counts a Stream deleted.
  void StreamGone();

  // Claims the node of `hello` for the stream; ALREADY_EXISTS if another
  // agent instance streams it.
  grpc::Status Register(grpc::ServerContextBase* context,
                        const v1::Hello& hello, StreamState* state);
  // Releases the node if the stream still holds it.
  void Unregister(const StreamState& state);
  // Cluster mode: OK when this server takes `batch`; else the refusal to
  // end the stream with (trailing metadata set, the node handed over).
  // Called with session.mu held.
  grpc::Status CheckOwner(StreamState& st, NodeSession& session,
                          const v1::FrameBatch& batch);
  // Validates, applies and acks one batch.
  grpc::Status HandleBatch(StreamState& state, const v1::FrameBatch& batch,
                           v1::Ack* ack);
  // The store id of `key` (a series of `job` the stream has not used yet,
  // its job label set), created if the series limits allow. kRefused (see
  // the .cc) when a limit refuses it, noted in the stream's refused_reason
  // and the metrics; an error for a malformed key or a failing store.
  absl::StatusOr<SeriesId> ResolveNew(StreamState& state, SeriesKey key,
                                      const std::string& job, double now);

  // Checks the first batch (hello, authentication) and registers the
  // stream; a non-OK status ends the stream.
  grpc::Status Open(grpc::ServerContextBase* context,
                    const v1::FrameBatch& batch, StreamState* state);

  struct LocalStream;

  const IngestOptions options_;
  v1::Ingest::AsyncService async_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  // Streams posted and not yet deleted.
  std::mutex live_mu_;
  std::condition_variable live_gone_;
  int live_ ABSL_GUARDED_BY(live_mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(live_mu_) = false;
  // Null without an observer.
  std::unique_ptr<FrameWorkers> workers_;
  SeriesBudget budget_;
  std::atomic<int> streams_{0};
  const std::unique_ptr<FirstBatchWatchdog> watchdog_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<NodeSession>> nodes_
      ABSL_GUARDED_BY(mu_);
  // The local sources' streams, by node.
  absl::flat_hash_map<std::string, std::shared_ptr<LocalStream>> local_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_INGEST_SERVICE_H_
