#include "agent/disk_spool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"

namespace vigil::agent {
namespace {

constexpr size_t kHeaderBytes = 8;  // u32 length, u32 CRC
constexpr size_t kMaxSegmentBytes = 4u << 20;
constexpr char kSegmentPrefix[] = "spool-";
constexpr char kSegmentSuffix[] = ".seg";

uint32_t Crc(const char* data, size_t n) { return Crc32c(data, n); }

void PutU32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t GetU32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return v;
}

absl::Status Errno(const std::string& what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Reads `n` bytes at `offset`; false on an I/O error or a short file.
bool ReadAt(int fd, uint64_t offset, size_t n, char* out) {
  size_t done = 0;
  while (done < n) {
    ssize_t r =
        pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

// Writes all of `data`; false (errno set) on failure.
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// The payloads of the records at the start of the file at `path` that are
// whole and pass their CRC, each with its offset; `*valid_bytes` is where
// they end.
absl::Status ReadRecords(const std::string& path,
                         std::vector<std::pair<uint64_t, std::string>>* out,
                         uint64_t* valid_bytes) {
  out->clear();
  *valid_bytes = 0;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno(absl::StrCat("open ", path), errno);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Errno(absl::StrCat("stat ", path), err);
  }
  uint64_t file_bytes = static_cast<uint64_t>(st.st_size), offset = 0;
  char header[kHeaderBytes];
  while (offset + kHeaderBytes <= file_bytes &&
         ReadAt(fd, offset, kHeaderBytes, header)) {
    uint32_t length = GetU32(header);
    if (length > file_bytes - offset - kHeaderBytes) break;  // torn
    std::string payload(length, '\0');
    if (!ReadAt(fd, offset + kHeaderBytes, length, payload.data()) ||
        Crc(payload.data(), length) != GetU32(header + 4)) {
      break;
    }
    out->emplace_back(offset, std::move(payload));
    offset += kHeaderBytes + length;
  }
  close(fd);
  *valid_bytes = offset;
  return absl::OkStatus();
}

// `payload` framed as a record.
std::string Frame(const std::string& payload) {
  std::string record(kHeaderBytes, '\0');
  PutU32(static_cast<uint32_t>(payload.size()), record.data());
  PutU32(Crc(payload.data(), payload.size()), record.data() + 4);
  return record + payload;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskBatchQueue>> DiskBatchQueue::Open(
    const std::string& dir, size_t max_bytes) {
  if (max_bytes == 0) {
    return absl::InvalidArgumentError("spool max bytes must be positive");
  }
  if (dir.empty()) return absl::InvalidArgumentError("spool dir is empty");
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::error_code type_ec;
  if (!fs::is_directory(dir, type_ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spool dir ", dir, " is not a directory and cannot be created",
        ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  std::string lock_path = (fs::path(dir) / "LOCK").string();
  int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return Errno(absl::StrCat("open ", lock_path), errno);
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    close(lock_fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("spool dir ", dir, " is in use by another agent"));
    }
    return Errno(absl::StrCat("lock ", lock_path), err);
  }
  // From here the queue owns lock_fd and closes it on every return.
  std::unique_ptr<DiskBatchQueue> queue(
      new DiskBatchQueue(dir, max_bytes, lock_fd));
  std::vector<std::string> leftovers;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (absl::StartsWith(name, kSegmentPrefix) &&
        absl::EndsWith(name, kSegmentSuffix)) {
      leftovers.push_back(it->path().string());
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("list spool dir ", dir, ": ", ec.message()));
  }
  // Names carry the first seq in 20 digits: name order is seq order.
  std::sort(leftovers.begin(), leftovers.end());
  if (absl::Status s = queue->Recover(leftovers); !s.ok()) return s;
  return queue;
}

absl::Status DiskBatchQueue::Recover(const std::vector<std::string>& paths) {
  const std::string dict_path =
      (std::filesystem::path(dir_) / "series.dict").string();
  std::vector<std::pair<uint64_t, std::string>> records;
  uint64_t dict_bytes = 0;
  if (absl::Status s = ReadRecords(dict_path, &records, &dict_bytes); !s.ok())
    return s;
  for (const auto& [offset, payload] : records) {
    v1::SeriesDef def;
    if (!def.ParseFromString(payload) || def.id() != left_series_.size()) {
      dict_bytes = offset;  // keep the consistent prefix only
      break;
    }
    left_series_.push_back(std::move(def));
  }
  const std::string acked_path =
      (std::filesystem::path(dir_) / "acked").string();
  acked_fd_ = open(acked_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (acked_fd_ < 0) return Errno(absl::StrCat("open ", acked_path), errno);
  char acked_bytes[8] = {};
  uint64_t acked = 0;
  if (ReadAt(acked_fd_, 0, sizeof(acked_bytes), acked_bytes)) {
    acked = GetU32(acked_bytes) | uint64_t{GetU32(acked_bytes + 4)} << 32;
  }
  for (const std::string& path : paths) {
    uint64_t valid_bytes = 0;
    if (absl::Status s = ReadRecords(path, &records, &valid_bytes); !s.ok())
      return s;
    Segment segment{path, 0, 0};
    for (const auto& [offset, payload] : records) {
      v1::FrameBatch batch;
      if (batch.ParseFromString(payload) && batch.seq() <= acked) continue;
      bool known = batch.ParseFromString(payload) &&
                   (index_.empty() || batch.seq() > index_.back().seq);
      for (const v1::Frame& f : batch.frames()) {
        for (uint32_t id : f.series_ids()) known = known && id < left_series_.size();
      }
      if (!known) {
        ++dropped_;
        continue;
      }
      index_.push_back({batch.seq(), segment_base_ + segments_.size(), offset,
                        static_cast<uint32_t>(payload.size())});
      ++segment.held;
      bytes_ += payload.size();
    }
    // Torn or corrupt records beyond valid_bytes are never read again;
    // the file keeps them until it is deleted.
    segment.file_bytes = valid_bytes;
    if (segment.held == 0) {
      if (unlink(path.c_str()) != 0) {
        return Errno(absl::StrCat("delete ", path), errno);
      }
      continue;
    }
    disk_bytes_ += valid_bytes;
    segments_.push_back(std::move(segment));
  }
  if (index_.empty()) {
    // A fresh start: seqs begin at 1 again, so the old watermark must go.
    left_series_.clear();
    dict_bytes = 0;
    const char zero[8] = {};
    if (pwrite(acked_fd_, zero, sizeof(zero), 0) != sizeof(zero)) {
      return Errno(absl::StrCat("write ", acked_path), errno);
    }
  }
  dict_fd_ = open(dict_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (dict_fd_ < 0) return Errno(absl::StrCat("open ", dict_path), errno);
  if (ftruncate(dict_fd_, static_cast<off_t>(dict_bytes)) != 0 ||
      lseek(dict_fd_, 0, SEEK_END) < 0) {
    return Errno(absl::StrCat("truncate ", dict_path), errno);
  }
  dict_size_ = static_cast<uint32_t>(left_series_.size());
  return absl::OkStatus();
}

absl::Status DiskBatchQueue::KeepSeries(const v1::SeriesDef& def) {
  if (def.id() != dict_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "series id ", def.id(), " kept out of order (want ", dict_size_, ")"));
  }
  if (!WriteAll(dict_fd_, Frame(def.SerializeAsString()))) {
    return Errno(absl::StrCat("write ", dir_, "/series.dict"), errno);
  }
  ++dict_size_;
  return absl::OkStatus();
}

DiskBatchQueue::DiskBatchQueue(std::string dir, size_t max_bytes, int lock_fd)
    : dir_(std::move(dir)),
      max_bytes_(max_bytes),
      segment_target_bytes_(std::min(kMaxSegmentBytes, max_bytes / 8)),
      lock_fd_(lock_fd) {}

DiskBatchQueue::~DiskBatchQueue() {
  if (write_fd_ >= 0) close(write_fd_);
  if (acked_fd_ >= 0) close(acked_fd_);
  if (dict_fd_ >= 0) close(dict_fd_);
  close(lock_fd_);
}

absl::Status DiskBatchQueue::Roll(uint64_t seq) {
  if (write_fd_ >= 0) {
    close(write_fd_);
    write_fd_ = -1;
  }
  std::string path =
      (std::filesystem::path(dir_) /
       absl::StrFormat("%s%020u%s", kSegmentPrefix, seq, kSegmentSuffix))
          .string();
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(absl::StrCat("create ", path), errno);
  write_fd_ = fd;
  segments_.push_back({std::move(path), 0, 0});
  return absl::OkStatus();
}

absl::Status DiskBatchQueue::Push(std::shared_ptr<const v1::FrameBatch> batch) {
  if (!index_.empty() && batch->seq() <= index_.back().seq) {
    return absl::InvalidArgumentError("batch seq not increasing");
  }
  std::string serialized;
  if (!batch->SerializeToString(&serialized)) {
    return absl::InvalidArgumentError("batch cannot be serialized");
  }
  size_t payload = serialized.size();
  if (payload > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("batch larger than 4 GiB");
  }
  std::string record = Frame(serialized);
  if (write_fd_ < 0 ||
      (segments_.back().file_bytes > 0 &&
       segments_.back().file_bytes + record.size() > segment_target_bytes_)) {
    absl::Status rolled = Roll(batch->seq());
    if (!rolled.ok()) return rolled;
  }
  Segment& segment = segments_.back();
  if (!WriteAll(write_fd_, record)) {
    int err = errno;
    if (ftruncate(write_fd_, static_cast<off_t>(segment.file_bytes)) != 0 ||
        lseek(write_fd_, 0, SEEK_END) < 0) {
      // The segment's tail is unknown now; start a new one next time.
      close(write_fd_);
      write_fd_ = -1;
    }
    return Errno(absl::StrCat("write ", segment.path), err);
  }
  index_.push_back({batch->seq(), segment_base_ + segments_.size() - 1,
                    segment.file_bytes, static_cast<uint32_t>(payload)});
  segment.file_bytes += record.size();
  ++segment.held;
  disk_bytes_ += record.size();
  bytes_ += payload;
  recent_ = std::move(batch);
  while (disk_bytes_ > max_bytes_ && segments_.size() > 1) {
    DeleteOldestSegment(/*count_dropped=*/true);
  }
  return absl::OkStatus();
}

void DiskBatchQueue::PopEntry() {
  const Entry& e = index_.front();
  --SegmentOf(e).held;
  bytes_ -= e.size;
  if (head_ != nullptr && head_->seq() <= e.seq) head_.reset();
  if (recent_ != nullptr && recent_->seq() <= e.seq) recent_.reset();
  index_.pop_front();
}

void DiskBatchQueue::DeleteOldestSegment(bool count_dropped) {
  while (!index_.empty() && index_.front().segment == segment_base_) {
    if (count_dropped && !index_.front().unreadable) ++dropped_;
    PopEntry();
  }
  Segment& oldest = segments_.front();
  // A segment that cannot be unlinked stays on disk unaccounted; nothing
  // better can be done with it here, and the next Open removes it.
  unlink(oldest.path.c_str());
  disk_bytes_ -= oldest.file_bytes;
  if (segments_.size() == 1 && write_fd_ >= 0) {
    close(write_fd_);
    write_fd_ = -1;
  }
  segments_.pop_front();
  ++segment_base_;
}

std::shared_ptr<const v1::FrameBatch> DiskBatchQueue::Read(
    const Entry& e) const {
  if (head_ != nullptr && head_->seq() == e.seq) return head_;
  if (recent_ != nullptr && recent_->seq() == e.seq) return recent_;
  const std::string& path = segments_[e.segment - segment_base_].path;
  std::string record(kHeaderBytes + e.size, '\0');
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && ReadAt(fd, e.offset, record.size(), record.data());
  if (fd >= 0) close(fd);
  auto batch = std::make_shared<v1::FrameBatch>();
  ok = ok && GetU32(record.data()) == e.size &&
       GetU32(record.data() + 4) == Crc(record.data() + kHeaderBytes, e.size) &&
       batch->ParseFromArray(record.data() + kHeaderBytes,
                             static_cast<int>(e.size)) &&
       batch->seq() == e.seq;
  if (!ok) {
    e.unreadable = true;
    ++unreadable_;
    return nullptr;
  }
  (&e == &index_.front() ? head_ : recent_) = batch;
  return batch;
}

std::shared_ptr<const v1::FrameBatch> DiskBatchQueue::NextAfter(
    uint64_t seq) const {
  auto it =
      std::upper_bound(index_.begin(), index_.end(), seq,
                       [](uint64_t s, const Entry& e) { return s < e.seq; });
  for (; it != index_.end(); ++it) {
    if (it->unreadable) continue;
    std::shared_ptr<const v1::FrameBatch> batch = Read(*it);
    if (batch != nullptr) return batch;
  }
  return nullptr;
}

size_t DiskBatchQueue::RemoveUpTo(uint64_t seq) {
  // Remembered for the next process; a failed write only means batches
  // acknowledged since are sent again after a restart (the server drops
  // the repeated samples).
  char acked[8];
  PutU32(static_cast<uint32_t>(seq), acked);
  PutU32(static_cast<uint32_t>(seq >> 32), acked + 4);
  (void)!pwrite(acked_fd_, acked, sizeof(acked), 0);
  size_t removed = 0;
  while (!index_.empty() && index_.front().seq <= seq) {
    PopEntry();
    ++removed;
  }
  while (!segments_.empty() && segments_.front().held == 0) {
    DeleteOldestSegment(/*count_dropped=*/false);
  }
  return removed;
}

std::shared_ptr<const v1::FrameBatch> DiskBatchQueue::PopFront() {
  std::shared_ptr<const v1::FrameBatch> batch;
  while (batch == nullptr && !index_.empty()) {
    if (!index_.front().unreadable) batch = Read(index_.front());
    PopEntry();
  }
  while (!segments_.empty() && segments_.front().held == 0) {
    DeleteOldestSegment(/*count_dropped=*/false);
  }
  return batch;
}

}  // namespace vigil::agent
