#include "server/ingest/first_batch_watchdog.h"

#include <algorithm>
#include <utility>

namespace vigil {

FirstBatchWatchdog::FirstBatchWatchdog(Clock* clock, double seconds,
                                       std::function<void(StreamHandle)> cancel)
    : clock_(clock),
      timeout_(seconds),
      cancel_(std::move(cancel)),
      thread_([this] { Run(); }) {}

FirstBatchWatchdog::~FirstBatchWatchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void FirstBatchWatchdog::Watch(StreamHandle stream, QueueHandle queue) {
  std::lock_guard<std::mutex> l(mu_);
  deadlines_[stream] = Deadline{clock_->Now() + timeout_, queue};
  wake_.notify_all();
}

bool FirstBatchWatchdog::Done(StreamHandle stream) {
  std::lock_guard<std::mutex> l(mu_);
  deadlines_.erase(stream);
  return cancelled_.erase(stream) > 0;
}

void FirstBatchWatchdog::QueueIdle(QueueHandle queue) {
  std::lock_guard<std::mutex> l(mu_);
  QueueState& q = queues_[queue];
  q.idle = true;
  q.idle_since = clock_->Now();
  if (overdue_ > 0) wake_.notify_all();
}

void FirstBatchWatchdog::QueueBusy(QueueHandle queue) {
  std::lock_guard<std::mutex> l(mu_);
  queues_[queue].idle = false;
}

void FirstBatchWatchdog::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    const double now = clock_->Now();
    double next = now + 3600;
    overdue_ = 0;
    for (auto it = deadlines_.begin(); it != deadlines_.end();) {
      const Deadline& d = it->second;
      if (d.at > now) {
        next = std::min(next, d.at);
        ++it;
        continue;
      }
      // Past its deadline: late only if its queue rested since (a queue
      // never seen resting has not started reading).
      const auto q = queues_.find(d.queue);
      if (q != queues_.end() && (q->second.idle || q->second.idle_since >= d.at)) {
        cancel_(it->first);
        cancelled_.insert(it->first);
        deadlines_.erase(it++);
      } else {
        ++overdue_;  // QueueIdle wakes this thread
        ++it;
      }
    }
    clock_->WaitUntil(l, wake_, next);
  }
}

}  // namespace vigil
