// Per-GPU detectors: missing GPUs, throttle bits, OOM forecast,
// fragmentation, peer comparison; and periodic-stall dips per node.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "detector/detector_impl.h"

namespace vigil {

using detector_internal::ClampTo;
using detector_internal::GpuState;
using detector_internal::JobState;
using detector_internal::kHistory;
using detector_internal::kInf;
using detector_internal::kNaN;
using detector_internal::kNone;
using detector_internal::kNoStep;
using detector_internal::NodeState;
using detector_internal::PeerTrack;

namespace {

// NVLink traffic (tx + rx, bytes/s) of `g`; NaN when neither is known.
double NvlinkRate(const GpuState& g) {
  const bool tx = std::isfinite(g.nvl_tx), rx = std::isfinite(g.nvl_rx);
  if (!tx && !rx) return kNaN;
  return (tx ? g.nvl_tx : 0) + (rx ? g.nvl_rx : 0);
}

}  // namespace

void Detector::Impl::CheckGpus(NodeState& n, JobState& j, uint32_t node) {
  const RedLineOptions& ro = opt.red_line;
  // Only frames with the node's core GPU telemetry (power, temperature)
  // judge absence: a frame of another collector, or of one series that
  // arrives at its own pace, says nothing about the other GPUs.
  if (n.core_gpu) ++n.gpu_frames;
  for (uint32_t gi : n.gpus) {
    GpuState& g = gpus[gi];
    if (g.seen_frame == n.frames) {
      g.last_gpu_frame = n.gpu_frames;
      if (g.missing) {
        g.missing = false;
        Emit(AnomalyKind::kGpuMissing, true, node, gi, kNone, 0);
      }
    } else if (n.core_gpu && !g.missing &&
               n.gpu_frames - g.last_gpu_frame >= ro.gpu_missing_frames) {
      g.missing = true;
      Anomaly& a = Emit(AnomalyKind::kGpuMissing, false, node, gi, kNone,
                        static_cast<double>(n.gpu_frames - g.last_gpu_frame));
      a.score = a.value;
      a.detail = absl::StrCat("absent from ", n.gpu_frames - g.last_gpu_frame,
                              " frames");
      continue;
    }
    if (g.seen_frame != n.frames) continue;
    if (std::isfinite(g.throttle)) {
      const uint64_t bits =
          ClampTo<uint64_t>(g.throttle) & opt.peer.throttle_mask;
      const Sustain::Edge e = g.throttle_sustain.Observe(
          bits != 0 && !n.rewarm, bits == 0, opt.peer.throttle_sustain);
      if (e != Sustain::Edge::kNone) {
        Anomaly& a =
            Emit(AnomalyKind::kThermalThrottle, e == Sustain::Edge::kCleared,
                 node, gi, kNone, g.throttle);
        a.metric = "gpu_throttle_reasons";
        a.score = bits;
        a.detail = absl::StrCat("throttle reasons 0x",
                                absl::Hex(ClampTo<uint64_t>(g.throttle)));
      }
    }
    CheckOom(g, gi);
    if (!n.warmup && !n.rewarm) CheckFragmentation(g, gi);
  }
  // A reading taken while the node ramps (a stall's or a checkpoint's
  // edge, a few hundred watts between two frames) is compared with no one:
  // nodes sample a job-wide ramp at different moments.
  const bool comparable = !n.benign && !n.transient;
  for (uint32_t gi : n.gpus) {
    GpuState& g = gpus[gi];
    if (g.seen_frame != n.frames) continue;
    g.peer_ok = comparable && !g.missing;
    if (!g.peer_ok) {
      g.power_peer.last = g.clock_peer.last = g.nvlink_peer.last = kNaN;
    }
  }
  if (j.live_nodes_at != run_state_changes) {
    j.live_nodes = 0;
    for (uint32_t nn : j.nodes) {
      j.live_nodes += nodes[nn].retired || nodes[nn].ended ? 0 : 1;
    }
    j.live_nodes_at = run_state_changes;
  }
  if (++j.frames_since_peers >= j.live_nodes) RecomputePeers(j);
  if (!comparable) return;
  // NVLink joins the GPUs of one node: a GPU is compared with the others of
  // its own frame, which saw the same part of the same steps (a job-wide
  // median a round old would see each tick's share of backward passes).
  scratch.clear();
  for (uint32_t gi : n.gpus) {
    const GpuState& g = gpus[gi];
    if (g.seen_frame == n.frames && g.peer_ok) {
      const double v = NvlinkRate(g);
      if (std::isfinite(v)) scratch.push_back(v);
    }
  }
  const int node_nvlink_peers = static_cast<int>(scratch.size());
  const double node_nvlink = detector_internal::MedianInPlace(scratch);
  for (uint32_t gi : n.gpus) {
    if (gpus[gi].seen_frame == n.frames && gpus[gi].peer_ok) {
      CheckPeers(gpus[gi], j, gi, node_nvlink, node_nvlink_peers);
    }
  }
}

void Detector::Impl::RecomputePeers(JobState& j) {
  j.frames_since_peers = 0;
  auto median_of = [&](auto get, int* count) {
    scratch.clear();
    for (uint32_t gi : j.gpus) {
      const GpuState& g = gpus[gi];
      const NodeState& n = nodes[g.node];
      const double fresh =
          std::isfinite(n.interval) ? 3 * n.interval + 1e-9 : 30;
      if (n.retired || n.ended || n.free || !g.peer_ok || g.missing ||
          !(ts - g.last_ts <= fresh)) {
        continue;
      }
      const double v = get(g);
      if (std::isfinite(v)) scratch.push_back(v);
    }
    *count = static_cast<int>(scratch.size());
    return detector_internal::MedianInPlace(scratch);
  };
  j.med_power =
      median_of([](const GpuState& g) { return g.power; }, &j.n_power);
  j.med_clock =
      median_of([](const GpuState& g) { return g.clock; }, &j.n_clock);
  j.med_nvlink = median_of(NvlinkRate, &j.n_nvlink);
}

namespace {

// How one GPU compares with its peers on one metric, debounced in
// proportion to the job's noise (PeerOptions::noise_z).
struct PeerCheck {
  // The residual (below the median: negative) and the thresholds on it:
  // raise at or below `raise`, calm above `calm`.
  double residual;
  double raise;
  double calm;
  double margin;
  // Also judge the fall from the GPU's own usual residual: a card that
  // normally draws 12 W above the median and loses 55 W is a fault though
  // it ends 43 W below; one that always sits 25 W below is not.
  bool own_normal = false;
};

// Samples before a GPU's usual residual counts, and the most it averages
// over (an EWMA), so it follows slow drift but not a fault.
constexpr int kNormalMin = 30;
constexpr int kNormalWindow = 360;

// Observes `c` on `t`; returns the edge and sets `judged` to the residual
// judged (the instant one, or its average in a noisy job). `noise` is the
// job's estimate of the residual's sample-to-sample change, updated here;
// until it has seen PeerOptions::noise_min_updates changes nothing is
// raised (a resumed or new job's first minutes would otherwise be judged
// as a quiet job's).
Sustain::Edge ObservePeer(const PeerCheck& c, PeerTrack& t,
                          detector_internal::PeerNoise* noise,
                          const PeerOptions& po, double* judged) {
  if (std::isfinite(t.last)) {
    // Robust: one jump (a phase change, a fault's onset) moves it little.
    double change = std::fabs(c.residual - t.last);
    if (std::isfinite(noise->mean)) change = std::min(change, 3 * noise->mean);
    noise->mean = std::isnan(noise->mean)
                      ? change
                      : noise->mean + 0.01 * (change - noise->mean);
    ++noise->updates;
  }
  t.last = c.residual;
  // The change of white noise of sd sigma has a mean |change| of
  // 2 / sqrt(pi) sigma.
  const double sigma = std::isfinite(noise->mean) ? noise->mean / 1.128 : 0;
  int window = po.sustain.window;
  if (sigma * po.noise_switch_z > c.margin) {
    const double need = po.noise_z * sigma / c.margin;
    window = std::clamp(static_cast<int>(need * need) + 1, po.sustain.window,
                        po.max_average_samples);
  }
  // The average is kept only while the job is noisy (and restarts when it
  // becomes so): quiet jobs judge each sample.
  if (window > po.sustain.window) {
    const double alpha = 2.0 / (window + 1);
    t.average = std::isnan(t.average)
                    ? c.residual
                    : t.average + alpha * (c.residual - t.average);
    ++t.samples;
  } else {
    t.average = kNaN;
    t.samples = 0;
  }
  SustainOptions so = po.sustain;
  double value = c.residual;
  bool valid = true;
  if (window > po.sustain.window) {
    // A noisy job: judge the average over enough samples, once it has
    // them, and clear only after as long a calm.
    valid = t.samples >= window;
    value = valid ? t.average : c.calm;
    so.clear = std::max(so.clear, window);
  }
  *judged = value;
  bool beyond = value <= c.raise && noise->updates >= po.noise_min_updates;
  bool calm = value > c.calm;
  if (c.own_normal && valid) {
    if (t.normal_samples >= kNormalMin) {
      const double fall = value - t.normal;
      beyond = beyond || (fall <= c.raise && value <= c.calm);
      calm = calm && fall > c.calm;
    }
    if (!t.sustain.raised() &&
        (t.normal_samples < kNormalMin ||
         std::fabs(value - t.normal) < c.margin)) {
      const int n = std::min(++t.normal_samples, kNormalWindow);
      t.normal = std::isnan(t.normal) ? value
                                      : t.normal + (value - t.normal) / n;
    }
  }
  return t.sustain.Observe(beyond, calm, so);
}

}  // namespace

void Detector::Impl::CheckPeers(GpuState& g, JobState& j, uint32_t gi,
                                double node_nvlink, int node_nvlink_peers) {
  const PeerOptions& po = opt.peer;
  const uint32_t node = g.node;
  if (j.n_power >= po.min_peers && j.med_power >= po.min_median_watts &&
      std::isfinite(g.power)) {
    // The peer median is up to a round old: move it by how much this
    // node's own median moved since (a job-wide ramp is common to all; one
    // GPU's fault moves a median of eight by nothing, a node-wide fault
    // shows from the next frame on).
    const double shift =
        std::isfinite(nodes[node].power_shift) ? nodes[node].power_shift : 0;
    const PeerCheck c{g.power - (j.med_power + shift), -po.power_below_watts,
                      -po.power_clear_watts, po.power_margin_watts,
                      /*own_normal=*/true};
    double judged;
    const Sustain::Edge e =
        ObservePeer(c, g.power_peer, &j.noise_power, po, &judged);
    if (e != Sustain::Edge::kNone) {
      const double below = -judged;
      Anomaly& a = Emit(AnomalyKind::kPeerPowerLow,
                        e == Sustain::Edge::kCleared, node, gi, kNone, g.power);
      a.metric = "gpu_power_watts";
      a.baseline_mean = j.med_power;
      a.score = below;
      a.detail = absl::StrCat(ClampTo<int64_t>(below),
                              " W below the median of ", j.n_power, " GPUs");
      if (g.power_peer.normal_samples >= kNormalMin) {
        absl::StrAppend(&a.detail, ", usually ",
                        ClampTo<int64_t>(g.power_peer.normal), " W");
      }
    }
  }
  if (j.n_clock >= po.min_peers && j.med_clock > 0 && std::isfinite(g.clock)) {
    const double ratio = g.clock / j.med_clock;
    const PeerCheck c{ratio - 1, po.clock_low_fraction - 1,
                      po.clock_clear_fraction - 1, po.clock_margin};
    double judged;
    const Sustain::Edge e =
        ObservePeer(c, g.clock_peer, &j.noise_clock, po, &judged);
    if (e != Sustain::Edge::kNone) {
      Anomaly& a = Emit(AnomalyKind::kClockLow, e == Sustain::Edge::kCleared,
                        node, gi, kNone, g.clock);
      a.metric = "gpu_sm_clock_mhz";
      a.baseline_mean = j.med_clock;
      a.score = -judged;
      if (std::isfinite(g.throttle)) {
        a.detail = absl::StrCat("throttle reasons 0x",
                                absl::Hex(ClampTo<uint64_t>(g.throttle)));
      }
    }
  }
  const double rate = NvlinkRate(g);
  const bool local = node_nvlink_peers > po.min_peers;
  const double med_nvlink = local ? node_nvlink : j.med_nvlink;
  const int n_nvlink = local ? node_nvlink_peers : j.n_nvlink;
  if (n_nvlink >= po.min_peers && med_nvlink >= po.nvlink_min_median &&
      std::isfinite(rate)) {
    const double ratio = rate / med_nvlink;
    const PeerCheck c{ratio - 1, po.nvlink_low_fraction - 1,
                      po.nvlink_clear_fraction - 1, po.nvlink_margin};
    double judged;
    const Sustain::Edge e =
        ObservePeer(c, g.nvlink_peer, &j.noise_nvlink, po, &judged);
    if (e != Sustain::Edge::kNone) {
      Anomaly& a = Emit(AnomalyKind::kNvlinkTrafficLow,
                        e == Sustain::Edge::kCleared, node, gi, kNone, rate);
      a.metric = "gpu_nvlink_tx_bytes_total";
      a.baseline_mean = med_nvlink;
      a.score = -judged;
    }
  }
}

void Detector::Impl::CheckOom(GpuState& g, uint32_t gi) {
  const TrendOptions& to = opt.trend;
  const NodeState& n = nodes[g.node];
  double used;
  if (g.has_used_series) {
    if (g.used_frame != n.frames) return;
    used = g.mem_used;
  } else {
    if (g.reserved_frame != n.frames) return;
    used = g.reserved;
  }
  const double total = g.mem_total;
  if (!std::isfinite(used) || !(total > 0)) return;
  // The allocator's ramp in the first steps (and a resumed run's climb
  // back to its working set) is no leak: only the threshold itself is
  // checked then, the growth fit after it.
  const bool ramping = n.warmup || n.rewarm;
  if (!ramping) {
    if (std::isnan(g.mem_fit_start)) g.mem_fit_start = ts;
    g.mem_fit.Add(ts, used, to.oom_tau_s);
  }
  const double frac = used / total;
  const double slope = g.mem_fit.slope();
  // A slope from a few noisy points is no trend: the fit must span half
  // its time constant.
  const bool growing = !ramping && g.mem_fit.points() >= to.oom_min_points &&
                       ts - g.mem_fit_start >= 0.5 * to.oom_tau_s &&
                       slope * to.oom_horizon_s >= to.oom_min_growth * total;
  const double target = to.oom_fraction * total;
  double seconds = kInf;
  if (frac >= to.oom_fraction) {
    seconds = 0;
  } else if (growing) {
    seconds = std::max(0.0, (target - g.mem_fit.value_now()) / slope);
  }
  const Sustain::Edge e =
      g.oom.Observe(seconds <= to.oom_horizon_s, seconds > 2 * to.oom_horizon_s,
                    to.oom_sustain);
  if (e == Sustain::Edge::kNone) return;
  Anomaly& a = Emit(AnomalyKind::kOomForecast, e == Sustain::Edge::kCleared,
                    g.node, gi, kNone, frac);
  a.metric =
      g.has_used_series ? "gpu_memory_used_bytes" : "torch_reserved_bytes";
  a.baseline_mean = to.oom_fraction;
  a.score = seconds;
  a.detail = absl::StrCat(
      "growth ", ClampTo<int64_t>(slope * 60 / (1 << 20)), " MiB/min, ",
      ClampTo<int64_t>(frac * 1000) / 10.0, " % used");
}

void Detector::Impl::CheckFragmentation(GpuState& g, uint32_t gi) {
  const TrendOptions& to = opt.trend;
  const NodeState& n = nodes[g.node];
  if (g.reserved_frame != n.frames || g.allocated_frame != n.frames ||
      !(g.reserved >= to.frag_min_reserved_bytes) ||
      !std::isfinite(g.allocated)) {
    return;
  }
  const double frag = 1 - g.allocated / g.reserved;
  const Sustain::Edge e = g.frag.Observe(frag > to.frag_threshold,
                                         frag < to.frag_clear, to.frag_sustain);
  if (e == Sustain::Edge::kNone) return;
  Anomaly& a = Emit(AnomalyKind::kFragmentation, e == Sustain::Edge::kCleared,
                    g.node, gi, kNone, frag);
  a.metric = "torch_reserved_bytes";
  a.baseline_mean = to.frag_threshold;
  a.score = frag;
}

void Detector::Impl::RecordDip(NodeState& n, JobState& j) {
  const TrendOptions& to = opt.trend;
  n.dip_ts[n.dips % kHistory] = ts;
  n.dip_step[n.dips % kHistory] = step ? *step : kNoStep;
  ++n.dips;
  j.last_dip_ts = ts;
  if (j.stall_raised || n.dips < to.stall_min_dips) return;
  // Spacing of the last stall_min_dips dips, in steps when all have one.
  const int k = std::min(to.stall_min_dips, kHistory);
  bool steps = true;
  for (int i = 0; i < k; ++i) {
    steps = steps && n.dip_step[(n.dips - 1 - i) % kHistory] != kNoStep;
  }
  double sum = 0, sum2 = 0, sum_s = 0;
  bool short_enough = true;
  const double max_period =
      steps ? to.stall_max_period_steps : to.stall_max_period_s;
  for (int i = 0; i + 1 < k; ++i) {
    const int a = (n.dips - 1 - i) % kHistory, b = (n.dips - 2 - i) % kHistory;
    const double d = steps ? static_cast<double>(n.dip_step[a] - n.dip_step[b])
                           : n.dip_ts[a] - n.dip_ts[b];
    short_enough = short_enough && d > 0 && d <= max_period &&
                   n.dip_ts[a] - n.dip_ts[b] <= to.stall_max_period_s;
    sum += d;
    sum2 += d * d;
    sum_s += n.dip_ts[a] - n.dip_ts[b];
  }
  const double m = sum / (k - 1);
  const double cv = std::sqrt(std::max(0.0, sum2 / (k - 1) - m * m)) / m;
  if (!short_enough || !(cv <= to.stall_max_cv)) return;
  // In synchronous data parallelism every rank waits for the starved one
  // at the next collective, so all nodes dip together and the first to
  // dip says nothing. The starved node is the one whose dataloader waits.
  double peer_median = kNaN;
  j.stall_raised = true;
  j.stall_period_s = sum_s / (k - 1);
  j.stall_node = StallCulprit(j, &peer_median);
  Anomaly& a = Emit(AnomalyKind::kPeriodicStall, false, j.stall_node, kNone,
                    kNone, j.stall_period_s);
  a.job = j.name;
  if (!a.step && step) a.step = step;
  a.score = m;
  a.detail = absl::StrCat("power dips every ", m, steps ? " steps" : " s");
  a.metric = "gpu_power_watts";
  a.baseline_mean = n.busy;
  if (j.stall_node == kNone) {
    absl::StrAppend(&a.detail, " across the job; no node's dataloader wait "
                               "stands out");
    return;
  }
  const double wait = nodes[j.stall_node].dl_mean;
  if (!std::isfinite(wait)) return;  // a single node without the metric
  a.metric = "train_dataloader_wait_seconds";
  a.baseline_mean = peer_median;
  absl::StrAppend(&a.detail, ", dataloader wait ", wait, " s");
  if (std::isfinite(peer_median)) {
    absl::StrAppend(&a.detail, " (other nodes ", peer_median, " s)");
  }
}

uint32_t Detector::Impl::StallCulprit(const JobState& j,
                                      double* peer_median) {
  const TrendOptions& to = opt.trend;
  uint32_t only = kNone, top = kNone;
  int live = 0;
  for (uint32_t nn : j.nodes) {
    const NodeState& n = nodes[nn];
    if (n.retired || n.ended || n.silent) continue;
    ++live;
    only = nn;
    if (std::isfinite(n.dl_mean) &&
        (top == kNone || n.dl_mean > nodes[top].dl_mean)) {
      top = nn;
    }
  }
  if (live == 1) return only;  // a single node stalls by itself
  if (top == kNone) return kNone;
  scratch.clear();
  for (uint32_t nn : j.nodes) {
    const NodeState& n = nodes[nn];
    if (nn != top && !n.retired && !n.ended && !n.silent &&
        std::isfinite(n.dl_mean)) {
      scratch.push_back(n.dl_mean);
    }
  }
  if (scratch.empty()) return kNone;
  *peer_median = detector_internal::MedianInPlace(scratch);
  const double wait = nodes[top].dl_mean;
  const bool stands_out = wait >= to.stall_dl_factor * *peer_median &&
                          wait - *peer_median >= to.stall_dl_min_excess_s;
  return stands_out ? top : kNone;
}

}  // namespace vigil
