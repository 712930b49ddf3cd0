#include "common/periodic_thread.h"

#include <utility>

#include "common/catch_all.h"

namespace vigil {

PeriodicThread::PeriodicThread(Clock* clock, double period_seconds,
                               std::function<void()> task,
                               std::function<void(const std::string&)> on_exception)
    : clock_(clock),
      period_seconds_(period_seconds),
      task_(std::move(task)),
      on_exception_(std::move(on_exception)) {}

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void PeriodicThread::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PeriodicThread::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  double next = clock_->Now();
  while (!stopping_) {
    clock_->WaitUntil(lock, cv_, next);
    if (stopping_) break;
    const double now = clock_->Now();
    if (now < next) continue;
    next = now + period_seconds_;
    lock.unlock();
    if (std::string error = CatchAll(task_); !error.empty()) on_exception_(error);
    lock.lock();
  }
}

}  // namespace vigil
