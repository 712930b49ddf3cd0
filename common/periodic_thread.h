// A thread that runs a task every period of a Clock's time.
#ifndef VIGIL_COMMON_PERIODIC_THREAD_H_
#define VIGIL_COMMON_PERIODIC_THREAD_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"

namespace vigil {

// Runs `task` on its own thread at Start() and then every `period_seconds`
// of `clock` time (a FakeClock in tests moves it). An exception from the
// task is caught and handed to `on_exception` (its what()), and the next
// period still runs: a bug in one round must not end the rounds for good.
// Not copyable; Stop() (or the destructor) waits for a running round.
class PeriodicThread {
 public:
  // `clock` is not owned and must outlive this.
  PeriodicThread(Clock* clock, double period_seconds, std::function<void()> task,
                 std::function<void(const std::string&)> on_exception);
  ~PeriodicThread();
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread; the first round runs at once. Call at most once.
  void Start();
  // Stops the thread after the round in progress. Idempotent.
  void Stop();

 private:
  void Loop();

  Clock* const clock_;
  const double period_seconds_;
  const std::function<void()> task_;
  const std::function<void(const std::string&)> on_exception_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace vigil

#endif  // VIGIL_COMMON_PERIODIC_THREAD_H_
