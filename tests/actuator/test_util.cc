#include "tests/actuator/test_util.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace vigil::testing {

ScratchDir::ScratchDir() {
  std::string pattern = ::testing::TempDir() + "/vigil_actuator_XXXXXX";
  char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void WriteFile(const std::string& path, const std::string& text, bool executable) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    ASSERT_TRUE(out.good()) << "cannot write " << path;
  }
  if (executable) chmod(path.c_str(), 0755);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

double AutoAdvanceClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

void AutoAdvanceClock::WaitUntil(std::unique_lock<std::mutex>&, std::condition_variable&,
                                 double deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  ++waits_;
  if (deadline > now_) now_ = deadline;
}

int AutoAdvanceClock::waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_;
}

}  // namespace vigil::testing
