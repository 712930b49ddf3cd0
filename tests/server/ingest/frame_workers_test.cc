// FrameWorkers: per-worker order, bounded queues, stop runs what is queued.
#include "server/ingest/frame_workers.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace vigil::testing {
namespace {

TEST(FrameWorkersTest, TasksOfOneWorkerRunInOrderOnOneThread) {
  FrameWorkers workers({.workers = 3, .queue_capacity = 1000});
  std::mutex mu;
  std::vector<std::vector<int>> seen(3);
  std::vector<std::set<std::thread::id>> threads(3);
  for (int i = 0; i < 300; ++i) {
    const int w = i % 3;
    ASSERT_TRUE(workers.Submit(w, [&, w, i] {
      std::lock_guard<std::mutex> l(mu);
      seen[w].push_back(i);
      threads[w].insert(std::this_thread::get_id());
    }));
  }
  workers.Stop();
  for (int w = 0; w < 3; ++w) {
    ASSERT_EQ(seen[w].size(), 100u);
    for (size_t k = 1; k < seen[w].size(); ++k) EXPECT_LT(seen[w][k - 1], seen[w][k]);
    EXPECT_EQ(threads[w].size(), 1u);
  }
  EXPECT_EQ(workers.completed(), 300u);
}

TEST(FrameWorkersTest, AFullQueueRefusesAndOthersGoOn) {
  FrameWorkers workers({.workers = 2, .queue_capacity = 2});
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran = 0;
  // Worker 0 is held by its first task; two more fill its queue.
  std::promise<void> started;
  ASSERT_TRUE(workers.Submit(0, [gate, &ran, &started] {
    started.set_value();
    gate.wait();
    ++ran;
  }));
  started.get_future().wait();
  ASSERT_TRUE(workers.Submit(0, [&ran] { ++ran; }));
  ASSERT_TRUE(workers.Submit(0, [&ran] { ++ran; }));
  EXPECT_FALSE(workers.HasRoom(0));
  EXPECT_FALSE(workers.Submit(0, [&ran] { ran += 100; }));
  EXPECT_EQ(workers.queued(0), 3u);
  // The other worker is not held up.
  std::promise<void> other;
  ASSERT_TRUE(workers.Submit(1, [&other] { other.set_value(); }));
  EXPECT_EQ(other.get_future().wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  release.set_value();
  workers.Stop();
  EXPECT_EQ(ran, 3);
  EXPECT_FALSE(workers.Submit(1, [] {}));  // stopped
}

// Waits (up to a minute) until `workers` completed `n` tasks.
bool AwaitCompleted(const FrameWorkers& workers, uint64_t n) {
  for (int i = 0; i < 60'000 && workers.completed() < n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return workers.completed() >= n;
}

TEST(FrameWorkersTest, TasksThatKeepComingAreTakenInBursts) {
  // A linger long enough for this thread to submit within it on a busy
  // machine.
  FrameWorkers workers(
      {.workers = 1, .queue_capacity = 100, .linger = std::chrono::seconds(1)});
  std::mutex mu;
  std::vector<int> seen;
  auto task = [&](int i) {
    return [&, i] {
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(i);
    };
  };
  ASSERT_TRUE(workers.Submit(0, task(0)));
  ASSERT_TRUE(AwaitCompleted(workers, 1));
  // The next comes at once: the worker, woken by it (if not already
  // lingering after the first), sleeps after it, and the eight that come
  // meanwhile are run after the sleep without waking it again.
  ASSERT_TRUE(workers.Submit(0, task(1)));
  ASSERT_TRUE(AwaitCompleted(workers, 2));
  for (int i = 2; i < 10; ++i) ASSERT_TRUE(workers.Submit(0, task(i)));
  ASSERT_TRUE(AwaitCompleted(workers, 10));
  EXPECT_GE(workers.wakeups(0), 1u);
  EXPECT_LE(workers.wakeups(0), 2u);
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(FrameWorkersTest, StopRunsWhatCameWhileLingering) {
  FrameWorkers workers(
      {.workers = 1, .queue_capacity = 100, .linger = std::chrono::seconds(1)});
  std::atomic<int> ran = 0;
  ASSERT_TRUE(workers.Submit(0, [&ran] { ++ran; }));
  ASSERT_TRUE(AwaitCompleted(workers, 1));
  ASSERT_TRUE(workers.Submit(0, [&ran] { ++ran; }));
  ASSERT_TRUE(workers.Submit(0, [&ran] { ++ran; }));
  workers.Stop();
  EXPECT_EQ(ran, 3);
  EXPECT_EQ(workers.completed(), 3u);
}

TEST(FrameWorkersTest, WithoutLingerEachWaitIsAWakeUp) {
  FrameWorkers workers({.workers = 1, .queue_capacity = 100});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(workers.Submit(0, [] {}));
    ASSERT_TRUE(AwaitCompleted(workers, i + 1));
    // The worker goes back to waiting as soon as its queue is empty.
    for (int k = 0; k < 60'000 && workers.queued(0) != 0; ++k)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  workers.Stop();
  EXPECT_EQ(workers.wakeups(0), 3u);
}

}  // namespace
}  // namespace vigil::testing
