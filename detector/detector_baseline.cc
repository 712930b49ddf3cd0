// Baselines: learning (bounded in steps and time, usable early with a
// widened band, inherited from the job's or its family's earlier runs),
// and the per-series detectors that use them (baseline, throughput, step
// slowdown, grad norm, loss, loss scale, ECC SBE rate, MFU).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "detector/detector_impl.h"

namespace vigil {

using detector_internal::JobState;
using detector_internal::kHistory;
using detector_internal::kNaN;
using detector_internal::kNone;
using detector_internal::kNoStep;
using detector_internal::kOscWindow;
using detector_internal::kProfileSamples;
using detector_internal::LearnState;
using detector_internal::NodeState;
using detector_internal::Profile;
using detector_internal::ProfileEntry;
using detector_internal::SeriesAux;
using detector_internal::SeriesState;
using detector_internal::Stage;

namespace {

// A series whose inherited baseline disagrees with its own first samples by
// more than this many sigmas learns its own instead (the run differs).
constexpr double kInheritMismatchSigmas = 4;
constexpr int kInheritCheckSamples = 10;

}  // namespace

bool Detector::Impl::LearnSample(SeriesState& s, double x) {
  const BaselineOptions& bo = opt.baseline;
  ++s.evaluated;
  if (step && s.first_step == kNoStep) s.first_step = *step;
  if (std::isnan(s.learn_start_ts)) s.learn_start_ts = ts;
  if (s.learning == nullptr) s.learning = std::make_unique<LearnState>();
  LearnState& l = *s.learning;
  if (l.seen == 0 && s.stage == Stage::kLearning &&
      !s.traits->trending) {
    Inherit(s);
  }
  double keep = x;
  if (s.traits->trending) {
    if (std::isnan(s.level)) {
      s.level = x;
      return false;
    }
    keep = x - s.level;
    s.level += bo.trend_level_alpha * (x - s.level);
  }
  if (l.seen++ % s.stride == 0) {
    l.samples.push_back(keep);
    if (static_cast<int>(l.samples.size()) >= bo.learn_buffer) {
      l.samples.KeepEveryOther();
      s.stride *= 2;
    }
  }
  const int64_t progress =
      (step && s.first_step != kNoStep) ? *step - s.first_step : s.evaluated;
  const double elapsed = ts - s.learn_start_ts;
  const int kept = static_cast<int>(l.samples.size());
  if ((progress >= bo.learn_steps || elapsed >= bo.learn_max_s) &&
      kept >= bo.min_learn_samples) {
    l.samples.DecodeTo(&scratch);
    double median, sigma;
    detector_internal::RobustStats(scratch, &median, &sigma);
    if (!s.traits->trending) s.level = median;
    s.spread = sigma;
    s.stage = Stage::kLearned;
    s.widen = 1;
    s.learning.reset();  // `l` is gone
    if (s.aux != kNone) {
      SeriesAux& ax = aux[s.aux];
      if (!ax.learn_diffs.empty()) {
        scratch.assign(ax.learn_diffs.begin(), ax.learn_diffs.end());
        ax.diff_level = detector_internal::MedianInPlace(scratch);
        std::vector<float>().swap(ax.learn_diffs);
      }
    }
    if (!s.traits->trending) Contribute(s);
    return false;
  }
  if (s.traits->trending) return false;
  if (s.stage == Stage::kInherited) {
    if (l.seen == kInheritCheckSamples) {
      l.samples.DecodeTo(&scratch);
      const double own = detector_internal::MedianInPlace(scratch);
      if (std::fabs(own - s.level) > kInheritMismatchSigmas * Sigma(s)) {
        s.stage = Stage::kLearning;
        s.level = kNaN;
        s.spread = 0;
      }
    }
    return s.usable();
  }
  // Usable early: provisional statistics, recomputed each time the sample
  // has grown fourfold (two or three times per series), with a widened
  // band.
  if (kept >= bo.early_min_samples && elapsed >= bo.early_min_s &&
      (l.early_at == 0 || l.seen >= 4 * l.early_at)) {
    l.samples.DecodeTo(&scratch);
    double median, sigma;
    detector_internal::RobustStats(scratch, &median, &sigma);
    s.level = median;
    s.spread = sigma;
    const double n_eff =
        std::min(static_cast<double>(l.seen),
                 elapsed / std::max(1e-9, bo.early_decorrelation_s));
    s.widen = static_cast<float>(
        std::min(bo.early_max_widening,
                 detector_internal::BandWidening(bo.k_sigma, n_eff)));
    s.stage = Stage::kEarly;
    l.early_at = l.seen;
  }
  return s.usable();
}

void Detector::Impl::Inherit(SeriesState& s) {
  const NodeState& n = nodes[s.node];
  const JobState& j = jobs[n.job];
  const SeriesKey key = KeyOf(static_cast<uint32_t>(&s - series.data()));
  int live = 0;
  for (uint32_t p : j.nodes) live += nodes[p].retired || nodes[p].ended ? 0 : 1;
  for (const std::string* name : {&j.name, &j.family}) {
    if (name->empty()) continue;
    auto pit = profiles.find(*name);
    if (pit == profiles.end()) continue;
    const Profile& p = pit->second;
    if (p.nodes > 0 &&
        std::abs(live - p.nodes) >
            opt.lifecycle.family_node_tolerance * p.nodes + 1e-9) {
      continue;
    }
    auto eit = p.by_metric.find(key.metric);
    if (eit == p.by_metric.end() || eit->second.samples.empty()) continue;
    // A new series of the job: its level is the typical one, its spread
    // the typical spread plus how much the series differ from each other.
    scratch.clear();
    for (const auto& [level, spread] : eit->second.samples) {
      scratch.push_back(level);
    }
    double level, between;
    detector_internal::RobustStats(scratch, &level, &between);
    scratch.clear();
    for (const auto& [level, spread] : eit->second.samples) {
      scratch.push_back(spread);
    }
    const double within = detector_internal::MedianInPlace(scratch);
    s.level = level;
    s.spread = std::sqrt(within * within + between * between);
    s.stage = Stage::kInherited;
    s.widen = 1;
    return;
  }
}

void Detector::Impl::Contribute(const SeriesState& s) {
  const NodeState& n = nodes[s.node];
  const JobState& j = jobs[n.job];
  const std::string metric =
      KeyOf(static_cast<uint32_t>(&s - series.data())).metric;
  for (const std::string* name : {&j.name, &j.family}) {
    if (name->empty()) continue;
    Profile& p = profiles[*name];
    p.nodes = std::max(j.peak_nodes, 1);
    ProfileEntry& e = p.by_metric[metric];
    const std::pair<float, float> sample{static_cast<float>(s.level),
                                         static_cast<float>(s.spread)};
    if (e.samples.size() < kProfileSamples) {
      e.samples.push_back(sample);
    } else {
      e.samples[e.next] = sample;
      e.next = (e.next + 1) % kProfileSamples;
    }
  }
}

void Detector::Impl::Relearn(SeriesState& s) {
  s.stage = Stage::kLearning;
  s.learning.reset();
  s.stride = 1;
  s.widen = 1;
  s.learn_start_ts = ts;
  s.first_step = step ? *step : kNoStep;
  s.evaluated = 0;
  s.level = kNaN;
  s.spread = 0;
  s.sustain = Sustain();
  s.raised_dir = 0;
  s.raised_ts = kNaN;
}

void Detector::Impl::Adapt(SeriesState& s, double x, bool bad) {
  if (bad || !s.learned()) return;
  const BaselineOptions& bo = opt.baseline;
  const double sigma = Sigma(s);
  const double r = x - s.level;
  const double clip = bo.k_sigma * sigma;
  const double alpha =
      s.traits->trending ? bo.trend_level_alpha : bo.level_alpha;
  s.level += alpha * std::clamp(r, -clip, clip);
  s.spread +=
      bo.sigma_alpha * (1.2533 * std::min(std::fabs(r), clip) - s.spread);
}

void Detector::Impl::Baseline(SeriesState& s, uint32_t dense, double x) {
  if (!Learn(s, x)) return;
  if (std::isnan(s.level)) {
    // A trending series' level restarts after a re-warm (BeginRewarm).
    s.level = x;
    return;
  }
  const BaselineOptions& bo = opt.baseline;
  const double sigma = Sigma(s);
  const double k = bo.k_sigma * s.widen, k_clear = bo.k_clear * s.widen;
  const double z = (x - s.level) / sigma;
  const BaselineMode mode = s.traits->mode;
  const double bad = mode == BaselineMode::kHigh  ? z
                     : mode == BaselineMode::kLow ? -z
                                                  : std::fabs(z);
  const Sustain::Edge e = s.sustain.Observe(
      bad > k, bad < k_clear,
      s.traits->metric == Metric::kTrainDataloaderWait ? bo.dataloader_sustain
                                                      : bo.sustain);
  if (e == Sustain::Edge::kRaised) {
    s.raised_dir =
        (mode == BaselineMode::kHigh || (mode == BaselineMode::kBoth && z > 0))
            ? 1
            : -1;
    s.raised_ts = ts;
  }
  auto emit = [&](bool cleared) {
    Anomaly& a = Emit(s.raised_dir > 0 ? AnomalyKind::kBaselineHigh
                                       : AnomalyKind::kBaselineLow,
                      cleared, s.node, s.gpu, dense, x);
    a.baseline_mean = s.level;
    a.baseline_sigma = sigma;
    a.score = z;
  };
  if (e != Sustain::Edge::kNone) emit(e == Sustain::Edge::kCleared);
  if (s.traits->metric == Metric::kTrainStepTime) StepSlowdown(s, dense, x);
  if (s.traits->relearn && s.sustain.raised() &&
      ts - s.raised_ts >= bo.relearn_after_s) {
    // A level shift confirmed for this long is the new normal: one
    // incident, then a new baseline - not a report every few minutes.
    emit(true);
    out->back().detail = "level shift taken as the new baseline";
    Relearn(s);
    return;
  }
  Adapt(s, x, bad > k);
}

void Detector::Impl::Throughput(SeriesState& s, uint32_t dense, double x) {
  if (!Learn(s, x) || !(s.level > 0)) return;
  const TrendOptions& to = opt.trend;
  const double sigma = Sigma(s);
  const double z = (x - s.level) / sigma;
  const double drop = 1 - x / s.level;
  const bool low = z < -to.throughput_min_z * s.widen;
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

void Detector::Impl::StepSlowdown(SeriesState& s, uint32_t dense, double x) {
  // Jobs that report tokens/s are graded by it (Throughput); a job that
  // only reports its step time is graded by how much longer steps take.
  const NodeState& n = nodes[s.node];
  if (n.has_tokens || !(s.level > 0) || s.aux == kNone) return;
  SeriesAux& ax = aux[s.aux];
  const TrendOptions& to = opt.trend;
  const double sigma = Sigma(s);
  const double z = (x - s.level) / sigma;
  const double slower = x / s.level - 1;
  const bool high = z > to.throughput_min_z * s.widen;
  const Sustain::Edge e2 =
      ax.slow2.Observe(high && slower > to.throughput_severe,
                      slower < to.throughput_warn, to.throughput_sustain);
  const Sustain::Edge e1 =
      ax.slow1.Observe(high && slower > to.throughput_warn,
                      slower < to.throughput_clear, to.throughput_sustain);
  int tier = 0;
  if (e1 == Sustain::Edge::kRaised) {
    tier = ax.slow2.raised() ? 2 : 1;
  } else if (e2 == Sustain::Edge::kRaised && ax.slow1.raised() &&
             ax.slow_tier < 2) {
    tier = 2;
  }
  if (tier == 0 && e1 != Sustain::Edge::kCleared) return;
  const bool cleared = e1 == Sustain::Edge::kCleared;
  Anomaly& a =
      Emit(AnomalyKind::kThroughputDrop, cleared, s.node, kNone, dense, x);
  a.tier = cleared ? ax.slow_tier : tier;
  a.baseline_mean = s.level;
  a.baseline_sigma = sigma;
  a.score = slower;
  a.detail = absl::StrFormat("step time %.3g s, up %.0f %% from %.3g s", x,
                             100 * slower, s.level);
  ax.slow_tier = static_cast<int8_t>(cleared ? 0 : tier);
  if (cleared) ax.slow2 = Sustain();
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
  if (!s.learned()) {
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
