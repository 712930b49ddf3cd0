#include "agent/host_io.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vigil::agent {

absl::StatusOr<HostFile> HostFile::Open(std::string path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT)
      return absl::NotFoundError(absl::StrCat(path, ": missing"));
    return absl::ErrnoToStatus(err, absl::StrCat("cannot open ", path));
  }
  return HostFile(fd, std::move(path));
}

HostFile::HostFile(HostFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

HostFile& HostFile::operator=(HostFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

HostFile::~HostFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::string_view> HostFile::Read(std::vector<char>* buf) const {
  if (buf->size() < 256) buf->resize(256);
  size_t used = 0;
  for (;;) {
    if (used == buf->size()) buf->resize(buf->size() * 2);
    const ssize_t n = ::pread(fd_, buf->data() + used, buf->size() - used,
                              static_cast<off_t>(used));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  return std::string_view(buf->data(), used);
}

absl::StatusOr<uint64_t> HostFile::ReadU64(std::vector<char>* buf) const {
  absl::StatusOr<std::string_view> text = Read(buf);
  if (!text.ok()) return text.status();
  std::optional<uint64_t> value = ParseU64(*text);
  if (!value) {
    return absl::DataLossError(absl::StrCat(
        path_, ": not an unsigned integer: ", QuoteForError(*text)));
  }
  return *value;
}

std::string_view TrimSpace(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(kSpace);
  return text.substr(begin, end - begin + 1);
}

std::optional<uint64_t> ParseU64(std::string_view text) {
  text = TrimSpace(text);
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::string QuoteForError(std::string_view text) {
  constexpr size_t kMax = 40;
  const bool cut = text.size() > kMax;
  std::string out = "\"";
  for (char c : text.substr(0, kMax)) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += '?';
    } else {
      out += c;
    }
  }
  out += cut ? "\"..." : "\"";
  return out;
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) {
    return absl::NotFoundError(absl::StrCat(dir, ": missing"));
  }
  std::vector<std::string> names;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    return absl::ErrnoToStatus(ec.value(), absl::StrCat("cannot list ", dir));
  }
  std::sort(names.begin(), names.end());
  return names;
}

void ProblemList::Add(absl::Status problem) {
  if (problem.ok()) return;
  ++count_;
  if (static_cast<int>(listed_.size()) < kMaxListed) {
    listed_.push_back(std::move(problem));
  }
}

absl::Status ProblemList::ToStatus() const {
  if (count_ == 0) return absl::OkStatus();
  if (count_ == 1) return listed_.front();
  std::string message = absl::StrCat(count_, " problems: ");
  absl::StrAppend(
      &message,
      absl::StrJoin(listed_, "; ", [](std::string* out, const absl::Status& s) {
        absl::StrAppend(out, s.message());
      }));
  if (count_ > kMaxListed) {
    absl::StrAppend(&message, "; and ", count_ - kMaxListed, " more");
  }
  return absl::Status(listed_.front().code(), message);
}

bool RescanTimer::Due(double ts) {
  if (last_ && ts >= *last_ && ts - *last_ < interval_) return false;
  last_ = ts;
  return true;
}

}  // namespace vigil::agent
