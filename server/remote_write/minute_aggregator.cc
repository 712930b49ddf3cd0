#include "server/remote_write/minute_aggregator.h"

#include <algorithm>
#include <cmath>

namespace vigil {
namespace {

constexpr int64_t kMinuteMs = 60'000;
// A series' due time may move earlier (a backlog arriving in a burst); a
// new check is queued only when it moves by more than this, so a minute
// of a silent series goes at most this much after it is due.
constexpr double kCheckSlackSeconds = 1;

// The start of the minute holding Unix time `ts`, in ms.
int64_t MinuteOf(double ts) {
  const int64_t ms = std::llround(ts * 1000.0);
  const int64_t floor = ms / kMinuteMs - (ms % kMinuteMs < 0 ? 1 : 0);
  return floor * kMinuteMs;
}

// Server time at which the minute starting at `minute_ms` is due, judged
// from a sample stamped `ts` that arrived at `now`.
double DueAt(int64_t minute_ms, double ts, double now, double grace) {
  const double end = static_cast<double>(minute_ms + kMinuteMs) / 1000.0;
  return now + std::max(end - ts, 0.0) + grace;
}

}  // namespace

MinuteAggregator::MinuteAggregator(double grace_seconds, double forget_seconds)
    : grace_seconds_(grace_seconds), forget_seconds_(forget_seconds) {}

void MinuteAggregator::Check(uint32_t id, Series& s) {
  s.checked_at = s.due;
  checks_.push(Pending{s.due, id, s.minute_ms});
}

void MinuteAggregator::Open(uint32_t id, Series& s, int64_t minute_ms,
                            double value) {
  s.minute_ms = minute_ms;
  s.min = s.max = s.sum = value;
  s.count = 1;
  Check(id, s);
}

void MinuteAggregator::Emit(uint32_t id, Series& s,
                            std::vector<MinuteRollup>* out) {
  out->push_back(MinuteRollup{id, s.minute_ms, s.min, s.max, s.sum, s.count});
  s.count = 0;
}

MinuteAggregator::Fold MinuteAggregator::Add(uint32_t id, double ts,
                                             double value, double now,
                                             std::vector<MinuteRollup>* out) {
  if (std::isnan(value)) return Fold::kSkippedNaN;
  const int64_t minute = MinuteOf(ts);
  const double due = DueAt(minute, ts, now, grace_seconds_);
  auto [it, inserted] = series_.try_emplace(id);
  Series& s = it->second;
  if (inserted) {
    s.due = due;
    Open(id, s, minute, value);
    return Fold::kAdded;
  }
  if (minute < s.minute_ms || (minute == s.minute_ms && s.count == 0))
    return Fold::kLate;
  if (minute > s.minute_ms) {
    if (s.count > 0) Emit(id, s, out);
    s.due = due;
    Open(id, s, minute, value);
    return Fold::kAdded;
  }
  s.min = std::min(s.min, value);
  s.max = std::max(s.max, value);
  s.sum += value;
  ++s.count;
  s.due = due;  // the latest sample judges the series' clock
  if (due + kCheckSlackSeconds < s.checked_at) Check(id, s);
  return Fold::kAdded;
}

bool MinuteAggregator::Sweep(double now, std::vector<MinuteRollup>* out,
                             size_t max_checks) {
  for (size_t n = 0; !checks_.empty() && checks_.top().due <= now; ++n) {
    if (n == max_checks) return true;
    const Pending check = checks_.top();
    checks_.pop();
    auto it = series_.find(check.id);
    if (it == series_.end() || it->second.minute_ms != check.minute_ms)
      continue;  // stale: the series moved on or was forgotten
    Series& s = it->second;
    if (s.due > now) {
      if (check.due >= s.checked_at) Check(check.id, s);  // else one is queued
    } else if (s.count > 0) {
      Emit(check.id, s, out);
      s.due = now + forget_seconds_;
      Check(check.id, s);
    } else {
      series_.erase(it);
    }
  }
  return false;
}

}  // namespace vigil
