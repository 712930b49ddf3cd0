#include "common/clock.h"

#include <chrono>

#include "common/monotonic_clock.h"

namespace vigil {
namespace {

class SystemClock : public Clock {
 public:
  double Now() const override {
    return std::chrono::duration<double>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  void WaitUntil(std::unique_lock<std::mutex>& lock,
                 std::condition_variable& cv, double deadline) override {
    double wait = deadline - Now();
    if (wait <= 0) return;
    cv.wait_for(lock, std::chrono::duration<double>(wait));
  }
};

}  // namespace

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Clock* RealClock() {
  static Clock* clock = new SystemClock();
  return clock;
}

double FakeClock::Now() const {
  std::lock_guard<std::mutex> l(mu_);
  return now_;
}

void FakeClock::WaitUntil(std::unique_lock<std::mutex>& lock,
                          std::condition_variable& cv, double deadline) {
  // The caller's cv is not ours, so poll in short real-time slices: waiters
  // wake promptly after Advance() or a notify on `cv`.
  if (Now() >= deadline) return;
  cv.wait_for(lock, std::chrono::milliseconds(1));
}

void FakeClock::Advance(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  if (seconds > 0) now_ += seconds;
  changed_.notify_all();
}

void FakeClock::Set(double t) {
  std::lock_guard<std::mutex> l(mu_);
  if (t > now_) now_ = t;
  changed_.notify_all();
}

}  // namespace vigil
