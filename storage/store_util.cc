#include "storage/store_util.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace vigil {
namespace {

uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Folds a value into min/max/sum/count fields shared by both structs.
template <typename T>
void Fold(T* p, double value) {
  ++p->count;
  if (std::isnan(value)) {
    ++p->nan_count;
    return;
  }
  if (p->count - p->nan_count == 1) {
    p->min = p->max = value;
    p->sum = value;
    return;
  }
  p->min = std::min(p->min, value);
  p->max = std::max(p->max, value);
  p->sum += value;
}

template <typename A, typename B>
void FoldAll(A* p, const B& other) {
  if (other.count == 0) return;
  const uint64_t mine = p->count - p->nan_count;
  const uint64_t theirs = other.count - other.nan_count;
  if (theirs > 0) {
    if (mine == 0) {
      p->min = other.min;
      p->max = other.max;
      p->sum = other.sum;
    } else {
      p->min = std::min(p->min, other.min);
      p->max = std::max(p->max, other.max);
      p->sum += other.sum;
    }
  }
  p->count += other.count;
  p->nan_count += other.nan_count;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

int64_t TsToMillis(double ts) { return std::llround(ts * 1000.0); }

double MillisToTs(int64_t ms) { return static_cast<double>(ms) / 1000.0; }

absl::Status ValidateFrames(std::span<const FrameColumns> frames,
                            size_t num_series) {
  // Millisecond timestamps must fit int64 comfortably.
  constexpr double kMaxAbsTs = 9e12;
  for (size_t f = 0; f < frames.size(); ++f) {
    const FrameColumns& frame = frames[f];
    if (!std::isfinite(frame.ts) || std::fabs(frame.ts) > kMaxAbsTs)
      return absl::InvalidArgumentError(
          absl::StrCat("frame ", f, ": timestamp ", frame.ts,
                       " is not a finite Unix time"));
    if (frame.ids.size() != frame.values.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "frame ", f, ": ", frame.ids.size(), " series ids but ",
          frame.values.size(), " values"));
    for (SeriesId id : frame.ids) {
      if (id >= num_series)
        return absl::InvalidArgumentError(
            absl::StrCat("frame ", f, ": unknown series id ", id));
    }
  }
  return absl::OkStatus();
}

SampleVerdict ClassifySample(SeriesCursor* cursor, int64_t ts_ms,
                             double value) {
  const uint64_t bits = Bits(value);
  if (cursor->has_last && ts_ms <= cursor->last_ms) {
    if (ts_ms == cursor->last_ms && bits == cursor->last_bits)
      return SampleVerdict::kDuplicate;
    return SampleVerdict::kOutOfOrder;
  }
  cursor->has_last = true;
  cursor->last_ms = ts_ms;
  cursor->last_bits = bits;
  return SampleVerdict::kAccept;
}

void CountVerdict(SampleVerdict verdict, AppendResult* result) {
  switch (verdict) {
    case SampleVerdict::kAccept:
      ++result->accepted;
      break;
    case SampleVerdict::kDuplicate:
      ++result->duplicates;
      break;
    case SampleVerdict::kOutOfOrder:
      ++result->out_of_order;
      break;
  }
}

int64_t MinuteOf(int64_t ts_ms) {
  int64_t m = ts_ms / 60000;
  if (ts_ms % 60000 < 0) --m;
  return m * 60000;
}

void AddToRollup(RollupPoint* point, double value) { Fold(point, value); }

void MergeRollup(RollupPoint* point, const RollupPoint& other) {
  FoldAll(point, other);
}

void RollUp(std::span<const int64_t> ts_ms, std::span<const double> values,
            std::vector<RollupPoint>* rollups) {
  for (size_t i = 0; i < ts_ms.size(); ++i) {
    const int64_t minute = MinuteOf(ts_ms[i]);
    if (rollups->empty() || rollups->back().minute_ms != minute) {
      rollups->push_back(RollupPoint{.minute_ms = minute});
    }
    AddToRollup(&rollups->back(), values[i]);
  }
}

std::vector<RollupPoint> MergeRollups(const std::vector<RollupPoint>& a,
                                      const std::vector<RollupPoint>& b) {
  std::vector<RollupPoint> out;
  out.reserve(a.size() + b.size());
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].minute_ms < b[j].minute_ms)) {
      out.push_back(a[i++]);
    } else if (i == a.size() || b[j].minute_ms < a[i].minute_ms) {
      out.push_back(b[j++]);
    } else {
      out.push_back(a[i++]);
      MergeRollup(&out.back(), b[j++]);
    }
  }
  return out;
}

AggregateBuilder::AggregateBuilder(double from, double to, double step)
    : from_(from), to_(to), step_(step) {}

Aggregate* AggregateBuilder::Bucket(double ts) {
  const int64_t index = static_cast<int64_t>(std::floor(ts / step_));
  if (last_ != nullptr && index == last_index_) return last_;
  auto [it, inserted] = buckets_.try_emplace(index);
  if (inserted) {
    it->second = Aggregate{.start = static_cast<double>(index) * step_,
                           .min = kNaN,
                           .max = kNaN,
                           .sum = 0,
                           .count = 0,
                           .nan_count = 0};
  }
  last_index_ = index;
  last_ = &it->second;
  return last_;
}

void AggregateBuilder::AddSample(int64_t ts_ms, double value) {
  const double ts = MillisToTs(ts_ms);
  if (ts < from_ || ts >= to_) return;
  Fold(Bucket(ts), value);
}

void AggregateBuilder::AddRollup(const RollupPoint& point) {
  const double ts = MillisToTs(point.minute_ms);
  if (ts < from_ || ts >= to_) return;
  FoldAll(Bucket(ts), point);
}

std::vector<Aggregate> AggregateBuilder::Finish() const {
  std::vector<Aggregate> out;
  out.reserve(buckets_.size());
  for (const auto& [index, bucket] : buckets_) out.push_back(bucket);
  return out;
}

absl::Status ValidateStep(double step) {
  if (!std::isfinite(step) || step <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("step must be a positive number of seconds, got ", step));
  return absl::OkStatus();
}

absl::Status ExpiredSeriesError(SeriesId id) {
  return absl::FailedPreconditionError(absl::StrCat(
      "series id ", id,
      " has expired (all its data is past retention); resolve its key again"));
}

bool MatchesFilter(const SeriesKey& key, const SeriesFilter& filter) {
  return (filter.metric.empty() || key.metric == filter.metric) &&
         (filter.job.empty() || key.LabelValue("job") == filter.job) &&
         (filter.node.empty() || key.LabelValue("node") == filter.node);
}

}  // namespace vigil
