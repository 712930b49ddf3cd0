// Hands the memory glibc keeps after a burst back to the kernel. At 1,250
// agent streams the server's start (dictionaries, series creation) leaves
// ~130 MB of freed heap held by malloc's arenas; malloc_trim(0) returns it
// (bench/RESULTS.md, "Many agents, one server", RSS).
#ifndef VIGIL_SERVER_HEALTH_MEMORY_TRIMMER_H_
#define VIGIL_SERVER_HEALTH_MEMORY_TRIMMER_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"

namespace vigil {

class MemoryTrimmer {
 public:
  // Calls `trim` (glibc's malloc_trim(0) when null) every
  // `interval_seconds` of `clock` (not owned; must outlive the trimmer)
  // on a thread of its own, once started.
  MemoryTrimmer(Clock* clock, double interval_seconds, std::function<void()> trim = nullptr);
  // Stops if running.
  ~MemoryTrimmer();
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

  // Starts the thread; the first trim is one interval away. Idempotent.
  void Start();
  // Stops and joins it. Idempotent.
  void Stop();

 private:
  // Trims at `first`, then every interval, until stopped.
  void Loop(double first);

  Clock* const clock_;
  const double interval_seconds_;
  const std::function<void()> trim_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_HEALTH_MEMORY_TRIMMER_H_
