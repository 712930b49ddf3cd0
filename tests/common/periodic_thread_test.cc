// PeriodicThread: a round at Start, then one per period of the clock; an
// exception is reported and the rounds go on; Stop ends them.
#include "common/periodic_thread.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/clock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

// True once `done()` holds, polling for up to 10 s of real time.
template <typename Fn>
bool Eventually(Fn done) {
  for (int i = 0; i < 10'000 && !done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

TEST(PeriodicThreadTest, RoundsFollowTheClockAndSurviveExceptions) {
  FakeClock clock;
  std::atomic<int> rounds = 0;
  std::atomic<int> caught = 0;
  std::string last_error;
  PeriodicThread t(
      &clock, 10,
      [&] {
        if (++rounds == 2) throw std::runtime_error("round two");
      },
      [&](const std::string& error) {
        last_error = error;
        ++caught;
      });
  t.Start();
  ASSERT_TRUE(Eventually([&] { return rounds == 1; }));  // at once
  clock.Advance(5);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(rounds, 1);  // not yet due
  clock.Advance(5);
  ASSERT_TRUE(Eventually([&] { return caught == 1; }));
  EXPECT_NE(last_error.find("round two"), std::string::npos) << last_error;
  clock.Advance(10);
  ASSERT_TRUE(Eventually([&] { return rounds == 3; }));  // went on
  t.Stop();
  t.Stop();  // idempotent
  clock.Advance(100);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(rounds, 3);
}

}  // namespace
}  // namespace vigil
