// SeriesStore contract, part 2: downsampling, retention and events.
#include <cmath>
#include <limits>

#include "absl/time/clock.h"

#include "tests/storage/contract_fixture.h"

namespace vigil::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kDay = 86400;

using StoreHistoryTest = StoreContractTest;

void ExpectSameBuckets(const std::vector<Aggregate>& got,
                       const std::vector<Aggregate>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].start, want[i].start) << i;
    EXPECT_EQ(got[i].count, want[i].count) << i;
    EXPECT_EQ(got[i].nan_count, want[i].nan_count) << i;
    EXPECT_DOUBLE_EQ(got[i].sum, want[i].sum) << i;
    EXPECT_EQ(got[i].min, want[i].min) << i;
    EXPECT_EQ(got[i].max, want[i].max) << i;
  }
}

TEST_P(StoreHistoryTest, AggregatesRawSamples) {
  const SeriesId a = MustResolve(Key("a"));
  // 3 minutes at 1 Hz: value = second of the minute; every 10th is NaN.
  for (int i = 0; i < 180; ++i)
    AppendFrame(store_.get(), kT0 + i, {a}, {i % 10 == 9 ? kNaN : double(i % 60)});
  // Leave a gap, then one sample.
  AppendFrame(store_.get(), kT0 + 600, {a}, {5});
  std::vector<Aggregate> buckets = MustAggregate(a, kT0, kT0 + 3600, 60);
  ASSERT_EQ(buckets.size(), 4u);  // empty minutes are omitted
  for (int m = 0; m < 3; ++m) {
    EXPECT_EQ(buckets[m].start, kT0 + 60 * m);
    EXPECT_EQ(buckets[m].count, 60u);
    EXPECT_EQ(buckets[m].nan_count, 6u);
    EXPECT_EQ(buckets[m].min, 0);
    EXPECT_EQ(buckets[m].max, 58);
    EXPECT_EQ(buckets[m].sum, 1770 - (9 + 19 + 29 + 39 + 49 + 59));
  }
  EXPECT_EQ(buckets[3].start, kT0 + 600);
  EXPECT_EQ(buckets[3].count, 1u);
  // Steps below a minute, and [from, to) cutting through buckets.
  std::vector<Aggregate> fine = MustAggregate(a, kT0 + 5, kT0 + 20, 10);
  ASSERT_EQ(fine.size(), 2u);
  EXPECT_EQ(fine[0].start, kT0);
  EXPECT_EQ(fine[0].count, 5u);  // 5..8 and NaN at 9
  EXPECT_EQ(fine[0].nan_count, 1u);
  EXPECT_EQ(fine[1].count, 10u);
  // An all-NaN bucket has NaN min/max.
  std::vector<Aggregate> nan_only = MustAggregate(a, kT0 + 9, kT0 + 10, 1);
  ASSERT_EQ(nan_only.size(), 1u);
  EXPECT_TRUE(std::isnan(nan_only[0].min));
  EXPECT_EQ(nan_only[0].count, nan_only[0].nan_count);
  EXPECT_EQ(store_->QueryAggregate(a, kT0, kT0 + 60, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->QueryAggregate(a, kT0, kT0 + 60, kNaN).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->QueryAggregate(9, kT0, kT0 + 60, 60).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreHistoryTest, RetentionKeepsRollupsThenDropsThem) {
  const SeriesId a = MustResolve(Key("a")), b = MustResolve(Key("b"));
  for (int i = 0; i < 1800; ++i) {
    AppendFrame(store_.get(), kT0 + i, {a, b},
                {std::sin(i * 0.01) * 100, i % 100 == 0 ? kNaN : 0.5 * i});
  }
  const std::vector<Aggregate> minutes_a = MustAggregate(a, kT0, kT0 + kDay, 60);
  const std::vector<Aggregate> minutes_b = MustAggregate(b, kT0, kT0 + kDay, 60);
  const std::vector<Aggregate> tens_b = MustAggregate(b, kT0, kT0 + kDay, 600);
  ASSERT_EQ(minutes_a.size(), 30u);

  // Past raw retention: raw samples are gone, minute aggregates remain.
  clock_.Advance(9 * kDay);
  ASSERT_TRUE(store_->EnforceRetention().ok());
  EXPECT_TRUE(MustQuery(a, kT0, kT0 + kDay).empty());
  ExpectSameBuckets(MustAggregate(a, kT0, kT0 + kDay, 60), minutes_a);
  ExpectSameBuckets(MustAggregate(b, kT0, kT0 + kDay, 60), minutes_b);
  ExpectSameBuckets(MustAggregate(b, kT0, kT0 + kDay, 600), tens_b);

  // New data next to old rollups: both are visible.
  AppendFrame(store_.get(), clock_.Now(), {a}, {1});
  EXPECT_EQ(MustAggregate(a, kT0, clock_.Now() + 1, 60).size(), 31u);
  // Running retention again changes nothing.
  ASSERT_TRUE(store_->EnforceRetention().ok());
  ExpectSameBuckets(MustAggregate(a, kT0, kT0 + kDay, 60), minutes_a);

  // Past rollup retention: everything old is gone, recent data stays.
  clock_.Advance(100 * kDay);
  ASSERT_TRUE(store_->EnforceRetention().ok());
  clock_.Advance(84 * kDay);
  AppendFrame(store_.get(), clock_.Now(), {a}, {2});
  ASSERT_TRUE(store_->EnforceRetention().ok());
  EXPECT_TRUE(MustAggregate(a, kT0, kT0 + kDay, 60).empty());
  EXPECT_EQ(MustAggregate(a, kT0, clock_.Now() + 1, 60).size(), 1u);  // the newest
  // b has nothing left at all: it left the index.
  EXPECT_EQ(store_->QueryAggregate(b, kT0, kT0 + kDay, 60).status().code(),
            absl::StatusCode::kNotFound);
}

// The store enforces retention by itself (the RocksDB store on its
// maintenance thread, woken by the append that finds it due).
TEST_P(StoreHistoryTest, StoreEnforcesRetentionPeriodically) {
  const SeriesId a = MustResolve(Key("a"));
  for (int i = 0; i < 100; ++i) AppendFrame(store_.get(), kT0 + i, {a}, {1.0 * i});
  clock_.Advance(10 * kDay);
  AppendFrame(store_.get(), clock_.Now(), {a}, {7});
  const std::vector<Sample> want = {{clock_.Now(), 7}};
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (MustQuery(a, 0, 1e10) != want && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(MustQuery(a, 0, 1e10), want);
  std::vector<Aggregate> old = MustAggregate(a, kT0, kT0 + 3600, 3600);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].count, 100u);
  EXPECT_EQ(old[0].sum, 4950);
}

// A series whose data has all expired leaves the index: its id is never
// given out again, appends naming it are refused (resolve the key again),
// and a series still reporting is untouched.
TEST_P(StoreHistoryTest, SeriesWhoseDataExpiredLeaveTheIndex) {
  const SeriesId old = MustResolve(Key("old")), live = MustResolve(Key("live"));
  for (int i = 0; i < 40; ++i) AppendFrame(store_.get(), kT0 + i, {old, live}, {1, 2});
  clock_.Advance(200 * kDay);
  AppendFrame(store_.get(), clock_.Now(), {live}, {3});
  ASSERT_TRUE(store_->EnforceRetention().ok());

  EXPECT_EQ(store_->Key(old).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Find(Key("old")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Query(old, 0, 1e10).status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(store_->ListSeries({}).size(), 1u);
  EXPECT_EQ(store_->ListSeries({})[0].id, live);
  EXPECT_EQ(store_->Stats().series, 1u);
  EXPECT_EQ(store_->Stats().series_expired, 1u);
  std::vector<SeriesId> ids = {old};
  std::vector<double> values = {4};
  FrameColumns frame{.ts = clock_.Now() + 1, .ids = ids, .values = values};
  EXPECT_EQ(store_->Append({&frame, 1}, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(MustQuery(live, 0, 1e10).size(), 1u);  // nothing applied

  const SeriesId again = MustResolve(Key("old"));
  EXPECT_NE(again, old);
  EXPECT_NE(again, live);
  AppendFrame(store_.get(), clock_.Now() + 1, {again, live}, {5, 6});
  EXPECT_EQ(MustQuery(again, 0, 1e10), (std::vector<Sample>{{clock_.Now() + 1, 5}}));

  if (GetParam() == Backend::kMemory) return;
  Open();  // the expiry is durable
  EXPECT_EQ(store_->Key(old).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().series, 2u);
  EXPECT_EQ(MustResolve(Key("old")), again);
  EXPECT_EQ(MustQuery(again, 0, 1e10).size(), 1u);
}

TEST_P(StoreHistoryTest, EventsByStreamAndTime) {
  auto append = [&](std::string stream, double ts, std::string payload) {
    auto seq = store_->AppendEvent(
        Event{.stream = std::move(stream), .ts = ts, .payload = std::move(payload)});
    EXPECT_TRUE(seq.ok()) << seq.status();
    return seq.value_or(0);
  };
  const uint64_t s1 = append("incident/1", kT0 + 10, R"({"state":"open"})");
  const uint64_t s2 = append("incident/2", kT0 + 5, "other");
  const uint64_t s3 = append("incident/1", kT0 + 5, "earlier");
  const uint64_t s4 = append("incident/1", kT0 + 20.5, "");
  EXPECT_LT(s1, s2);
  EXPECT_LT(s2, s3);
  EXPECT_LT(s3, s4);
  std::vector<Event> got = store_->ListEvents("incident/1", 0, 1e10, 100);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "earlier");
  EXPECT_EQ(got[0].seq, s3);
  EXPECT_EQ(got[0].ts, kT0 + 5);
  EXPECT_EQ(got[0].stream, "incident/1");
  EXPECT_EQ(got[1].payload, R"({"state":"open"})");
  EXPECT_EQ(got[2].ts, kT0 + 20.5);
  EXPECT_EQ(store_->ListEvents("incident/1", kT0 + 5, kT0 + 20.5, 100).size(), 2u);
  EXPECT_EQ(store_->ListEvents("incident/1", 0, 1e10, 1)[0].seq, s3);
  EXPECT_TRUE(store_->ListEvents("incident/", 0, 1e10, 100).empty());
  EXPECT_TRUE(store_->ListEvents("incident/1", 0, 1e10, 0).empty());
  EXPECT_EQ(store_->AppendEvent(Event{.stream = "", .ts = kT0, .seq = 0, .payload = "x"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Events are never expired by the store.
  clock_.Advance(400 * kDay);
  ASSERT_TRUE(store_->EnforceRetention().ok());
  EXPECT_EQ(store_->ListEvents("incident/1", 0, 1e10, 100).size(), 3u);
}

// A service prunes its own stream: events before the cutoff go (for good,
// across a reopen), later ones and other streams stay, seqs go on.
TEST_P(StoreHistoryTest, EventsBeforeACutoffAreDeleted) {
  auto append = [&](std::string stream, double ts) {
    auto seq = store_->AppendEvent(Event{.stream = std::move(stream), .ts = ts, .payload = "p"});
    EXPECT_TRUE(seq.ok()) << seq.status();
    return seq.value_or(0);
  };
  append("outbox", kT0 + 1);
  append("outbox", kT0 - 5000);  // far back: before any other
  append("outbox/actions", kT0);
  const uint64_t kept = append("outbox", kT0 + 2);
  append("outbo", kT0);  // a stream whose name is a prefix of another's
  ASSERT_TRUE(store_->DeleteEventsBefore("outbox", kT0 + 2).ok());
  std::vector<Event> left = store_->ListEvents("outbox", -1e12, 1e12, 100);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].seq, kept);
  EXPECT_EQ(store_->ListEvents("outbox/actions", -1e12, 1e12, 100).size(), 1u);
  EXPECT_EQ(store_->ListEvents("outbo", -1e12, 1e12, 100).size(), 1u);
  EXPECT_TRUE(store_->DeleteEventsBefore("none", kT0).ok());
  EXPECT_EQ(store_->DeleteEventsBefore("", kT0).code(), absl::StatusCode::kInvalidArgument);
  if (GetParam() == Backend::kRocksDb) {
    Open();
    EXPECT_EQ(store_->ListEvents("outbox", -1e12, 1e12, 100).size(), 1u);
  }
  EXPECT_GT(append("outbox", kT0 + 3), kept);
}

TEST_P(StoreHistoryTest, StateIsReplacedAndKept) {
  EXPECT_EQ(store_->GetState("escalation").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->PutState("escalation", "v1").ok());
  ASSERT_TRUE(store_->PutState("escalation", std::string("v2\0x", 4)).ok());
  ASSERT_TRUE(store_->PutState("other", "o").ok());
  EXPECT_EQ(store_->GetState("escalation").value_or(""), std::string("v2\0x", 4));
  EXPECT_EQ(store_->GetState("other").value_or(""), "o");
  EXPECT_EQ(store_->PutState("", "x").code(), absl::StatusCode::kInvalidArgument);
  clock_.Advance(400 * kDay);
  ASSERT_TRUE(store_->EnforceRetention().ok());
  EXPECT_EQ(store_->GetState("other").value_or(""), "o");
}

// A value written in parts replaces the key's value only once committed,
// and is replaced in turn by PutState; keys are any bytes.
TEST_P(StoreHistoryTest, StateWrittenInPartsReplacesOnCommit) {
  const std::string key = "detection/1-of-2";
  ASSERT_TRUE(store_->PutState(key, "old").ok());
  std::string big;
  {
    auto writer = store_->NewStateWriter(key);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int part = 0; part < 64; ++part) {
      const std::string bytes(1000 + part, static_cast<char>(part));
      big += bytes;
      ASSERT_TRUE((*writer)->Append(bytes).ok());
    }
    ASSERT_TRUE((*writer)->Append(std::string("\0nul", 4)).ok());
    big += std::string("\0nul", 4);
    EXPECT_EQ(store_->GetState(key).value_or(""), "old");  // not committed
    ASSERT_TRUE((*writer)->Commit().ok());
    EXPECT_FALSE((*writer)->Commit().ok());  // once
  }
  EXPECT_EQ(store_->GetState(key).value_or(""), big);
  {
    // Dropped without Commit: the committed value stays.
    auto writer = store_->NewStateWriter(key);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("half").ok());
  }
  EXPECT_EQ(store_->GetState(key).value_or(""), big);
  if (GetParam() == Backend::kRocksDb) {
    Open();
    EXPECT_EQ(store_->GetState(key).value_or(""), big);
  }
  // Keys that differ only where a file name could not tell them apart.
  const std::vector<std::string> keys = {".", "..", "a/b", "a%2Fb", "a b", std::string("\0", 1)};
  for (const std::string& k : keys) {
    auto writer = store_->NewStateWriter(k);
    ASSERT_TRUE(writer.ok()) << k;
    ASSERT_TRUE((*writer)->Append("v" + k).ok());
    ASSERT_TRUE((*writer)->Commit().ok()) << k;
  }
  for (const std::string& k : keys) {
    EXPECT_EQ(store_->GetState(k).value_or(""), "v" + k) << k;
  }
  ASSERT_TRUE(store_->PutState(key, "small").ok());
  EXPECT_EQ(store_->GetState(key).value_or(""), "small");
  if (GetParam() == Backend::kRocksDb) {
    Open();
    EXPECT_EQ(store_->GetState(key).value_or(""), "small");
  }
  EXPECT_EQ(store_->NewStateWriter("").status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreHistoryTest,
                         ::testing::Values(Backend::kMemory, Backend::kRocksDb),
                         BackendName);

}  // namespace
}  // namespace vigil::testing
