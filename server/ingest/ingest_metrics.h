// Counters of the ingest path, read by GET /metrics.
#ifndef VIGIL_SERVER_INGEST_INGEST_METRICS_H_
#define VIGIL_SERVER_INGEST_INGEST_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"

namespace vigil {

// Why an input was refused; one label value of vigil_ingest_rejected_total.
enum class RejectReason {
  kMissingHello,
  kBadHello,
  kNodeTaken,
  kBadSeriesDef,
  kUnknownSeries,
  kLengthMismatch,
  kBadTimestamp,
  kTooOld,
  kFutureTimestamp,
  kBadJob,
  kSeqNotIncreasing,
  kStorage,
  kUnauthenticated,  // node token missing, malformed or unknown
  kTokenWrongNode,   // a valid token of another node
  kCertWrongNode,    // client certificate of another node
  kNoFirstBatch,     // no first batch within IngestOptions::first_batch_seconds
  kTooManyStreams,   // IngestOptions::max_streams reached
  kDetectionBacklog, // the frame workers' queue of a batch's shard is full
  kNotOwner,         // cluster: the batch's job belongs to another shard
  kCount,  // not a reason: the number of reasons
};

// The Prometheus label value of `reason`, e.g. "unknown_series".
std::string_view RejectReasonName(RejectReason reason);

// Samples per second over the last complete seconds, from per-second
// buckets. Thread-safe; Add() takes a short lock once per batch.
class RateWindow {
 public:
  // Number of complete seconds averaged over.
  static constexpr int kSeconds = 10;
  // Counts `n` events at Unix time `now`.
  void Add(double now, uint64_t n);
  // Events per second over the kSeconds complete seconds before `now`.
  double Rate(double now) const;

 private:
  static constexpr int kBuckets = kSeconds + 2;
  struct Bucket {
    int64_t second = -1;
    uint64_t count = 0;
  };
  mutable std::mutex mu_;
  std::array<Bucket, kBuckets> buckets_ ABSL_GUARDED_BY(mu_);
};

// Durations in seconds, as a Prometheus histogram with fixed buckets from
// 0.5 ms to 10 s. Observe() is a few relaxed atomic adds, lock-free; a
// reader sees each bucket at some moment, not one snapshot of all.
class LatencyHistogram {
 public:
  // Upper bounds of the buckets (seconds); one more bucket holds the rest.
  static constexpr std::array<double, 13> kBounds = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};
  // Counts one duration (negative and NaN count as 0).
  void Observe(double seconds);
  // Durations observed so far.
  uint64_t count() const;
  // Appends the family `name` in the Prometheus text format: HELP, TYPE,
  // cumulative `_bucket{le=...}` lines, `_sum` and `_count`.
  void AppendText(std::string* out, std::string_view name, std::string_view help) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Which limit refused a new series (vigil_ingest_series_refused_total).
enum class SeriesLimit {
  kStream,  // the stream's dictionary is full (max_series_per_stream)
  kNode,    // the node created too many series (SeriesBudgetOptions)
  kJob,     // the job did
  kStore,   // the store's global max_series
  kCount,   // not a limit: the number of limits
};

// The Prometheus label value of `limit`, e.g. "node".
std::string_view SeriesLimitName(SeriesLimit limit);

// Monotonic ingest counters (plus the connected-agents gauge), and the
// drop counts agents report. Safe for concurrent use: the counters are
// lock-free, the agent reports take a short lock once per stream; values
// are read without a common snapshot.
struct IngestMetrics {
  std::atomic<uint64_t> samples{0};   // samples appended (incl. dropped)
  std::atomic<uint64_t> batches{0};   // batches applied (not resends)
  std::atomic<uint64_t> frames{0};    // frames applied
  std::atomic<uint64_t> resent_batches{0};  // deduplicated resends
  std::atomic<uint64_t> dropped_duplicate{0};
  std::atomic<uint64_t> dropped_out_of_order{0};
  // Samples dropped because a limit refused their series.
  std::atomic<uint64_t> dropped_series_limit{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(SeriesLimit::kCount)>
      series_refused{};
  std::atomic<int64_t> connected_agents{0};  // gauge: live streams
  // Frame workers (detection shards) and the batch parts each holds,
  // queued or running (gauges; workers past kMaxReportedWorkers unreported).
  static constexpr int kMaxReportedWorkers = 64;
  std::atomic<int> frame_workers{0};
  std::array<std::atomic<int64_t>, kMaxReportedWorkers> worker_queued{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(RejectReason::kCount)>
      rejected{};
  RateWindow sample_rate;
  // Per batch of an agent stream, from its read completing to its ack
  // being handed to gRPC: the store's append (frame log included) alone,
  // and everything the server does before it acks (the append, then the
  // wait for and the run of detection on the frame workers).
  LatencyHistogram batch_apply;
  LatencyHistogram batch_ack;
  // Per part of a batch a frame worker runs: detection on its frames,
  // waits for the shard's lock included, its wait in the queue not.
  LatencyHistogram batch_detect;

  // Counts one series refused by `limit`.
  void RefuseSeries(SeriesLimit limit) {
    series_refused[static_cast<size_t>(limit)].fetch_add(
        1, std::memory_order_relaxed);
  }

  // Counts one refused input.
  void Reject(RejectReason reason) {
    rejected[static_cast<size_t>(reason)].fetch_add(1,
                                                    std::memory_order_relaxed);
  }

  // Records the dropped-batch counts the agent of `node` reported in its
  // latest Hello (see v1::Hello): `dropped` by its full queue, `earlier`
  // left by a previous agent process.
  void SetAgentDrops(const std::string& node, uint64_t dropped,
                     uint64_t earlier);
  // The Prometheus text of vigil_ingest_agent_dropped_batches_total{node,
  // cause} for the nodes that ever reported a drop (a 10,000-node fleet
  // that drops nothing adds no series).
  std::string AgentDropsText() const;

 private:
  struct AgentDrops {
    uint64_t dropped = 0;
    uint64_t earlier = 0;
  };
  mutable std::mutex agent_mu_;
  std::map<std::string, AgentDrops> agent_drops_ ABSL_GUARDED_BY(agent_mu_);
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_INGEST_METRICS_H_
