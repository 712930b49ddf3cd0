// Internal helpers shared by the SeriesStore implementations: time
// conversion, input validation, the out-of-order policy and downsampling.
// Not part of the public storage interface.
#ifndef VIGIL_STORAGE_STORE_UTIL_H_
#define VIGIL_STORAGE_STORE_UTIL_H_

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "storage/series_store.h"

namespace vigil {

// Unix seconds -> integer milliseconds (rounded to nearest) and back.
int64_t TsToMillis(double ts);
double MillisToTs(int64_t ms);

// OK if every frame has finite ts, equal-length columns and ids below
// `num_series`; otherwise kInvalidArgument naming the first problem.
absl::Status ValidateFrames(std::span<const FrameColumns> frames,
                            size_t num_series);

// Last accepted sample of a series, for the out-of-order policy.
struct SeriesCursor {
  bool has_last = false;
  int64_t last_ms = 0;
  uint64_t last_bits = 0;  // bit pattern of the last value
};

enum class SampleVerdict { kAccept, kDuplicate, kOutOfOrder };

// Applies the policy of AppendResult: a later ts is accepted (and becomes
// the cursor); the same ts with the bitwise-same value is a duplicate; an
// earlier ts, or the same ts with another value, is out of order.
SampleVerdict ClassifySample(SeriesCursor* cursor, int64_t ts_ms,
                             double value);

// Counts `verdict` into `result`.
void CountVerdict(SampleVerdict verdict, AppendResult* result);

// 1-minute rollup of one series: min/max/sum over non-NaN values.
struct RollupPoint {
  int64_t minute_ms = 0;  // start of the minute
  double min = 0;
  double max = 0;
  double sum = 0;
  uint64_t count = 0;      // samples, NaN included
  uint64_t nan_count = 0;  // NaN samples
};

// Start of the minute holding `ts_ms`.
int64_t MinuteOf(int64_t ts_ms);

// Folds one sample into `point` (whose minute_ms is set by the caller).
void AddToRollup(RollupPoint* point, double value);
// Folds `other` (same minute) into `point`.
void MergeRollup(RollupPoint* point, const RollupPoint& other);

// Appends the samples (in time order) to `rollups` (sorted by minute),
// merging into the last point when it is the same minute.
void RollUp(std::span<const int64_t> ts_ms, std::span<const double> values,
            std::vector<RollupPoint>* rollups);

// Merges two minute-sorted rollup vectors; equal minutes are combined.
std::vector<RollupPoint> MergeRollups(const std::vector<RollupPoint>& a,
                                      const std::vector<RollupPoint>& b);

// Builds QueryAggregate buckets from raw samples and rollup minutes. A
// rollup minute counts in the bucket holding its start.
class AggregateBuilder {
 public:
  // `step` > 0 seconds; only data with from <= ts < to is counted.
  AggregateBuilder(double from, double to, double step);
  void AddSample(int64_t ts_ms, double value);
  void AddRollup(const RollupPoint& point);
  // Non-empty buckets in time order.
  std::vector<Aggregate> Finish() const;

 private:
  Aggregate* Bucket(double ts);

  double from_;
  double to_;
  double step_;
  std::map<int64_t, Aggregate> buckets_;
  int64_t last_index_ = 0;
  Aggregate* last_ = nullptr;
};

// kInvalidArgument unless step is finite and > 0.
absl::Status ValidateStep(double step);

// Append's refusal of a series that left the index (kFailedPrecondition).
absl::Status ExpiredSeriesError(SeriesId id);

// Whether `key` matches the label fields of `filter` (not its page).
bool MatchesFilter(const SeriesKey& key, const SeriesFilter& filter);

}  // namespace vigil

#endif  // VIGIL_STORAGE_STORE_UTIL_H_
