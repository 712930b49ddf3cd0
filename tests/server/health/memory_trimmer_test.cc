// MemoryTrimmer on a fake clock: it trims once per interval of that clock,
// not before, and stops promptly.
#include "server/health/memory_trimmer.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "gtest/gtest.h"

namespace vigil {
namespace {

bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

TEST(MemoryTrimmerTest, TrimsOncePerInterval) {
  FakeClock clock(1000);
  std::atomic<int> trims{0};
  MemoryTrimmer trimmer(&clock, 30, [&] { ++trims; });
  trimmer.Start();
  trimmer.Start();  // idempotent
  clock.Advance(29);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(trims.load(), 0) << "not before the interval";
  clock.Advance(1);
  ASSERT_TRUE(Eventually([&] { return trims.load() == 1; }));
  clock.Advance(30);
  ASSERT_TRUE(Eventually([&] { return trims.load() == 2; }));
  trimmer.Stop();
  trimmer.Stop();  // idempotent
  clock.Advance(300);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(trims.load(), 2) << "nothing after Stop";
}

TEST(MemoryTrimmerTest, TheDefaultTrimRuns) {
  FakeClock clock(1000);
  MemoryTrimmer trimmer(&clock, 1);  // glibc's malloc_trim(0)
  trimmer.Start();
  clock.Advance(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  trimmer.Stop();
}

}  // namespace
}  // namespace vigil
