// Internal state of Detector, shared by its .cc files. Not a public API.
#ifndef VIGIL_DETECTOR_DETECTOR_IMPL_H_
#define VIGIL_DETECTOR_DETECTOR_IMPL_H_

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "detector/detector.h"
#include "detector/ew_line_fit.h"
#include "detector/metric_catalog.h"
#include "detector/sustain.h"

namespace vigil {
namespace detector_internal {

inline constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
inline constexpr int64_t kNoStep = std::numeric_limits<int64_t>::min();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
// Loss-oscillation window (steps).
inline constexpr int kOscWindow = 16;
// Dip starts and loss-scale halvings remembered per node / series.
inline constexpr int kHistory = 8;

// Extra state of the few series with pattern detectors (loss, loss scale,
// ECC SBE); indexed by SeriesState::aux.
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
};

// One series: its traits, its input state and its detector state.
struct SeriesState {
  MetricTraits traits;
  uint32_t id = 0;
  uint32_t node = kNone;  // bound on first frame
  uint32_t gpu = kNone;   // GpuState slot, when labelled with a gpu
  uint32_t aux = kNone;
  int gpu_label = -1;  // parsed "gpu" label, -1 when none
  // Input: counters keep the previous raw value.
  double prev_raw = kNaN;
  double prev_ts = kNaN;
  double cur = kNaN;  // gauge value, or counter rate per second
  double inc = 0;     // counter increase in this frame
  // Learning and baseline.
  int64_t first_step = kNoStep;
  int64_t evaluated = 0;
  int64_t learn_seen = 0;
  int32_t stride = 1;
  bool learned = false;
  int8_t raised_dir = 0;  // +1 high / -1 low; throughput: the tier
  double level = kNaN;
  double spread = 0;
  Sustain sustain;   // baseline, throughput tier 1, grad explosion, MFU
  Sustain sustain2;  // throughput tier 2, grad vanishing
  // Red lines (error counters, NaN, row remap).
  bool red_raised = false;
  int32_t red_calm = 0;
  int32_t nonfinite_run = 0;
  std::vector<float> learn;
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
  double power = kNaN, clock = kNaN, throttle = kNaN;
  double nvl_tx = kNaN, nvl_rx = kNaN;
  double mem_used = kNaN, mem_total = kNaN;
  double reserved = kNaN, allocated = kNaN, xid_last = kNaN;
  Sustain power_low, clock_low, nvlink_low, throttle_sustain, oom, frag;
  EwLineFit mem_fit;
  double mem_fit_start = kNaN;
};

// One (job, node) pair.
struct NodeState {
  std::string name;
  uint32_t job = kNone;
  bool retired = false;  // the node now reports another job
  bool silent = false;
  double last_ts = kNaN;    // data time of the last frame (intervals)
  double last_seen = kNaN;  // detection time it was processed (silence)
  double interval = kNaN;
  int64_t frames = 0;
  int64_t gpu_frames = 0;
  bool any_gpu = false;  // this frame carried a gpu-labelled sample
  int64_t step = kNoStep;
  bool step_moved = false;
  int phase = -1;  // train_phase in this frame, -1 when absent
  bool fp16 = false;
  // Inferred dips and benign state.
  double busy = kNaN;
  int busy_frames = 0;
  bool in_dip = false;
  double dip_start_ts = 0;
  int grace = 0;
  bool warmup = false;
  bool benign = false;
  // train_dataloader_wait_seconds: time-weighted EWMA (TrendOptions::
  // stall_dl_tau_s) and the time of its last sample.
  double dl_mean = kNaN;
  double dl_ts = kNaN;
  std::vector<uint32_t> gpus;
  // Periodic stall: starts of the last dips.
  std::array<double, kHistory> dip_ts{};
  std::array<int64_t, kHistory> dip_step{};
  int dips = 0;
};

// One job: its nodes and GPUs, peer medians, step progress.
struct JobState {
  std::string name;
  absl::flat_hash_map<std::string, uint32_t> nodes_by_name;
  std::vector<uint32_t> nodes;
  std::vector<uint32_t> gpus;
  int64_t frames_since_peers = 0;
  double med_power = kNaN, med_clock = kNaN, med_nvlink = kNaN;
  int n_power = 0, n_clock = 0, n_nvlink = 0;
  bool has_steps = false;
  bool hang_raised = false;
  double last_progress_ts = kNaN;
  double last_frame_ts = kNaN;
  double longest_stall_s = 0;
  double benign_phase_ts = -kInf;
  // Periodic stall, raised once per job on the culprit node (kNone:
  // job-wide); the latest dip of any of its nodes keeps it alive.
  bool stall_raised = false;
  uint32_t stall_node = kNone;
  double stall_period_s = 0;
  double last_dip_ts = kNaN;
};

}  // namespace detector_internal

// Everything Detector owns; see detector.cc, detector_gpu.cc,
// detector_liveness.cc.
struct Detector::Impl {
  explicit Impl(const DetectorOptions& o) : opt(o) {}

  // detector.cc
  uint32_t NodeFor(std::string_view job, std::string_view node);
  void Bind(detector_internal::SeriesState& s, uint32_t node);
  void Ingest(detector_internal::SeriesState& s, uint32_t node, double x);
  void UpdatePhase(detector_internal::NodeState& n,
                   detector_internal::JobState& j);
  void Evaluate(detector_internal::SeriesState& s, uint32_t dense);
  void RedLines(detector_internal::SeriesState& s, uint32_t dense, double x);
  bool Learn(detector_internal::SeriesState& s, double x);
  void Adapt(detector_internal::SeriesState& s, double x, bool bad);
  double Sigma(const detector_internal::SeriesState& s) const;
  void Baseline(detector_internal::SeriesState& s, uint32_t dense, double x);
  void Throughput(detector_internal::SeriesState& s, uint32_t dense, double x);
  void GradNorm(detector_internal::SeriesState& s, uint32_t dense, double x);
  void LossPattern(detector_internal::SeriesState& s, uint32_t dense, double x);
  void LossScale(detector_internal::SeriesState& s, uint32_t dense, double x);
  void EccSbe(detector_internal::SeriesState& s, uint32_t dense);
  void Mfu(detector_internal::SeriesState& s, uint32_t dense, double x);
  // Appends an anomaly stamped with the current frame (or scan) context.
  Anomaly& Emit(AnomalyKind kind, bool cleared, uint32_t node, uint32_t gpu,
                uint32_t dense, double value);

  // detector_gpu.cc
  void CheckGpus(detector_internal::NodeState& n,
                 detector_internal::JobState& j, uint32_t node);
  void RecomputePeers(detector_internal::JobState& j);
  void CheckPeers(detector_internal::GpuState& g,
                  const detector_internal::JobState& j, uint32_t gpu);
  void CheckOom(detector_internal::GpuState& g, uint32_t gpu);
  void CheckFragmentation(detector_internal::GpuState& g, uint32_t gpu);
  void RecordDip(detector_internal::NodeState& n,
                 detector_internal::JobState& j);
  // The node of `j` whose dataloader wait stands out against the median of
  // the others (returned in `peer_median`); kNone when none does.
  uint32_t StallCulprit(const detector_internal::JobState& j,
                        double* peer_median);

  // detector_liveness.cc
  void OnFrameTime(detector_internal::NodeState& n,
                   detector_internal::JobState& j, uint32_t node,
                   const FrameView& frame);
  void Scan(double ts);

  const DetectorOptions opt;
  std::vector<uint32_t> dense_of_id;
  std::vector<detector_internal::SeriesState> series;
  std::vector<SeriesKey> keys;  // by dense index
  std::vector<detector_internal::SeriesAux> aux;
  std::vector<detector_internal::NodeState> nodes;
  std::vector<detector_internal::GpuState> gpus;
  std::vector<detector_internal::JobState> jobs;
  absl::flat_hash_map<std::string, uint32_t> job_by_name;
  absl::flat_hash_map<std::string, uint32_t> node_by_name;  // current pair
  std::vector<uint32_t> touched;
  std::vector<double> scratch;
  double next_scan = -detector_internal::kInf;
  // The latest AdvanceTime: detection time. Liveness judges a frame by
  // max(its ts, clock), so frames an agent resends after an outage, which
  // carry old timestamps, count as signs of life when they arrive.
  double clock = -detector_internal::kInf;
  // max(ts, clock) for the frame being processed.
  double seen = 0;
  DetectorStats stats;
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
}  // namespace detector_internal

}  // namespace vigil

#endif  // VIGIL_DETECTOR_DETECTOR_IMPL_H_
