// The seam between what the agent reads on a node (GPUs through NVML, RDMA
// NICs and disks through sysfs and /proc, the training process through its
// socket) and what it streams. Each source is a Collector; the agent calls
// every enabled collector once per tick and sends what they add as one
// frame. Series names follow REQUIREMENTS.md "Metric catalogue".
#ifndef VIGIL_AGENT_COLLECTOR_H_
#define VIGIL_AGENT_COLLECTOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/series_key.h"

namespace vigil::agent {

// One reading of one series. Counters (names ending in _total) carry the
// cumulative value since the source started counting, not an increment.
struct Sample {
  SeriesKey key;
  double value = 0;
};

// The readings of one tick, filled in by the collectors in turn.
struct Tick {
  // Unix seconds the tick stands for; every sample shares it.
  double ts = 0;
  std::vector<Sample> samples;
  // The job running on the node and the training step it is on, set by the
  // collector that knows them (the training endpoint); empty / unset when
  // no collector does.
  std::string job;
  std::optional<int64_t> step;
  // The scheduler's id of `job` when every source of the claim was checked
  // with the scheduler (agent/job_identity.h); empty: `job` is only claimed.
  std::string verified_job_id;
  // Set on the first tick after a job ended on this node (its ranks left,
  // or the node's job changed): which job, its last step, why.
  struct JobEnd {
    std::string job;
    std::optional<int64_t> step;
    std::string reason;
  };
  std::optional<JobEnd> job_end;

  // Appends `metric` with `labels` (any order) and `value`.
  void Add(std::string metric, std::vector<Label> labels, double value) {
    samples.push_back(Sample{SeriesKey{std::move(metric), std::move(labels)},
                             value});
  }
};

// Receives readings a collector notices between ticks (an XID error, an
// uncorrectable ECC error) so they are sent at once, as their own frame,
// instead of waiting for the next tick. Implementations are thread-safe.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Sends `event` (its ts, samples; job and step are filled in by the sink
  // when empty) as soon as possible. Never blocks on the network.
  virtual void Deliver(Tick event) = 0;
};

// One source of readings. Collect is called from one thread at a time; a
// collector that runs threads of its own (event waiters, a socket server)
// starts them in Start and joins them in Stop.
class Collector {
 public:
  virtual ~Collector() = default;
  // Short name used in logs, the agent's /metrics and the config
  // ("nvml", "infiniband", "disk", "cpu", "training").
  virtual std::string_view name() const = 0;
  // Starts background work; events go to `events` (not owned; outlives the
  // collector's Stop). An error means the collector cannot run at all (no
  // library, no device, socket in use); the agent then reports it and goes
  // on without it. The default does nothing.
  virtual absl::Status Start(EventSink* events) {
    (void)events;
    return absl::OkStatus();
  }
  // Appends the readings of `tick->ts` to `tick`. Sources that are missing
  // or failing in part (one GPU lost, one counter file unreadable) are
  // skipped and described in the returned status, which the agent logs and
  // counts; the samples added are still sent.
  virtual absl::Status Collect(Tick* tick) = 0;
  // Stops background work. Idempotent; the default does nothing.
  virtual void Stop() {}
  // The collector's own counters for the agent's /metrics, as (name,
  // value) pairs exported as vigil_agent_<collector>_<name>, e.g.
  // {"lines_rejected_total", 3}. Thread-safe. The default has none.
  virtual std::vector<std::pair<std::string, double>> HealthCounters() const {
    return {};
  }
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_COLLECTOR_H_
