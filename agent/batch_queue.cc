#include "agent/batch_queue.h"

#include <algorithm>
#include <utility>

namespace vigil::agent {

absl::Status MemoryBatchQueue::Push(
    std::shared_ptr<const v1::FrameBatch> batch) {
  if (!batches_.empty() && batch->seq() <= batches_.back().batch->seq()) {
    return absl::InvalidArgumentError("batch seq not increasing");
  }
  size_t n = batch->ByteSizeLong();
  batches_.push_back({std::move(batch), n});
  bytes_ += n;
  while (bytes_ > max_bytes_ && batches_.size() > 1) {
    bytes_ -= batches_.front().bytes;
    batches_.pop_front();
    ++dropped_;
  }
  return absl::OkStatus();
}

std::shared_ptr<const v1::FrameBatch> MemoryBatchQueue::NextAfter(
    uint64_t seq) const {
  auto it = std::upper_bound(
      batches_.begin(), batches_.end(), seq,
      [](uint64_t s, const Entry& e) { return s < e.batch->seq(); });
  return it == batches_.end() ? nullptr : it->batch;
}

size_t MemoryBatchQueue::RemoveUpTo(uint64_t seq) {
  size_t removed = 0;
  while (!batches_.empty() && batches_.front().batch->seq() <= seq) {
    bytes_ -= batches_.front().bytes;
    batches_.pop_front();
    ++removed;
  }
  return removed;
}

std::shared_ptr<const v1::FrameBatch> MemoryBatchQueue::PopFront() {
  if (batches_.empty()) return nullptr;
  std::shared_ptr<const v1::FrameBatch> b = std::move(batches_.front().batch);
  bytes_ -= batches_.front().bytes;
  batches_.pop_front();
  return b;
}

}  // namespace vigil::agent
