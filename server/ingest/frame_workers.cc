#include "server/ingest/frame_workers.h"

#include <algorithm>
#include <utility>

namespace vigil {

FrameWorkers::FrameWorkers(const FrameWorkersOptions& options)
    : capacity_(std::max<size_t>(1, options.queue_capacity)) {
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
  std::unique_lock<std::mutex> l(q.mu);
  while (true) {
    q.wake.wait(l, [&q] { return q.stopping || !q.tasks.empty(); });
    if (q.tasks.empty()) return;  // stopping, and all run
    absl::AnyInvocable<void()> task = std::move(q.tasks.front());
    q.tasks.pop_front();
    ++q.running;
    l.unlock();
    task();
    completed_.fetch_add(1, std::memory_order_relaxed);
    l.lock();
    --q.running;
  }
}

}  // namespace vigil
