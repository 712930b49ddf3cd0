#include "storage/frame_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"

namespace vigil {
namespace {

constexpr char kPrefix[] = "frames-";
constexpr char kSuffix[] = ".log";
constexpr size_t kHeaderSize = 8;
// A record larger than this is treated as corrupt.
constexpr uint32_t kMaxRecord = 1u << 30;

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status ReadError(const std::string& path, const absl::Status& error) {
  return absl::InternalError(
      absl::StrCat("cannot read frame log ", path, ": ", error.message()));
}

template <typename T>
void Put(std::string* out, size_t* pos, const T& v) {
  std::memcpy(out->data() + *pos, &v, sizeof v);
  *pos += sizeof v;
}

template <typename T>
bool Get(std::string_view* in, T* v) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

// Decodes one payload into column storage and frames pointing into it.
bool ParsePayload(std::string_view payload, std::vector<SeriesId>* ids,
                  std::vector<double>* values,
                  std::vector<FrameColumns>* frames) {
  uint32_t count;
  if (!Get(&payload, &count)) return false;
  struct Extent {
    double ts;
    size_t begin, n;
  };
  std::vector<Extent> extents;
  ids->clear();
  values->clear();
  for (uint32_t f = 0; f < count; ++f) {
    double ts;
    uint32_t n;
    if (!Get(&payload, &ts) || !Get(&payload, &n)) return false;
    if (payload.size() / 12 < n) return false;
    const size_t begin = ids->size();
    if (n == 0) {  // memcpy may not be given the null data() of an empty vector
      extents.push_back(Extent{ts, begin, 0});
      continue;
    }
    ids->resize(begin + n);
    values->resize(begin + n);
    std::memcpy(ids->data() + begin, payload.data(), 4 * size_t{n});
    payload.remove_prefix(4 * size_t{n});
    std::memcpy(values->data() + begin, payload.data(), 8 * size_t{n});
    payload.remove_prefix(8 * size_t{n});
    extents.push_back(Extent{ts, begin, n});
  }
  if (!payload.empty()) return false;
  frames->clear();
  for (const Extent& e : extents) {
    frames->push_back(FrameColumns{
        .ts = e.ts,
        .ids = std::span<const SeriesId>(ids->data() + e.begin, e.n),
        .values = std::span<const double>(values->data() + e.begin, e.n)});
  }
  return true;
}

// Reads a file front to back through one buffer that grows only to the
// largest record asked for.
class SegmentReader {
 public:
  explicit SegmentReader(int fd) : fd_(fd) {}

  // Points *out at the next `n` bytes of the file, valid until the next
  // call. False if the file ends first; kInternal on a read error.
  absl::StatusOr<bool> Next(size_t n, std::string_view* out) {
    if (end_ - begin_ < n) {
      buffer_.erase(0, begin_);
      end_ -= begin_;
      begin_ = 0;
      buffer_.resize(std::max(n, kReadSize));
      while (end_ < n) {
        const ssize_t got = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return absl::InternalError(std::strerror(errno));
        if (got == 0) return false;
        end_ += static_cast<size_t>(got);
      }
    }
    *out = std::string_view(buffer_.data() + begin_, n);
    begin_ += n;
    return true;
  }

 private:
  static constexpr size_t kReadSize = 1 << 20;

  int fd_;
  std::string buffer_;
  size_t begin_ = 0;  // the first byte not handed out
  size_t end_ = 0;    // the end of the bytes read
};

}  // namespace

std::string FrameLogSegmentPath(const std::string& dir, uint64_t number) {
  return absl::StrFormat("%s/%s%020d%s", dir, kPrefix, number, kSuffix);
}

absl::StatusOr<std::vector<uint64_t>> ListFrameLogSegments(
    const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Errno("cannot list", dir);
  std::vector<uint64_t> out;
  const size_t prefix = std::strlen(kPrefix), suffix = std::strlen(kSuffix);
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() != prefix + 20 + suffix ||
        name.substr(0, prefix) != kPrefix ||
        name.substr(prefix + 20) != kSuffix)
      continue;
    std::string_view digits = name.substr(prefix, 20);
    if (!std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.push_back(std::stoull(std::string(digits)));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::unique_ptr<FrameLogWriter>> FrameLogWriter::Create(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        0644);
  if (fd < 0) return Errno("cannot create frame log", path);
  auto writer = std::unique_ptr<FrameLogWriter>(new FrameLogWriter(fd, path));
  // The new name must be durable before records in the file are relied on:
  // without this, a power loss can drop the whole segment.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(),
                            O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Errno("cannot open the frame log's directory", dir);
  const int sync_errno = ::fsync(dir_fd) == 0 ? 0 : errno;
  ::close(dir_fd);
  if (sync_errno != 0) {
    errno = sync_errno;
    return Errno("cannot sync the frame log's directory", dir);
  }
  return writer;
}

FrameLogWriter::~FrameLogWriter() { ::close(fd_); }

absl::Status FrameLogWriter::Append(std::span<const FrameColumns> frames,
                                    bool sync) {
  if (broken_)
    return absl::InternalError(
        absl::StrCat("frame log ", path_, " is unusable after a write error"));
  size_t payload = 4;
  for (const FrameColumns& f : frames) payload += 12 + 12 * f.ids.size();
  buffer_.resize(kHeaderSize + payload);
  size_t pos = kHeaderSize;
  Put(&buffer_, &pos, static_cast<uint32_t>(frames.size()));
  for (const FrameColumns& f : frames) {
    Put(&buffer_, &pos, f.ts);
    Put(&buffer_, &pos, static_cast<uint32_t>(f.ids.size()));
    if (f.ids.empty()) continue;  // an empty span may hold a null pointer
    std::memcpy(buffer_.data() + pos, f.ids.data(), 4 * f.ids.size());
    pos += 4 * f.ids.size();
    std::memcpy(buffer_.data() + pos, f.values.data(), 8 * f.values.size());
    pos += 8 * f.values.size();
  }
  size_t header = 0;
  Put(&buffer_, &header, static_cast<uint32_t>(payload));
  Put(&buffer_, &header, Crc32c(buffer_.data() + kHeaderSize, payload));

  size_t written = 0;
  while (written < buffer_.size()) {
    const ssize_t n =
        ::write(fd_, buffer_.data() + written, buffer_.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status error = Errno("cannot write frame log", path_);
      if (::ftruncate(fd_, size_) != 0 ||
          ::lseek(fd_, size_, SEEK_SET) != static_cast<off_t>(size_))
        broken_ = true;
      return error;
    }
    written += n;
  }
  size_ += written;
  if (sync && ::fdatasync(fd_) != 0) {
    broken_ = true;
    return Errno("cannot sync frame log", path_);
  }
  return absl::OkStatus();
}

absl::StatusOr<FrameLogReplay> ReplayFrameLogSegment(
    const std::string& path, bool truncate_torn,
    const std::function<absl::Status(std::span<const FrameColumns>)>& apply) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open frame log", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status error = Errno("cannot stat frame log", path);
    ::close(fd);
    return error;
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  // Record by record through one buffer, so that a replay after a crash
  // holds a record at a time, not the segment (up to the checkpoint
  // threshold, 256 MiB by default, on top of the open blocks it refills).
  SegmentReader reader(fd);
  FrameLogReplay replay;
  std::vector<SeriesId> ids;
  std::vector<double> values;
  std::vector<FrameColumns> frames;
  absl::Status status;
  uint64_t offset = 0;
  while (status.ok() && file_size - offset >= kHeaderSize) {
    std::string_view header;
    absl::StatusOr<bool> got = reader.Next(kHeaderSize, &header);
    if (!got.ok()) {
      status = ReadError(path, got.status());
      break;
    }
    if (!*got) break;
    uint32_t length, crc;
    Get(&header, &length);
    Get(&header, &crc);
    // A length beyond the file's end is a torn (or corrupt) record: stop
    // before allocating for it.
    if (length > kMaxRecord || length > file_size - offset - kHeaderSize) break;
    std::string_view payload;
    got = reader.Next(length, &payload);
    if (!got.ok()) {
      status = ReadError(path, got.status());
      break;
    }
    if (!*got || Crc32c(payload.data(), payload.size()) != crc ||
        !ParsePayload(payload, &ids, &values, &frames))
      break;
    status = apply(frames);
    if (!status.ok()) break;
    ++replay.records;
    offset += kHeaderSize + length;
  }
  replay.valid_bytes = offset;
  replay.torn_bytes = status.ok() ? file_size - offset : 0;
  if (status.ok() && truncate_torn && replay.torn_bytes > 0 &&
      ::ftruncate(fd, replay.valid_bytes) != 0)
    status = Errno("cannot truncate frame log", path);
  ::close(fd);
  if (!status.ok()) return status;
  return replay;
}

}  // namespace vigil
