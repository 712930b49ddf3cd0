// The agent's store of batches the server has not acknowledged yet. The
// stream client resends them, oldest first, after every reconnect. The
// in-memory queue here is bounded; an on-disk spool can take its place
// behind the same interface.
#ifndef VIGIL_AGENT_BATCH_QUEUE_H_
#define VIGIL_AGENT_BATCH_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "vigil/v1/ingest.pb.h"

namespace vigil::agent {

// Unacknowledged batches in seq order. Implementations need not be
// thread-safe: the stream client serializes every call.
class BatchQueue {
 public:
  virtual ~BatchQueue() = default;
  // Appends `batch`, whose seq must exceed every queued one. When the bound
  // is exceeded the oldest batches (never `batch` itself) are dropped and
  // counted. An error means the batch could not be stored.
  virtual absl::Status Push(std::shared_ptr<const v1::FrameBatch> batch) = 0;
  // The oldest batch with seq > `seq`, or null when there is none.
  virtual std::shared_ptr<const v1::FrameBatch> NextAfter(
      uint64_t seq) const = 0;
  // Removes every batch with seq <= `seq`; returns how many.
  virtual size_t RemoveUpTo(uint64_t seq) = 0;
  // Removes and returns the oldest batch, or null when empty.
  virtual std::shared_ptr<const v1::FrameBatch> PopFront() = 0;
  // Batches held.
  virtual size_t size() const = 0;
  // Serialized bytes held.
  virtual size_t bytes() const = 0;
  // Batches dropped so far because the bound was hit.
  virtual uint64_t dropped() const = 0;
  // Seq of the newest batch held, 0 when empty.
  virtual uint64_t newest_seq() const = 0;

  // Keeps `def`, a new entry of the stream client's series dictionary, with
  // the batches, so that a queue that outlives the process (a disk spool)
  // can hand it to the next one. An error means it could not be kept and
  // the series must not be used. The default keeps nothing.
  virtual absl::Status KeepSeries(const v1::SeriesDef& def) {
    (void)def;
    return absl::OkStatus();
  }
  // The dictionary kept with the batches an earlier process left (ids 0,
  // 1, ... in order), which the stream client takes over so that those
  // batches mean what they meant; empty when no batch was left.
  virtual std::vector<v1::SeriesDef> LeftSeries() const { return {}; }
};

// A BatchQueue in memory, bounded by the serialized size of its batches.
class MemoryBatchQueue : public BatchQueue {
 public:
  // Holds at most `max_bytes` (at least the newest batch is always kept).
  explicit MemoryBatchQueue(size_t max_bytes) : max_bytes_(max_bytes) {}

  absl::Status Push(std::shared_ptr<const v1::FrameBatch> batch) override;
  std::shared_ptr<const v1::FrameBatch> NextAfter(uint64_t seq) const override;
  size_t RemoveUpTo(uint64_t seq) override;
  std::shared_ptr<const v1::FrameBatch> PopFront() override;
  size_t size() const override { return batches_.size(); }
  size_t bytes() const override { return bytes_; }
  uint64_t dropped() const override { return dropped_; }
  uint64_t newest_seq() const override {
    return batches_.empty() ? 0 : batches_.back().batch->seq();
  }

 private:
  struct Entry {
    std::shared_ptr<const v1::FrameBatch> batch;
    size_t bytes;
  };
  const size_t max_bytes_;
  std::deque<Entry> batches_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_BATCH_QUEUE_H_
