// Registration, frame ingestion, benign-phase inference and the per-series
// detectors (red lines, baseline, throughput, grad norm, loss, loss scale,
// ECC SBE rate, MFU).
#include "detector/detector.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "detector/detector_impl.h"

namespace vigil {

using detector_internal::GpuState;
using detector_internal::JobState;
using detector_internal::kHistory;
using detector_internal::kInf;
using detector_internal::kNaN;
using detector_internal::kNone;
using detector_internal::kNoStep;
using detector_internal::kOscWindow;
using detector_internal::NodeState;
using detector_internal::SeriesAux;
using detector_internal::SeriesState;

namespace detector_internal {

absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

double MedianInPlace(std::vector<double>& v) {
  if (v.empty()) return kNaN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + mid));
}

namespace {

// Median and 1.4826 x MAD of `v` (reordered), with a mean-absolute-deviation
// fallback when more than half the values are equal.
void RobustStats(std::vector<double>& v, double* median, double* sigma) {
  *median = MedianInPlace(v);
  double abs_sum = 0;
  for (double& x : v) {
    x = std::fabs(x - *median);
    abs_sum += x;
  }
  *sigma = 1.4826 * MedianInPlace(v);
  if (*sigma == 0 && !v.empty()) *sigma = 1.2533 * abs_sum / v.size();
}

}  // namespace
}  // namespace detector_internal

Detector::Detector(const DetectorOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

Detector::~Detector() = default;

DetectorStats Detector::stats() const {
  DetectorStats s = impl_->stats;
  s.series = static_cast<int64_t>(impl_->series.size());
  s.nodes = static_cast<int64_t>(impl_->nodes.size());
  s.jobs = static_cast<int64_t>(impl_->jobs.size());
  return s;
}

bool Detector::HasSeries(uint32_t id) const {
  return id < impl_->dense_of_id.size() && impl_->dense_of_id[id] != kNone;
}

std::optional<SeriesBaseline> Detector::Baseline(uint32_t id) const {
  if (!HasSeries(id)) return std::nullopt;
  const SeriesState& s = impl_->series[impl_->dense_of_id[id]];
  SeriesBaseline b;
  b.learned = s.learned && std::isfinite(s.level);
  b.k_sigma = impl_->opt.baseline.k_sigma;
  b.rate = s.traits.counter;
  b.evaluated = s.evaluated;
  if (b.learned) {
    b.mean = s.level;
    b.sigma = impl_->Sigma(s);
  }
  return b;
}

absl::Status Detector::RegisterSeries(uint32_t id, const SeriesKey& key) {
  if (id >= kMaxSeriesId) {
    return absl::InvalidArgumentError(
        absl::StrCat("series id ", id, " is not below ", kMaxSeriesId));
  }
  Impl& m = *impl_;
  if (id < m.dense_of_id.size() && m.dense_of_id[id] != kNone) {
    if (m.keys[m.dense_of_id[id]] == key) return absl::OkStatus();
    return absl::AlreadyExistsError(
        absl::StrCat("series id ", id, " is already ",
                     m.keys[m.dense_of_id[id]].ToString()));
  }
  if (id >= m.dense_of_id.size()) {
    m.dense_of_id.resize(std::max<size_t>(id + 1, m.dense_of_id.size() * 2),
                         kNone);
  }
  m.dense_of_id[id] = static_cast<uint32_t>(m.series.size());
  SeriesState s;
  s.id = id;
  s.traits = LookupMetric(key.metric);
  int gpu = -1;
  if (std::string_view g = key.LabelValue("gpu");
      !g.empty() && absl::SimpleAtoi(detector_internal::AbslView(g), &gpu) &&
      gpu >= 0) {
    s.gpu_label = gpu;
  }
  const Metric metric = s.traits.metric;
  if (metric == Metric::kTrainLoss || metric == Metric::kTrainLossScale ||
      metric == Metric::kGpuEccSbe) {
    s.aux = static_cast<uint32_t>(m.aux.size());
    m.aux.emplace_back();
  }
  m.series.push_back(std::move(s));
  m.keys.push_back(key);
  return absl::OkStatus();
}

uint32_t Detector::Impl::NodeFor(std::string_view job_name,
                                 std::string_view node_name) {
  auto jit = job_by_name.find(detector_internal::AbslView(job_name));
  if (jit == job_by_name.end()) {
    jit = job_by_name.emplace(std::string(job_name), jobs.size()).first;
    jobs.emplace_back();
    jobs.back().name = std::string(job_name);
  }
  JobState& j = jobs[jit->second];
  if (auto nit = j.nodes_by_name.find(detector_internal::AbslView(node_name));
      nit != j.nodes_by_name.end()) {
    return nit->second;
  }
  const uint32_t idx = static_cast<uint32_t>(nodes.size());
  j.nodes_by_name.emplace(std::string(node_name), idx);
  j.nodes.push_back(idx);
  nodes.emplace_back();
  nodes.back().name = std::string(node_name);
  nodes.back().job = jit->second;
  // A node that moves to another job leaves its old pair: no silence
  // alarm for the job it no longer runs.
  auto [it, inserted] = node_by_name.try_emplace(std::string(node_name), idx);
  if (!inserted) {
    NodeState& old = nodes[it->second];
    old.retired = true;
    if (old.silent) {
      old.silent = false;
      Emit(AnomalyKind::kNodeSilent, true, it->second, kNone, kNone, 0);
    }
    it->second = idx;
  }
  return idx;
}

void Detector::Impl::Bind(SeriesState& s, uint32_t node) {
  s.node = node;
  NodeState& n = nodes[node];
  if (s.traits.metric == Metric::kTrainLossScale) n.fp16 = true;
  if (s.gpu_label < 0) return;
  for (uint32_t g : n.gpus) {
    if (gpus[g].index == s.gpu_label) {
      s.gpu = g;
      break;
    }
  }
  if (s.gpu == kNone) {
    s.gpu = static_cast<uint32_t>(gpus.size());
    gpus.emplace_back();
    gpus.back().node = node;
    gpus.back().index = s.gpu_label;
    gpus.back().last_gpu_frame = n.gpu_frames;
    n.gpus.push_back(s.gpu);
    jobs[n.job].gpus.push_back(s.gpu);
  }
  if (s.traits.metric == Metric::kGpuMemoryUsed) {
    gpus[s.gpu].has_used_series = true;
  }
}

void Detector::Impl::Ingest(SeriesState& s, uint32_t node, double x) {
  NodeState& n = nodes[node];
  if (s.traits.counter) {
    s.inc = 0;
    s.cur = kNaN;
    if (std::isfinite(x)) {
      if (std::isfinite(s.prev_raw)) {
        // A decrease is a counter reset (agent or driver restart): the
        // counter restarted from zero, as in Prometheus' increase().
        s.inc = x >= s.prev_raw ? x - s.prev_raw : x;
        const double dt = ts - s.prev_ts;
        if (dt > 0) s.cur = s.inc / dt;
      }
      s.prev_raw = x;
      s.prev_ts = ts;
    }
  } else {
    s.cur = x;
  }
  if (s.traits.metric == Metric::kTrainPhase && std::isfinite(x)) {
    n.phase = static_cast<int>(x);
  } else if (s.traits.metric == Metric::kTrainDataloaderWait &&
             std::isfinite(x)) {
    // Weighted by the time it covers: a frame's value is the wait of the
    // last step, held until the next one.
    if (std::isnan(n.dl_mean)) {
      n.dl_mean = x;
    } else if (ts > n.dl_ts) {
      n.dl_mean += (1 - std::exp(-(ts - n.dl_ts) / opt.trend.stall_dl_tau_s)) *
                   (x - n.dl_mean);
    }
    n.dl_ts = std::isnan(n.dl_ts) ? ts : std::max(n.dl_ts, ts);
  }
  if (s.gpu == kNone) return;
  GpuState& g = gpus[s.gpu];
  n.any_gpu = true;
  g.seen_frame = n.frames;
  g.last_ts = ts;
  switch (s.traits.metric) {
    case Metric::kGpuPower:
      g.power = x;
      break;
    case Metric::kGpuSmClock:
      g.clock = x;
      break;
    case Metric::kGpuThrottleReasons:
      g.throttle = x;
      break;
    case Metric::kGpuNvlinkTx:
      g.nvl_tx = s.cur;
      break;
    case Metric::kGpuNvlinkRx:
      g.nvl_rx = s.cur;
      break;
    case Metric::kGpuMemoryTotal:
      g.mem_total = x;
      break;
    case Metric::kGpuXidLast:
      g.xid_last = x;
      break;
    case Metric::kGpuMemoryUsed:
      g.mem_used = x;
      g.used_frame = n.frames;
      break;
    case Metric::kTorchReserved:
      g.reserved = x;
      g.reserved_frame = n.frames;
      break;
    case Metric::kTorchAllocated:
      g.allocated = x;
      g.allocated_frame = n.frames;
      break;
    default:
      break;
  }
}

void Detector::ProcessFrame(const FrameView& frame, std::vector<Anomaly>* out) {
  Impl& m = *impl_;
  m.out = out;
  m.ts = frame.ts;
  m.step = frame.step;
  const uint32_t node = m.NodeFor(frame.job, frame.node);
  m.cur_node = node;
  NodeState& n = m.nodes[node];
  JobState& j = m.jobs[n.job];
  ++m.stats.frames;
  ++n.frames;
  n.any_gpu = false;
  n.phase = -1;
  m.OnFrameTime(n, j, node, frame);

  // Pass 1: values and counter rates; gather node/GPU context.
  m.touched.clear();
  const size_t count = std::min(frame.ids.size(), frame.values.size());
  m.stats.samples += static_cast<int64_t>(count);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t id = frame.ids[i];
    const uint32_t dense =
        id < m.dense_of_id.size() ? m.dense_of_id[id] : kNone;
    if (dense == kNone) {
      ++m.stats.unregistered_samples;
      continue;
    }
    SeriesState& s = m.series[dense];
    if (s.node == kNone) m.Bind(s, node);
    m.Ingest(s, node, frame.values[i]);
    m.touched.push_back(dense);
  }

  // Pass 2: phase, then every series, then every GPU of the node.
  m.UpdatePhase(n, j);
  for (uint32_t dense : m.touched) m.Evaluate(m.series[dense], dense);
  m.CheckGpus(n, j, node);
  m.out = nullptr;
}

void Detector::AdvanceTime(double ts, std::vector<Anomaly>* out) {
  Impl& m = *impl_;
  m.clock = std::max(m.clock, ts);
  if (ts < m.next_scan) return;
  m.next_scan = ts + m.opt.liveness.check_interval_s;
  m.out = out;
  m.ts = ts;
  m.step.reset();
  m.Scan(ts);
  m.out = nullptr;
}

void Detector::Impl::UpdatePhase(NodeState& n, JobState& j) {
  const PhaseOptions& po = opt.phase;
  const bool phase_benign = n.phase == 1 || n.phase == 2;
  if (phase_benign) j.benign_phase_ts = seen;
  scratch.clear();
  for (uint32_t g : n.gpus) {
    const GpuState& gs = gpus[g];
    if (gs.seen_frame == n.frames && std::isfinite(gs.power)) {
      scratch.push_back(gs.power);
    }
  }
  if (!scratch.empty()) {
    const double med = detector_internal::MedianInPlace(scratch);
    const bool ready = n.busy_frames >= po.min_busy_frames;
    const bool dip = ready && (n.in_dip ? med < po.dip_exit_fraction * n.busy
                                        : med < po.dip_fraction * n.busy);
    if (dip && !n.in_dip) {
      n.dip_start_ts = ts;
      n.in_dip = true;
      RecordDip(n, j);
    }
    n.in_dip = dip;
    const bool long_dip = dip && ts - n.dip_start_ts > po.max_benign_dip_s;
    if ((!dip || long_dip) && !phase_benign) {
      n.busy =
          std::isnan(n.busy) ? med : n.busy + po.busy_alpha * (med - n.busy);
      ++n.busy_frames;
    }
  }
  if (j.stall_raised && ts - j.last_dip_ts > 3 * j.stall_period_s) {
    j.stall_raised = false;
    Anomaly& a =
        Emit(AnomalyKind::kPeriodicStall, true, j.stall_node, kNone, kNone, 0);
    a.job = j.name;
  }
  const bool benign_now =
      phase_benign || (n.in_dip && ts - n.dip_start_ts <= po.max_benign_dip_s);
  bool grace = false;
  if (benign_now) {
    n.grace = po.grace_frames;
  } else if (n.grace > 0) {
    --n.grace;
    grace = true;
  }
  n.warmup = step ? *step < opt.baseline.warmup_steps
                  : n.frames <= opt.baseline.warmup_steps;
  n.benign = benign_now || grace || n.warmup;
}

Anomaly& Detector::Impl::Emit(AnomalyKind kind, bool cleared, uint32_t node,
                              uint32_t gpu, uint32_t dense, double value) {
  Anomaly& a = out->emplace_back();
  a.kind = kind;
  a.cleared = cleared;
  a.ts = ts;
  a.value = value;
  if (node != kNone) {
    const NodeState& n = nodes[node];
    a.node = n.name;
    a.job = jobs[n.job].name;
    if (step) {
      a.step = step;
    } else if (n.step != kNoStep) {
      a.step = n.step;
    }
  }
  if (gpu != kNone) a.gpu = gpus[gpu].index;
  if (dense != kNone) {
    const SeriesKey& key = keys[dense];
    a.series_id = series[dense].id;
    a.metric = key.metric;
    a.dev = std::string(key.LabelValue("dev"));
  }
  return a;
}

void Detector::Impl::Evaluate(SeriesState& s, uint32_t dense) {
  const NodeState& n = nodes[s.node];
  const double x = s.cur;
  RedLines(s, dense, x);
  if (s.traits.metric == Metric::kGpuEccSbe) EccSbe(s, dense);
  // Per-step metrics repeat between steps: only a new step is a sample.
  if (s.traits.per_step && step && !n.step_moved) return;
  if (!std::isfinite(x)) return;
  if (s.traits.metric == Metric::kTrainLossScale) {
    if (!n.warmup) LossScale(s, dense, x);
    return;
  }
  if (n.benign) return;
  switch (s.traits.metric) {
    case Metric::kTrainTokensPerSecond:
      Throughput(s, dense, x);
      return;
    case Metric::kTrainGradNorm:
      GradNorm(s, dense, x);
      return;
    case Metric::kTrainMfu:
      Mfu(s, dense, x);
      return;
    case Metric::kTrainLoss:
      LossPattern(s, dense, x);
      Baseline(s, dense, x);
      return;
    default:
      if (s.traits.mode != BaselineMode::kNone) Baseline(s, dense, x);
  }
}

void Detector::Impl::RedLines(SeriesState& s, uint32_t dense, double x) {
  const RedLineOptions& ro = opt.red_line;
  const Metric metric = s.traits.metric;
  std::optional<AnomalyKind> kind;
  bool hit = false;
  if (s.traits.red_line) {
    kind = s.traits.red_line;
    hit = s.inc > 0;
  } else if (metric == Metric::kTrainLoss) {
    kind = AnomalyKind::kLossNan;
    hit = !std::isfinite(x);
  } else if (metric == Metric::kTrainGradNorm) {
    kind = AnomalyKind::kGradNan;
    // fp16: GradScaler's scale search overflows during warm-up and now
    // and then later; only a long run of non-finite norms is a red line.
    const NodeState& n = nodes[s.node];
    s.nonfinite_run = std::isfinite(x) ? 0 : s.nonfinite_run + 1;
    hit = n.fp16 ? !n.warmup && s.nonfinite_run >= ro.grad_nonfinite_fp16_steps
                 : s.nonfinite_run >= 1;
  } else if (metric == Metric::kGpuRemappedRowsPending) {
    if (!std::isfinite(x)) return;
    kind = AnomalyKind::kRowRemapPending;
    hit = x >= 0.5;
    if (!hit && s.red_raised) s.red_calm = ro.clear_frames;
  } else {
    return;
  }
  const double value = s.traits.counter ? s.inc : x;
  if (hit) {
    s.red_calm = 0;
    if (s.red_raised) return;
    s.red_raised = true;
    Anomaly& a = Emit(*kind, false, s.node, s.gpu, dense, value);
    a.score = value;
    if (metric == Metric::kGpuXidErrors && s.gpu != kNone &&
        std::isfinite(gpus[s.gpu].xid_last)) {
      a.detail =
          absl::StrCat("xid ", static_cast<int64_t>(gpus[s.gpu].xid_last));
    }
    return;
  }
  if (s.red_raised && ++s.red_calm >= ro.clear_frames) {
    s.red_raised = false;
    s.red_calm = 0;
    Emit(*kind, true, s.node, s.gpu, dense, value);
  }
}

bool Detector::Impl::Learn(SeriesState& s, double x) {
  const BaselineOptions& bo = opt.baseline;
  ++s.evaluated;
  if (step && s.first_step == kNoStep) s.first_step = *step;
  if (s.learned) return true;
  double keep = x;
  if (s.traits.trending) {
    if (std::isnan(s.level)) {
      s.level = x;
      return false;
    }
    keep = x - s.level;
    s.level += bo.trend_level_alpha * (x - s.level);
  }
  if (s.learn_seen++ % s.stride == 0) {
    s.learn.push_back(static_cast<float>(keep));
    if (static_cast<int>(s.learn.size()) >= bo.learn_buffer) {
      for (size_t i = 0; i < s.learn.size() / 2; ++i)
        s.learn[i] = s.learn[2 * i];
      s.learn.resize(s.learn.size() / 2);
      s.stride *= 2;
    }
  }
  const int64_t progress =
      (step && s.first_step != kNoStep) ? *step - s.first_step : s.evaluated;
  if (progress < bo.learn_steps ||
      static_cast<int>(s.learn.size()) < bo.min_learn_samples) {
    return false;
  }
  scratch.assign(s.learn.begin(), s.learn.end());
  double median, sigma;
  detector_internal::RobustStats(scratch, &median, &sigma);
  if (!s.traits.trending) s.level = median;
  s.spread = sigma;
  s.learned = true;
  std::vector<float>().swap(s.learn);
  if (s.aux != kNone) {
    SeriesAux& ax = aux[s.aux];
    if (!ax.learn_diffs.empty()) {
      scratch.assign(ax.learn_diffs.begin(), ax.learn_diffs.end());
      ax.diff_level = detector_internal::MedianInPlace(scratch);
      std::vector<float>().swap(ax.learn_diffs);
    }
  }
  return false;
}

double Detector::Impl::Sigma(const SeriesState& s) const {
  return std::max({s.spread, opt.baseline.sigma_floor_rel * std::fabs(s.level),
                   s.traits.sigma_floor, 1e-12});
}

void Detector::Impl::Adapt(SeriesState& s, double x, bool bad) {
  if (bad) return;
  const BaselineOptions& bo = opt.baseline;
  const double sigma = Sigma(s);
  const double r = x - s.level;
  const double clip = bo.k_sigma * sigma;
  const double alpha =
      s.traits.trending ? bo.trend_level_alpha : bo.level_alpha;
  s.level += alpha * std::clamp(r, -clip, clip);
  s.spread +=
      bo.sigma_alpha * (1.2533 * std::min(std::fabs(r), clip) - s.spread);
}

void Detector::Impl::Baseline(SeriesState& s, uint32_t dense, double x) {
  if (!Learn(s, x)) return;
  const BaselineOptions& bo = opt.baseline;
  const double sigma = Sigma(s);
  const double z = (x - s.level) / sigma;
  const BaselineMode mode = s.traits.mode;
  const double bad = mode == BaselineMode::kHigh  ? z
                     : mode == BaselineMode::kLow ? -z
                                                  : std::fabs(z);
  const Sustain::Edge e = s.sustain.Observe(
      bad > bo.k_sigma, bad < bo.k_clear,
      s.traits.metric == Metric::kTrainDataloaderWait ? bo.dataloader_sustain
                                                      : bo.sustain);
  if (e == Sustain::Edge::kRaised) {
    s.raised_dir =
        (mode == BaselineMode::kHigh || (mode == BaselineMode::kBoth && z > 0))
            ? 1
            : -1;
  }
  if (e != Sustain::Edge::kNone) {
    Anomaly& a = Emit(s.raised_dir > 0 ? AnomalyKind::kBaselineHigh
                                       : AnomalyKind::kBaselineLow,
                      e == Sustain::Edge::kCleared, s.node, s.gpu, dense, x);
    a.baseline_mean = s.level;
    a.baseline_sigma = sigma;
    a.score = z;
  }
  Adapt(s, x, bad > bo.k_sigma);
}

void Detector::Impl::Throughput(SeriesState& s, uint32_t dense, double x) {
  if (!Learn(s, x) || !(s.level > 0)) return;
  const TrendOptions& to = opt.trend;
  const double sigma = Sigma(s);
  const double z = (x - s.level) / sigma;
  const double drop = 1 - x / s.level;
  const bool low = z < -to.throughput_min_z;
  const Sustain::Edge e2 =
      s.sustain2.Observe(low && drop > to.throughput_severe,
                         drop < to.throughput_warn, to.throughput_sustain);
  const Sustain::Edge e1 =
      s.sustain.Observe(low && drop > to.throughput_warn,
                        drop < to.throughput_clear, to.throughput_sustain);
  int tier = 0;
  if (e1 == Sustain::Edge::kRaised) {
    tier = s.sustain2.raised() ? 2 : 1;
  } else if (e2 == Sustain::Edge::kRaised && s.sustain.raised() &&
             s.raised_dir < 2) {
    tier = 2;
  }
  if (tier > 0 || e1 == Sustain::Edge::kCleared) {
    const bool cleared = e1 == Sustain::Edge::kCleared;
    Anomaly& a =
        Emit(AnomalyKind::kThroughputDrop, cleared, s.node, kNone, dense, x);
    a.tier = cleared ? s.raised_dir : tier;
    a.baseline_mean = s.level;
    a.baseline_sigma = sigma;
    a.score = drop;
    s.raised_dir = static_cast<int8_t>(cleared ? 0 : tier);
    if (cleared) s.sustain2 = Sustain();
  }
  Adapt(s, x, drop > to.throughput_clear);
}

void Detector::Impl::GradNorm(SeriesState& s, uint32_t dense, double x) {
  if (!Learn(s, x) || !(s.level > 0)) return;
  const TrendOptions& to = opt.trend;
  const double ratio = x / s.level;
  const Sustain::Edge up =
      s.sustain.Observe(ratio >= to.grad_explosion_factor,
                        ratio < to.grad_explosion_clear, to.grad_sustain);
  const Sustain::Edge down =
      s.sustain2.Observe(ratio <= to.grad_vanish_fraction,
                         ratio > to.grad_vanish_clear, to.grad_sustain);
  for (auto [edge, kind] : {std::pair{up, AnomalyKind::kGradExplosion},
                            std::pair{down, AnomalyKind::kGradVanishing}}) {
    if (edge == Sustain::Edge::kNone) continue;
    Anomaly& a =
        Emit(kind, edge == Sustain::Edge::kCleared, s.node, kNone, dense, x);
    a.baseline_mean = s.level;
    a.baseline_sigma = Sigma(s);
    a.score = ratio;
  }
  Adapt(s, x,
        ratio > to.grad_explosion_clear || ratio < 1 / to.grad_explosion_clear);
}

void Detector::Impl::LossPattern(SeriesState& s, uint32_t dense, double x) {
  SeriesAux& ax = aux[s.aux];
  const double prev = ax.prev;
  ax.prev = x;
  if (std::isnan(prev)) return;
  const double d = x - prev;
  ax.diffs[ax.diff_count++ % kOscWindow] = static_cast<float>(d);
  if (!s.learned) {
    if (static_cast<int>(ax.learn_diffs.size()) < opt.baseline.learn_buffer) {
      ax.learn_diffs.push_back(static_cast<float>(std::fabs(d)));
    }
    return;
  }
  if (ax.diff_count < kOscWindow || std::isnan(ax.diff_level)) return;
  const TrendOptions& to = opt.trend;
  scratch.clear();
  int flips = 0;
  for (int i = 0; i < kOscWindow; ++i) {
    const float a = ax.diffs[(ax.diff_count + i) % kOscWindow];
    scratch.push_back(std::fabs(a));
    if (i > 0) {
      const float b = ax.diffs[(ax.diff_count + i - 1) % kOscWindow];
      if ((a > 0) != (b > 0)) ++flips;
    }
  }
  const double med = detector_internal::MedianInPlace(scratch);
  const double ref =
      std::max({ax.diff_level, 1e-3 * std::fabs(s.level), 1e-12});
  const double flip_frac = flips / static_cast<double>(kOscWindow - 1);
  const Sustain::Edge e = ax.osc.Observe(
      med > to.loss_osc_factor * ref && flip_frac >= to.loss_osc_min_flips,
      med < 0.5 * to.loss_osc_factor * ref, to.loss_osc_sustain);
  if (e == Sustain::Edge::kNone) return;
  Anomaly& a = Emit(AnomalyKind::kLossOscillation, e == Sustain::Edge::kCleared,
                    s.node, kNone, dense, med);
  a.baseline_mean = ref;
  a.score = med / ref;
  a.detail = absl::StrCat("sign flips ", flips, "/", kOscWindow - 1);
}

void Detector::Impl::LossScale(SeriesState& s, uint32_t dense, double x) {
  SeriesAux& ax = aux[s.aux];
  const int64_t pos = step ? *step : ++s.evaluated;
  const TrendOptions& to = opt.trend;
  if (std::isfinite(ax.prev) && x < 0.75 * ax.prev) {
    ax.halvings[ax.halving_count++ % kHistory] = pos;
  }
  ax.prev = x;
  const int kept = std::min({ax.halving_count, kHistory});
  int recent = 0;
  int64_t last = kNoStep;
  for (int i = 0; i < kept; ++i) {
    const int64_t h = ax.halvings[i];
    if (h > pos - to.loss_scale_window_steps) ++recent;
    last = std::max(last, h);
  }
  if (!ax.thrash_raised && recent >= to.loss_scale_halvings) {
    ax.thrash_raised = true;
    Anomaly& a =
        Emit(AnomalyKind::kLossScaleThrash, false, s.node, kNone, dense, x);
    a.score = recent;
    a.detail = absl::StrCat(recent, " halvings in ", to.loss_scale_window_steps,
                            " steps");
  } else if (ax.thrash_raised && pos - last > to.loss_scale_window_steps) {
    ax.thrash_raised = false;
    Emit(AnomalyKind::kLossScaleThrash, true, s.node, kNone, dense, x);
  }
}

void Detector::Impl::EccSbe(SeriesState& s, uint32_t dense) {
  SeriesAux& ax = aux[s.aux];
  const TrendOptions& to = opt.trend;
  if (std::isnan(ax.sbe_first_ts)) {
    ax.sbe_first_ts = ts;
  } else if (ts > ax.sbe_last_ts) {
    ax.sbe_sum *= std::exp(-(ts - ax.sbe_last_ts) / to.ecc_sbe_tau_s);
  }
  ax.sbe_last_ts = ts;
  ax.sbe_sum += s.inc;
  // Normalise by the weight a constant rate would have had so far, so an
  // early storm is not diluted; at least one minute of extrapolation base.
  const double elapsed = ts - ax.sbe_first_ts;
  const double base = std::max(
      60.0, to.ecc_sbe_tau_s * (1 - std::exp(-elapsed / to.ecc_sbe_tau_s)));
  const double per_day = ax.sbe_sum / base * 86400;
  if (!ax.sbe_raised && ax.sbe_sum >= to.ecc_sbe_min_count &&
      per_day >= to.ecc_sbe_per_day) {
    ax.sbe_raised = true;
    Anomaly& a =
        Emit(AnomalyKind::kEccSbeRate, false, s.node, s.gpu, dense, per_day);
    a.baseline_mean = to.ecc_sbe_per_day;
    a.score = per_day;
  } else if (ax.sbe_raised && per_day < 0.5 * to.ecc_sbe_per_day) {
    ax.sbe_raised = false;
    Emit(AnomalyKind::kEccSbeRate, true, s.node, s.gpu, dense, per_day);
  }
}

void Detector::Impl::Mfu(SeriesState& s, uint32_t dense, double x) {
  const TrendOptions& to = opt.trend;
  const Sustain::Edge e = s.sustain.Observe(x < to.mfu_threshold,
                                            x >= to.mfu_clear, to.mfu_sustain);
  if (e == Sustain::Edge::kNone) return;
  Anomaly& a = Emit(AnomalyKind::kMfuLow, e == Sustain::Edge::kCleared, s.node,
                    kNone, dense, x);
  a.baseline_mean = to.mfu_threshold;
  a.score = to.mfu_threshold - x;
}

}  // namespace vigil
