#include "server/fleet/fleet_view.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"

namespace vigil {
namespace {

// The metrics the view keeps; GPU readings first, then the job figures.
enum Tracked : int8_t {
  kPower, kTemperature, kSmClock, kThrottle, kUtilization,
  kTokens, kStepTime, kMfu, kTrackedCount
};
constexpr std::string_view kTrackedNames[kTrackedCount] = {
    "gpu_power_watts",        "gpu_temperature_celsius", "gpu_sm_clock_mhz",
    "gpu_throttle_reasons",   "gpu_utilization_ratio",   "train_tokens_per_second",
    "train_step_time_seconds", "train_mfu_ratio"};

bool IsGpuReading(int kind) { return kind >= kPower && kind <= kUtilization; }

// The job figure a train metric feeds (its samples are aggregated), or -1.
int FigureOf(int kind) {
  if (kind == kTokens) return static_cast<int>(JobFigure::kTokensPerSecond);
  if (kind == kMfu) return static_cast<int>(JobFigure::kMfu);
  return -1;
}

// The figure whose baseline a train metric's series gives, or -1.
int BaselineFigureOf(int kind) {
  if (kind == kStepTime) return static_cast<int>(JobFigure::kStepRate);
  return FigureOf(kind);
}

void SetReading(GpuReading& g, int kind, double v) {
  switch (kind) {
    case kPower: g.power_watts = v; break;
    case kTemperature: g.temperature_celsius = v; break;
    case kSmClock: g.sm_clock_mhz = v; break;
    case kThrottle: g.throttle_reasons = v; break;
    case kUtilization: g.utilization = v; break;
    default: break;
  }
}

// `options` with nonsense replaced by the defaults.
FleetViewOptions Checked(FleetViewOptions options) {
  const FleetViewOptions defaults;
  if (!(options.bucket_seconds > 0)) options.bucket_seconds = defaults.bucket_seconds;
  if (options.buckets < 1) options.buckets = defaults.buckets;
  if (!(options.forget_job_seconds > 0)) options.forget_job_seconds = defaults.forget_job_seconds;
  return options;
}

}  // namespace

FleetView::FleetView(const SeriesStore* store, FleetViewOptions options)
    : store_(store), options_(Checked(options)) {}

FleetView::Slot FleetView::Resolve(uint32_t id) {
  if (id >= slots_.size()) slots_.resize(std::max<size_t>(id + 1, slots_.size() * 5 / 4));
  Slot& slot = slots_[id];
  if (slot.resolved) return slot;
  slot.resolved = true;
  absl::StatusOr<SeriesKey> key = store_->Key(id);
  if (key.ok()) {
    for (int k = 0; k < kTrackedCount; ++k) {
      if (key->metric == kTrackedNames[k]) slot.kind = static_cast<int8_t>(k);
    }
    const std::string_view gpu = key->LabelValue("gpu");
    int number = -1;
    if (!gpu.empty() &&
        absl::SimpleAtoi(absl::string_view(gpu.data(), gpu.size()), &number) &&
        number >= 0 && number <= INT16_MAX)
      slot.gpu = static_cast<int16_t>(number);
    if (IsGpuReading(slot.kind) && slot.gpu < 0) slot.kind = -1;
  }
  return slot;
}

FleetView::Bucket* FleetView::BucketAt(JobState& job, double ts) {
  const double width = options_.bucket_seconds;
  const double start = std::floor(ts / width) * width;
  std::deque<Bucket>& buckets = job.buckets;
  if (buckets.empty() || start > buckets.back().start) {
    // Open the bucket, with empty ones for a gap; keep the newest.
    double next = buckets.empty() ? start : buckets.back().start + width;
    if (start - next > width * options_.buckets) next = start - width * (options_.buckets - 1);
    for (; next <= start + width / 2; next += width) {
      buckets.push_back(Bucket{});
      buckets.back().start = next;
    }
    while (static_cast<int>(buckets.size()) > options_.buckets) buckets.pop_front();
  }
  if (start < buckets.front().start) return nullptr;  // older than the window
  const size_t index =
      static_cast<size_t>(std::llround((start - buckets.front().start) / width));
  return index < buckets.size() ? &buckets[index] : nullptr;
}

void FleetView::OnFrame(const FrameView& frame) {
  std::lock_guard<std::mutex> l(mu_);
  if (frame.ts >= next_forget_ts_) {
    ForgetEndedJobs(frame.ts);
    next_forget_ts_ = frame.ts + std::min(600.0, options_.forget_job_seconds / 4);
  }
  auto node_it = nodes_.find(frame.node);
  if (node_it == nodes_.end())
    node_it = nodes_.emplace(std::string(frame.node), Node{}).first;
  Node& node = node_it->second;
  if (node.job != frame.job) {
    node = Node{};
    node.job = std::string(frame.job);
  }
  if (frame.ts >= node.last_frame_ts) {
    node.verified_job_id = std::string(frame.verified_job_id);
    node.claimed = frame.claimed_node;
  }
  node.last_frame_ts = std::max(node.last_frame_ts, frame.ts);
  if (frame.step) node.step = frame.step;
  auto job_it = jobs_.find(node.job);
  if (job_it == jobs_.end()) job_it = jobs_.emplace(node.job, JobState{}).first;
  JobState& job = job_it->second;
  job.last_frame_ts = std::max(job.last_frame_ts, frame.ts);
  if (frame.step && (!job.step || *frame.step > *job.step)) job.step = frame.step;
  Bucket* bucket = BucketAt(job, frame.ts);
  if (bucket != nullptr && frame.step) {
    if (std::isnan(bucket->first_ts) || frame.ts < bucket->first_ts) {
      bucket->first_ts = frame.ts;
      bucket->first_step = *frame.step;
    }
    if (std::isnan(bucket->last_ts) || frame.ts >= bucket->last_ts) {
      bucket->last_ts = frame.ts;
      bucket->last_step = *frame.step;
    }
  }
  const size_t n = std::min(frame.ids.size(), frame.values.size());
  for (size_t i = 0; i < n; ++i) {
    const Slot slot = Resolve(frame.ids[i]);
    if (slot.kind < 0) continue;
    const double v = frame.values[i];
    if (IsGpuReading(slot.kind)) {
      GpuReading& g = node.gpus[slot.gpu];
      g.gpu = slot.gpu;
      g.ts = std::max(g.ts, frame.ts);
      SetReading(g, slot.kind, v);
      continue;
    }
    if (const int f = BaselineFigureOf(slot.kind); f >= 0 && !slot.listed) {
      job.series[f].push_back(frame.ids[i]);
      slots_[frame.ids[i]].listed = true;
    }
    const int f = FigureOf(slot.kind);
    if (f < 0 || bucket == nullptr || !std::isfinite(v)) continue;
    bucket->sum[f] += v;
    ++bucket->count[f];
    if (node.reported_bucket[f] != bucket->start) {
      node.reported_bucket[f] = bucket->start;
      ++bucket->nodes[f];
    }
  }
}

void FleetView::ForgetEndedJobs(double now) {
  absl::flat_hash_set<std::string_view> running;
  for (const auto& [name, node] : nodes_) running.insert(node.job);
  std::erase_if(jobs_, [&](const auto& entry) {
    const auto& [name, job] = entry;
    return !running.contains(name) &&
           now - job.last_frame_ts > options_.forget_job_seconds;
  });
}

JobSnapshot FleetView::Snapshot(const std::string& name,
                                const JobState& job) const {
  JobSnapshot s;
  s.job = name;
  s.last_frame_ts = job.last_frame_ts;
  s.step = job.step;
  s.series = job.series;
  for (const auto& [node_name, node] : nodes_) {
    if (node.job == name) s.nodes.push_back(node_name);
  }
  const int tokens = static_cast<int>(JobFigure::kTokensPerSecond);
  const int mfu = static_cast<int>(JobFigure::kMfu);
  const int rate = static_cast<int>(JobFigure::kStepRate);
  for (const Bucket& b : job.buckets) {
    FigurePoint p{b.start, NAN};
    if (b.last_ts > b.first_ts)
      p.value = (b.last_step - b.first_step) / (b.last_ts - b.first_ts);
    s.spark[rate].push_back(p);
    p.value = b.count[tokens] ? b.sum[tokens] / b.count[tokens] * b.nodes[tokens] : NAN;
    s.spark[tokens].push_back(p);
    p.value = b.count[mfu] ? b.sum[mfu] / b.count[mfu] : NAN;
    s.spark[mfu].push_back(p);
  }
  return s;
}

std::vector<NodeSnapshot> FleetView::Nodes() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<NodeSnapshot> out;
  out.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) {
    NodeSnapshot s{name, node.job, node.verified_job_id, node.last_frame_ts,
                   node.step, {}, node.claimed};
    s.gpus.reserve(node.gpus.size());
    for (const auto& [index, gpu] : node.gpus) s.gpus.push_back(gpu);
    out.push_back(std::move(s));
  }
  return out;
}

bool FleetView::IsClaimedNode(const std::string& node) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.claimed;
}

std::vector<JobSnapshot> FleetView::Jobs() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<JobSnapshot> out;
  for (const auto& [name, job] : jobs_) out.push_back(Snapshot(name, job));
  return out;
}

std::optional<VerifiedJob> FleetView::FindVerifiedJob(
    const std::string& job, const std::string& prefer) const {
  std::lock_guard<std::mutex> l(mu_);
  std::optional<VerifiedJob> found;
  for (const auto& [name, node] : nodes_) {
    if (node.job != job || node.verified_job_id.empty()) continue;
    if (name == prefer) return VerifiedJob{node.verified_job_id, name};
    if (!found) found = VerifiedJob{node.verified_job_id, name};
  }
  return found;
}

std::optional<JobSnapshot> FleetView::Job(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return std::nullopt;
  return Snapshot(name, it->second);
}

}  // namespace vigil
