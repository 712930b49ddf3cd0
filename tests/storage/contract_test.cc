// SeriesStore contract, part 1: series identity, append, query, bad input.
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "tests/storage/contract_fixture.h"

namespace vigil::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

using StoreSeriesTest = StoreContractTest;

TEST_P(StoreSeriesTest, ResolveIsStableAndDense) {
  const SeriesId a = MustResolve(Key("gpu_power_watts", "n1", "j1", "0"));
  const SeriesId b = MustResolve(Key("gpu_power_watts", "n1", "j1", "1"));
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(MustResolve(Key("gpu_power_watts", "n1", "j1", "0")), a);
  // Unsorted labels name the same series.
  SeriesKey unsorted{.metric = "gpu_power_watts",
                     .labels = {{"node", "n1"}, {"job", "j1"}, {"gpu", "1"}}};
  EXPECT_EQ(MustResolve(unsorted), b);
  auto key = store_->Key(b);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(*key, Key("gpu_power_watts", "n1", "j1", "1"));
  EXPECT_EQ(store_->Key(99).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().series, 2u);
}

TEST_P(StoreSeriesTest, FindNeverCreates) {
  EXPECT_EQ(store_->Find(Key("gpu_power_watts", "n1", "j1", "0")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().series, 0u);
  const SeriesId a = MustResolve(Key("gpu_power_watts", "n1", "j1", "0"));
  SeriesKey unsorted{.metric = "gpu_power_watts",
                     .labels = {{"node", "n1"}, {"job", "j1"}, {"gpu", "0"}}};
  absl::StatusOr<SeriesId> found = store_->Find(unsorted);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, a);
  EXPECT_EQ(store_->Find(SeriesKey{.metric = "9bad", .labels = {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreSeriesTest, MalformedKeysAreRejected) {
  EXPECT_EQ(store_->Resolve(SeriesKey{.metric = "9bad", .labels = {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Resolve(SeriesKey{.metric = "m", .labels = {{"a", ""}}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Stats().series, 0u);
}

TEST_P(StoreSeriesTest, SeriesLimit) {
  options_.max_series = 2;
  Open();
  MustResolve(Key("a"));
  MustResolve(Key("b"));
  EXPECT_EQ(store_->Resolve(Key("c")).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(MustResolve(Key("a")), 0u);  // existing keys still resolve
}

TEST_P(StoreSeriesTest, ListSeriesFilters) {
  MustResolve(Key("power", "n1", "j1"));
  MustResolve(Key("power", "n2", "j1"));
  MustResolve(Key("temp", "n1", "j2"));
  auto filter = [](std::string job, std::string node, std::string metric) {
    return SeriesFilter{.job = job, .node = node, .metric = metric};
  };
  auto ids = [&](const SeriesFilter& f) {
    std::vector<SeriesId> out;
    for (const SeriesInfo& s : store_->ListSeries(f)) out.push_back(s.id);
    return out;
  };
  EXPECT_EQ(ids({}), (std::vector<SeriesId>{0, 1, 2}));
  EXPECT_EQ(ids(filter("", "", "power")), (std::vector<SeriesId>{0, 1}));
  EXPECT_EQ(ids(filter("", "n1", "")), (std::vector<SeriesId>{0, 2}));
  EXPECT_EQ(ids(filter("j2", "", "")), (std::vector<SeriesId>{2}));
  EXPECT_EQ(ids(filter("j1", "n2", "power")),
            (std::vector<SeriesId>{1}));
  EXPECT_TRUE(ids(filter("", "", "nope")).empty());
  EXPECT_EQ(store_->ListSeries(filter("", "n2", ""))[0].key, Key("power", "n2", "j1"));
  // Pages: ids from `start`, at most `limit`.
  EXPECT_EQ(ids({.start = 1}), (std::vector<SeriesId>{1, 2}));
  EXPECT_EQ(ids({.limit = 2}), (std::vector<SeriesId>{0, 1}));
  EXPECT_EQ(ids({.node = "n1", .start = 1, .limit = 5}), (std::vector<SeriesId>{2}));
  EXPECT_TRUE(ids({.start = 3}).empty());
}

TEST_P(StoreSeriesTest, AppendAndQueryAcrossBlocks) {
  const SeriesId a = MustResolve(Key("a")), b = MustResolve(Key("b"));
  // 100 frames: several closed blocks of 16 plus an open one.
  for (int i = 0; i < 100; ++i) {
    AppendResult r = AppendFrame(store_.get(), kT0 + i, {a, b},
                                 {600.125 + i, i % 7 == 0 ? kNaN : -i * 0.5});
    EXPECT_EQ(r.accepted, 2u);
  }
  std::vector<Sample> all = MustQuery(a, kT0, kT0 + 1000);
  ASSERT_EQ(all.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(all[i], (Sample{kT0 + i, 600.125 + i}));
  // [from, to) bounds, including ranges inside one block.
  std::vector<Sample> part = MustQuery(b, kT0 + 10, kT0 + 20);
  ASSERT_EQ(part.size(), 10u);
  EXPECT_EQ(part.front().ts, kT0 + 10);
  EXPECT_EQ(part.back().ts, kT0 + 19);
  EXPECT_TRUE(std::isnan(MustQuery(b, kT0 + 14, kT0 + 15)[0].value));
  EXPECT_EQ(MustQuery(b, kT0 + 99, kT0 + 99.5).size(), 1u);  // open block
  EXPECT_TRUE(MustQuery(a, kT0 - 100, kT0).empty());
  EXPECT_TRUE(MustQuery(a, kT0 + 100, kT0 + 200).empty());
  EXPECT_EQ(store_->Query(42, kT0, kT0 + 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().samples_appended, 200u);
}

TEST_P(StoreSeriesTest, MillisecondTimestampsAndSpecialValues) {
  const SeriesId a = MustResolve(Key("a"));
  const double values[] = {kNaN, kInf, -kInf, -0.0, 1e300, 5e-324, 0.1};
  for (int i = 0; i < 7; ++i)
    AppendFrame(store_.get(), kT0 + 0.001 * i + 0.25, {a}, {values[i]});
  std::vector<Sample> got = MustQuery(a, kT0, kT0 + 1);
  ASSERT_EQ(got.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(got[i].ts, kT0 + 0.001 * i + 0.25);
    EXPECT_EQ(Bits(got[i].value), Bits(values[i])) << i;
  }
}

TEST_P(StoreSeriesTest, DuplicatesAndOutOfOrderAreDroppedAndCounted) {
  const SeriesId a = MustResolve(Key("a")), b = MustResolve(Key("b"));
  AppendFrame(store_.get(), kT0 + 10, {a, b}, {1, kNaN});
  // Same ts, same value (NaN included): duplicates.
  AppendResult r = AppendFrame(store_.get(), kT0 + 10, {a, b}, {1, kNaN});
  EXPECT_EQ(r.accepted, 0u);
  EXPECT_EQ(r.duplicates, 2u);
  // Same ts with another value, and an earlier ts: out of order.
  r = AppendFrame(store_.get(), kT0 + 10, {a}, {2});
  EXPECT_EQ(r.out_of_order, 1u);
  r = AppendFrame(store_.get(), kT0 + 5, {a, b}, {3, 3});
  EXPECT_EQ(r.out_of_order, 2u);
  // Within one Append, frames are applied in order.
  FrameColumns frames[2];
  std::vector<SeriesId> ids = {a};
  std::vector<double> v1 = {4}, v2 = {5};
  frames[0] = {.ts = kT0 + 12, .ids = ids, .values = v1};
  frames[1] = {.ts = kT0 + 11, .ids = ids, .values = v2};
  ASSERT_TRUE(store_->Append(frames, &r).ok());
  EXPECT_EQ(r.accepted, 1u);
  EXPECT_EQ(r.out_of_order, 1u);
  EXPECT_EQ(MustQuery(a, 0, kT0 + 100),
            (std::vector<Sample>{{kT0 + 10, 1}, {kT0 + 12, 4}}));
  const StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.samples_appended, 3u);
  EXPECT_EQ(stats.samples_dropped, 6u);
}

TEST_P(StoreSeriesTest, BadInputIsRejectedWithNothingApplied) {
  const SeriesId a = MustResolve(Key("a"));
  std::vector<SeriesId> good_ids = {a}, bad_ids = {a, 7};
  std::vector<double> one = {1}, two = {1, 2};
  auto expect_rejected = [&](FrameColumns second) {
    FrameColumns frames[2] = {{.ts = kT0, .ids = good_ids, .values = one},
                              second};
    AppendResult r;
    EXPECT_EQ(store_->Append(frames, &r).code(),
              absl::StatusCode::kInvalidArgument);
  };
  expect_rejected({.ts = kT0 + 1, .ids = bad_ids, .values = two});
  expect_rejected({.ts = kT0 + 1, .ids = good_ids, .values = two});
  expect_rejected({.ts = kNaN, .ids = good_ids, .values = one});
  expect_rejected({.ts = kInf, .ids = good_ids, .values = one});
  expect_rejected({.ts = 1e300, .ids = good_ids, .values = one});
  EXPECT_TRUE(MustQuery(a, 0, 1e12).empty());
  EXPECT_EQ(store_->Stats().samples_appended, 0u);
  // The store still works afterwards.
  EXPECT_EQ(AppendFrame(store_.get(), kT0, {a}, {1}).accepted, 1u);
}

TEST_P(StoreSeriesTest, EmptyAppendsAreFine) {
  AppendResult r;
  EXPECT_TRUE(store_->Append({}, &r).ok());
  FrameColumns empty{.ts = kT0, .ids = {}, .values = {}};
  EXPECT_TRUE(store_->Append({&empty, 1}, nullptr).ok());
  EXPECT_EQ(r.accepted, 0u);
}

TEST_P(StoreSeriesTest, ConcurrentAppendsAndQueries) {
  constexpr int kThreads = 4, kFrames = 300;
  std::vector<SeriesId> ids;
  for (int t = 0; t < kThreads; ++t)
    ids.push_back(MustResolve(Key("m", "n" + std::to_string(t))));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kFrames; ++i) {
        AppendFrame(store_.get(), kT0 + i, {ids[t]}, {double(i)});
        if (i % 50 == 0) (void)store_->Query(ids[(t + 1) % kThreads], 0, 1e10);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (SeriesId id : ids) {
    std::vector<Sample> got = MustQuery(id, 0, 1e10);
    ASSERT_EQ(got.size(), size_t{kFrames});
    for (int i = 0; i < kFrames; ++i) EXPECT_EQ(got[i].value, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreSeriesTest,
                         ::testing::Values(Backend::kMemory, Backend::kRocksDb),
                         BackendName);

}  // namespace
}  // namespace vigil::testing
