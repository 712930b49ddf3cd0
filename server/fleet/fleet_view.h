// The latest state of every node and job, kept from frames as they arrive,
// for the web UI's jobs and nodes pages: they must answer for thousands of
// nodes in milliseconds, without reading the store. Holds the newest GPU
// readings per node and, per job, 30 minutes of one-minute aggregates of
// step rate, tokens/s and MFU for sparklines. In memory only: after a
// restart nodes reappear with their next frame. A job that no node runs any
// more is forgotten a while after its last frame, so the view follows the
// jobs of the day, not every job since the server started.
#ifndef VIGIL_SERVER_FLEET_FLEET_VIEW_H_
#define VIGIL_SERVER_FLEET_FLEET_VIEW_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "server/frame_observer.h"
#include "storage/series_store.h"

namespace vigil {

// Newest readings of one GPU; NaN where not reported.
struct GpuReading {
  int gpu = 0;
  double ts = 0;  // frame time of the newest reading
  double power_watts = NAN;
  double temperature_celsius = NAN;
  double sm_clock_mhz = NAN;
  double throttle_reasons = NAN;
  double utilization = NAN;
};

// One node as last heard from.
struct NodeSnapshot {
  std::string node;
  std::string job;
  // The scheduler's id of `job` when the node's agent verified it; empty
  // when `job` is only claimed (proto Frame.verified_job_id).
  std::string verified_job_id;
  double last_frame_ts = 0;  // data time of the newest frame
  std::optional<int64_t> step;
  std::vector<GpuReading> gpus;  // by gpu index
  // Its newest frame came from remote write, not from an agent
  // (FrameView::claimed_node).
  bool claimed = false;
};

// Job-wide training throughput figures.
enum class JobFigure : uint8_t { kStepRate, kTokensPerSecond, kMfu };
inline constexpr int kJobFigures = 3;

// One point of a job's sparkline: bucket start and value (NaN: no data).
struct FigurePoint {
  double ts = 0;
  double value = NAN;
};

// One job as last heard from.
struct JobSnapshot {
  std::string job;
  std::vector<std::string> nodes;  // sorted
  double last_frame_ts = 0;
  std::optional<int64_t> step;
  // Sparklines by JobFigure, oldest first: step rate (steps/s from frame
  // steps), tokens/s summed over nodes, MFU averaged over nodes.
  std::array<std::vector<FigurePoint>, kJobFigures> spark;
  // Store series ids of the nodes' train_tokens_per_second,
  // train_step_time_seconds and train_mfu_ratio (for their baselines).
  std::array<std::vector<SeriesId>, kJobFigures> series;
};

// A job as a node's agent verified it with the scheduler.
struct VerifiedJob {
  std::string job_id;  // the scheduler's id (proto Frame.verified_job_id)
  std::string node;    // a node that runs it
};

struct FleetViewOptions {
  // Sparkline bucket width and how many buckets are kept.
  double bucket_seconds = 60;
  int buckets = 30;
  // A job no node runs any more (its nodes moved to other jobs) leaves the
  // view this many seconds of data time after its newest frame.
  double forget_job_seconds = 86400;
};

// Thread-safe: OnFrame from ingest threads, reads from HTTP threads.
class FleetView : public FrameObserver {
 public:
  // `store` (not owned, must outlive this) names series ids on first sight.
  explicit FleetView(const SeriesStore* store,
                     FleetViewOptions options = FleetViewOptions());

  // Records the frame's node, job, step and the readings it tracks.
  void OnFrame(const FrameView& frame) override;

  // Every node, sorted by name.
  std::vector<NodeSnapshot> Nodes() const;
  // Every job, sorted by name.
  std::vector<JobSnapshot> Jobs() const;
  // One job; nullopt when no frame of it was seen.
  std::optional<JobSnapshot> Job(const std::string& job) const;
  // The scheduler id of `job` and a node whose newest frame runs it with
  // that id verified by the node's agent: `prefer` when it qualifies, else
  // the first by name. Nullopt when no node running `job` verified it.
  std::optional<VerifiedJob> FindVerifiedJob(const std::string& job,
                                             const std::string& prefer) const;
  // True when `node`'s newest frame named it only by a remote-written
  // series' labels (FrameView::claimed_node); false for an agent's node
  // and for nodes never seen.
  bool IsClaimedNode(const std::string& node) const;

 private:
  // What a series id means to the view.
  struct Slot {
    bool resolved = false;  // looked up in the store already
    int8_t kind = -1;       // index into kTracked, -1: not tracked
    bool listed = false;    // in its job's `series` already
    int16_t gpu = -1;
  };
  struct Bucket {
    double start = 0;
    // Per figure: sum and count of samples, and distinct nodes reporting.
    std::array<double, kJobFigures> sum{};
    std::array<int, kJobFigures> count{};
    std::array<int, kJobFigures> nodes{};
    // Step progress within the bucket.
    double first_ts = NAN, last_ts = NAN;
    int64_t first_step = 0, last_step = 0;
  };
  struct Node {
    std::string job;
    std::string verified_job_id;
    bool claimed = false;
    double last_frame_ts = 0;
    std::optional<int64_t> step;
    std::map<int, GpuReading> gpus;
    // Per figure: the bucket start this node last reported into.
    std::array<double, kJobFigures> reported_bucket{NAN, NAN, NAN};
  };
  struct JobState {
    std::deque<Bucket> buckets;
    std::array<std::vector<SeriesId>, kJobFigures> series;
    double last_frame_ts = 0;
    std::optional<int64_t> step;
  };

  Slot Resolve(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bucket of `ts`, opening newer ones as needed; null when `ts` is
  // older than the kept window.
  Bucket* BucketAt(JobState& job, double ts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobSnapshot Snapshot(const std::string& name, const JobState& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the jobs no node runs whose newest frame is older than
  // forget_job_seconds before `now` (data time).
  void ForgetEndedJobs(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SeriesStore* const store_;
  const FleetViewOptions options_;
  mutable std::mutex mu_;
  // By store series id (ids are dense): one lookup per sample, no hashing.
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  // Transparent comparators: a frame's names are looked up without a copy.
  std::map<std::string, Node, std::less<>> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, JobState, std::less<>> jobs_ ABSL_GUARDED_BY(mu_);
  // Data time of the next ForgetEndedJobs pass.
  double next_forget_ts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_FLEET_FLEET_VIEW_H_
