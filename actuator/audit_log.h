// The actuator's append-only audit log: one JSON object per line, every
// webhook request (accepted or refused) and what came of it. It is also
// where idempotency survives a restart: the answers of done actions are
// read back when the log is opened. Format: actuator/README.md.
#ifndef VIGIL_ACTUATOR_AUDIT_LOG_H_
#define VIGIL_ACTUATOR_AUDIT_LOG_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vigil::actuator {

// Appends records to a file opened with O_APPEND; each record is written
// with one write() and synced before Append returns. Thread-safe.
class AuditLog {
 public:
  // Opens the log at `path` (creating the file, not its directory) and
  // reads the records already there. A line that is not a JSON object
  // (e.g. torn by a crash) is skipped and counted, and a torn last line is
  // ended so the next record starts on a line of its own. kInvalidArgument
  // for an empty path; kUnavailable when the file cannot be read or opened
  // for appending.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& path);
  ~AuditLog();

  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // The records that were in the file when it was opened, oldest first.
  const std::vector<nlohmann::json>& existing_records() const {
    return existing_records_;
  }
  // How many lines of the existing file were not JSON objects.
  int skipped_lines() const { return skipped_lines_; }
  const std::string& path() const { return path_; }

  // Appends `record` (a JSON object) as one line. kInvalidArgument when it
  // is not an object; kUnavailable when the write or sync fails.
  absl::Status Append(const nlohmann::json& record);

 private:
  AuditLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  std::vector<nlohmann::json> existing_records_;
  int skipped_lines_ = 0;
  std::mutex mu_;  // serializes writes to fd_
  const int fd_;
};

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_AUDIT_LOG_H_
