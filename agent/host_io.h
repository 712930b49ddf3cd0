// Cheap reads of the small pseudo-files of sysfs and /proc for the host
// collectors (RDMA NICs, disks, CPU): a file is opened once, when the
// collector discovers it, and re-read with pread from offset 0 every tick
// into a buffer the caller keeps, so a steady-state read allocates nothing.
#ifndef VIGIL_AGENT_HOST_IO_H_
#define VIGIL_AGENT_HOST_IO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vigil::agent {

// A file opened read-only. Move-only; closes itself. Not thread-safe.
class HostFile {
 public:
  // Opens `path` read-only and non-blocking (a FIFO cannot hang a tick).
  // kNotFound if it does not exist; otherwise the errno's code, with the
  // path, if it cannot be opened.
  static absl::StatusOr<HostFile> Open(std::string path);

  HostFile(HostFile&& other) noexcept;
  HostFile& operator=(HostFile&& other) noexcept;
  HostFile(const HostFile&) = delete;
  HostFile& operator=(const HostFile&) = delete;
  ~HostFile();

  // The whole content, read from offset 0 into `buf` (grown as needed,
  // never shrunk); valid until `buf` is next written. The errno's code,
  // with the path, if the read fails.
  absl::StatusOr<std::string_view> Read(std::vector<char>* buf) const;
  // The content as one unsigned decimal integer (surrounding whitespace
  // allowed), read through `buf`. kDataLoss naming the path and quoting
  // the content if it is anything else; read errors as for Read.
  absl::StatusOr<uint64_t> ReadU64(std::vector<char>* buf) const;

  const std::string& path() const { return path_; }

 private:
  HostFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_ = -1;
  std::string path_;
};

// `text` without leading and trailing spaces, tabs and newlines.
std::string_view TrimSpace(std::string_view text);
// `text` (surrounding whitespace allowed) as an unsigned decimal integer;
// nullopt if it is empty, signed, too large for 64 bits or has other
// characters.
std::optional<uint64_t> ParseU64(std::string_view text);
// `text` quoted for an error message, cut to its first 40 bytes.
std::string QuoteForError(std::string_view text);

// Names in directory `dir`, sorted, without "." and "..". kNotFound if it
// does not exist; otherwise the error's code and message if it cannot be
// listed.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir);

// The problems met during one Collect, folded into the single status the
// collector returns.
class ProblemList {
 public:
  // Records `problem` (ignored if OK).
  void Add(absl::Status problem);
  // OK if nothing was recorded; otherwise the first problem's code and a
  // message listing the first few problems ("3 problems: a; b; c").
  absl::Status ToStatus() const;

 private:
  static constexpr int kMaxListed = 4;
  int count_ = 0;
  std::vector<absl::Status> listed_;
};

// Decides when a collector re-discovers its file set, from tick times
// (never the clock): at the first tick, then whenever `interval` seconds of
// tick time have passed since the last discovery, or tick time went back.
class RescanTimer {
 public:
  explicit RescanTimer(double interval) : interval_(interval) {}
  // True if a rescan is due at `ts`; if so, counts it as done at `ts`.
  bool Due(double ts);

 private:
  double interval_;
  std::optional<double> last_;
};

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_HOST_IO_H_
