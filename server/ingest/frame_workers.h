// Worker threads that take detection (and the other frame observers) off
// the ingest path: each worker runs the tasks of its queue in order, so
// the frames of one detection shard are seen in stream order by one
// thread, and several shards run on several cores.
#ifndef VIGIL_SERVER_INGEST_FRAME_WORKERS_H_
#define VIGIL_SERVER_INGEST_FRAME_WORKERS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"

namespace vigil {

// What FrameWorkers needs.
struct FrameWorkersOptions {
  // Threads (and queues); at least 1.
  int workers = 1;
  // Tasks one queue may hold; Submit refuses past it. At least 1.
  size_t queue_capacity = 10'000;
  // When tasks come more often than this (the worker waited less than it
  // for the one that woke it), the worker sleeps this long after running
  // what is queued and then runs what came meanwhile, until a sleep finds
  // nothing: tasks that arrive one by one (a thousand agents, each sending
  // once a second) are taken several at a time for one wake-up instead of
  // one each, and wait up to this much longer. 0: each task is taken as
  // it comes.
  std::chrono::microseconds linger{0};
};

// A fixed set of worker threads with one bounded FIFO queue each.
// Thread-safe. Stop() (or the destructor) runs what is queued, then joins.
class FrameWorkers {
 public:
  explicit FrameWorkers(const FrameWorkersOptions& options);
  ~FrameWorkers();

  FrameWorkers(const FrameWorkers&) = delete;
  FrameWorkers& operator=(const FrameWorkers&) = delete;

  int workers() const { return static_cast<int>(queues_.size()); }

  // True if worker `worker` has room for another task now (a later
  // Submit may still find it full when others submitted meanwhile).
  bool HasRoom(int worker) const;

  // Queues `task` on worker `worker` (0 <= worker < workers()); it runs on
  // that worker's thread after every task queued there before it. False,
  // and `task` dropped unrun, when the queue is full or the workers are
  // stopping.
  bool Submit(int worker, absl::AnyInvocable<void()> task);

  // As Submit, but past the capacity too: for a caller that found room
  // (HasRoom) before and lost it to others since. False, and `task`
  // dropped unrun, only when the workers are stopping.
  bool SubmitPastCapacity(int worker, absl::AnyInvocable<void()> task);

  // True once Stop() was called.
  bool stopping() const;

  // Tasks queued or running on `worker` now.
  size_t queued(int worker) const;

  // Times worker `worker` woke from waiting for a task (a burst of tasks
  // taken after a linger's sleep does not count).
  uint64_t wakeups(int worker) const;

  // Tasks run so far, over all workers.
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }

  // Runs what is queued, then joins the threads. Idempotent; Submit
  // refuses from the start of the call.
  void Stop();

 private:
  struct Queue {
    mutable std::mutex mu;
    std::condition_variable wake;
    std::deque<absl::AnyInvocable<void()>> tasks ABSL_GUARDED_BY(mu);
    size_t running ABSL_GUARDED_BY(mu) = 0;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    uint64_t wakeups ABSL_GUARDED_BY(mu) = 0;
    std::thread thread;
  };

  void Run(Queue& queue);

  const size_t capacity_;
  const std::chrono::microseconds linger_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::atomic<uint64_t> completed_{0};
};

}  // namespace vigil

#endif  // VIGIL_SERVER_INGEST_FRAME_WORKERS_H_
