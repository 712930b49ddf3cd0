// Long-term series: ships the 1-minute rollups of every series (and, when
// asked, the raw samples of chosen metrics) from vigil-server to a
// Prometheus remote-write 1.0 endpoint (VictoriaMetrics, Prometheus with
// --web.enable-remote-write-receiver, Mimir, ...).
//
// Exported names (labels kept: job, node, gpu, ...; timestamps in ms):
//   <metric>:min_1m, <metric>:max_1m, <metric>:avg_1m, <metric>:count_1m
//       one sample per series per minute, stamped with the minute's start;
//       NaN samples are left out (count_1m counts the others); see
//       minute_aggregator.h for when a minute is finished.
//   <metric>  every non-NaN raw sample of a metric matching raw_metrics.
//
// Ingest never waits on the endpoint: frames are folded in under a short
// lock and what is ready waits in a bounded queue; when it is full the
// oldest samples are dropped and counted. A sender thread batches, sends
// and retries (exponential backoff with jitter on network errors, 5xx and
// 429, honouring Retry-After); a request the endpoint refuses with another
// 4xx is dropped and counted, and each distinct refusal is logged once.
#ifndef VIGIL_SERVER_REMOTE_WRITE_REMOTE_WRITE_H_
#define VIGIL_SERVER_REMOTE_WRITE_REMOTE_WRITE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/json_reader.h"
#include "notify/notify.h"
#include "server/frame_observer.h"
#include "server/remote_write/minute_aggregator.h"
#include "server/remote_write/write_request.h"
#include "storage/series_store.h"

namespace vigil {

// The "remote_write" section of the server config. Plain data; copyable.
//   {"url": "http://vm:8428/api/v1/write", "raw_metrics": ["^gpu_xid.*"],
//    "batch_samples": 5000, "flush_seconds": 5,
//    "max_pending_samples": 1000000, "timeout_seconds": 30,
//    "grace_seconds": 10, "retry_base_seconds": 1, "retry_max_seconds": 30,
//    "shutdown_flush_seconds": 5,
//    "bearer_token_file": "/etc/vigil/vm.token"
//    | "basic_auth": {"username": "vigil", "password_file": "/etc/vigil/vm.pw"}}
struct RemoteWriteOptions {
  // Where requests are POSTed (http:// or https://, libcurl). Required.
  std::string url;
  // ECMAScript regexes; a metric name matching one in full has every raw
  // sample sent as well. Empty: rollups only.
  std::vector<std::string> raw_metrics;
  // Most samples per request.
  int batch_samples = 5000;
  // A smaller request goes once its oldest sample has waited this long.
  double flush_seconds = 5;
  // Samples waiting at most (queued and in flight); past it the oldest are
  // dropped (vigil_remote_write_samples_dropped_total{reason="queue_full"}).
  uint64_t max_pending_samples = 1'000'000;
  // Per request.
  double timeout_seconds = 30;
  // How long after a minute's end its late samples still count (see
  // minute_aggregator.h).
  double grace_seconds = 10;
  // Retry delays: exponential from the base, capped, full jitter. A
  // Retry-After is honoured up to 10 times the cap.
  double retry_base_seconds = 1;
  double retry_max_seconds = 30;
  // At Stop(), how long pending samples may take to go out; what is left
  // then is dropped (reason="shutdown").
  double shutdown_flush_seconds = 5;
  // Optional credentials, read once by RemoteWriter::Create: a bearer token
  // file, or basic auth with a password file (not both).
  std::string bearer_token_file;
  std::string basic_auth_username;
  std::string basic_auth_password_file;
};

// OK when `options` can be used; kInvalidArgument listing every problem,
// one per line, each starting with its key path ("remote_write.url: ...").
// Credential files are read later, by RemoteWriter::Create.
absl::Status ValidateRemoteWriteOptions(const RemoteWriteOptions& options);

// Reads the "remote_write" section `section` into `*out`, recording every
// problem in `reader` with its key path ("remote_write.url: required");
// `*out` is set only when the section had no error.
void ParseRemoteWriteSection(const nlohmann::json& section,
                             JsonConfigReader& reader,
                             std::optional<RemoteWriteOptions>* out);

// Ships rollups and chosen raw samples to a remote-write endpoint. OnFrame
// is safe from any number of stream threads and never blocks on the
// network; Start/Stop must be called from one thread.
class RemoteWriter : public FrameObserver {
 public:
  // Checks `options` and reads the credential files. kInvalidArgument for a
  // missing or non-HTTP url, a bad regex or bad limits (naming the key),
  // kNotFound / kInvalidArgument for an unreadable or empty credential
  // file (named). `store` (series keys), `clock` and `transport` are not
  // owned and must outlive the writer.
  static absl::StatusOr<std::unique_ptr<RemoteWriter>> Create(
      const RemoteWriteOptions& options, const SeriesStore* store,
      Clock* clock, Transport* transport);
  // Stops the sender (as Stop()).
  ~RemoteWriter() override;

  // Starts the sender thread. Frames seen before are kept.
  void Start();
  // Sends what is pending for up to shutdown_flush_seconds, drops the rest
  // and the minutes still open, and joins the sender. Idempotent.
  void Stop();

  // Folds the frame's samples into their minutes; queues finished minutes
  // and raw samples of chosen metrics.
  void OnFrame(const FrameView& frame) override;

  // Prometheus text of the vigil_remote_write_* families for /metrics.
  std::string MetricsText() const;

  // Why samples were dropped (label values of ..._samples_dropped_total).
  enum class Drop { kQueueFull, kRejected, kLate, kUnknownSeries, kShutdown, kCount };
  // How a request ended (label values of ..._requests_total).
  enum class Result { kSuccess, kNetworkError, kServerError, kThrottled, kRejected, kCount };

 private:
  // One sample waiting to be sent.
  struct Pending {
    uint32_t id;
    ExportKind kind;
    int64_t ts_ms;
    double value;
  };
  RemoteWriter(const RemoteWriteOptions& options, const SeriesStore* store,
               Clock* clock, Transport* transport, std::vector<std::regex> raw,
               std::vector<std::pair<std::string, std::string>> headers,
               std::string username, std::string password);

  void Run();
  // Queues the rollup fields of `rollups`, dropping the oldest when full.
  void QueueRollups(const std::vector<MinuteRollup>& rollups)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Queue(const Pending& sample) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when the raw samples of `id` are sent (decided once per id).
  bool IsRaw(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes up to batch_samples from the queue and sends them until they are
  // accepted, refused, or (stopping) the shutdown deadline passes; `lock`
  // holds mu_ and is released while encoding, sending and backing off.
  void SendBatch(std::unique_lock<std::mutex>& lock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The request body of `batch`, one TimeSeries per exported series;
  // counts the samples encoded in `*samples` and, in `*unknown`, those of
  // series no longer in the store (left out). Sender thread only.
  std::string Encode(const std::vector<Pending>& batch, size_t* samples,
                     size_t* unknown);
  void CountDrop(Drop reason, uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RemoteWriteOptions options_;
  const SeriesStore* const store_;
  Clock* const clock_;
  Transport* const transport_;
  const std::vector<std::regex> raw_patterns_;
  const std::vector<std::pair<std::string, std::string>> headers_;
  const std::string username_;
  const std::string password_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  MinuteAggregator aggregator_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  // Server time the oldest queued sample was queued (valid when queued).
  double oldest_queued_at_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether each id seen has its raw samples sent.
  absl::flat_hash_map<uint32_t, bool> raw_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<MinuteRollup> scratch_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  double stop_deadline_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_[static_cast<size_t>(Drop::kCount)] ABSL_GUARDED_BY(mu_) = {};
  uint64_t requests_[static_cast<size_t>(Result::kCount)] ABSL_GUARDED_BY(mu_) = {};
  double last_success_ ABSL_GUARDED_BY(mu_) = 0;
  // Refusals already logged, and whether the endpoint is failing now (a
  // change is logged once).
  std::set<std::string> logged_refusals_ ABSL_GUARDED_BY(mu_);
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t request_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Keys of the series sent, by id (sender thread only; node map: Encode
  // holds pointers into it while adding).
  absl::node_hash_map<uint32_t, SeriesKey> keys_;
  std::thread thread_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_REMOTE_WRITE_REMOTE_WRITE_H_
