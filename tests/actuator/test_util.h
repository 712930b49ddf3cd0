// Helpers shared by the actuator tests: scratch directories, files, and a
// clock whose waits return at once with time moved to their deadline.
#ifndef VIGIL_TESTS_ACTUATOR_TEST_UTIL_H_
#define VIGIL_TESTS_ACTUATOR_TEST_UTIL_H_

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"

namespace vigil::testing {

// A fresh empty directory under the test temp dir, removed with this.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes `text` to `path` (mode 0755 when `executable`).
void WriteFile(const std::string& path, const std::string& text,
               bool executable = false);
// The contents of `path` ("" when missing).
std::string ReadFile(const std::string& path);
// The non-empty lines of `path`.
std::vector<std::string> ReadLines(const std::string& path);

// A clock that only moves when waited on: WaitUntil jumps to the deadline.
// Polling loops thus run through their timeouts at once, deterministically.
class AutoAdvanceClock : public Clock {
 public:
  explicit AutoAdvanceClock(double start) : now_(start) {}
  double Now() const override;
  void WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 double deadline) override;
  // How many times WaitUntil was called.
  int waits() const;

 private:
  mutable std::mutex mu_;
  double now_;
  int waits_ = 0;
};

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_ACTUATOR_TEST_UTIL_H_
