#include "tests/agent/host_test_util.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace vigil::agent::testing {

namespace fs = std::filesystem;

std::string TestData(std::string_view rel) {
  return std::string(VIGIL_HOST_TESTDATA) + "/" + std::string(rel);
}

FixtureCopy::FixtureCopy(std::string_view rel) {
  const ::testing::TestInfo* t =
      ::testing::UnitTest::GetInstance()->current_test_info();
  root_ = (fs::path(::testing::TempDir()) /
           (std::string("host_") + t->test_suite_name() + "_" + t->name() +
            "_" + std::to_string(getpid())))
              .string();
  fs::remove_all(root_);
  fs::create_directories(root_);
  fs::copy(TestData(rel), root_, fs::copy_options::recursive);
}

FixtureCopy::~FixtureCopy() { fs::remove_all(root_); }

void FixtureCopy::Write(std::string_view rel, std::string_view content) const {
  const fs::path path = fs::path(root_) / rel;
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

void FixtureCopy::Remove(std::string_view rel) const {
  fs::remove_all(fs::path(root_) / rel);
}

void FixtureCopy::CopyTree(std::string_view from, std::string_view to) const {
  fs::copy(fs::path(root_) / from, fs::path(root_) / to,
           fs::copy_options::recursive);
}

Tick At(double ts) {
  Tick tick;
  tick.ts = ts;
  return tick;
}

std::optional<double> Value(const Tick& tick, std::string_view metric,
                            std::string_view dev) {
  for (const Sample& s : tick.samples) {
    if (s.key.metric == metric && s.key.LabelValue("dev") == dev) {
      return s.value;
    }
  }
  return std::nullopt;
}

std::set<std::string> Devs(const Tick& tick, std::string_view metric) {
  std::set<std::string> out;
  for (const Sample& s : tick.samples) {
    if (s.key.metric == metric) out.emplace(s.key.LabelValue("dev"));
  }
  return out;
}

}  // namespace vigil::agent::testing
