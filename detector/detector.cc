// Registration, pairs and runs, frame ingestion, benign-phase inference,
// red lines and XID conditions.
#include "detector/detector.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "detector/detector_impl.h"

namespace vigil {

using detector_internal::ClampTo;
using detector_internal::GpuState;
using detector_internal::JobState;
using detector_internal::KeyParts;
using detector_internal::kInf;
using detector_internal::kNaN;
using detector_internal::kNone;
using detector_internal::kNoStep;
using detector_internal::NodeState;
using detector_internal::SeriesAux;
using detector_internal::SeriesState;
using detector_internal::Stage;
using detector_internal::XidCondition;

// How many samples ahead ProcessFrame prefetches a series' state: far
// enough for a load from memory to land, near enough to stay in cache.
constexpr size_t kPrefetchSeriesAhead = 8;

namespace detector_internal {

absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

double MedianInPlace(std::vector<double>& v) {
  if (v.empty()) return kNaN;
  const size_t mid = v.size() / 2;
  if (v.size() <= 16) {
    // A node's GPUs: insertion sort beats nth_element's set-up.
    for (size_t i = 1; i < v.size(); ++i) {
      const double x = v[i];
      size_t k = i;
      for (; k > 0 && v[k - 1] > x; --k) v[k] = v[k - 1];
      v[k] = x;
    }
    return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
  }
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + mid));
}

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

double BandWidening(double k, double n_eff) {
  if (!(n_eff > 1)) n_eff = 1;
  // A MAD sigma is as good as a standard deviation from 37 % as many
  // samples: that many degrees of freedom.
  const double nu = std::max(2.0, 0.37 * (n_eff - 1));
  const double z = k, z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  const double t = z + (z3 + z) / (4 * nu) +
                   (5 * z5 + 16 * z3 + 3 * z) / (96 * nu * nu) +
                   (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * nu * nu * nu);
  return std::max(1.0, t * std::sqrt(1 + 1 / n_eff) / k);
}

}  // namespace detector_internal

Detector::Impl::Impl(const DetectorOptions& o) : opt(o) {
  if (!opt.lifecycle.family_pattern.empty()) {
    try {
      family_re.emplace(opt.lifecycle.family_pattern);
    } catch (const std::regex_error&) {
      family_re.reset();  // Validated by the caller; never fatal here.
    }
  }
}

JobFamilyMatcher::JobFamilyMatcher(const std::string& pattern) {
  if (pattern.empty()) return;
  try {
    re_.emplace(pattern);
  } catch (const std::regex_error&) {
    re_.reset();  // Validated by the caller; never fatal here.
  }
}

std::string JobFamilyMatcher::FamilyOf(std::string_view job) const {
  if (!re_) return "";
  std::match_results<std::string_view::const_iterator> match;
  if (std::regex_match(job.begin(), job.end(), match, *re_) &&
      match.size() > 1 && match[1].length() > 0)
    return match[1].str();
  return "";
}

Detector::Detector(const DetectorOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

Detector::~Detector() = default;

absl::Status Detector::ValidateOptions(const DetectorOptions& options) {
  try {
    std::regex re(options.lifecycle.family_pattern);
    if (re.mark_count() < 1 && !options.lifecycle.family_pattern.empty()) {
      return absl::InvalidArgumentError(
          "family_pattern needs a capture group (the family)");
    }
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("family_pattern is not a valid regex: ", e.what()));
  }
  return absl::OkStatus();
}

DetectorStats Detector::stats() const {
  DetectorStats s = impl_->stats;
  s.series = static_cast<int64_t>(impl_->series.size() -
                                  impl_->free_series.size());
  s.nodes =
      static_cast<int64_t>(impl_->nodes.size() - impl_->free_nodes.size());
  s.jobs = static_cast<int64_t>(impl_->jobs.size() - impl_->free_jobs.size());
  return s;
}

bool Detector::HasSeries(uint32_t id) const {
  return id < impl_->dense_of_id.size() && impl_->dense_of_id[id] != kNone;
}

void Detector::PrimeCounter(uint32_t id, double ts, double value) {
  if (!HasSeries(id) || !std::isfinite(ts) || !std::isfinite(value)) return;
  Impl& m = *impl_;
  const uint32_t dense = m.dense_of_id[id];
  if (!m.series[dense].traits->counter) return;
  m.primed_counters[dense] = {ts, value};
}

std::optional<SeriesBaseline> Detector::Baseline(uint32_t id) const {
  if (!HasSeries(id)) return std::nullopt;
  const Impl& m = *impl_;
  const SeriesState& s = m.series[m.dense_of_id[id]];
  SeriesBaseline b;
  b.learns = LearnsBaseline(*s.traits);
  b.learned = s.learned() && std::isfinite(s.level);
  b.usable = s.usable() && std::isfinite(s.level);
  b.k_sigma = m.opt.baseline.k_sigma * s.widen;
  b.rate = s.traits->counter;
  b.evaluated = s.evaluated;
  b.learn_target_steps = m.opt.baseline.learn_steps;
  b.learn_max_seconds = m.opt.baseline.learn_max_s;
  b.source = s.stage == Stage::kEarly       ? "early"
             : s.stage == Stage::kInherited ? "inherited"
             : s.stage == Stage::kLearned   ? "learned"
                                            : "learning";
  if (s.first_step != kNoStep && s.node != kNone &&
      m.nodes[s.node].step != kNoStep) {
    b.learn_progress_steps = m.nodes[s.node].step - s.first_step;
  } else {
    b.learn_progress_steps = s.evaluated;
  }
  if (std::isfinite(s.learn_start_ts) && s.node != kNone &&
      std::isfinite(m.nodes[s.node].last_ts)) {
    b.learn_progress_seconds = m.nodes[s.node].last_ts - s.learn_start_ts;
  }
  if (b.usable) {
    b.mean = s.level;
    b.sigma = m.Sigma(s);
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
    if (EncodeSeriesKey(m.KeyOf(m.dense_of_id[id])) == EncodeSeriesKey(key))
      return absl::OkStatus();
    return absl::AlreadyExistsError(
        absl::StrCat("series id ", id, " is already ",
                     m.KeyOf(m.dense_of_id[id]).ToString()));
  }
  if (id >= m.dense_of_id.size()) {
    m.dense_of_id.resize(std::max<size_t>(id + 1, m.dense_of_id.size() * 2),
                         kNone);
  }
  SeriesState s;
  s.id = id;
  auto [traits, added] = m.traits_by_metric.try_emplace(key.metric);
  if (added) traits->second = LookupMetric(key.metric);
  s.traits = &traits->second;
  int gpu = -1;
  if (std::string_view g = key.LabelValue("gpu");
      !g.empty() && absl::SimpleAtoi(detector_internal::AbslView(g), &gpu) &&
      gpu >= 0) {
    s.gpu_label = gpu;
  }
  const Metric metric = s.traits->metric;
  if (metric == Metric::kTrainLoss || metric == Metric::kTrainLossScale ||
      metric == Metric::kGpuEccSbe || metric == Metric::kTrainStepTime) {
    if (!m.free_aux.empty()) {
      s.aux = m.free_aux.back();
      m.free_aux.pop_back();
    } else {
      s.aux = static_cast<uint32_t>(m.aux.size());
      m.aux.emplace_back();
    }
  }
  uint32_t dense;
  if (!m.free_series.empty()) {
    dense = m.free_series.back();
    m.free_series.pop_back();
    m.series[dense] = std::move(s);
  } else {
    dense = static_cast<uint32_t>(m.series.size());
    m.series.push_back(std::move(s));
    m.keys.emplace_back();
  }
  m.SetKey(dense, key);
  m.dense_of_id[id] = dense;
  if (auto it = m.pending_series.find(id); it != m.pending_series.end()) {
    m.ApplySeries(dense, it->second);
    m.pending_series.erase(it);
  }
  return absl::OkStatus();
}

uint32_t Detector::Impl::NodeFor(std::string_view job_name,
                                 std::string_view node_name) {
  auto jit = job_by_name.find(detector_internal::AbslView(job_name));
  if (jit == job_by_name.end()) {
    uint32_t idx;
    if (!free_jobs.empty()) {
      idx = free_jobs.back();
      free_jobs.pop_back();
      jobs[idx] = JobState();
    } else {
      idx = static_cast<uint32_t>(jobs.size());
      jobs.emplace_back();
    }
    JobState& j = jobs[idx];
    j.name = std::string(job_name);
    if (auto it = pending_jobs.find(j.name); it != pending_jobs.end()) {
      // A run in progress when the snapshot was taken.
      j.run_start_ts = it->second.run_start_ts;
      j.last_checkpoint_ts = it->second.last_checkpoint_ts;
      j.longest_stall_s = it->second.longest_stall_s;
      pending_jobs.erase(it);
    }
    std::smatch match;
    if (family_re && std::regex_match(j.name, match, *family_re) &&
        match.size() > 1 && match[1].length() > 0) {
      j.family = match[1].str();
    }
    jit = job_by_name.emplace(j.name, idx).first;
  }
  JobState& j = jobs[jit->second];
  if (auto nit = j.nodes_by_name.find(detector_internal::AbslView(node_name));
      nit != j.nodes_by_name.end()) {
    return nit->second;
  }
  uint32_t idx;
  if (!free_nodes.empty()) {
    idx = free_nodes.back();
    free_nodes.pop_back();
    nodes[idx] = NodeState();
  } else {
    idx = static_cast<uint32_t>(nodes.size());
    nodes.emplace_back();
  }
  j.nodes_by_name.emplace(std::string(node_name), idx);
  j.nodes.push_back(idx);
  NodeState& n = nodes[idx];
  n.name = std::string(node_name);
  n.job = jit->second;
  n.retired = true;  // until Activate makes it the node's current pair
  ++run_state_changes;
  return idx;
}

void Detector::Impl::Activate(uint32_t idx, const FrameView& frame) {
  const NodeState& n = nodes[idx];
  // The common case: the node's current pair goes on.
  if (!n.retired && !n.ended) return;
  uint32_t previous = kNone;
  if (auto it = node_by_name.find(n.name);
      it != node_by_name.end() && it->second != idx) {
    const NodeState& old = nodes[it->second];
    if (!old.silent && !old.handed_over) previous = it->second;
  }
  ActivatePair(idx, frame);
  if (previous != kNone) CarryNodeErrors(previous, idx, frame.ts);
}

uint32_t detector_internal::StringInterner::Add(std::string_view s) {
  if (auto it = ids_.find(AbslView(s)); it != ids_.end()) {
    ++counts_[it->second];
    return it->second;
  }
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back();
    counts_.push_back(0);
  }
  strings_[id] = std::make_unique<std::string>(s);
  counts_[id] = 1;
  ids_.emplace(AbslView(*strings_[id]), id);
  return id;
}

void detector_internal::StringInterner::Release(uint32_t id) {
  if (--counts_[id] > 0) return;
  ids_.erase(AbslView(*strings_[id]));
  strings_[id].reset();
  free_.push_back(id);
}

void Detector::Impl::SetKey(uint32_t dense, const SeriesKey& key) {
  const bool sorted = std::is_sorted(key.labels.begin(), key.labels.end());
  SeriesKey shape{.metric = key.metric, .labels = {}};
  SeriesKey scope;
  for (const Label& label : key.labels) {
    const bool split = sorted && (label.first == "job" || label.first == "node");
    (split ? scope : shape).labels.push_back(label);
  }
  keys[dense] = KeyParts{.shape = key_shapes.Add(EncodeSeriesKey(shape)),
                         .scope = key_scopes.Add(EncodeSeriesKey(scope))};
}

void Detector::Impl::ClearKey(uint32_t dense) {
  KeyParts& parts = keys[dense];
  if (parts.shape == kNone) return;
  key_shapes.Release(parts.shape);
  key_scopes.Release(parts.scope);
  parts = KeyParts();
}

SeriesKey Detector::Impl::KeyOf(uint32_t dense) const {
  const KeyParts& parts = keys[dense];
  if (parts.shape == kNone) return SeriesKey();
  SeriesKey key = DecodeSeriesKey(key_shapes.Get(parts.shape)).value_or(SeriesKey());
  absl::StatusOr<SeriesKey> scope = DecodeSeriesKey(key_scopes.Get(parts.scope));
  if (scope.ok()) {
    // The shape's labels are sorted (or the scope is empty): put each back
    // where it was.
    for (Label& label : scope->labels) {
      auto at = std::upper_bound(key.labels.begin(), key.labels.end(), label);
      key.labels.insert(at, std::move(label));
    }
  }
  return key;
}

std::string Detector::Impl::NodeWideKey(uint32_t dense) const {
  SeriesKey key = KeyOf(dense);
  std::erase_if(key.labels, [](const auto& label) { return label.first == "job"; });
  return EncodeSeriesKey(key);
}

void Detector::Impl::CarryNodeErrors(uint32_t from, uint32_t to, double ts) {
  carry_pair = kNone;
  carry_values.clear();
  for (uint32_t d : nodes[from].series) {
    const SeriesState& s = series[d];
    if (s.traits->node_errors && std::isfinite(s.prev_raw) && s.prev_ts < ts)
      carry_values.emplace(NodeWideKey(d), std::make_pair(s.prev_ts, s.prev_raw));
  }
  if (carry_values.empty()) return;
  carry_pair = to;
  // Series of the pair from an earlier run here; the others when Bind
  // attaches them.
  for (uint32_t d : nodes[to].series) TakeCarry(d);
}

void Detector::Impl::TakeCarry(uint32_t dense) {
  const SeriesState& s = series[dense];
  if (!s.traits->node_errors) return;
  auto it = carry_values.find(NodeWideKey(dense));
  if (it == carry_values.end()) return;
  if (std::isfinite(s.prev_ts) && s.prev_ts >= it->second.first) return;
  carried_counters[dense] = it->second;
}

void Detector::Impl::ActivatePair(uint32_t idx, const FrameView& frame) {
  NodeState& n = nodes[idx];
  JobState& j = jobs[n.job];
  auto [it, inserted] = node_by_name.try_emplace(n.name, idx);
  if (!inserted && it->second != idx) {
    // The node moved on to another job: its old pair stops counting. No
    // silence alarm for the job it no longer runs.
    NodeState& old = nodes[it->second];
    old.retired = true;
    ++run_state_changes;
    if (old.silent) {
      old.silent = false;
      Emit(old.silent_idle ? AnomalyKind::kIdleNodeSilent
                           : AnomalyKind::kNodeSilent,
           true, it->second, kNone, kNone, 0);
    }
    it->second = idx;
  }
  if (n.ended) {
    // Frames of a job that ended on this node: an agent that lingers on
    // the finished job (its step frozen), or the job resumed here.
    if (frame.step && *frame.step != n.end_step) {
      n.ended = false;
      n.retired = false;
      ++run_state_changes;
      n.handed_over = false;
      StartRun(n, j, frame);
    }
    return;
  }
  if (n.retired) {
    n.retired = false;
    ++run_state_changes;
    n.handed_over = false;
    auto it = n.frames == 0
                  ? pending_runs.find(absl::StrCat(
                        j.name, absl::string_view("\0", 1), n.name))
                  : pending_runs.end();
    if (it == pending_runs.end()) {
      StartRun(n, j, frame);
      return;
    }
    // A run that was in progress when the snapshot was taken (the server
    // restarted): it goes on, it does not start again.
    const PendingRun& run = it->second;
    n.run_start_ts = run.run_start_ts;
    n.run_start_step = run.run_start_step;
    n.rewarm = run.rewarm;
    n.interval = run.interval;
    n.busy = run.busy;
    n.busy_frames = run.busy_frames;
    pending_runs.erase(it);
    if (std::isnan(j.run_start_ts)) j.run_start_ts = n.run_start_ts;
    int live = 0;
    for (uint32_t p : j.nodes) {
      live += nodes[p].retired || nodes[p].ended ? 0 : 1;
    }
    j.peak_nodes = std::max(j.peak_nodes, live);
  }
}

void Detector::Impl::StartRun(NodeState& n, JobState& j,
                              const FrameView& frame) {
  BeginRewarm(n, frame.ts, frame.step ? *frame.step : kNoStep);
  n.silent = false;
  n.step = kNoStep;
  n.in_dip = false;
  n.grace = 0;
  if (j.ended || std::isnan(j.run_start_ts)) {
    // A new run of the job: the first node to report starts it.
    j.ended = false;
    j.end_ts = kNaN;
    j.run_start_ts = frame.ts;
    j.last_checkpoint_ts = kNaN;
    j.hang_raised = false;
    j.has_steps = false;
    j.progressed = false;
    j.last_progress_ts = kNaN;
    j.awaiting_since = kNaN;
    j.unreachable_raised = false;
    j.peak_nodes = 0;
  }
  // The node's counters moved on while it ran other jobs: the first frame
  // of this run is their new starting point, not an increase.
  for (uint32_t d : n.series) {
    series[d].prev_raw = kNaN;
    series[d].prev_ts = kNaN;
  }
  int live = 0;
  for (uint32_t p : j.nodes) live += nodes[p].retired || nodes[p].ended ? 0 : 1;
  j.peak_nodes = std::max(j.peak_nodes, live);
}

void Detector::Impl::BeginRewarm(NodeState& n, double at, int64_t at_step) {
  n.rewarm = true;
  n.run_start_ts = at;
  n.run_start_step = at_step;
  for (uint32_t g : n.gpus) {
    gpus[g].mem_fit = EwLineFit();
    gpus[g].mem_fit_start = kNaN;
  }
  // The loss comes back at the checkpoint's value, above where the trend
  // had gone: the trend restarts from the first sample after the re-warm.
  // The debouncers stay: a condition raised before the restart clears
  // through them (a run that ended had them reset by EndPair).
  for (uint32_t d : n.series) {
    SeriesState& s = series[d];
    if (!s.traits->trending) continue;
    s.level = kNaN;
    if (s.aux != kNone) {
      aux[s.aux].prev = kNaN;
      aux[s.aux].diff_count = 0;
    }
  }
}

void Detector::Impl::Bind(SeriesState& s, uint32_t node) {
  s.node = node;
  NodeState& n = nodes[node];
  n.series.push_back(
      static_cast<uint32_t>(&s - series.data()));
  if (node == carry_pair) TakeCarry(n.series.back());
  if (s.traits->metric == Metric::kTrainLossScale) n.fp16 = true;
  if (s.traits->metric == Metric::kTrainTokensPerSecond) n.has_tokens = true;
  if (s.gpu_label < 0) return;
  for (uint32_t g : n.gpus) {
    if (gpus[g].index == s.gpu_label) {
      s.gpu = g;
      break;
    }
  }
  if (s.gpu == kNone) {
    if (!free_gpus.empty()) {
      s.gpu = free_gpus.back();
      free_gpus.pop_back();
      gpus[s.gpu] = GpuState();
    } else {
      s.gpu = static_cast<uint32_t>(gpus.size());
      gpus.emplace_back();
    }
    gpus[s.gpu].node = node;
    gpus[s.gpu].index = s.gpu_label;
    gpus[s.gpu].last_gpu_frame = n.gpu_frames;
    n.gpus.push_back(s.gpu);
    jobs[n.job].gpus.push_back(s.gpu);
  }
  if (s.traits->metric == Metric::kGpuMemoryUsed) {
    gpus[s.gpu].has_used_series = true;
  }
}

void Detector::Impl::Ingest(SeriesState& s, uint32_t node, double x) {
  NodeState& n = nodes[node];
  if (s.traits->counter) {
    s.inc = 0;
    s.cur = kNaN;
    if (std::isfinite(x)) {
      if (!std::isfinite(s.prev_raw) && !primed_counters.empty()) {
        // A new process's first sample: count from the value the series
        // had before (PrimeCounter), when that is earlier.
        auto it = primed_counters.find(
            static_cast<uint32_t>(&s - series.data()));
        if (it != primed_counters.end()) {
          if (it->second.first < ts) {
            s.prev_ts = it->second.first;
            s.prev_raw = it->second.second;
          }
          primed_counters.erase(it);
        }
      }
      if (!carried_counters.empty()) {
        // The run's first sample after the node came straight from another
        // job: count from that job's last value. Lower is no reset to
        // count from zero (another source, a driver reload): it starts here.
        auto it = carried_counters.find(
            static_cast<uint32_t>(&s - series.data()));
        if (it != carried_counters.end()) {
          if (it->second.first < ts && x >= it->second.second &&
              !(s.prev_ts >= it->second.first)) {
            s.prev_ts = it->second.first;
            s.prev_raw = it->second.second;
          }
          carried_counters.erase(it);
        }
      }
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
  if (s.traits->metric == Metric::kTrainPhase && std::isfinite(x)) {
    n.phase = ClampTo<int>(x);
  } else if (s.traits->metric == Metric::kTrainDataloaderWait &&
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
  switch (s.traits->metric) {
    case Metric::kGpuPower:
      g.power = x;
      n.core_gpu = true;
      break;
    case Metric::kGpuTemperature:
      n.core_gpu = true;
      break;
    case Metric::kGpuUtilization:
      g.util = x;
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

void Detector::NodeMovedAway(const FrameView& frame, std::vector<Anomaly>* out,
                             bool handed_over) {
  Impl& m = *impl_;
  auto it = m.node_by_name.find(detector_internal::AbslView(frame.node));
  if (it == m.node_by_name.end()) return;
  const uint32_t idx = it->second;
  m.out = out;
  m.ts = frame.ts;
  m.step.reset();
  NodeState& n = m.nodes[idx];
  if (!frame.job_end.job.empty() && m.jobs[n.job].name == frame.job_end.job &&
      !n.ended) {
    m.EndPair(idx, frame.ts, frame.job_end.step.value_or(n.step));
    m.MaybeJobEnded(n.job, frame.ts,
                    frame.job_end.reason.empty()
                        ? std::string_view("the nodes' agents reported its end")
                        : frame.job_end.reason);
  }
  // As in Activate for a node that moved on: its pair here stops counting.
  NodeState& moved = m.nodes[idx];
  moved.retired = true;
  ++m.run_state_changes;
  moved.handed_over = handed_over;
  if (moved.silent) {
    moved.silent = false;
    m.Emit(moved.silent_idle ? AnomalyKind::kIdleNodeSilent
                             : AnomalyKind::kNodeSilent,
           true, idx, kNone, kNone, 0);
  }
  m.node_by_name.erase(detector_internal::AbslView(frame.node));
  m.out = nullptr;
}

void Detector::ProcessFrame(const FrameView& frame, std::vector<Anomaly>* out) {
  Impl& m = *impl_;
  m.out = out;
  m.ts = frame.ts;
  m.step = frame.step;
  ++m.stats.frames;
  if (!frame.job_end.job.empty()) {
    // The node reports that a job ended on it (it now reports `frame.job`).
    auto jit = m.job_by_name.find(
        detector_internal::AbslView(frame.job_end.job));
    if (jit != m.job_by_name.end() && frame.job_end.job != frame.job) {
      JobState& ended = m.jobs[jit->second];
      auto nit =
          ended.nodes_by_name.find(detector_internal::AbslView(frame.node));
      if (nit != ended.nodes_by_name.end() && !m.nodes[nit->second].ended) {
        NodeState& p = m.nodes[nit->second];
        m.EndPair(nit->second, frame.ts,
                  frame.job_end.step.value_or(p.step));
        m.MaybeJobEnded(
            jit->second, frame.ts,
            frame.job_end.reason.empty()
                ? std::string_view("the nodes' agents reported its end")
                : frame.job_end.reason);
      }
    }
  }
  const uint32_t node = m.NodeFor(frame.job, frame.node);
  m.Activate(node, frame);
  m.cur_node = node;
  NodeState& n = m.nodes[node];
  JobState& j = m.jobs[n.job];
  ++n.frames;
  n.any_gpu = false;
  n.core_gpu = false;
  n.phase = -1;
  m.OnFrameTime(n, j, node, frame);
  const size_t count = std::min(frame.ids.size(), frame.values.size());
  m.stats.samples += static_cast<int64_t>(count);
  if (n.ended) {
    // An agent still reporting a job that ended here: alive, nothing more.
    m.out = nullptr;
    return;
  }

  // Pass 1: values and counter rates; gather node/GPU context.
  m.touched.clear();
  for (size_t i = 0; i < count; ++i) {
    // A second of a big cluster touches each series once, so its state is
    // out of cache: ask for that of the series a few places ahead while
    // this one is read.
    if (i + kPrefetchSeriesAhead < count && !m.series.empty()) {
      const uint32_t ahead = frame.ids[i + kPrefetchSeriesAhead];
      const uint32_t dense_ahead =
          ahead < m.dense_of_id.size() ? m.dense_of_id[ahead] : 0;
      const char* at = reinterpret_cast<const char*>(
          m.series.data() + std::min<size_t>(dense_ahead, m.series.size() - 1));
      __builtin_prefetch(at);
      __builtin_prefetch(at + sizeof(SeriesState) - 1);
    }
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
  if (ts >= m.next_forget) {
    m.next_forget = ts + 60;
    m.Forget(ts);
  }
  m.out = nullptr;
}

void Detector::Impl::UpdatePhase(NodeState& n, JobState& j) {
  const PhaseOptions& po = opt.phase;
  const LifecycleOptions& lo = opt.lifecycle;
  const bool phase_benign = n.phase == 1 || n.phase == 2;
  if (phase_benign) j.benign_phase_ts = seen;
  if (n.phase == 1) j.last_checkpoint_ts = ts;
  scratch.clear();
  for (uint32_t g : n.gpus) {
    const GpuState& gs = gpus[g];
    if (gs.seen_frame == n.frames && std::isfinite(gs.power)) {
      scratch.push_back(gs.power);
    }
  }
  if (n.rewarm) {
    const bool steps_done =
        n.run_start_step == kNoStep || !step ||
        *step - n.run_start_step >= lo.rewarm_steps;
    if (ts - n.run_start_ts >= lo.rewarm_s && steps_done) n.rewarm = false;
  }
  n.transient = false;
  n.power_shift = kNaN;
  if (!scratch.empty()) {
    const double med = detector_internal::MedianInPlace(scratch);
    if (std::isfinite(n.prev_median_power)) {
      const double scale = std::isfinite(n.busy)
                               ? n.busy
                               : std::max(med, n.prev_median_power);
      n.transient =
          std::fabs(med - n.prev_median_power) > po.transient_fraction * scale;
      n.power_shift = med - n.prev_median_power;
    }
    n.prev_median_power = med;
    const bool ready = n.busy_frames >= po.min_busy_frames;
    const bool dip = ready && (n.in_dip ? med < po.dip_exit_fraction * n.busy
                                        : med < po.dip_fraction * n.busy);
    if (dip && !n.in_dip) {
      n.dip_start_ts = ts;
      n.in_dip = true;
      // A dip the node reports as a checkpoint or an eval is not a stall.
      if (!phase_benign) RecordDip(n, j);
      // A job-wide dip is its checkpoint (or eval) when it reports no
      // phases: the work saved up to here is safe.
      if (n.phase < 0) j.last_checkpoint_ts = ts;
    }
    n.in_dip = dip;
    const bool long_dip = dip && ts - n.dip_start_ts > po.max_benign_dip_s;
    if ((!dip || long_dip) && !phase_benign && !n.rewarm) {
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
  // LR warm-up: the first steps of a job, bounded in time so that a job of
  // slow steps is not blind for hours.
  const bool young = !std::isfinite(j.run_start_ts) ||
                     ts - j.run_start_ts < opt.baseline.warmup_max_s;
  n.warmup = young && (step ? *step < opt.baseline.warmup_steps
                            : n.frames <= opt.baseline.warmup_steps);
  n.benign = benign_now || grace || n.warmup || n.rewarm;
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
    const SeriesKey key = KeyOf(dense);
    a.series_id = series[dense].id;
    a.metric = key.metric;
    a.dev = std::string(key.LabelValue("dev"));
  }
  return a;
}

void Detector::Impl::Evaluate(SeriesState& s, uint32_t dense) {
  const NodeState& n = nodes[s.node];
  const double x = s.cur;
  if (s.traits->metric == Metric::kGpuXidErrors) {
    Xid(s, dense);
    return;
  }
  RedLines(s, dense, x);
  if (s.traits->metric == Metric::kGpuEccSbe) EccSbe(s, dense);
  // Per-step metrics repeat between steps: only a new step is a sample.
  if (s.traits->per_step && step && !n.step_moved) return;
  if (!std::isfinite(x)) return;
  if (s.traits->metric == Metric::kTrainLossScale) {
    if (!n.warmup && !n.rewarm) LossScale(s, dense, x);
    return;
  }
  if (n.benign) return;
  switch (s.traits->metric) {
    case Metric::kTrainTokensPerSecond:
      Throughput(s, dense, x);
      return;
    case Metric::kTrainStepTime:
      StepSlowdown(s, dense, x);
      Baseline(s, dense, x);
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
      if (s.traits->mode != BaselineMode::kNone) Baseline(s, dense, x);
  }
}

void Detector::Impl::RedLines(SeriesState& s, uint32_t dense, double x) {
  const RedLineOptions& ro = opt.red_line;
  const Metric metric = s.traits->metric;
  std::optional<AnomalyKind> kind;
  bool hit = false;
  if (s.traits->red_line) {
    kind = s.traits->red_line;
    hit = s.inc > 0;
  } else if (metric == Metric::kTrainLoss) {
    kind = AnomalyKind::kLossNan;
    hit = !std::isfinite(x);
  } else if (metric == Metric::kTrainGradNorm) {
    kind = AnomalyKind::kGradNan;
    // fp16: GradScaler's scale search overflows during warm-up and now
    // and then later; only a long run of non-finite norms is a red line.
    const NodeState& n = nodes[s.node];
    // Count steps, not frames: one overflowing step repeats in every frame
    // until the next step (a checkpoint can hold it for a minute).
    if (!step || n.step_moved) {
      s.nonfinite_run = std::isfinite(x) ? 0 : s.nonfinite_run + 1;
    }
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
  const double value = s.traits->counter ? s.inc : x;
  if (hit) {
    s.red_calm = 0;
    if (s.red_raised) return;
    s.red_raised = true;
    Anomaly& a = Emit(*kind, false, s.node, s.gpu, dense, value);
    a.score = value;
    return;
  }
  if (s.red_raised && ++s.red_calm >= ro.clear_frames) {
    s.red_raised = false;
    s.red_calm = 0;
    Emit(*kind, true, s.node, s.gpu, dense, value);
  }
}

void Detector::Impl::Xid(SeriesState& s, uint32_t dense) {
  if (s.gpu == kNone) {
    // An XID counter without a GPU label: a plain red line.
    RedLines(s, dense, s.cur);
    return;
  }
  GpuState& g = gpus[s.gpu];
  const int code =
      std::isfinite(g.xid_last) ? ClampTo<int>(g.xid_last) : -1;
  auto emit = [&](XidCondition& c, bool cleared) {
    Anomaly& a = Emit(AnomalyKind::kXid, cleared, s.node, s.gpu, dense,
                      c.count);
    if (c.code >= 0) a.code = c.code;
    const double span = c.last_ts - c.first_ts;
    a.score = span > 0 ? c.count / span : c.count;
    a.detail = c.code >= 0 ? absl::StrCat("xid ", c.code) : "xid";
    if (c.count > 1) {
      absl::StrAppend(&a.detail, ", ", ClampTo<int64_t>(c.count),
                      " events");
      if (span > 0) {
        absl::StrAppend(&a.detail, " in ", ClampTo<int64_t>(span),
                        " s");
      }
    }
  };
  if (s.inc > 0) {
    XidCondition* c = nullptr;
    for (XidCondition& x : g.xids) {
      if (x.code == code) c = &x;
    }
    if (c == nullptr) {
      c = &g.xids.emplace_back();
      c->code = code;
    }
    if (!c->raised) {
      c->raised = true;
      c->count = 0;
      c->first_ts = ts;
      c->reported = 0;
    }
    c->count += s.inc;
    c->last_ts = ts;
    c->calm = 0;
    // One condition per code however long the storm: raised once, then
    // updated (count, rate) each time the count grows tenfold.
    if (c->reported == 0 || c->count >= 10 * c->reported) {
      c->reported = c->count;
      emit(*c, false);
    }
  }
  for (XidCondition& c : g.xids) {
    if (!c.raised || c.last_ts == ts) continue;
    if (++c.calm >= opt.red_line.clear_frames) {
      c.raised = false;
      emit(c, true);
    }
  }
  std::erase_if(g.xids, [](const XidCondition& c) { return !c.raised; });
}

}  // namespace vigil
