// Internal state of Detector, shared by its .cc files. Not a public API.
#ifndef VIGIL_DETECTOR_DETECTOR_IMPL_H_
#define VIGIL_DETECTOR_DETECTOR_IMPL_H_

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "detector/detector.h"
#include "detector/ew_line_fit.h"
#include "detector/learn_samples.h"
#include "detector/metric_catalog.h"
#include "detector/sustain.h"

namespace vigil {
namespace detector_internal {

// `v` as integer type T, clamped to T's range (NaN gives 0). Readings come
// from agents, and casting a double outside the target's range is
// undefined behaviour.
template <typename T>
T ClampTo(double v) {
  if (!(v == v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::min()))
    return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max()))
    return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

inline constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
inline constexpr int64_t kNoStep = std::numeric_limits<int64_t>::min();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
// Loss-oscillation window (steps).
inline constexpr int kOscWindow = 16;
// Dip starts and loss-scale halvings remembered per node / series.
inline constexpr int kHistory = 8;
// (level, spread) pairs kept per metric of a job profile.
inline constexpr size_t kProfileSamples = 64;

// Extra state of the few series with pattern detectors (loss, loss scale,
// ECC SBE, step time); indexed by SeriesState::aux.
struct SeriesAux {
  // Loss oscillation: ring of the last step-to-step changes.
  double prev = kNaN;
  std::array<float, kOscWindow> diffs{};
  int diff_count = 0;
  double diff_level = kNaN;  // learned median |change|
  std::vector<float> learn_diffs;
  Sustain osc;
  // Loss-scale halvings: positions (steps or samples) of the last ones.
  std::array<int64_t, kHistory> halvings{};
  int halving_count = 0;
  bool thrash_raised = false;
  // ECC SBE: exponentially weighted count of errors.
  double sbe_sum = 0;
  double sbe_first_ts = kNaN;
  double sbe_last_ts = kNaN;
  bool sbe_raised = false;
  // Step time graded as a slowdown (jobs' speed): its own debouncers.
  Sustain slow1, slow2;
  int8_t slow_tier = 0;
};

// The traits of a series not registered (a free slot).
inline const MetricTraits kNoTraits{};

// Where a series' baseline comes from.
enum class Stage : uint8_t {
  kLearning,   // not usable yet
  kEarly,      // usable: provisional statistics of a short sample, with a
               // widened band
  kInherited,  // usable: the job's (or its family's) profile, while its
               // own learning goes on
  kLearned,    // learned: the requirement's band
};

// One series: its traits, its input state and its detector state. Held
// for every series a server watches (286 K at 1,250 nodes): fields are
// ordered by size, and what few series need lives in SeriesAux.
// What a series keeps only while it learns, allocated when it starts and
// freed once it has learned: a learned series, which is what most of a
// fleet's series are once their jobs have run a while, does without these
// 48 bytes (bench/RESULTS.md, "What a long-running server holds").
struct LearnState {
  LearnSamples samples;  // half precision, every stride-th sample
  int64_t seen = 0;      // samples offered, kept or not
  // `seen` when the early statistics were last computed.
  int64_t early_at = 0;
};

struct SeriesState {
  // Shared by the series of one metric name (Detector::Impl::TraitsOf).
  const MetricTraits* traits = &kNoTraits;
  uint32_t id = 0;
  uint32_t node = kNone;  // bound on first frame
  uint32_t gpu = kNone;   // GpuState slot, when labelled with a gpu
  uint32_t aux = kNone;
  // Input: counters keep the previous raw value.
  double prev_raw = kNaN;
  double prev_ts = kNaN;
  double cur = kNaN;  // gauge value, or counter rate per second
  double inc = 0;     // counter increase in this frame
  // Learning and baseline.
  int64_t first_step = kNoStep;
  double learn_start_ts = kNaN;
  int64_t evaluated = 0;
  double raised_ts = kNaN;  // when the baseline condition was raised
  double level = kNaN;
  double spread = 0;
  Sustain sustain;   // baseline, throughput tier 1, grad explosion, MFU
  Sustain sustain2;  // throughput tier 2, grad vanishing
  // While the series learns (learning, early or inherited); none once
  // learned, as most series are most of the time.
  std::unique_ptr<LearnState> learning;
  int32_t gpu_label = -1;  // parsed "gpu" label, -1 when none
  int32_t stride = 1;
  // The band's widening over k_sigma (1 once learned).
  float widen = 1;
  // Red lines (error counters, NaN, row remap).
  int32_t red_calm = 0;
  int32_t nonfinite_run = 0;
  Stage stage = Stage::kLearning;
  int8_t raised_dir = 0;  // +1 high / -1 low; throughput: the tier
  bool red_raised = false;

  bool usable() const { return stage != Stage::kLearning; }
  bool learned() const { return stage == Stage::kLearned; }
};

// One XID code's condition on one GPU: a storm of thousands is one
// condition with a count and a rate.
struct XidCondition {
  int code = -1;  // -1: unknown (no gpu_xid_last)
  double count = 0;
  double first_ts = 0;
  double last_ts = 0;
  double reported = 0;  // count at the last raise / update
  int32_t calm = 0;
  bool raised = false;
};

// A peer comparison of one GPU (power, clock or NVLink traffic): its
// difference from the job's median, instantaneous and averaged.
struct PeerTrack {
  double last = kNaN;     // the previous residual
  double average = kNaN;  // EWMA of the residual
  // The GPU's usual residual (its offset among its peers), learned on calm
  // samples; a fall of the threshold from it is a fault too.
  double normal = kNaN;
  int32_t normal_samples = 0;
  int32_t samples = 0;
  Sustain sustain;
};

// A job's sample-to-sample noise of one peer residual: an EWMA of its
// |change| and how many changes it has seen (a young estimate is no
// judge of what is noise).
struct PeerNoise {
  double mean = kNaN;
  int32_t updates = 0;
};

// One GPU of one node.
struct GpuState {
  uint32_t node = kNone;
  int index = -1;
  int64_t seen_frame = -1;  // node frame number it last appeared in
  int64_t last_gpu_frame = 0;
  int64_t used_frame = -1, reserved_frame = -1, allocated_frame = -1;
  bool missing = false;
  bool has_used_series = false;
  double last_ts = kNaN;
  double power = kNaN, clock = kNaN, throttle = kNaN, util = kNaN;
  double nvl_tx = kNaN, nvl_rx = kNaN;
  double mem_used = kNaN, mem_total = kNaN;
  double reserved = kNaN, allocated = kNaN, xid_last = kNaN;
  PeerTrack power_peer, clock_peer, nvlink_peer;
  bool peer_ok = false;  // its last reading may be compared with peers
  Sustain throttle_sustain, oom, frag;
  EwLineFit mem_fit;
  double mem_fit_start = kNaN;
  std::vector<XidCondition> xids;
};

// One (job, node) pair: one node's part in one run of a job.
struct NodeState {
  std::string name;
  uint32_t job = kNone;
  bool free = false;     // slot on the free list
  bool retired = false;  // the node now reports another job
  bool handed_over = false;  // retired: its job moved to another server
  bool ended = false;    // the job ended on this node
  bool silent = false;
  bool silent_idle = false;  // raised as kIdleNodeSilent
  double end_ts = kNaN;
  int64_t end_step = kNoStep;
  double last_ts = kNaN;    // data time of the last frame (intervals)
  double last_seen = kNaN;  // detection time it was processed (silence)
  double interval = kNaN;
  int64_t frames = 0;
  int64_t gpu_frames = 0;
  bool any_gpu = false;   // this frame carried a gpu-labelled sample
  bool core_gpu = false;  // ... of a core GPU metric (power, temperature)
  int64_t step = kNoStep;
  bool step_moved = false;
  int phase = -1;  // train_phase in this frame, -1 when absent
  bool fp16 = false;
  // The current run on this node: its first frame and step; re-warm lasts
  // until both LifecycleOptions bounds have passed.
  double run_start_ts = kNaN;
  int64_t run_start_step = kNoStep;
  bool rewarm = false;
  // Inferred dips and benign state.
  double busy = kNaN;
  int busy_frames = 0;
  bool in_dip = false;
  double dip_start_ts = 0;
  // The node's median GPU power in its previous frame, and whether this
  // frame's moved by more than PhaseOptions::transient_fraction of its busy
  // level (a ramp).
  double prev_median_power = kNaN;
  bool transient = false;
  // This frame's median power minus the previous one's: the job-wide drift
  // since the peer median was taken, as this node saw it.
  double power_shift = kNaN;
  int grace = 0;
  bool warmup = false;
  bool benign = false;
  // train_dataloader_wait_seconds: time-weighted EWMA (TrendOptions::
  // stall_dl_tau_s) and the time of its last sample.
  double dl_mean = kNaN;
  double dl_ts = kNaN;
  bool has_tokens = false;  // reports train_tokens_per_second
  std::vector<uint32_t> gpus;
  std::vector<uint32_t> series;  // dense indices bound to this pair
  // Periodic stall: starts of the last dips.
  std::array<double, kHistory> dip_ts{};
  std::array<int64_t, kHistory> dip_step{};
  int dips = 0;
};

// The scheduler's word on a job (Detector::SetJobState).
enum class SchedulerView : uint8_t { kUnknown, kRunning, kEnded };

// One job: its nodes and GPUs, peer medians, step progress.
struct JobState {
  std::string name;
  std::string family;  // "" when the name has no run suffix
  bool free = false;
  absl::flat_hash_map<std::string, uint32_t> nodes_by_name;
  std::vector<uint32_t> nodes;
  std::vector<uint32_t> gpus;
  int64_t frames_since_peers = 0;
  // Live nodes (neither retired nor ended): the peer medians are computed
  // again after that many frames, once a round. Counted again only when
  // Impl::run_state_changes has moved since `live_nodes_at` (a 1,250-node
  // job would otherwise visit every node for each node's frame).
  int64_t live_nodes = 0;
  uint64_t live_nodes_at = ~uint64_t{0};
  double med_power = kNaN, med_clock = kNaN, med_nvlink = kNaN;
  int n_power = 0, n_clock = 0, n_nvlink = 0;
  // Sample-to-sample noise of the residuals, per metric.
  PeerNoise noise_power, noise_clock, noise_nvlink;
  bool has_steps = false;
  // The run's step has moved at least once (before that, a slow first step
  // - compiling, loading, NCCL setup - is not a hang).
  bool progressed = false;
  bool hang_raised = false;
  double last_progress_ts = kNaN;
  double last_frame_ts = kNaN;
  double longest_stall_s = 0;
  double benign_phase_ts = -kInf;
  // The run: its first frame, its last checkpoint (train_phase or an
  // inferred dip), its largest node count.
  double run_start_ts = kNaN;
  double last_checkpoint_ts = kNaN;
  int peak_nodes = 0;
  bool ended = false;
  double end_ts = kNaN;
  // Scheduler: its last word and when; since when an inferred end waits.
  SchedulerView scheduler = SchedulerView::kUnknown;
  double scheduler_ts = -kInf;
  double awaiting_since = kNaN;
  bool unreachable_raised = false;
  // Periodic stall, raised once per job on the culprit node (kNone:
  // job-wide); the latest dip of any of its nodes keeps it alive.
  bool stall_raised = false;
  uint32_t stall_node = kNone;
  double stall_period_s = 0;
  double last_dip_ts = kNaN;
};

// Learned baselines of a job (and of its family), kept after its nodes
// are forgotten so that a resumed run or a continuation starts from them.
struct ProfileEntry {
  std::vector<std::pair<float, float>> samples;  // (level, spread)
  size_t next = 0;  // ring position once full
};
struct Profile {
  int nodes = 0;  // the node count of the run that learned it
  absl::flat_hash_map<std::string, ProfileEntry> by_metric;
  // Data time of the last Forget pass that found a run of it running
  // (runs learn into profiles and start from them only while running;
  // LifecycleOptions::forget_profile_s); NaN until the first pass after it
  // was made, restored or imported. Not in snapshots.
  double used_ts = kNaN;
};

// Strings that many holders share, each kept once with a count of its
// holders; an id is reused once its count falls to zero. Not thread-safe.
class StringInterner {
 public:
  // The id of `s`, its count raised by one.
  uint32_t Add(std::string_view s);
  // Lowers the count of `id` (one Add's); at zero the string is freed.
  void Release(uint32_t id);
  // The string of a live id.
  std::string_view Get(uint32_t id) const { return *strings_[id]; }

 private:
  std::vector<std::unique_ptr<std::string>> strings_;  // by id; null: free
  std::vector<uint32_t> counts_;
  std::vector<uint32_t> free_;
  absl::flat_hash_map<absl::string_view, uint32_t> ids_;  // views of strings_
};

// A series' key as two interned parts (Detector::Impl::SetKey): its
// metric and labels but job and node (a few hundred shapes across a
// fleet), and those two labels (one per job and node). kNone: a free slot.
struct KeyParts {
  uint32_t shape = kNone;
  uint32_t scope = kNone;
};

}  // namespace detector_internal

// Everything Detector owns; see detector.cc, detector_baseline.cc,
// detector_gpu.cc, detector_liveness.cc.
struct Detector::Impl {
  explicit Impl(const DetectorOptions& o);

  // detector.cc
  uint32_t NodeFor(std::string_view job, std::string_view node);
  // Makes pair `idx` its node's current pair (retiring the previous one)
  // and starts a run on it when it was not running. A node that came
  // straight from its previous pair (still reporting, not handed to another
  // server) carries its error counters over (CarryNodeErrors).
  void Activate(uint32_t idx, const FrameView& frame);
  // Activate without the carry.
  void ActivatePair(uint32_t idx, const FrameView& frame);
  // Keeps the last values of pair `from`'s error counters (before `ts`) as
  // carry_values of pair `to`, and notes them in carried_counters for
  // those of `to`'s series already bound.
  void CarryNodeErrors(uint32_t from, uint32_t to, double ts);
  // Notes in carried_counters the carry_values entry of series `dense`
  // when it is an error counter whose own last value is older.
  void TakeCarry(uint32_t dense);
  // The series' key without its job: the same for a node's counter in
  // every job.
  std::string NodeWideKey(uint32_t dense) const;
  void StartRun(detector_internal::NodeState& n,
                detector_internal::JobState& j, const FrameView& frame);
  // Starts node `n`'s re-warm at time `at` and step `at_step` (kNoStep when
  // none): a new run, or a restart in place from a checkpoint. What the
  // process rebuilds (its memory working set, its loss trend) starts afresh.
  void BeginRewarm(detector_internal::NodeState& n, double at, int64_t at_step);
  void Bind(detector_internal::SeriesState& s, uint32_t node);
  void Ingest(detector_internal::SeriesState& s, uint32_t node, double x);
  void UpdatePhase(detector_internal::NodeState& n,
                   detector_internal::JobState& j);
  void Evaluate(detector_internal::SeriesState& s, uint32_t dense);
  void RedLines(detector_internal::SeriesState& s, uint32_t dense, double x);
  void Xid(detector_internal::SeriesState& s, uint32_t dense);
  // Appends an anomaly stamped with the current frame (or scan) context.
  Anomaly& Emit(AnomalyKind kind, bool cleared, uint32_t node, uint32_t gpu,
                uint32_t dense, double value);

  // detector_baseline.cc
  // Counts sample `x` of `s` and learns from it while `s` learns; true
  // when a band is in use (learned, early or inherited).
  bool Learn(detector_internal::SeriesState& s, double x) {
    if (s.learned()) {  // the common case, kept inline
      ++s.evaluated;
      return true;
    }
    return LearnSample(s, x);
  }
  bool LearnSample(detector_internal::SeriesState& s, double x);
  void Adapt(detector_internal::SeriesState& s, double x, bool bad);
  // The series' sigma with its floors.
  double Sigma(const detector_internal::SeriesState& s) const {
    const double rel = s.traits->sigma_floor_rel >= 0
                           ? s.traits->sigma_floor_rel
                           : opt.baseline.sigma_floor_rel;
    const double a = s.spread > s.traits->sigma_floor ? s.spread
                                                     : s.traits->sigma_floor;
    const double b = rel * (s.level < 0 ? -s.level : s.level);
    const double m = a > b ? a : b;
    return m > 1e-12 ? m : 1e-12;
  }
  void Baseline(detector_internal::SeriesState& s, uint32_t dense, double x);
  void Throughput(detector_internal::SeriesState& s, uint32_t dense, double x);
  void StepSlowdown(detector_internal::SeriesState& s, uint32_t dense,
                    double x);
  void GradNorm(detector_internal::SeriesState& s, uint32_t dense, double x);
  void LossPattern(detector_internal::SeriesState& s, uint32_t dense, double x);
  void LossScale(detector_internal::SeriesState& s, uint32_t dense, double x);
  void EccSbe(detector_internal::SeriesState& s, uint32_t dense);
  void Mfu(detector_internal::SeriesState& s, uint32_t dense, double x);
  // Starts `s` from its job's or family's profile when one fits.
  void Inherit(detector_internal::SeriesState& s);
  // Folds the learned baseline of `s` into its job's and family's profile.
  void Contribute(const detector_internal::SeriesState& s);
  // Forgets the learned state of `s`: it learns again.
  void Relearn(detector_internal::SeriesState& s);

  // detector_gpu.cc
  void CheckGpus(detector_internal::NodeState& n,
                 detector_internal::JobState& j, uint32_t node);
  void RecomputePeers(detector_internal::JobState& j);
  // Compares GPU `gpu` with its peers: power and clock with the job's
  // medians, NVLink traffic with `node_nvlink`, the median of its node's
  // frame over `node_nvlink_peers` GPUs (the job's with too few).
  void CheckPeers(detector_internal::GpuState& g,
                  detector_internal::JobState& j, uint32_t gpu,
                  double node_nvlink, int node_nvlink_peers);
  void CheckOom(detector_internal::GpuState& g, uint32_t gpu);
  void CheckFragmentation(detector_internal::GpuState& g, uint32_t gpu);
  void RecordDip(detector_internal::NodeState& n,
                 detector_internal::JobState& j);
  // The node of `j` whose dataloader wait stands out against the median of
  // the others (returned in `peer_median`); kNone when none does.
  uint32_t StallCulprit(const detector_internal::JobState& j,
                        double* peer_median);

  // detector_state.cc: the state of series `dense` from a snapshot's
  // record; false (nothing changed) when it does not fit its key.
  bool ApplySeries(uint32_t dense, std::string_view blob);
  // detector_state.cc: whether slot `dense` holds a live series whose state
  // a snapshot keeps; its snapshot record, and the snapshot's sections after
  // the series (profiles, runs, jobs), appended to `out`.
  bool InSnapshot(uint32_t dense) const;
  // detector_state.cc: whether slot `dense` holds a live series of a node
  // running a job that learns a baseline and has not learned it yet (in
  // warm-up or learning).
  bool StillToLearn(uint32_t dense) const;
  void AppendSeriesRecord(uint32_t dense, std::string* out) const;
  void AppendSnapshotRest(std::string* out) const;
  // A run or job of a snapshot, applied when it next reports.
  struct PendingRun {
    int64_t step = detector_internal::kNoStep;
    int64_t run_start_step = detector_internal::kNoStep;
    double interval = detector_internal::kNaN;
    double busy = detector_internal::kNaN;
    double run_start_ts = detector_internal::kNaN;
    int32_t busy_frames = 0;
    bool rewarm = false;
  };
  struct PendingJob {
    double run_start_ts = detector_internal::kNaN;
    double last_checkpoint_ts = detector_internal::kNaN;
    double longest_stall_s = 0;
  };

  // detector_liveness.cc
  void OnFrameTime(detector_internal::NodeState& n,
                   detector_internal::JobState& j, uint32_t node,
                   const FrameView& frame);
  void Scan(double ts);
  // Silence, ends and unreachability of one job at detection time `now`.
  void ScanJob(uint32_t job, double now);
  void ScanHang(detector_internal::JobState& j, double now);
  // Ends the job on pair `idx` at `ts` (its step `step`): forgets its
  // raised conditions (the job's incidents resolve on kJobEnded).
  void EndPair(uint32_t idx, double ts, int64_t step);
  // Ends every running pair of `job` and raises kJobEnded once.
  void EndJob(uint32_t job, double ts, std::string_view how, bool quiet = false);
  // Raises kJobEnded when no pair of `job` runs any more.
  // `quiet`: the job moved to another server; no job_ended anomaly.
  void MaybeJobEnded(uint32_t job, double ts, std::string_view how, bool quiet = false);
  // Frees the state of pairs ended long ago and the profiles no run has
  // used for forget_profile_s.
  void Forget(double now);
  void FreePair(uint32_t idx);

  const DetectorOptions opt;
  std::optional<std::regex> family_re;
  std::vector<uint32_t> dense_of_id;
  std::vector<detector_internal::SeriesState> series;
  // By dense index: the series' key in two interned parts, 8 bytes a
  // series where its encoded key took ~110 (bench/RESULTS.md, "Where a
  // series' memory goes").
  detector_internal::StringInterner key_shapes, key_scopes;
  std::vector<detector_internal::KeyParts> keys;
  // Makes `key` the key of slot `dense` (free, or its key cleared). A key
  // whose labels are sorted by name (a normalized one, as the store's) is
  // split into its job and node labels and the rest; any other is kept
  // whole, so that KeyOf gives back exactly what was set.
  void SetKey(uint32_t dense, const SeriesKey& key);
  // Frees the key of slot `dense`.
  void ClearKey(uint32_t dense);
  // The key of series `dense`; an empty key for a free slot.
  SeriesKey KeyOf(uint32_t dense) const;
  std::vector<uint32_t> free_series;
  std::vector<detector_internal::SeriesAux> aux;
  std::vector<uint32_t> free_aux;
  // The traits of each metric name seen, one copy for all its series
  // (stable addresses: SeriesState::traits points here).
  absl::node_hash_map<std::string, MetricTraits> traits_by_metric;
  std::vector<detector_internal::NodeState> nodes;
  std::vector<uint32_t> free_nodes;
  std::vector<detector_internal::GpuState> gpus;
  std::vector<uint32_t> free_gpus;
  std::vector<detector_internal::JobState> jobs;
  std::vector<uint32_t> free_jobs;
  absl::flat_hash_map<std::string, uint32_t> job_by_name;
  absl::flat_hash_map<std::string, uint32_t> node_by_name;  // current pair
  absl::flat_hash_map<std::string, detector_internal::Profile> profiles;
  // From a restored snapshot, until the series, run or job reports again:
  // series records by id, runs by "job\0node", jobs by name.
  absl::flat_hash_map<uint32_t, std::string> pending_series;
  // Counter values given by PrimeCounter, by dense index, until the
  // series' next finite sample: (data time, raw value).
  absl::flat_hash_map<uint32_t, std::pair<double, double>> primed_counters;
  // The same from the node's previous job (CarryNodeErrors); a lower first
  // sample is a new starting point, not a reset.
  absl::flat_hash_map<uint32_t, std::pair<double, double>> carried_counters;
  // The pair that came straight from another job most recently, and that
  // job's last error counter values by NodeWideKey: (data time, value).
  uint32_t carry_pair = detector_internal::kNone;
  absl::flat_hash_map<std::string, std::pair<double, double>> carry_values;
  absl::flat_hash_map<std::string, PendingRun> pending_runs;
  absl::flat_hash_map<std::string, PendingJob> pending_jobs;
  // When Forget first saw restored state waiting (NaN: none seen yet since
  // the last restore). What has not reported again forget_ended_s later
  // is dropped: a series of a job that ended while the server was down
  // would otherwise wait in memory, and in every snapshot, for ever.
  double pending_since = detector_internal::kNaN;
  std::vector<uint32_t> touched;
  std::vector<double> scratch;
  std::vector<uint32_t> scratch_nodes;
  double next_scan = -detector_internal::kInf;
  double next_forget = -detector_internal::kInf;
  // The latest AdvanceTime: detection time. Liveness judges a frame by
  // max(its ts, clock), so frames an agent resends after an outage, which
  // carry old timestamps, count as signs of life when they arrive.
  double clock = -detector_internal::kInf;
  // max(ts, clock) for the frame being processed.
  double seen = 0;
  DetectorStats stats;
  // Moves whenever a node's pair becomes or stops being live (retired or
  // ended set or cleared): JobState::live_nodes is counted again then.
  uint64_t run_state_changes = 0;
  // Context of the call in progress.
  std::vector<Anomaly>* out = nullptr;
  double ts = 0;
  std::optional<int64_t> step;
  uint32_t cur_node = detector_internal::kNone;
};

namespace detector_internal {
// `s` as an absl::string_view (Debian's Abseil does not alias
// std::string_view).
absl::string_view AbslView(std::string_view s);
// Median of `v` (reordered); NaN when empty.
double MedianInPlace(std::vector<double>& v);
// Median and 1.4826 x MAD of `v` (reordered), with a mean-absolute-
// deviation fallback when more than half the values are equal.
void RobustStats(std::vector<double>& v, double* median, double* sigma);
// The factor by which a k-sigma band learned from `n_eff` effective
// samples is widened: a Student-t prediction interval (Cornish-Fisher),
// with the MAD's efficiency in the degrees of freedom; 1 for large n.
double BandWidening(double k, double n_eff);
}  // namespace detector_internal

}  // namespace vigil

#endif  // VIGIL_DETECTOR_DETECTOR_IMPL_H_
