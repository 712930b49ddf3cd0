// Drives a real node: calls every collector on a fixed interval grid, turns
// their readings into one frame per tick and hands it to the FrameSink;
// events a collector notices between ticks go out at once as their own
// frame.
#ifndef VIGIL_AGENT_COLLECT_RUNNER_H_
#define VIGIL_AGENT_COLLECT_RUNNER_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/collector.h"
#include "agent/stream_client.h"
#include "common/clock.h"

namespace vigil::agent {

// How a CollectRunner ticks.
struct CollectRunnerOptions {
  // Seconds between ticks; ticks fall on multiples of it in Unix time.
  double interval_seconds = 1.0;
  // Stop after this many seconds; 0 runs until Stop().
  double duration_seconds = 0;
  // Job of frames while no collector names one. Must be a valid label value.
  std::string idle_job = "idle";
  // Seconds between status lines on stderr; 0 prints none.
  double status_every_seconds = 60;
};

// What one collector did, for logs and the agent's /metrics.
struct CollectorStats {
  std::string name;
  bool running = false;       // Start succeeded (or was never needed)
  std::string start_error;    // why Start failed, when it did
  uint64_t ticks = 0;         // Collect calls
  uint64_t errors = 0;        // Collect calls that returned an error
  uint64_t samples = 0;       // samples added, all ticks
  std::string last_error;     // message of the latest error; "" after an OK
  double last_duration_seconds = 0;  // wall time of the latest Collect
  // Collector::HealthCounters at the time of the snapshot.
  std::vector<std::pair<std::string, double>> counters;
};

// Counters of a CollectRunner.
struct CollectRunnerStats {
  uint64_t ticks = 0;
  uint64_t events = 0;            // event frames sent
  uint64_t samples_refused = 0;   // samples whose series could not register
  size_t series = 0;              // distinct series registered
  std::vector<CollectorStats> collectors;
};

// Feeds collectors into one stream client. Run() blocks; Stop() and stats()
// may be called from any thread. Deliver (EventSink) is thread-safe.
class CollectRunner : public EventSink {
 public:
  // `collectors`, `client` and `clock` are not owned and must outlive the
  // runner; `client` may be null when only CollectNow is used.
  CollectRunner(CollectRunnerOptions options,
                std::vector<Collector*> collectors, FrameSink* client,
                Clock* clock);
  ~CollectRunner() override;

  // Starts the collectors (one that fails to start is reported on stderr
  // and left out), then ticks until Stop() or the duration ends, then stops
  // them. An error only if the client refuses a frame outright.
  absl::Status Run();
  // Makes Run() return soon. Thread-safe.
  void Stop();

  // Starts the collectors not tried yet; one that fails is reported on
  // stderr and left out for good. Run() calls it; --once calls it before
  // CollectNow.
  void StartCollectors();
  // Takes one tick at `ts` from the started collectors and returns it (the
  // job filled in) without sending it. For `vigil-agent --once`.
  Tick CollectNow(double ts);
  // Stops every started collector. Idempotent.
  void StopCollectors();

  // Sends `event` now as its own frame (EventSink).
  void Deliver(Tick event) override;

  // Seq of the last batch enqueued (0 before the first). Thread-safe.
  uint64_t last_seq() const;
  // A snapshot of the counters. Thread-safe.
  CollectRunnerStats stats() const;

 private:
  // Calls every running collector for tick `ts`.
  Tick Collect(double ts);
  // Converts `tick` to a frame and enqueues it.
  absl::Status Send(Tick tick);

  const CollectRunnerOptions options_;
  const std::vector<Collector*> collectors_;
  FrameSink* const client_;
  Clock* const clock_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_job_ ABSL_GUARDED_BY(mu_);
  std::string last_verified_job_id_ ABSL_GUARDED_BY(mu_);
  std::optional<int64_t> last_step_ ABSL_GUARDED_BY(mu_);
  CollectRunnerStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> started_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> tried_ ABSL_GUARDED_BY(mu_);  // Start was called

  // Series ids, shared by ticks and events; sends are serialized by it.
  std::mutex send_mu_;
  absl::flat_hash_map<SeriesKey, uint32_t> ids_ ABSL_GUARDED_BY(send_mu_);
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_COLLECT_RUNNER_H_
