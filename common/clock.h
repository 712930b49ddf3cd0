// The time seam: every component that needs "now" or wants to wait takes a
// Clock, so tests drive time with FakeClock instead of sleeping.
#ifndef VIGIL_COMMON_CLOCK_H_
#define VIGIL_COMMON_CLOCK_H_

#include <condition_variable>
#include <mutex>

namespace vigil {

// Wall-clock time source. Times are Unix seconds (fractions allowed).
// Implementations are safe for concurrent use.
class Clock {
 public:
  virtual ~Clock() = default;
  // The current Unix time in seconds.
  virtual double Now() const = 0;
  // Blocks until Now() >= `deadline` or until `cv` is notified (spurious
  // wake-ups allowed); `lock` must hold the mutex `cv` waits with.
  virtual void WaitUntil(std::unique_lock<std::mutex>& lock,
                         std::condition_variable& cv, double deadline) = 0;
};

// The process-wide real clock (system_clock). Never destroyed.
Clock* RealClock();

// A clock that only moves when told to. Waiters wake when Advance() passes
// their deadline. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(double start = 1764000000.0) : now_(start) {}
  double Now() const override;
  void WaitUntil(std::unique_lock<std::mutex>& lock,
                 std::condition_variable& cv, double deadline) override;
  // Moves time forward by `seconds` (>= 0) and wakes waiters.
  void Advance(double seconds);
  // Sets the time to `t`; never moves backwards.
  void Set(double t);

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  double now_;
};

}  // namespace vigil

#endif  // VIGIL_COMMON_CLOCK_H_
