#include "server/escalation/event_hub.h"

#include <chrono>
#include <utility>

namespace vigil {

EventHub::EventHub(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

void EventHub::Publish(nlohmann::json notice) {
  {
    std::lock_guard<std::mutex> l(mu_);
    notice["seq"] = ++last_seq_;
    std::string topic = notice.value("topic", "incident");
    ring_.push_back(ChangeNotice{last_seq_, std::move(topic), notice.dump()});
    if (ring_.size() > capacity_) ring_.pop_front();
  }
  cv_.notify_all();
}

ChangeBatch EventHub::WaitAfter(uint64_t after, double timeout_seconds) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::duration<double>(timeout_seconds),
               [&] { return last_seq_ > after; });
  ChangeBatch batch;
  if (last_seq_ <= after) return batch;
  batch.gap = ring_.empty() || ring_.front().seq > after + 1;
  for (const ChangeNotice& notice : ring_) {
    if (notice.seq > after) batch.notices.push_back(notice);
  }
  return batch;
}

uint64_t EventHub::last_seq() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_seq_;
}

}  // namespace vigil
