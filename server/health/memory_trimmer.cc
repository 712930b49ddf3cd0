#include "server/health/memory_trimmer.h"

#include <malloc.h>

#include <utility>

namespace vigil {

MemoryTrimmer::MemoryTrimmer(Clock* clock, double interval_seconds, std::function<void()> trim)
    : clock_(clock),
      interval_seconds_(interval_seconds),
      trim_(trim != nullptr ? std::move(trim) : [] { malloc_trim(0); }) {}

MemoryTrimmer::~MemoryTrimmer() { Stop(); }

void MemoryTrimmer::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  // The first deadline counts from Start, not from when the thread runs.
  const double first = clock_->Now() + interval_seconds_;
  thread_ = std::thread([this, first] { Loop(first); });
}

void MemoryTrimmer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MemoryTrimmer::Loop(double first) {
  std::unique_lock<std::mutex> lock(mu_);
  double next = first;
  while (!stopping_) {
    clock_->WaitUntil(lock, wake_, next);
    if (stopping_) break;
    if (clock_->Now() < next) continue;
    next = clock_->Now() + interval_seconds_;
    lock.unlock();
    trim_();
    lock.lock();
  }
}

}  // namespace vigil
