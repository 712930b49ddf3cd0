#include "common/clock.h"

#include <chrono>
#include <thread>

#include "common/monotonic_clock.h"

#include "gtest/gtest.h"

namespace vigil {
namespace {

TEST(FakeClockTest, MovesOnlyWhenTold) {
  FakeClock clock(100.0);
  EXPECT_EQ(clock.Now(), 100.0);
  clock.Advance(2.5);
  EXPECT_EQ(clock.Now(), 102.5);
  clock.Set(50.0);  // never backwards
  EXPECT_EQ(clock.Now(), 102.5);
  clock.Set(200.0);
  EXPECT_EQ(clock.Now(), 200.0);
}

TEST(FakeClockTest, WaiterWakesAfterAdvancePastDeadline) {
  FakeClock clock(0.0);
  std::mutex mu;
  std::condition_variable cv;
  bool woke = false;
  std::thread waiter([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (clock.Now() < 10.0) clock.WaitUntil(lock, cv, 10.0);
    woke = true;
  });
  clock.Advance(5.0);
  clock.Advance(5.0);
  waiter.join();
  EXPECT_TRUE(woke);
}

TEST(RealClockTest, IsUnixSeconds) {
  double now = RealClock()->Now();
  EXPECT_GT(now, 1.7e9);  // after 2023
  EXPECT_LT(now, 4.1e9);
}

TEST(MonotonicSecondsTest, NeverGoesBackAndFollowsRealTime) {
  const double start = MonotonicSeconds();
  double last = start;
  for (int i = 0; i < 1000; ++i) {
    const double now = MonotonicSeconds();
    EXPECT_GE(now, last);
    last = now;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(MonotonicSeconds() - start, 0.019);
}

}  // namespace
}  // namespace vigil
