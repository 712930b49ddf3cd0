// 1-minute rollups (min/max/sum/count) of every series, built from the
// frames as they arrive, for remote write. Pure: no I/O and no clock; the
// caller passes the server time a sample arrived at (`now`).
//
// When a minute of a series is finished:
//  - as soon as a sample of the same series lands in a later minute (a
//    node's frames arrive in order, so nothing of that minute is still to
//    come: a backlog resent after a partition rolls up minute by minute);
//  - otherwise once the series has been silent long enough: `grace_seconds`
//    after the series' own clock, as judged from its latest sample's
//    arrival, passed the minute's end. For a node whose clock agrees with
//    the server's that is the minute's end plus the grace, so a node whose
//    frames run up to the grace late still lands in its minute (checked
//    with up to a second's slack).
// A finished minute is emitted once. A sample of a minute already emitted
// (or of an earlier one) is late and dropped; a silent series remembers its
// last emitted minute for `forget_seconds`, so a node that went quiet and
// then resends its spool does not emit a second, partial point for it.
// NaN samples carry no reading and are skipped; +/-Inf are folded in.
//
// Memory: one entry per series that reported within forget_seconds, plus
// at most a few heap entries per such series.
#ifndef VIGIL_SERVER_REMOTE_WRITE_MINUTE_AGGREGATOR_H_
#define VIGIL_SERVER_REMOTE_WRITE_MINUTE_AGGREGATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace vigil {

// One finished minute of one series (store series id).
struct MinuteRollup {
  uint32_t id = 0;
  int64_t minute_start_ms = 0;  // Unix ms, a multiple of 60,000
  double min = 0;
  double max = 0;
  double sum = 0;
  uint64_t count = 0;  // samples folded in (NaN excluded); >= 1
};

// Builds minute rollups. Not thread-safe: the caller serializes calls.
class MinuteAggregator {
 public:
  // What Add did with a sample.
  enum class Fold { kAdded, kLate, kSkippedNaN };

  // `grace_seconds` >= 0; `forget_seconds` > 0: how long a silent series'
  // last emitted minute is remembered.
  explicit MinuteAggregator(double grace_seconds,
                            double forget_seconds = 3600);

  // Folds `value` of series `id`, stamped `ts` (frame time, Unix seconds)
  // and arriving at server time `now`. Appends to `*out` the series'
  // previous minute when `ts` starts a later one. kLate: the sample's
  // minute was already emitted (dropped).
  Fold Add(uint32_t id, double ts, double value, double now,
           std::vector<MinuteRollup>* out);
  // Appends to `*out` every minute of a silent series that is due at
  // server time `now`, and forgets series silent for forget_seconds.
  // Looks at no more than `max_checks` queued checks (about 0.5 us each
  // with millions of series); true when some due ones are left for the
  // next call.
  bool Sweep(double now, std::vector<MinuteRollup>* out,
             size_t max_checks = SIZE_MAX);
  // Series with an open minute or a remembered one.
  size_t series() const { return series_.size(); }

 private:
  struct Series {
    int64_t minute_ms = 0;  // the open minute, or the last emitted one
    double min = 0;
    double max = 0;
    double sum = 0;
    uint64_t count = 0;     // 0: nothing open; minute_ms was emitted
    double due = 0;         // server time to emit (open) or forget (not)
    double checked_at = 0;  // due of the earliest check queued for it
  };
  struct Pending {
    double due;
    uint32_t id;
    int64_t minute_ms;
    bool operator>(const Pending& other) const { return due > other.due; }
  };

  // Queues a check of `s` at s.due.
  void Check(uint32_t id, Series& s);
  // Starts minute `minute_ms` of `s` with `value`.
  void Open(uint32_t id, Series& s, int64_t minute_ms, double value);
  // Appends the open minute of `s` to `*out` and closes it.
  static void Emit(uint32_t id, Series& s, std::vector<MinuteRollup>* out);

  const double grace_seconds_;
  const double forget_seconds_;
  absl::flat_hash_map<uint32_t, Series> series_;
  // When to look at a series again; stale entries are skipped when popped.
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>>
      checks_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_REMOTE_WRITE_MINUTE_AGGREGATOR_H_
