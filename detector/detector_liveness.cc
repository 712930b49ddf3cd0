// Liveness: frame intervals, step progress, node silence and job hang.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "detector/detector_impl.h"

namespace vigil {

using detector_internal::GpuState;
using detector_internal::JobState;
using detector_internal::kNone;
using detector_internal::kNoStep;
using detector_internal::NodeState;

void Detector::Impl::OnFrameTime(NodeState& n, JobState& j, uint32_t node,
                                 const FrameView& frame) {
  const LivenessOptions& lo = opt.liveness;
  if (std::isfinite(n.last_ts)) {
    const double dt = ts - n.last_ts;
    if (dt > 0) {
      // A gap must not inflate the interval it is judged against.
      n.interval =
          std::isnan(n.interval)
              ? dt
              : n.interval + lo.interval_alpha *
                                 (std::min(dt, 3 * n.interval) - n.interval);
    }
  }
  n.last_ts = ts;
  seen = std::max(ts, clock);
  n.last_seen = seen;
  j.last_frame_ts =
      std::isnan(j.last_frame_ts) ? seen : std::max(j.last_frame_ts, seen);
  if (n.silent) {
    n.silent = false;
    Emit(AnomalyKind::kNodeSilent, true, node, kNone, kNone, 0);
  }
  n.step_moved = false;
  if (!frame.step) return;
  const int64_t step_now = *frame.step;
  if (!j.has_steps) {
    j.has_steps = true;
    j.last_progress_ts = seen;
  }
  // Any change counts as progress: a restart from a checkpoint goes back.
  if (n.step != kNoStep && step_now != n.step) {
    n.step_moved = true;
    if (j.hang_raised) {
      j.hang_raised = false;
      Anomaly& a = Emit(AnomalyKind::kJobHang, true, kNone, kNone, kNone,
                        seen - j.last_progress_ts);
      a.job = j.name;
      a.step = step_now;
    } else {
      j.longest_stall_s =
          std::max(j.longest_stall_s, seen - j.last_progress_ts);
    }
    j.last_progress_ts = seen;
  } else if (n.step == kNoStep) {
    n.step_moved = true;
  }
  n.step = step_now;
}

void Detector::Impl::Scan(double now) {
  const LivenessOptions& lo = opt.liveness;
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    NodeState& n = nodes[i];
    if (n.retired || n.silent || !std::isfinite(n.interval)) continue;
    const double limit =
        std::max(lo.silent_intervals * n.interval, lo.min_silence_s);
    const double quiet = now - n.last_seen;
    if (quiet <= limit) continue;
    n.silent = true;
    Anomaly& a = Emit(AnomalyKind::kNodeSilent, false, i, kNone, kNone, quiet);
    a.baseline_mean = n.interval;
    a.score = quiet / n.interval;
    a.detail = absl::StrCat("no frame for ", static_cast<int64_t>(quiet),
                            " s (interval ", n.interval, " s)");
  }
  for (JobState& j : jobs) {
    if (!j.has_steps || j.hang_raised ||
        !(now - j.last_frame_ts <= lo.hang_recent_frame_s)) {
      continue;
    }
    double timeout =
        std::max(lo.hang_timeout_s, lo.hang_stall_factor * j.longest_stall_s);
    if (j.benign_phase_ts >= j.last_progress_ts) {
      timeout = std::max(timeout, lo.hang_benign_phase_max_s);
    }
    const double stalled = now - j.last_progress_ts;
    if (stalled <= timeout) continue;
    j.hang_raised = true;
    // Evidence: a hung collective leaves power near idle and NVLink quiet.
    double power = 0, nvlink = 0;
    int n_power = 0, n_nvlink = 0;
    int64_t step = kNoStep;
    for (uint32_t ni : j.nodes) step = std::max(step, nodes[ni].step);
    for (uint32_t gi : j.gpus) {
      const GpuState& g = gpus[gi];
      if (nodes[g.node].retired) continue;
      if (std::isfinite(g.power)) power += g.power, ++n_power;
      if (std::isfinite(g.nvl_tx)) nvlink += g.nvl_tx, ++n_nvlink;
    }
    Anomaly& a =
        Emit(AnomalyKind::kJobHang, false, kNone, kNone, kNone, stalled);
    a.job = j.name;
    if (step != kNoStep) a.step = step;
    a.baseline_mean = timeout;
    a.score = stalled;
    a.detail =
        absl::StrCat("step stalled ", static_cast<int64_t>(stalled), " s");
    if (n_power > 0) {
      absl::StrAppend(&a.detail, ", mean GPU power ",
                      static_cast<int64_t>(power / n_power), " W");
    }
    if (n_nvlink > 0) {
      absl::StrAppend(&a.detail, ", mean NVLink tx ",
                      static_cast<int64_t>(nvlink / n_nvlink / 1e6), " MB/s");
    }
  }
}

}  // namespace vigil
