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
  std::string data;
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status error = Errno("cannot read frame log", path);
      ::close(fd);
      return error;
    }
    if (n == 0) break;
    data.append(chunk, n);
  }
  FrameLogReplay replay;
  std::vector<SeriesId> ids;
  std::vector<double> values;
  std::vector<FrameColumns> frames;
  std::string_view rest = data;
  absl::Status status;
  while (rest.size() >= kHeaderSize) {
    uint32_t length, crc;
    std::string_view header = rest;
    Get(&header, &length);
    Get(&header, &crc);
    if (length > kMaxRecord || header.size() < length) break;
    const std::string_view payload = header.substr(0, length);
    if (Crc32c(payload.data(), payload.size()) != crc ||
        !ParsePayload(payload, &ids, &values, &frames))
      break;
    status = apply(frames);
    if (!status.ok()) break;
    ++replay.records;
    rest.remove_prefix(kHeaderSize + length);
  }
  replay.valid_bytes = data.size() - rest.size();
  replay.torn_bytes = status.ok() ? rest.size() : 0;
  if (status.ok() && truncate_torn && replay.torn_bytes > 0 &&
      ::ftruncate(fd, replay.valid_bytes) != 0)
    status = Errno("cannot truncate frame log", path);
  ::close(fd);
  if (!status.ok()) return status;
  return replay;
}

}  // namespace vigil
