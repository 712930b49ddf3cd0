// The frame log: an append-only file of Append() calls that makes acked
// samples survive a crash until a checkpoint has put them in RocksDB.
//
// A log is a sequence of numbered segment files
// (frames-NNNNNNNNNNNNNNNNNNNN.log); a checkpoint starts a new segment. A
// segment is an 8-byte header ("VGFL", then u32 version 2) and records:
// u32 payload length, u32 CRC-32C of the payload (little-endian), payload
// = varint frame count, then per frame f64 ts, varint n, n series ids
// (each the zigzag varint of its difference from the one before, the
// first from 0), n values. A value is a varint whose two low bits say
// what it is:
//   0: an integer i, |i| < 2^53 (not -0): the varint is zigzag(i) << 2;
//   1: a decimal i / 1000 that is not an integer (watts to the milliwatt):
//      zigzag(i) << 2 | 1;
//   2: a float holds it exactly: the varint is 2, then 4 bytes of the float;
//   3: anything else (NaN payloads included): 3, then 8 bytes of the double.
// A sample of the simulator's frames takes 4.2 bytes instead of 12; the
// frame log is most of what a server writes to disk (docs/SCALING.md).
//
// Segments without the header (version 1) are still read: their payload is
// u32 frame count, then per frame f64 ts, u32 n, n u32 series ids, n f64
// values.
#ifndef VIGIL_STORAGE_FRAME_LOG_H_
#define VIGIL_STORAGE_FRAME_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/series_store.h"

namespace vigil {

// Path of segment `number` in `dir`.
std::string FrameLogSegmentPath(const std::string& dir, uint64_t number);

// Numbers of the segment files in `dir`, ascending. kInternal if `dir`
// cannot be listed.
absl::StatusOr<std::vector<uint64_t>> ListFrameLogSegments(
    const std::string& dir);

// Appends records to one segment. Not thread-safe.
class FrameLogWriter {
 public:
  // Creates (truncating) segment file `path` and writes its header.
  // kInternal on I/O errors.
  static absl::StatusOr<std::unique_ptr<FrameLogWriter>> Create(
      const std::string& path);
  ~FrameLogWriter();
  FrameLogWriter(const FrameLogWriter&) = delete;
  FrameLogWriter& operator=(const FrameLogWriter&) = delete;

  // Writes `frames` as one record with one write(), then fsync()s if `sync`.
  // On failure the file is cut back to its previous size; if even that
  // fails the writer refuses every later record. kInternal on I/O errors.
  absl::Status Append(std::span<const FrameColumns> frames, bool sync);

  // Bytes in the segment, its header included.
  uint64_t size() const { return size_; }
  // True once a failed write could not be undone (or a sync failed): every
  // later Append fails, and the log must move to a new segment.
  bool broken() const { return broken_; }

 private:
  FrameLogWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_;
  std::string path_;
  uint64_t size_ = 0;
  bool broken_ = false;
  std::string buffer_;
};

// What ReplayFrameLogSegment found.
struct FrameLogReplay {
  uint64_t records = 0;
  uint64_t valid_bytes = 0;  // bytes up to the end of the last good record
  uint64_t torn_bytes = 0;   // bytes after it (an incomplete or bad record)
};

// Calls `apply` with the frames of each record of segment `path` in order,
// stopping at the first incomplete or corrupt record. If `truncate_torn`,
// the file is cut to its valid prefix. kInternal on I/O errors;
// kFailedPrecondition for a segment of a version this code does not know
// (left as it is); or the first error `apply` returns.
absl::StatusOr<FrameLogReplay> ReplayFrameLogSegment(
    const std::string& path, bool truncate_torn,
    const std::function<absl::Status(std::span<const FrameColumns>)>& apply);

}  // namespace vigil

#endif  // VIGIL_STORAGE_FRAME_LOG_H_
