// Helpers shared by the storage tests: per-test data dirs, series keys and
// store construction for both backends.
#ifndef VIGIL_TESTS_STORAGE_STORE_TEST_UTIL_H_
#define VIGIL_TESTS_STORAGE_STORE_TEST_UTIL_H_

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "storage/rocksdb_store.h"
#include "storage/series_store.h"

namespace vigil::testing {

// A data dir named after the running test (stable across the re-executed
// child of a threadsafe death test), emptied on creation and destruction.
class TestDir {
 public:
  TestDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "." + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = ::testing::TempDir() + "vigil_storage_test/" + name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// key metric{job=job,node=node[,gpu=gpu]}.
inline SeriesKey Key(std::string metric, std::string node = "n1",
                     std::string job = "j1", std::string gpu = "") {
  SeriesKey key{.metric = std::move(metric),
                .labels = {{"job", std::move(job)}, {"node", std::move(node)}}};
  if (!gpu.empty()) key.labels.push_back({"gpu", std::move(gpu)});
  EXPECT_TRUE(NormalizeSeriesKey(&key).ok());
  return key;
}

// Appends one frame; fails the test on error.
inline AppendResult AppendFrame(SeriesStore* store, double ts,
                                const std::vector<SeriesId>& ids,
                                const std::vector<double>& values) {
  FrameColumns frame{.ts = ts, .ids = ids, .values = values};
  AppendResult result;
  EXPECT_TRUE(store->Append({&frame, 1}, &result).ok());
  return result;
}

// Options for a RocksDB store in `dir` with small blocks.
inline RocksDbStoreOptions SmallRocksOptions(Clock* clock,
                                             const std::string& dir) {
  RocksDbStoreOptions options;
  options.store.clock = clock;
  options.store.block_samples = 16;
  options.data_dir = dir;
  return options;
}

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_STORAGE_STORE_TEST_UTIL_H_
