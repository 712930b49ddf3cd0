// The in-memory SeriesStore: same contract as the RocksDB store, no
// durability. Raw samples past raw retention are folded into 1-minute
// rollups, which are dropped past rollup retention.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "storage/series_store.h"
#include "storage/store_util.h"

namespace vigil {
namespace {

// Clock seconds between retention passes triggered by Append().
constexpr double kRetentionInterval = 600;

struct MemorySeries {
  SeriesKey key;
  SeriesCursor cursor;
  std::vector<int64_t> ts_ms;
  std::vector<double> values;
  std::vector<RollupPoint> rollups;  // sorted by minute, older than raw
  bool expired = false;  // left the index (EnforceRetention)
};

class MemoryStore : public SeriesStore {
 public:
  explicit MemoryStore(const StoreOptions& options)
      : options_(options),
        next_retention_(options.clock->Now() + kRetentionInterval) {}

  absl::StatusOr<SeriesId> Resolve(const SeriesKey& key) override {
    SeriesKey normal = key;
    if (auto s = NormalizeSeriesKey(&normal); !s.ok()) return s;
    absl::MutexLock l(&mu_);
    auto it = ids_.find(normal);
    if (it != ids_.end()) return it->second;
    if (series_.size() - expired_ >= options_.max_series)
      return absl::ResourceExhaustedError(
          absl::StrCat("series limit ", options_.max_series, " reached"));
    const SeriesId id = static_cast<SeriesId>(series_.size());
    series_.emplace_back().key = normal;
    ids_.emplace(std::move(normal), id);
    return id;
  }

  absl::StatusOr<SeriesId> Find(const SeriesKey& key) const override {
    SeriesKey normal = key;
    if (auto s = NormalizeSeriesKey(&normal); !s.ok()) return s;
    absl::MutexLock l(&mu_);
    auto it = ids_.find(normal);
    if (it == ids_.end()) return absl::NotFoundError("no such series");
    return it->second;
  }

  absl::StatusOr<SeriesKey> Key(SeriesId id) const override {
    absl::MutexLock l(&mu_);
    if (id >= series_.size() || series_[id].expired)
      return absl::NotFoundError(absl::StrCat("unknown series id ", id));
    return series_[id].key;
  }

  std::vector<SeriesInfo> ListSeries(const SeriesFilter& filter) const override {
    absl::MutexLock l(&mu_);
    std::vector<SeriesInfo> out;
    for (SeriesId id = filter.start; id < series_.size() && out.size() < filter.limit;
         ++id) {
      const MemorySeries& s = series_[id];
      if (!s.expired && MatchesFilter(s.key, filter))
        out.push_back(SeriesInfo{.id = id, .key = s.key});
    }
    return out;
  }

  absl::Status Append(std::span<const FrameColumns> frames,
                      AppendResult* result) override {
    AppendResult local;
    bool retention_due = false;
    {
      absl::MutexLock l(&mu_);
      if (auto s = ValidateFrames(frames, series_.size()); !s.ok()) return s;
      if (expired_ > 0) {
        for (const FrameColumns& frame : frames) {
          for (SeriesId id : frame.ids) {
            if (series_[id].expired) return ExpiredSeriesError(id);
          }
        }
      }
      for (const FrameColumns& frame : frames) {
        const int64_t ts_ms = TsToMillis(frame.ts);
        for (size_t i = 0; i < frame.ids.size(); ++i) {
          MemorySeries& s = series_[frame.ids[i]];
          const SampleVerdict v = ClassifySample(&s.cursor, ts_ms, frame.values[i]);
          CountVerdict(v, &local);
          if (v != SampleVerdict::kAccept) continue;
          s.ts_ms.push_back(ts_ms);
          s.values.push_back(frame.values[i]);
        }
      }
      appended_ += local.accepted;
      dropped_ += local.duplicates + local.out_of_order;
      const double now = options_.clock->Now();
      if (now >= next_retention_) {
        next_retention_ = now + kRetentionInterval;
        retention_due = true;
      }
    }
    if (result != nullptr) *result = local;
    if (retention_due) return EnforceRetention();
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Sample>> Query(SeriesId id, double from,
                                            double to) const override {
    absl::MutexLock l(&mu_);
    if (id >= series_.size() || series_[id].expired)
      return absl::NotFoundError(absl::StrCat("unknown series id ", id));
    const MemorySeries& s = series_[id];
    const int64_t from_ms = TsToMillis(from);
    auto begin = std::lower_bound(s.ts_ms.begin(), s.ts_ms.end(), from_ms);
    std::vector<Sample> out;
    for (auto it = begin; it != s.ts_ms.end(); ++it) {
      const double ts = MillisToTs(*it);
      if (ts < from) continue;
      if (ts >= to) break;
      out.push_back(Sample{ts, s.values[it - s.ts_ms.begin()]});
    }
    return out;
  }

  absl::StatusOr<std::vector<Aggregate>> QueryAggregate(
      SeriesId id, double from, double to, double step) const override {
    if (auto s = ValidateStep(step); !s.ok()) return s;
    absl::MutexLock l(&mu_);
    if (id >= series_.size() || series_[id].expired)
      return absl::NotFoundError(absl::StrCat("unknown series id ", id));
    const MemorySeries& s = series_[id];
    AggregateBuilder builder(from, to, step);
    for (const RollupPoint& p : s.rollups) builder.AddRollup(p);
    auto begin = std::lower_bound(s.ts_ms.begin(), s.ts_ms.end(),
                                  TsToMillis(from) - 1);
    for (auto it = begin; it != s.ts_ms.end(); ++it) {
      builder.AddSample(*it, s.values[it - s.ts_ms.begin()]);
      if (MillisToTs(*it) >= to) break;
    }
    return builder.Finish();
  }

  absl::StatusOr<uint64_t> AppendEvent(const Event& event) override {
    if (event.stream.empty())
      return absl::InvalidArgumentError("event stream is empty");
    absl::MutexLock l(&mu_);
    Event stored = event;
    stored.seq = next_seq_++;
    auto& list = events_[event.stream];
    // Keep each stream sorted by (ts, seq).
    auto pos = std::upper_bound(
        list.begin(), list.end(), stored,
        [](const Event& a, const Event& b) { return a.ts < b.ts; });
    list.insert(pos, std::move(stored));
    return next_seq_ - 1;
  }

  absl::Status DeleteEventsBefore(std::string_view stream, double ts) override {
    if (stream.empty()) return absl::InvalidArgumentError("event stream is empty");
    if (std::isnan(ts)) return absl::InvalidArgumentError("cutoff is NaN");
    absl::MutexLock l(&mu_);
    auto it = events_.find(std::string(stream));
    if (it == events_.end()) return absl::OkStatus();
    // Sorted by ts: drop the prefix below the cutoff's millisecond.
    const double cutoff = std::floor(ts * 1000.0) / 1000.0;
    auto end = std::lower_bound(
        it->second.begin(), it->second.end(), cutoff,
        [](const Event& e, double t) { return e.ts < t; });
    it->second.erase(it->second.begin(), end);
    return absl::OkStatus();
  }

  std::vector<Event> ListEvents(std::string_view stream, double from,
                                double to, size_t limit) const override {
    absl::MutexLock l(&mu_);
    std::vector<Event> out;
    auto it = events_.find(std::string(stream));
    if (it == events_.end()) return out;
    for (const Event& e : it->second) {
      if (out.size() >= limit) break;
      if (e.ts >= from && e.ts < to) out.push_back(e);
    }
    return out;
  }

  absl::Status PutState(std::string_view key, std::string_view value) override {
    if (key.empty()) return absl::InvalidArgumentError("state key is empty");
    absl::MutexLock l(&mu_);
    state_[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> GetState(std::string_view key) const override {
    absl::MutexLock l(&mu_);
    auto it = state_.find(std::string(key));
    if (it == state_.end())
      return absl::NotFoundError(absl::StrCat("no state under \"", std::string(key), "\""));
    return it->second;
  }

  absl::Status Flush() override { return absl::OkStatus(); }

  absl::Status EnforceRetention() override {
    absl::MutexLock l(&mu_);
    const double now = options_.clock->Now();
    const int64_t raw_cutoff = TsToMillis(now - options_.retention.raw_seconds);
    const int64_t rollup_cutoff =
        TsToMillis(now - options_.retention.rollup_seconds);
    for (MemorySeries& s : series_) {
      const size_t n = std::lower_bound(s.ts_ms.begin(), s.ts_ms.end(),
                                        raw_cutoff) - s.ts_ms.begin();
      if (n > 0) {
        RollUp(std::span(s.ts_ms).first(n), std::span(s.values).first(n),
               &s.rollups);
        s.ts_ms.erase(s.ts_ms.begin(), s.ts_ms.begin() + n);
        s.values.erase(s.values.begin(), s.values.begin() + n);
      }
      auto keep = std::find_if(s.rollups.begin(), s.rollups.end(),
                               [&](const RollupPoint& p) {
                                 return p.minute_ms >= rollup_cutoff;
                               });
      s.rollups.erase(s.rollups.begin(), keep);
      if (!s.expired && s.cursor.has_last && s.ts_ms.empty() && s.rollups.empty() &&
          s.cursor.last_ms < std::min(raw_cutoff, rollup_cutoff)) {
        ids_.erase(s.key);
        s.key = SeriesKey{};
        s.expired = true;
        ++expired_;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Health() const override { return absl::OkStatus(); }

  StoreStats Stats() const override {
    absl::MutexLock l(&mu_);
    return StoreStats{.series = series_.size() - expired_,
                      .series_expired = expired_,
                      .samples_appended = appended_,
                      .samples_dropped = dropped_};
  }

 private:
  const StoreOptions options_;
  mutable absl::Mutex mu_;
  std::vector<MemorySeries> series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SeriesKey, SeriesId> ids_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<Event>> events_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> state_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
  double next_retention_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<SeriesStore> NewMemoryStore(const StoreOptions& options) {
  return std::make_unique<MemoryStore>(options);
}

}  // namespace vigil
