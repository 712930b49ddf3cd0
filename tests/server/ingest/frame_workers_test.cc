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

}  // namespace
}  // namespace vigil::testing
