// The SeriesStore contract fixture: every TEST_P on it runs against the
// in-memory store and the RocksDB store.
#ifndef VIGIL_TESTS_STORAGE_CONTRACT_FIXTURE_H_
#define VIGIL_TESTS_STORAGE_CONTRACT_FIXTURE_H_

#include <memory>
#include <optional>
#include <string>

#include "tests/storage/store_test_util.h"

namespace vigil::testing {

enum class Backend { kMemory, kRocksDb };

inline std::string BackendName(
    const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kMemory ? "Memory" : "RocksDb";
}

class StoreContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  StoreContractTest() {
    options_.clock = &clock_;
    options_.block_samples = 16;
    Open();
  }

  // (Re)creates the store with options_ (a memory store starts empty).
  void Open() {
    store_.reset();
    if (GetParam() == Backend::kMemory) {
      store_ = NewMemoryStore(options_);
      return;
    }
    RocksDbStoreOptions rocks;
    rocks.store = options_;
    rocks.data_dir = dir_.path();
    auto store = OpenRocksDbStore(rocks);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  SeriesId MustResolve(const SeriesKey& key) {
    auto id = store_->Resolve(key);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  std::vector<Sample> MustQuery(SeriesId id, double from, double to) {
    auto samples = store_->Query(id, from, to);
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.value_or(std::vector<Sample>{});
  }

  std::vector<Aggregate> MustAggregate(SeriesId id, double from, double to,
                                       double step) {
    auto buckets = store_->QueryAggregate(id, from, to, step);
    EXPECT_TRUE(buckets.ok()) << buckets.status();
    return buckets.value_or(std::vector<Aggregate>{});
  }

  // A start time aligned to an hour, near the fake clock.
  static constexpr double kT0 = 1764000000.0;

  TestDir dir_;
  FakeClock clock_{kT0};
  StoreOptions options_;
  std::unique_ptr<SeriesStore> store_;
};

}  // namespace vigil::testing

#endif  // VIGIL_TESTS_STORAGE_CONTRACT_FIXTURE_H_
