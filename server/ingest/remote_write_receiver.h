// Prometheus remote write in: Prometheus, vmagent or Grafana Agent send
// Vigil what they scrape (dcgm-exporter, node_exporter), and those series
// feed the same storage and detectors as an agent's (docs/PROMETHEUS.md).
//
// A request (remote write 1.0: a snappy-compressed protobuf WriteRequest)
// is decoded, its series mapped onto Vigil's catalogue (promcompat/
// metric_mapping.h), and its samples grouped by node and timestamp: one
// node's samples at one scrape timestamp form a frame. Each node's part is
// validated and stored through IngestService::ApplyLocal before the request
// is answered, so what was answered 2xx is durable. Prometheus splits a
// scrape across requests and parallel shards, so detection gets a node's
// frame from a FrameAssembler once no piece of it came for
// frame_grace_seconds.
//
// Jobs: a series names its job through the configured labels; series
// without one (node_exporter's) take the job its node's labelled series
// named last, else the idle job. When a node's job changes, its first frame
// of the new job carries the end of the old one (docs/DETECTION.md, "Job
// lifecycle"), as an agent's would.
//
// Trust: a token holder can name any node and job. Such frames carry
// FrameView::claimed_node and no verified job id, so nothing they raise is
// acted on without a human's approval. A node that has an agent stream is
// fed by its agent only: remote-written samples of it are left out.
#ifndef VIGIL_SERVER_INGEST_REMOTE_WRITE_RECEIVER_H_
#define VIGIL_SERVER_INGEST_REMOTE_WRITE_RECEIVER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/periodic_thread.h"
#include "promcompat/metric_mapping.h"
#include "server/config/receiver_config.h"
#include "server/ingest/frame_assembler.h"
#include "server/ingest/ingest_service.h"

namespace vigil {

// The receiver. Write is thread-safe; Start/Stop from one thread.
class RemoteWriteReceiver {
 public:
  // The source name ApplyLocal records for the nodes it feeds.
  static constexpr std::string_view kSource = "prometheus-remote-write";

  // Checks the options (the mapping's, the limits): kInvalidArgument
  // naming the problem. `ingest` and `clock` must outlive the receiver.
  static absl::StatusOr<std::unique_ptr<RemoteWriteReceiver>> Create(
      const RemoteWriteReceiverOptions& options, IngestService* ingest, Clock* clock);
  ~RemoteWriteReceiver();

  // Starts handing whole frames to detection (every 0.5 s of `clock`).
  void Start();
  // Hands every open frame to detection and stops. Idempotent.
  void Stop();

  // Takes one request body. `content_encoding` must be "snappy". Every
  // node's samples that could be stored are stored, whatever happens to
  // the others. Errors: kInvalidArgument for a body that does not decode
  // or series and frames that are bad (the message names the first few;
  // the rest of the request was taken), kResourceExhausted for a body
  // over max_decoded_bytes, kUnavailable when detection is behind
  // (nothing of the remaining nodes stored; the sender retries), other
  // codes as storage reports them.
  absl::Status Write(std::string_view content_encoding, std::string_view body);

  // Prometheus text of the vigil_remote_write_receiver_* families.
  std::string MetricsText() const;

  // What became of samples (label values of ..._samples_total).
  enum class Outcome {
    kStored,
    kUnmapped,
    kNoNode,
    kBadSeries,
    kAgentStreamsNode,
    kNotOwner,
    kRejected,     // a frame was refused (bad timestamp, bad job, ...)
    kDropped,      // duplicate, out of order, or refused by a series limit
    kStale,        // Prometheus staleness markers: not readings
    kCount,
  };

 private:
  RemoteWriteReceiver(const RemoteWriteReceiverOptions& options,
                      std::unique_ptr<promcompat::MetricMapper> mapper, IngestService* ingest,
                      Clock* clock);

  // Hands the due frames (all when `all`) to detection.
  void Flush(bool all);
  void Count(Outcome outcome, uint64_t n) {
    counts_[static_cast<size_t>(outcome)].fetch_add(n, std::memory_order_relaxed);
  }

  // What a node's frames carry over from one request to the next.
  struct NodeState {
    std::string job;           // the job its labelled series named last
    double job_ts = 0;         // when (sample time)
    std::string last_job;      // the job of its latest frame
    double last_ts = 0;        // and that frame's time
    // DCGM's last-XID gauge turned into a count (by encoded key).
    promcompat::ChangeCounter changes;
  };

  const RemoteWriteReceiverOptions options_;
  const std::unique_ptr<promcompat::MetricMapper> mapper_;
  IngestService* const ingest_;
  Clock* const clock_;

  std::mutex nodes_mu_;
  absl::flat_hash_map<std::string, NodeState> nodes_ ABSL_GUARDED_BY(nodes_mu_);

  mutable std::mutex assembler_mu_;
  FrameAssembler assembler_ ABSL_GUARDED_BY(assembler_mu_);
  // Serializes Flush: a node's frames leave in order.
  std::mutex flush_mu_;

  std::array<std::atomic<uint64_t>, static_cast<size_t>(Outcome::kCount)> counts_{};
  std::atomic<uint64_t> requests_ok_{0};
  std::atomic<uint64_t> requests_failed_{0};
  std::atomic<uint64_t> frames_delivered_{0};
  std::atomic<uint64_t> pieces_late_{0};
  std::unique_ptr<PeriodicThread> flusher_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_REMOTE_WRITE_RECEIVER_H_
