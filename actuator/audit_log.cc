#include "actuator/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace vigil::actuator {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("audit log path is empty");
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open the audit log ", path,
                                               " for appending: ", std::strerror(errno)));
  }
  std::unique_ptr<AuditLog> log(new AuditLog(path, fd));
  std::ifstream in(path);
  if (!in) {
    return absl::UnavailableError(absl::StrCat("cannot read the audit log ", path));
  }
  std::string line;
  bool ends_with_newline = true;
  while (std::getline(in, line)) {
    ends_with_newline = !in.eof();
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.is_object()) {
      ++log->skipped_lines_;
      continue;
    }
    log->existing_records_.push_back(std::move(record));
  }
  if (in.bad()) {
    return absl::UnavailableError(absl::StrCat("error reading the audit log ", path));
  }
  if (!ends_with_newline && write(fd, "\n", 1) != 1) {
    return absl::UnavailableError(absl::StrCat("cannot append to the audit log ", path,
                                               ": ", std::strerror(errno)));
  }
  return log;
}

AuditLog::~AuditLog() { close(fd_); }

absl::Status AuditLog::Append(const nlohmann::json& record) {
  if (!record.is_object()) {
    return absl::InvalidArgumentError("an audit record must be a JSON object");
  }
  // Invalid UTF-8 from a request is replaced rather than refused: refused
  // requests are audited too.
  std::string line =
      record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  size_t written = 0;
  while (written < line.size()) {
    ssize_t n = write(fd_, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot append to the audit log ",
                                                 path_, ": ", std::strerror(errno)));
    }
    written += static_cast<size_t>(n);
  }
  if (fdatasync(fd_) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot sync the audit log ", path_,
                                               ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace vigil::actuator
