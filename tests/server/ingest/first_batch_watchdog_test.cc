// FirstBatchWatchdog (server/ingest/first_batch_watchdog.h): a stream is
// late only if its queue rested after its deadline, so a first batch that
// waits behind a busy queue is not cancelled.
#include "server/ingest/first_batch_watchdog.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "common/clock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

class FirstBatchWatchdogTest : public ::testing::Test {
 protected:
  // True once `stream` was cancelled, waiting up to 5 s of real time for
  // the watchdog's thread.
  bool CancelledWithin5s(int* stream) {
    for (int i = 0; i < 500; ++i) {
      if (cancelled_.load() == stream) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // True if `stream` is cancelled within 100 ms (it should not be: the
  // watchdog acts within a millisecond or so when it does).
  bool CancelledSoon(int* stream) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return cancelled_.load() == stream;
  }

  FakeClock clock_{1000};
  std::atomic<void*> cancelled_{nullptr};
  FirstBatchWatchdog watchdog_{&clock_, 10, [this](void* s) { cancelled_ = s; }};
  int stream_ = 0, queue_ = 0;
};

TEST_F(FirstBatchWatchdogTest, AStreamOfAnIdleQueueIsCancelledAtItsDeadline) {
  watchdog_.QueueIdle(&queue_);
  watchdog_.Watch(&stream_, &queue_);
  clock_.Advance(9);
  EXPECT_FALSE(CancelledSoon(&stream_));
  clock_.Advance(2);
  EXPECT_TRUE(CancelledWithin5s(&stream_));
  EXPECT_TRUE(watchdog_.Done(&stream_));
}

TEST_F(FirstBatchWatchdogTest, AFirstBatchWaitingBehindABusyQueueIsNotCancelled) {
  watchdog_.QueueIdle(&queue_);
  watchdog_.Watch(&stream_, &queue_);
  watchdog_.QueueBusy(&queue_);  // other streams' first batches, for long
  clock_.Advance(30);
  EXPECT_FALSE(CancelledSoon(&stream_));
  // The queue reaches the batch, which came long ago.
  EXPECT_FALSE(watchdog_.Done(&stream_));
  watchdog_.QueueIdle(&queue_);
  EXPECT_FALSE(CancelledSoon(&stream_));
}

TEST_F(FirstBatchWatchdogTest, ALateStreamIsCancelledOnceItsQueueRests) {
  watchdog_.Watch(&stream_, &queue_);
  watchdog_.QueueIdle(&queue_);
  clock_.Advance(1);
  watchdog_.QueueBusy(&queue_);  // it rested before the deadline only
  clock_.Advance(20);
  EXPECT_FALSE(CancelledSoon(&stream_));
  watchdog_.QueueIdle(&queue_);  // nothing to read: the batch never came
  EXPECT_TRUE(CancelledWithin5s(&stream_));
  EXPECT_TRUE(watchdog_.Done(&stream_));
}

TEST_F(FirstBatchWatchdogTest, AQueueThatRestedAfterTheDeadlineCancelsEvenIfBusyAgain) {
  watchdog_.Watch(&stream_, &queue_);
  watchdog_.QueueBusy(&queue_);
  clock_.Advance(11);
  watchdog_.QueueIdle(&queue_);
  watchdog_.QueueBusy(&queue_);  // busy again, but it rested past the deadline
  EXPECT_TRUE(CancelledWithin5s(&stream_));
}

}  // namespace
}  // namespace vigil
