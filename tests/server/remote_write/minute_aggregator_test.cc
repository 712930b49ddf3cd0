// The pure minute aggregator: boundaries, grace, late samples, NaN, silent
// series and forgetting.
#include "server/remote_write/minute_aggregator.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace vigil {
namespace {

constexpr double kT0 = 1764000000;  // a minute start (divisible by 60)
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Fold = MinuteAggregator::Fold;

// Feeds series `id` one sample per second over [from, to) with value = t -
// kT0, arriving at server time t + lag.
void Feed(MinuteAggregator& a, uint32_t id, double from, double to,
          std::vector<MinuteRollup>* out, double lag = 0) {
  for (double t = from; t < to; t += 1) a.Add(id, t, t - kT0, t + lag, out);
}

TEST(MinuteAggregator, NextMinuteClosesThePreviousOne) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  Feed(a, 7, kT0, kT0 + 60, &out);
  EXPECT_TRUE(out.empty());
  a.Add(7, kT0 + 60, 100, kT0 + 60, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, 7u);
  EXPECT_EQ(out[0].minute_start_ms, static_cast<int64_t>(kT0) * 1000);
  EXPECT_EQ(out[0].count, 60u);
  EXPECT_EQ(out[0].min, 0);
  EXPECT_EQ(out[0].max, 59);
  EXPECT_EQ(out[0].sum, 59 * 60 / 2);
}

TEST(MinuteAggregator, BoundariesAreHalfOpenAndNegativeTimesFloor) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  a.Add(1, kT0 + 59.999, 1, kT0, &out);
  a.Add(1, kT0 + 60.0, 2, kT0, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].minute_start_ms, static_cast<int64_t>(kT0) * 1000);
  out.clear();
  a.Add(2, -0.5, 1, kT0, &out);
  a.Add(2, 0, 1, kT0, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].minute_start_ms, -60000);
}

TEST(MinuteAggregator, SilentSeriesIsEmittedAfterTheGrace) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  Feed(a, 3, kT0, kT0 + 30, &out);  // then silent
  a.Sweep(kT0 + 69.9, &out);
  EXPECT_TRUE(out.empty());
  a.Sweep(kT0 + 70, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].count, 30u);
  a.Sweep(kT0 + 500, &out);
  EXPECT_EQ(out.size(), 1u) << "emitted once";
}

TEST(MinuteAggregator, LateSampleWithinGraceLands) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  a.Add(4, kT0 + 50, 1, kT0 + 50, &out);
  a.Sweep(kT0 + 65, &out);
  // Frame stamped in the minute, arriving 8 s after its end.
  EXPECT_EQ(a.Add(4, kT0 + 59, 5, kT0 + 68, &out), Fold::kAdded);
  a.Sweep(kT0 + 69, &out);
  EXPECT_TRUE(out.empty()) << "due is judged from the latest arrival";
  a.Sweep(kT0 + 79, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].count, 2u);
  EXPECT_EQ(out[0].max, 5);
}

TEST(MinuteAggregator, SampleOfAnEmittedMinuteIsLate) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  a.Add(5, kT0 + 10, 1, kT0 + 10, &out);
  a.Sweep(kT0 + 70, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(a.Add(5, kT0 + 20, 1, kT0 + 75, &out), Fold::kLate);
  // The next minute starts normally.
  EXPECT_EQ(a.Add(5, kT0 + 61, 1, kT0 + 75, &out), Fold::kAdded);
  // And a sample of a minute before the open one is late too.
  EXPECT_EQ(a.Add(5, kT0 + 30, 1, kT0 + 76, &out), Fold::kLate);
  EXPECT_EQ(out.size(), 1u);
}

TEST(MinuteAggregator, BacklogRollsUpMinuteByMinute) {
  // A node resending ten minutes of spooled frames in a burst, all
  // arriving at one server time long after: each minute is whole.
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  const double now = kT0 + 3600;
  for (double t = kT0; t < kT0 + 600; t += 1) a.Add(9, t, 1, now, &out);
  ASSERT_EQ(out.size(), 9u);
  for (const MinuteRollup& r : out) EXPECT_EQ(r.count, 60u);
  // Its last sample (second 59 of the last minute) came at `now`: the
  // minute ends a second later by the node's clock, then the grace (and
  // up to a second's slack).
  a.Sweep(now + 10.5, &out);
  EXPECT_EQ(out.size(), 9u) << "the last minute waits for its own end";
  a.Sweep(now + 12, &out);
  ASSERT_EQ(out.size(), 10u);
  EXPECT_EQ(out[9].count, 60u);
}

TEST(MinuteAggregator, NodeAheadOfTheServerIsJudgedByItsOwnClock) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  // The node's clock runs 100 s ahead of the server's.
  Feed(a, 11, kT0, kT0 + 30, &out, -100);
  a.Sweep(kT0 - 100 + 30 + 30 + 9, &out);
  EXPECT_TRUE(out.empty());
  a.Sweep(kT0 - 100 + 70, &out);
  EXPECT_EQ(out.size(), 1u);
}

TEST(MinuteAggregator, NaNIsSkippedAndInfinityFolded) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  EXPECT_EQ(a.Add(1, kT0, kNaN, kT0, &out), Fold::kSkippedNaN);
  EXPECT_EQ(a.series(), 0u) << "a NaN alone opens nothing";
  a.Add(1, kT0 + 1, 2, kT0, &out);
  a.Add(1, kT0 + 2, kNaN, kT0, &out);
  a.Add(1, kT0 + 3, std::numeric_limits<double>::infinity(), kT0, &out);
  a.Add(1, kT0 + 61, 0, kT0, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].count, 2u);
  EXPECT_EQ(out[0].min, 2);
  EXPECT_TRUE(std::isinf(out[0].max));
  // A minute of nothing but NaN emits nothing.
  out.clear();
  a.Add(2, kT0, kNaN, kT0, &out);
  a.Sweep(kT0 + 1000, &out);
  for (const MinuteRollup& r : out) EXPECT_NE(r.id, 2u);
}

TEST(MinuteAggregator, SilentSeriesAreForgotten) {
  MinuteAggregator a(10, /*forget_seconds=*/300);
  std::vector<MinuteRollup> out;
  for (uint32_t id = 0; id < 100; ++id) a.Add(id, kT0 + 1, 1, kT0 + 1, &out);
  EXPECT_EQ(a.series(), 100u);
  a.Sweep(kT0 + 70, &out);
  EXPECT_EQ(out.size(), 100u);
  EXPECT_EQ(a.series(), 100u) << "remembered: a late sample is still late";
  a.Sweep(kT0 + 70 + 300, &out);
  EXPECT_EQ(a.series(), 0u);
}

TEST(MinuteAggregator, SweepInChunks) {
  MinuteAggregator a(10);
  std::vector<MinuteRollup> out;
  for (uint32_t id = 0; id < 25; ++id) a.Add(id, kT0 + 1, 1, kT0 + 1, &out);
  EXPECT_TRUE(a.Sweep(kT0 + 70, &out, 10));
  EXPECT_EQ(out.size(), 10u);
  EXPECT_TRUE(a.Sweep(kT0 + 70, &out, 10));
  EXPECT_FALSE(a.Sweep(kT0 + 70, &out, 10));
  EXPECT_EQ(out.size(), 25u);
  EXPECT_FALSE(a.Sweep(kT0 + 70, &out, 10));
}

TEST(MinuteAggregator, ManySeriesManyMinutesEmitEachOnce) {
  MinuteAggregator a(5);
  std::vector<MinuteRollup> out;
  for (double t = kT0; t < kT0 + 300; t += 1) {
    for (uint32_t id = 0; id < 20; ++id) a.Add(id, t, id, t, &out);
    a.Sweep(t, &out);
  }
  a.Sweep(kT0 + 400, &out);
  ASSERT_EQ(out.size(), 20u * 5);
  for (const MinuteRollup& r : out) {
    EXPECT_EQ(r.count, 60u);
    EXPECT_EQ(r.min, r.id);
  }
}

}  // namespace
}  // namespace vigil
