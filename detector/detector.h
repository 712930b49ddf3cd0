// Online anomaly detection for GPU training jobs: red lines, per-series
// dynamic baselines, peer comparison, liveness and trend detectors, fed one
// frame at a time. The live server and vigil-replay use it identically:
// time and step come only with the data, so a recorded trace always yields
// the same anomalies.
#ifndef VIGIL_DETECTOR_DETECTOR_H_
#define VIGIL_DETECTOR_DETECTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/series_key.h"
#include "detector/anomaly.h"
#include "detector/frame.h"
#include "detector/options.h"

namespace vigil {

// Counters of what the detector has consumed.
struct DetectorStats {
  int64_t frames = 0;
  int64_t samples = 0;
  // Samples skipped because their id was never registered.
  int64_t unregistered_samples = 0;
  int64_t series = 0;
  int64_t nodes = 0;
  int64_t jobs = 0;
};

// The dynamic baseline of one series as the k-sigma rule sees it now.
struct SeriesBaseline {
  // False for series no detector learns a baseline of (utilization, MFU's
  // fixed threshold, red-line counters): the rest is then meaningless.
  bool learns = true;
  // True once learning ended (learn_steps, or learn_max_s of data).
  bool learned = false;
  // True when the band is in use: learned, or usable early (a provisional
  // band from a short sample, widened), or inherited from the job's (or
  // its family's) earlier run. Mean and sigma are meaningful only then.
  bool usable = false;
  // "learning", "early", "inherited" or "learned".
  const char* source = "learning";
  // Level (median of the learning window, then slowly adapted; a fast
  // EWMA for trending series such as loss) and robust sigma with floors.
  double mean = 0;
  double sigma = 0;
  // The multiple of sigma in use: DetectorOptions::baseline.k_sigma,
  // widened while the baseline has seen little.
  double k_sigma = 3;
  // Counters: the baseline is of the rate per second, not the raw value.
  bool rate = false;
  // Samples the series has had evaluated.
  int64_t evaluated = 0;
  // Learning progress: steps since the series' first learned step (its
  // samples when it has no steps) out of learn_target_steps, and seconds
  // of data out of learn_max_seconds; learning ends at either.
  int64_t learn_progress_steps = 0;
  int64_t learn_target_steps = 1000;
  double learn_progress_seconds = 0;
  double learn_max_seconds = 3600;
};

// What the scheduler says of a job (Detector::SetJobState).
enum class JobRunState : uint8_t {
  kRunning,  // it runs: a job whose nodes all fall silent is unreachable
  kEnded,    // it ended: never a fault
};

// A job's current run as the detector sees it, for the rules' GPU-hours at
// risk.
struct JobContext {
  int nodes = 0;  // nodes running it now
  int gpus = 0;   // their GPUs
  // First frame of the run; its last checkpoint (train_phase or an
  // inferred job-wide dip), NaN when none yet.
  double run_start_ts = 0;
  double last_checkpoint_ts = 0;
  bool ended = false;
};

// All detectors over all jobs. Series state lives in vectors indexed by a
// dense index resolved once per series id, so a frame costs O(samples) with
// no allocation once every series has finished learning.
//
// Not thread-safe: one thread (or one lock) drives an instance. Holds no
// references to its inputs after a call returns.
// The family of a job name under LifecycleOptions::family_pattern (its
// first capture group): the runs of one family share learned profiles, so
// whoever splits jobs across detectors must keep a family together.
// Thread-safe.
class JobFamilyMatcher {
 public:
  // An empty or invalid pattern makes every family "".
  explicit JobFamilyMatcher(const std::string& pattern);
  // The family of `job`, or "" when its name has no run suffix.
  std::string FamilyOf(std::string_view job) const;

 private:
  std::optional<std::regex> re_;
};

// Where a snapshot written in parts (Detector::SaveStatePart) has got to.
// Start from a default one; done() once the last part is written.
struct SnapshotCursor {
  // 0: header; 1: series restored from a snapshot and not registered yet;
  // 2: registered series; 3: profiles, runs and jobs; 4: done.
  int section = 0;
  // Section 1: the ids still to write; section 2: the next dense slot.
  std::vector<uint32_t> pending;
  size_t next = 0;
  // Series of running jobs that learn a baseline and have not learned it
  // yet (in warm-up or learning), counted as the series are written.
  int64_t still_to_learn = 0;
  bool done() const { return section == 4; }
};

class Detector {
 public:
  // Ids are store series ids and should be dense (allocated sequentially):
  // the detector indexes a vector by them. Ids at or above this are
  // rejected.
  static constexpr uint32_t kMaxSeriesId = 1u << 26;

  // `options` should have passed ValidateOptions.
  explicit Detector(const DetectorOptions& options = DetectorOptions());
  // OK when `options` can be used; kInvalidArgument naming the field
  // otherwise (a family_pattern that is not a regex with a group).
  static absl::Status ValidateOptions(const DetectorOptions& options);
  ~Detector();
  Detector(const Detector&) = delete;
  Detector& operator=(const Detector&) = delete;

  // Declares that series `id` is `key`; call before a frame uses `id`. The
  // key's metric selects the detectors; its "gpu" (integer) and "dev"
  // labels localise anomalies; the series belongs to the node and job of
  // the first frame that carries it. Registering an id again with the same
  // key is a no-op. kInvalidArgument if id >= kMaxSeriesId, kAlreadyExists
  // if `id` was registered with a different key.
  absl::Status RegisterSeries(uint32_t id, const SeriesKey& key);

  // Whether `id` has been registered (the server registers ids it has not
  // yet told the detector about, from its store's id -> key map).
  bool HasSeries(uint32_t id) const;

  // Gives counter series `id` the raw `value` it had at data time `ts`,
  // for a process that starts without it (the server primes a series it
  // first sees from its store's last sample): when the series' next frame
  // is later than `ts` and finds no previous value of its own, its
  // increase counts from `value`, so a counter that moved while the
  // server was down (an ECC error during a restart) is seen to move - even
  // when that frame starts the node's run here. Ignored for unregistered
  // ids, gauges and non-finite values; a later call replaces an unused one.
  void PrimeCounter(uint32_t id, double ts, double value);

  // The current baseline of series `id`; nullopt when `id` is not
  // registered.
  std::optional<SeriesBaseline> Baseline(uint32_t id) const;

  // Consumes one frame (one node tick) and appends the anomalies it raised
  // or cleared to `out`. Samples whose id is unregistered are counted in
  // stats() and skipped. Frames of one node must come in `ts` order.
  // Does not check liveness: see AdvanceTime.
  void ProcessFrame(const FrameView& frame, std::vector<Anomaly>* out);

  // Moves detection time to `ts` (a frame time in replay, the server clock
  // live) and appends node_silent / job_hang anomalies to `out`. Cheap to
  // call per frame: it scans at most once per
  // LivenessOptions::check_interval_s of `ts`.
  void AdvanceTime(double ts, std::vector<Anomaly>* out);

  // Tells the detector the scheduler's word on `job` at data time `ts`
  // and appends what follows to `out`: kEnded ends the job on every node
  // (kJobEnded; its conditions end with it), kRunning makes a job whose
  // nodes all stop reporting kJobUnreachable instead of ended. Unknown
  // jobs are ignored.
  void SetJobState(std::string_view job, JobRunState state, double ts,
                   std::vector<Anomaly>* out);

  // Tells the detector that `frame.node` now reports a job another
  // detector watches (the server splits jobs across detection shards), so
  // its current pair here will see no more frames: when `frame.job_end`
  // names the job it ran here, that run ends as with a job_end marker
  // (appending what follows to `out`); otherwise the pair is retired like
  // that of a node that moved to another job (no silence alarm, a pending
  // one cleared). Only `node`, `ts` and `job_end` of `frame` are read. A
  // node unknown here is ignored. `handed_over`: the node's job goes on
  // under another server's watch (a cluster shard took it,
  // docs/SCALING.md); once every node of the job here is handed over, its
  // run ends here without a job_ended anomaly.
  void NodeMovedAway(const FrameView& frame, std::vector<Anomaly>* out,
                     bool handed_over = false);

  // Jobs whose nodes all stopped and that wait for the scheduler's word
  // (LifecycleOptions::await_scheduler_s); empty when that is 0.
  std::vector<std::string> JobsAwaitingScheduler() const;

  // Jobs with a running node (for polling their scheduler state).
  std::vector<std::string> RunningJobs() const;

  // The current run of `job`; nullopt for an unknown job.
  std::optional<JobContext> Context(std::string_view job) const;

  // Writes what the detector has learned (baselines, the samples of those
  // still learning, job and family profiles, runs in progress) to `out`
  // (binary, versioned; detector/detector_state.cc). Never fails today.
  absl::Status SaveState(std::string* out) const;

  // Appends the next part of the same snapshot to `out`, stopping once it
  // has appended about `max_bytes` (a part ends after a whole series), and
  // advances `cursor`; the parts in order are one snapshot. For a snapshot
  // of millions of series that should never be in memory whole: the
  // caller may release its lock and write each part away between calls,
  // and the detector may go on meanwhile. Each series is written as it is
  // when its part is; a series registered between two parts may be left
  // out (it has learned nothing a restart would miss); one that was
  // waiting for its saved state is not. Never fails.
  void SaveStatePart(SnapshotCursor* cursor, size_t max_bytes,
                     std::string* out) const;

  // Takes back a SaveState snapshot: a series registered later (or now)
  // under the same id and key starts from its saved baseline, a run that
  // reports again continues without re-warming. kDataLoss for a corrupt
  // or truncated snapshot, kFailedPrecondition for another format version;
  // nothing is changed then.
  absl::Status RestoreState(std::string_view data);

  // The learned profiles of `job` and of its family (what a new series of
  // the job starts its baseline from), to hand to another detector that
  // takes the job over (a cluster shard, docs/SCALING.md). Binary,
  // versioned; empty of profiles when none was learned yet. Never fails.
  std::string ExportProfiles(std::string_view job) const;
  // Takes profiles from ExportProfiles; a profile already known here is
  // kept. kInvalidArgument / kFailedPrecondition / kDataLoss for data that
  // is not an export, of another version, or corrupt; nothing is changed
  // then.
  absl::Status ImportProfiles(std::string_view data);

  // What has been consumed so far.
  DetectorStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vigil

#endif  // VIGIL_DETECTOR_DETECTOR_H_
