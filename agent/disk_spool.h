// A BatchQueue kept on disk, so that an agent cut off from its server keeps
// hours of unacknowledged batches without holding them in memory.
//
// Layout: the spool directory holds append-only segment files named
// spool-<seq of their first batch, 20 digits>.seg, each a run of records
//   [u32 payload length][u32 CRC-32C of payload][serialized FrameBatch]
// (little-endian). A new segment starts when the current one would pass
// min(4 MiB, max_bytes / 8). Memory holds only an index (seq, segment,
// offset, size per batch) and at most two decoded batches.
//
// Restarts: the series dictionary the batches' frames refer to is kept
// beside them in series.dict (the same record framing, one SeriesDef per
// record, ids 0, 1, ... in order), appended as the stream client registers
// series. A new agent process reopening the spool resends what the earlier
// one left: it takes over that dictionary (LeftSeries) and continues the
// seqs after the newest batch held. The highest acknowledged seq is kept in
// the file "acked" (8 bytes, rewritten at every RemoveUpTo), so batches
// acknowledged before the restart are not sent again. Batches that refer to a series the
// dictionary lacks (it was torn, or deleted by hand) are dropped and
// counted, as are records cut short or failing their CRC. Nothing is
// fsynced: a node that loses power loses what its page cache held; an agent
// that crashes or is restarted loses nothing.
#ifndef VIGIL_AGENT_DISK_SPOOL_H_
#define VIGIL_AGENT_DISK_SPOOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/batch_queue.h"
#include "vigil/v1/ingest.pb.h"

namespace vigil::agent {

// Default bound of a spool: 256 MiB of segment files.
inline constexpr size_t kDefaultSpoolMaxBytes = 256u << 20;

// A BatchQueue in segment files under one directory, bounded by the size of
// those files. When a Push takes them past the bound, whole segments are
// deleted oldest first (never the one holding the batch just pushed) and
// their unacknowledged batches counted as dropped. Not thread-safe, like
// every BatchQueue; one process at a time may open a directory.
class DiskBatchQueue : public BatchQueue {
 public:
  // Opens the spool in `dir`, creating it (and its parents) if missing, and
  // takes an exclusive lock on it (file LOCK). Batches an earlier process
  // left are held again, in seq order, with their dictionary (LeftSeries);
  // reading a segment stops at a torn or corrupt record, and batches naming
  // series the dictionary lacks are dropped and counted. kInvalidArgument
  // if max_bytes is 0; kFailedPrecondition if `dir` is not a directory or
  // another process holds the lock; kInternal for other I/O errors.
  static absl::StatusOr<std::unique_ptr<DiskBatchQueue>> Open(
      const std::string& dir, size_t max_bytes = kDefaultSpoolMaxBytes);
  ~DiskBatchQueue() override;

  DiskBatchQueue(const DiskBatchQueue&) = delete;
  DiskBatchQueue& operator=(const DiskBatchQueue&) = delete;

  // Appends `batch` to the newest segment. kInvalidArgument if its seq does
  // not exceed every held one; kInternal if it cannot be written (the
  // segment is then cut back to its previous length and nothing is held).
  absl::Status Push(std::shared_ptr<const v1::FrameBatch> batch) override;
  // The oldest batch with seq > `seq`, read back from disk, or null when
  // there is none. A held batch that cannot be read back (I/O error, bad
  // CRC) is skipped and counted in dropped().
  std::shared_ptr<const v1::FrameBatch> NextAfter(uint64_t seq) const override;
  // Removes every batch with seq <= `seq` and deletes the segments left
  // with none; returns how many batches.
  size_t RemoveUpTo(uint64_t seq) override;
  // Removes and returns the oldest readable batch (unreadable ones before
  // it are removed and counted as dropped), or null when empty.
  std::shared_ptr<const v1::FrameBatch> PopFront() override;
  // Batches held.
  size_t size() const override { return index_.size(); }
  // Serialized bytes of the batches held.
  size_t bytes() const override { return bytes_; }
  // Batches dropped: by the bound, at Open, or unreadable.
  uint64_t dropped() const override { return dropped_ + unreadable_; }
  uint64_t newest_seq() const override {
    return index_.empty() ? 0 : index_.back().seq;
  }
  // Appends `def` to series.dict. kInvalidArgument if its id is not the
  // next one; kInternal if it cannot be written.
  absl::Status KeepSeries(const v1::SeriesDef& def) override;
  // The dictionary of the batches found at Open (empty if none were kept).
  std::vector<v1::SeriesDef> LeftSeries() const override {
    return left_series_;
  }

  // Bytes of the segment files, framing and acknowledged batches of a
  // partly acknowledged segment included; this is what max_bytes bounds.
  size_t disk_bytes() const { return disk_bytes_; }
  // Segment files on disk.
  size_t segments() const { return segments_.size(); }

 private:
  struct Segment {
    std::string path;
    size_t file_bytes = 0;
    size_t held = 0;  // batches of this segment still in index_
  };
  struct Entry {
    uint64_t seq;
    uint64_t segment;  // position in segments_ counted from segment_base_
    uint64_t offset;   // of the record header
    uint32_t size;     // payload bytes
    mutable bool unreadable = false;
  };

  DiskBatchQueue(std::string dir, size_t max_bytes, int lock_fd);
  // Reads series.dict, then indexes the leftover segments `paths` (sorted
  // by first seq) and keeps what is readable and fully known; opens
  // series.dict for appending (emptied when no batch was kept).
  absl::Status Recover(const std::vector<std::string>& paths);
  // Starts a new segment for a batch with `seq`.
  absl::Status Roll(uint64_t seq);
  // Deletes the oldest segment; its held batches count as `dropped` when
  // `count_dropped`.
  void DeleteOldestSegment(bool count_dropped);
  // Removes the oldest index entry.
  void PopEntry();
  // Reads the batch of `e`; null (and `e` marked unreadable) on failure.
  std::shared_ptr<const v1::FrameBatch> Read(const Entry& e) const;
  Segment& SegmentOf(const Entry& e) {
    return segments_[e.segment - segment_base_];
  }

  const std::string dir_;
  const size_t max_bytes_;
  const size_t segment_target_bytes_;
  const int lock_fd_;
  int write_fd_ = -1;  // newest segment, -1 when none is open
  int dict_fd_ = -1;   // series.dict, open for appending
  int acked_fd_ = -1;  // "acked": the highest seq removed by RemoveUpTo
  uint32_t dict_size_ = 0;  // entries in series.dict
  std::vector<v1::SeriesDef> left_series_;
  std::deque<Segment> segments_;
  uint64_t segment_base_ = 0;  // Entry::segment of segments_.front()
  std::deque<Entry> index_;
  size_t bytes_ = 0;
  size_t disk_bytes_ = 0;
  uint64_t dropped_ = 0;
  mutable uint64_t unreadable_ = 0;
  // The last batch pushed or read, and the oldest one read.
  mutable std::shared_ptr<const v1::FrameBatch> recent_, head_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_DISK_SPOOL_H_
