#include "server/ingest/frame_workers.h"

#include <algorithm>
#include <utility>

namespace vigil {

FrameWorkers::FrameWorkers(const FrameWorkersOptions& options)
    : capacity_(std::max<size_t>(1, options.queue_capacity)),
      linger_(std::max(std::chrono::microseconds(0), options.linger)) {
  const int n = std::max(1, options.workers);
  for (int i = 0; i < n; ++i) queues_.push_back(std::make_unique<Queue>());
  for (auto& q : queues_) {
    Queue* queue = q.get();
    queue->thread = std::thread([this, queue] { Run(*queue); });
  }
}

FrameWorkers::~FrameWorkers() { Stop(); }

bool FrameWorkers::HasRoom(int worker) const {
  const Queue& q = *queues_[worker];
  std::lock_guard<std::mutex> l(q.mu);
  return !q.stopping && q.tasks.size() < capacity_;
}

bool FrameWorkers::Submit(int worker, absl::AnyInvocable<void()> task) {
  Queue& q = *queues_[worker];
  {
    std::lock_guard<std::mutex> l(q.mu);
    if (q.stopping || q.tasks.size() >= capacity_) return false;
    q.tasks.push_back(std::move(task));
  }
  q.wake.notify_one();
  return true;
}

bool FrameWorkers::SubmitPastCapacity(int worker, absl::AnyInvocable<void()> task) {
  Queue& q = *queues_[worker];
  {
    std::lock_guard<std::mutex> l(q.mu);
    if (q.stopping) return false;
    q.tasks.push_back(std::move(task));
  }
  q.wake.notify_one();
  return true;
}

bool FrameWorkers::stopping() const {
  const Queue& q = *queues_.front();
  std::lock_guard<std::mutex> l(q.mu);
  return q.stopping;
}

size_t FrameWorkers::queued(int worker) const {
  const Queue& q = *queues_[worker];
  std::lock_guard<std::mutex> l(q.mu);
  return q.tasks.size() + q.running;
}

void FrameWorkers::Stop() {
  for (auto& q : queues_) {
    {
      std::lock_guard<std::mutex> l(q->mu);
      q->stopping = true;
    }
    q->wake.notify_all();
  }
  for (auto& q : queues_) {
    if (q->thread.joinable()) q->thread.join();
  }
}

void FrameWorkers::Run(Queue& q) {
  using Steady = std::chrono::steady_clock;
  std::unique_lock<std::mutex> l(q.mu);
  while (true) {
    const Steady::time_point idle_from =
        linger_.count() > 0 ? Steady::now() : Steady::time_point{};
    q.wake.wait(l, [&q] { return q.stopping || !q.tasks.empty(); });
    if (q.tasks.empty()) return;  // stopping, and all run
    ++q.wakeups;
    // Tasks that come more often than the linger (a thousand agents, each
    // once a second) are taken in bursts, one sleep for several, until a
    // sleep finds none; sparse ones are taken as they come.
    const bool lingers =
        linger_.count() > 0 && Steady::now() - idle_from < linger_;
    while (true) {
      while (!q.tasks.empty()) {
        absl::AnyInvocable<void()> task = std::move(q.tasks.front());
        q.tasks.pop_front();
        ++q.running;
        l.unlock();
        task();
        completed_.fetch_add(1, std::memory_order_relaxed);
        l.lock();
        --q.running;
      }
      if (!lingers || q.stopping) break;
      l.unlock();
      std::this_thread::sleep_for(linger_);
      l.lock();
      if (q.tasks.empty()) break;
    }
  }
}

uint64_t FrameWorkers::wakeups(int worker) const {
  const Queue& q = *queues_[worker];
  std::lock_guard<std::mutex> l(q.mu);
  return q.wakeups;
}

}  // namespace vigil
