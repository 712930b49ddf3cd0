#include "storage/frame_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "storage/varint.h"

namespace vigil {
namespace {

constexpr char kPrefix[] = "frames-";
constexpr char kSuffix[] = ".log";
using storage_internal::EncodeVarint64;
using storage_internal::GetVarint64;
using storage_internal::kMaxVarint64Bytes;
using storage_internal::UnZigZag;
using storage_internal::ZigZag;

// A record's header: payload length and CRC.
constexpr size_t kHeaderSize = 8;
// A record larger than this is treated as corrupt.
constexpr uint32_t kMaxRecord = 1u << 30;
// A segment's header: magic and version. No version 1 record starts this
// way: its length would be beyond kMaxRecord.
constexpr char kSegmentMagic[4] = {'V', 'G', 'F', 'L'};
constexpr uint32_t kSegmentVersion = 2;
constexpr size_t kSegmentHeaderSize = 8;
// The most bytes a value takes (tag 3 and its double).
constexpr size_t kMaxValueBytes = 9;
// Integers a double holds exactly.
constexpr double kExactInteger = 9007199254740992.0;  // 2^53

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

// Writes value `v` at `out` (room for kMaxValueBytes) as the header
// describes; returns the byte after.
char* EncodeValue(char* out, double v) {
  if (std::fabs(v) < kExactInteger) {
    const double whole = std::trunc(v);
    if (whole == v) {
      if (v != 0 || !std::signbit(v)) {
        return EncodeVarint64(out, ZigZag(static_cast<int64_t>(whole)) << 2);
      }
    } else if (std::fabs(v) < kExactInteger / 1000) {
      const double thousandths = std::nearbyint(v * 1000);
      if (thousandths / 1000 == v) {
        return EncodeVarint64(
            out, ZigZag(static_cast<int64_t>(thousandths)) << 2 | 1);
      }
    }
  }
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) == v) {
    *out++ = 2;
    std::memcpy(out, &f, sizeof f);
    return out + sizeof f;
  }
  *out++ = 3;
  std::memcpy(out, &v, sizeof v);
  return out + sizeof v;
}

bool GetValue(std::string_view* in, double* v) {
  uint64_t word;
  if (!GetVarint64(in, &word)) return false;
  switch (word & 3) {
    case 0:
      *v = static_cast<double>(UnZigZag(word >> 2));
      return true;
    case 1:
      *v = static_cast<double>(UnZigZag(word >> 2)) / 1000;
      return true;
    case 2: {
      float f;
      if (word != 2 || !Get(in, &f)) return false;
      *v = f;
      return true;
    }
    default:
      return word == 3 && Get(in, v);
  }
}

// A frame of a payload being decoded: its time and its count of samples,
// which follow those of the frames before it in the columns.
struct FrameExtent {
  double ts;
  size_t n;
};

// Decodes one version 2 payload into `extents` and the columns.
bool DecodePayload(std::string_view payload, std::vector<FrameExtent>* extents,
                   std::vector<SeriesId>* ids, std::vector<double>* values) {
  uint64_t count;
  // A frame takes at least 9 bytes.
  if (!GetVarint64(&payload, &count) || count > payload.size() / 9)
    return false;
  for (uint64_t f = 0; f < count; ++f) {
    double ts;
    uint64_t n;
    // A sample takes at least 2 bytes.
    if (!Get(&payload, &ts) || !GetVarint64(&payload, &n) ||
        n > payload.size() / 2)
      return false;
    const size_t begin = ids->size();
    ids->resize(begin + n);
    values->resize(begin + n);
    uint64_t id = 0;
    for (size_t i = begin; i < begin + n; ++i) {
      uint64_t delta;
      if (!GetVarint64(&payload, &delta)) return false;
      id += static_cast<uint64_t>(UnZigZag(delta));
      if (id > UINT32_MAX) return false;
      (*ids)[i] = static_cast<SeriesId>(id);
    }
    for (size_t i = begin; i < begin + n; ++i) {
      if (!GetValue(&payload, &(*values)[i])) return false;
    }
    extents->push_back(FrameExtent{ts, n});
  }
  return payload.empty();
}

// Decodes one version 1 payload, as DecodePayload.
bool DecodePayloadV1(std::string_view payload,
                     std::vector<FrameExtent>* extents,
                     std::vector<SeriesId>* ids, std::vector<double>* values) {
  uint32_t count;
  if (!Get(&payload, &count)) return false;
  for (uint32_t f = 0; f < count; ++f) {
    double ts;
    uint32_t n;
    if (!Get(&payload, &ts) || !Get(&payload, &n)) return false;
    if (payload.size() / 12 < n) return false;
    extents->push_back(FrameExtent{ts, n});
    if (n == 0) continue;  // memcpy may not be given a null data()
    const size_t begin = ids->size();
    ids->resize(begin + n);
    values->resize(begin + n);
    std::memcpy(ids->data() + begin, payload.data(), 4 * size_t{n});
    payload.remove_prefix(4 * size_t{n});
    std::memcpy(values->data() + begin, payload.data(), 8 * size_t{n});
    payload.remove_prefix(8 * size_t{n});
  }
  return payload.empty();
}

// Decodes a payload of `version1` or not into column storage and frames
// pointing into it; false if it is malformed.
bool ParsePayload(std::string_view payload, bool version1,
                  std::vector<SeriesId>* ids, std::vector<double>* values,
                  std::vector<FrameColumns>* frames) {
  std::vector<FrameExtent> extents;
  ids->clear();
  values->clear();
  if (!(version1 ? DecodePayloadV1 : DecodePayload)(payload, &extents, ids,
                                                     values))
    return false;
  frames->clear();
  size_t begin = 0;
  for (const FrameExtent& e : extents) {
    frames->push_back(FrameColumns{
        .ts = e.ts,
        .ids = std::span<const SeriesId>(ids->data() + begin, e.n),
        .values = std::span<const double>(values->data() + begin, e.n)});
    begin += e.n;
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

  // Hands out again the bytes handed out first (only before more than
  // one read's worth was asked for).
  void Rewind() { begin_ = 0; }

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
  char header[kSegmentHeaderSize];
  std::memcpy(header, kSegmentMagic, sizeof kSegmentMagic);
  std::memcpy(header + sizeof kSegmentMagic, &kSegmentVersion,
              sizeof kSegmentVersion);
  if (::write(fd, header, sizeof header) != static_cast<ssize_t>(sizeof header))
    return Errno("cannot write the header of frame log", path);
  writer->size_ = sizeof header;
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
  size_t bound = kMaxVarint64Bytes;
  for (const FrameColumns& f : frames) {
    bound += sizeof f.ts + kMaxVarint64Bytes +
             f.ids.size() * (kMaxVarint64Bytes + kMaxValueBytes);
  }
  buffer_.resize(kHeaderSize + bound);
  char* const begin = buffer_.data() + kHeaderSize;
  char* out = EncodeVarint64(begin, frames.size());
  for (const FrameColumns& f : frames) {
    std::memcpy(out, &f.ts, sizeof f.ts);
    out = EncodeVarint64(out + sizeof f.ts, f.ids.size());
    SeriesId previous = 0;
    for (SeriesId id : f.ids) {
      out = EncodeVarint64(out, ZigZag(int64_t{id} - int64_t{previous}));
      previous = id;
    }
    for (double v : f.values) out = EncodeValue(out, v);
  }
  const size_t payload = out - begin;
  buffer_.resize(kHeaderSize + payload);
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
  // threshold, 96 MiB by default, on top of the open blocks it refills).
  SegmentReader reader(fd);
  FrameLogReplay replay;
  std::vector<SeriesId> ids;
  std::vector<double> values;
  std::vector<FrameColumns> frames;
  absl::Status status;
  uint64_t offset = 0;
  // Version 2 segments start with their header; version 1 ones with a
  // record (a segment cut short in its header holds no record either way).
  bool version1 = true;
  if (file_size >= kSegmentHeaderSize) {
    std::string_view header;
    absl::StatusOr<bool> got = reader.Next(kSegmentHeaderSize, &header);
    if (!got.ok()) {
      ::close(fd);
      return ReadError(path, got.status());
    }
    if (std::memcmp(header.data(), kSegmentMagic, sizeof kSegmentMagic) == 0) {
      uint32_t version;
      std::memcpy(&version, header.data() + sizeof kSegmentMagic, sizeof version);
      if (version != kSegmentVersion) {
        ::close(fd);
        return absl::FailedPreconditionError(absl::StrCat(
            "frame log ", path, " is of version ", version,
            " (a later vigil-server's?); this one reads versions 1 and ",
            kSegmentVersion));
      }
      version1 = false;
      offset = kSegmentHeaderSize;
    } else {
      reader.Rewind();
    }
  }
  while (status.ok() && file_size - offset >= kHeaderSize) {
    std::string_view header;
    absl::StatusOr<bool> got = reader.Next(kHeaderSize, &header);
    if (!got.ok()) {
      status = ReadError(path, got.status());
      break;
    }
    if (!*got) break;
    uint32_t length = 0, crc = 0;
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
        !ParsePayload(payload, version1, &ids, &values, &frames))
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
