#include "storage/compressed_samples.h"

#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/storage/xor_format_records.h"

namespace vigil {
namespace {

uint64_t Bits(double v) { return std::bit_cast<uint64_t>(v); }
double FromBits(uint64_t b) { return std::bit_cast<double>(b); }

// Appends every sample, then checks that decoding from each of a few
// starting points gives them back bit for bit. Returns the buffer bytes.
size_t RoundTrip(const std::vector<int64_t>& ts, const std::vector<double>& v) {
  CompressedSamples samples;
  for (size_t i = 0; i < ts.size(); ++i) {
    samples.Append(ts[i], v[i]);
    EXPECT_EQ(samples.size(), i + 1);
  }
  for (size_t begin : {size_t{0}, size_t{1}, ts.size() / 2, ts.size()}) {
    std::vector<int64_t> ts_out = {-1};  // Decode appends
    std::vector<double> v_out = {-1};
    samples.Decode(begin, &ts_out, &v_out);
    const size_t n = begin < ts.size() ? ts.size() - begin : 0;
    EXPECT_EQ(ts_out.size(), n + 1);
    EXPECT_EQ(v_out.size(), n + 1);
    for (size_t i = 0; i < n && i + 1 < ts_out.size(); ++i) {
      EXPECT_EQ(ts_out[i + 1], ts[begin + i]) << "at " << begin + i;
      EXPECT_EQ(Bits(v_out[i + 1]), Bits(v[begin + i])) << "at " << begin + i;
    }
  }
  return samples.capacity_bytes();
}

TEST(CompressedSamplesTest, EmptyDecodesToNothing) {
  CompressedSamples samples;
  std::vector<int64_t> ts;
  std::vector<double> v;
  samples.Decode(0, &ts, &v);
  EXPECT_TRUE(ts.empty());
  EXPECT_TRUE(samples.empty());
  EXPECT_EQ(RoundTrip({}, {}), 0u);
}

TEST(CompressedSamplesTest, RegularSeriesCostsAFewBitsASample) {
  std::vector<int64_t> ts;
  std::vector<double> v;
  for (int i = 0; i < 720; ++i) {
    ts.push_back(1764000000000 + i * 1000);
    v.push_back(i % 60 < 30 ? 300.0 : 301.5);  // a level that moves rarely
  }
  EXPECT_LT(RoundTrip(ts, v), 720u * 12 / 20);  // a twentieth of 12 B each
}

TEST(CompressedSamplesTest, EveryBitPatternAndGapRoundTrips) {
  const double special[] = {0.0,
                            -0.0,
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN(),
                            FromBits(0x7ff0000000000001),  // signalling NaN payload
                            FromBits(0xfff8dead0000beef),
                            std::numeric_limits<double>::denorm_min(),
                            std::numeric_limits<double>::max(),
                            1.0,
                            1.0,
                            1e-300};
  std::vector<int64_t> ts;
  std::vector<double> v;
  int64_t t = 1764000000000;
  const int64_t gaps[] = {1000, 1000, 1001, 999, 0, 60'000, 3'600'000, 1, 5000,
                          -7, std::numeric_limits<int32_t>::max(), 1000};
  for (size_t i = 0; i < std::size(special); ++i) {
    t += gaps[i];
    ts.push_back(t);
    v.push_back(special[i]);
  }
  // Extremes of the timestamp range: deltas wrap.
  ts.push_back(std::numeric_limits<int64_t>::min());
  v.push_back(2.5);
  ts.push_back(std::numeric_limits<int64_t>::max());
  v.push_back(2.5);
  ts.push_back(0);
  v.push_back(-2.5);
  RoundTrip(ts, v);
}

TEST(CompressedSamplesTest, RandomSeriesRoundTrip) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<int64_t> ts;
    std::vector<double> v;
    int64_t t = static_cast<int64_t>(rng() >> 20);
    double level = static_cast<double>(rng() % 1000);
    const int n = 1 + static_cast<int>(rng() % 800);
    for (int i = 0; i < n; ++i) {
      switch (rng() % 4) {
        case 0: t += 1000; break;
        case 1: t += static_cast<int64_t>(rng() % 5000); break;
        case 2: t += static_cast<int64_t>(rng() % (int64_t{1} << 40)); break;
        default: t += 1000 + static_cast<int64_t>(rng() % 3) - 1; break;
      }
      ts.push_back(t);
      switch (rng() % 4) {
        case 0: break;  // unchanged
        case 1: level += 0.25; break;
        case 2: level = FromBits(rng()); break;  // any bit pattern
        default: level = std::round(level * 1000 + 1) / 1000; break;
      }
      v.push_back(level);
    }
    RoundTrip(ts, v);
  }
}

TEST(CompressedSamplesTest, ClearFreesKeepsTheLastSampleAndStartsAgain) {
  CompressedSamples samples;
  for (int i = 0; i < 100; ++i) samples.Append(1000 * i, i);
  samples.Clear();
  EXPECT_TRUE(samples.empty());
  EXPECT_EQ(samples.capacity_bytes(), 0u);
  // The last sample is still known (the store's cursor).
  EXPECT_EQ(samples.last_ts_ms(), 99000);
  EXPECT_EQ(samples.last_bits(), std::bit_cast<uint64_t>(99.0));
  samples.SetLast(7, 42);
  EXPECT_EQ(samples.last_ts_ms(), 7);
  EXPECT_EQ(samples.last_bits(), 42u);
  samples.Append(5, 1.5);
  EXPECT_EQ(samples.last_ts_ms(), 5);
  samples.SetLast(9, 43);  // not empty: ignored
  EXPECT_EQ(samples.last_ts_ms(), 5);
  EXPECT_EQ(samples.last_bits(), std::bit_cast<uint64_t>(1.5));
  std::vector<int64_t> ts;
  std::vector<double> v;
  samples.Decode(0, &ts, &v);
  EXPECT_EQ(ts, std::vector<int64_t>{5});
  EXPECT_EQ(v, std::vector<double>{1.5});
}

// A noisy series of `n` samples: mostly 1 Hz with jitter and gaps, values
// that stay, drift, change by a little or become any bit pattern.
void NoisySeries(std::mt19937_64& rng, int n, std::vector<int64_t>* ts,
                 std::vector<double>* v) {
  int64_t t = static_cast<int64_t>(rng() >> 24);
  double level = 300;
  for (int i = 0; i < n; ++i) {
    t += rng() % 8 == 0 ? static_cast<int64_t>(rng() % 100'000) : 1000;
    ts->push_back(t);
    switch (rng() % 5) {
      case 0: break;
      case 1: level += 0.5; break;
      case 2: level = FromBits(rng()); break;
      default: level = 300 + static_cast<double>(rng() % 1000) / 10; break;
    }
    v->push_back(level);
  }
}

// Rebuilds a sequence from `records` as the store's loader does: decode
// each against what was rebuilt so far, then append its samples.
bool Rebuild(const std::vector<std::string>& records, CompressedSamples* out) {
  std::string previous;
  for (const std::string& record : records) {
    std::vector<int64_t> ts;
    std::vector<double> v;
    if (!out->DecodeRecord(record, previous, &ts, &v)) return false;
    previous = record;
    for (size_t i = 0; i < ts.size(); ++i) out->Append(ts[i], v[i]);
  }
  return true;
}

// Checks that `records` rebuild exactly samples `ts`, `v`.
void ExpectRebuilt(const std::vector<std::string>& records, const std::vector<int64_t>& ts,
                   const std::vector<double>& v) {
  CompressedSamples rebuilt;
  ASSERT_TRUE(Rebuild(records, &rebuilt));
  std::vector<int64_t> ts_out;
  std::vector<double> v_out;
  rebuilt.Decode(0, &ts_out, &v_out);
  ASSERT_EQ(ts_out, ts);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(Bits(v_out[i]), Bits(v[i])) << i;
}

// Sequences that move between the value codings: decimals whose scale
// grows and shrinks, values no scale holds (-0.0, NaN, 0.1 + 0.2, beyond
// 2^53) among them, jumps past any Rice code, changes in units that a later
// change breaks, and XOR-coded runs that turn decimal again.
TEST(CompressedSamplesTest, DecimalCodingEdgesRoundTrip) {
  const std::vector<std::vector<double>> series = {
      {1, 1.5, 1.25, 1.125, 1.0625, 1.03125, 2, 3, 4, 0.000001, 0.0000015, 7},
      {300.5, -0.0, 300.5, std::numeric_limits<double>::quiet_NaN(), 300.25, 300.25, 0.1 + 0.2,
       0.3, 0.3, 1e300, 2, 2, 2},
      {9007199254740991.0, 9007199254740990.0, 9007199254740992.0, 1e17, -9007199254740991.0,
       0, 4e15, -4e15, 0, 1},
      {512, 1024, 4096, 4096 + 512, 1536, 1537, 1537 + 512, 0, -512, 1 << 21, 1 << 22},
      {1.0 / 3, 2.0 / 3, 1.0 / 7, 1.0 / 9, 0.5, 0.75, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3,
       1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 3, 2, 3, 4, 5, 6, 7, 8, 9, 10},
      {-273.15, -273.14, -273.16, 1e6, -1e6, 123456.789012, 123456.789013, 5e-7, -5e-7},
  };
  for (const std::vector<double>& v : series) {
    std::vector<int64_t> ts;
    for (size_t i = 0; i < v.size(); ++i) ts.push_back(1764000000000 + 1000 * int64_t(i));
    RoundTrip(ts, v);
  }
  // Long random sequences of those kinds of value, cut into records.
  std::mt19937_64 rng(23);
  for (int round = 0; round < 200; ++round) {
    std::vector<int64_t> ts;
    std::vector<double> v;
    int64_t t = 1764000000000;
    int64_t q = static_cast<int64_t>(rng() % 100000);
    int scale = static_cast<int>(rng() % 7);
    const int64_t unit = int64_t{1} << (rng() % 22);
    const int n = 1 + static_cast<int>(rng() % 600);
    for (int i = 0; i < n; ++i) {
      t += 1000;
      ts.push_back(t);
      switch (rng() % 16) {
        case 0: v.push_back(FromBits(rng())); break;
        case 1: q += static_cast<int64_t>(rng() >> 12) - (int64_t{1} << 51); break;
        case 2: scale = static_cast<int>(rng() % 7); break;
        case 3: q += 1; break;
        default: q += unit * (static_cast<int64_t>(rng() % 41) - 20); break;
      }
      if (v.size() < ts.size()) {
        static constexpr double kPow10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};
        v.push_back(static_cast<double>(q % (int64_t{1} << 53)) / kPow10[scale]);
      }
    }
    RoundTrip(ts, v);
    CompressedSamples samples;
    std::vector<std::string> records;
    CompressedSamples::Mark mark = samples.mark();
    for (size_t i = 0; i < ts.size(); ++i) {
      samples.Append(ts[i], v[i]);
      if (rng() % 29 == 0 || i + 1 == ts.size()) {
        records.emplace_back();
        samples.AppendRecordSince(mark, &records.back());
        mark = samples.mark();
      }
    }
    SCOPED_TRACE(round);
    ExpectRebuilt(records, ts, v);
  }
}

// What agents report is mostly decimal: its samples cost what their
// changes cost, not the ~30-50 bits of a double's XOR.
TEST(CompressedSamplesTest, DecimalSeriesCostTheirChanges) {
  std::mt19937_64 rng(3);
  std::vector<int64_t> ts;
  std::vector<double> power, memory, counter;
  int64_t mw = 300000, pages = 39000, bytes = 0;
  for (int i = 0; i < 720; ++i) {
    ts.push_back(1764000000000 + 1000 * i);
    mw += static_cast<int64_t>(rng() % 101) - 50;  // watts to the milliwatt, +-50 mW
    power.push_back(static_cast<double>(mw) / 1000);
    if (rng() % 4 == 0) pages += static_cast<int64_t>(rng() % 3) - 1;  // 2 MiB pages
    memory.push_back(static_cast<double>(pages << 21));
    bytes += 25'000'000'000 + static_cast<int64_t>(rng() % 1'000'000);  // 25 GB/s
    counter.push_back(static_cast<double>(bytes));
  }
  EXPECT_LT(RoundTrip(ts, power), 720u * 12 / 8);    // < 12 bits a sample
  EXPECT_LT(RoundTrip(ts, memory), 720u * 4 / 8);    // < 4 bits a sample
  EXPECT_LT(RoundTrip(ts, counter), 720u * 30 / 8);  // < 30 bits a sample
}

TEST(CompressedSamplesTest, RecordsSinceMarksRebuildTheSequence) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 100; ++round) {
    std::vector<int64_t> ts;
    std::vector<double> v;
    NoisySeries(rng, 1 + static_cast<int>(rng() % 400), &ts, &v);
    CompressedSamples samples;
    std::vector<std::string> records;
    CompressedSamples::Mark mark = samples.mark();
    for (size_t i = 0; i < ts.size(); ++i) {
      samples.Append(ts[i], v[i]);
      if (rng() % 37 == 0 || i + 1 == ts.size()) {  // a checkpoint
        std::string record;
        samples.AppendRecordSince(mark, &record);
        const std::optional<CompressedSamples::RecordInfo> info =
            CompressedSamples::PeekRecord(record);
        ASSERT_TRUE(info.has_value());
        EXPECT_EQ(info->count, samples.size() - mark.count);
        EXPECT_EQ(info->continues, mark.count > 0);
        EXPECT_EQ(info->last_ts_ms, ts[i]);
        records.push_back(record);
        mark = samples.mark();
      }
    }
    std::string none;
    samples.AppendRecordSince(samples.mark(), &none);
    EXPECT_TRUE(none.empty()) << "nothing after the last mark";

    SCOPED_TRACE(round);
    ExpectRebuilt(records, ts, v);
  }
}

// A sequence that lets go of its samples up to each checkpoint's mark
// (the store, once their record is written) appends on, writes the same
// records as one that keeps everything, and what it still holds continues
// the records before it; its buffer holds only that.
TEST(CompressedSamplesTest, DroppedSamplesLeaveARecordThatContinues) {
  std::mt19937_64 rng(29);
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE(round);
    std::vector<int64_t> ts;
    std::vector<double> v;
    NoisySeries(rng, 2 + static_cast<int>(rng() % 700), &ts, &v);
    CompressedSamples whole, dropping;
    std::vector<std::string> records;
    CompressedSamples::Mark mark;
    for (size_t i = 0; i < ts.size(); ++i) {
      whole.Append(ts[i], v[i]);
      dropping.Append(ts[i], v[i]);
      if (rng() % 41 != 0) continue;  // a checkpoint
      std::string record, same;
      whole.AppendRecordSince(mark, &record);
      dropping.AppendRecordSince(mark, &same);
      ASSERT_EQ(record, same);
      records.push_back(record);
      mark = dropping.mark();
      dropping.DropBefore(mark);
      EXPECT_EQ(dropping.kept().count, mark.count);
      EXPECT_EQ(dropping.size(), whole.size());
    }
    if (records.empty()) continue;
    EXPECT_LT(dropping.capacity_bytes(), whole.capacity_bytes());
    std::vector<int64_t> ts_out;
    std::vector<double> v_out;
    EXPECT_FALSE(dropping.Decode(0, &ts_out, &v_out)) << "the first samples are gone";
    EXPECT_TRUE(ts_out.empty());
    std::string before_kept;
    dropping.AppendRecordSince({}, &before_kept);
    EXPECT_TRUE(before_kept.empty()) << "no record from before kept()";
    // A mark before kept() or past the end changes nothing.
    dropping.DropBefore({});
    dropping.DropBefore({dropping.mark().bit + 8, dropping.mark().count + 1});
    EXPECT_EQ(dropping.kept().count, mark.count);
    std::string rest;
    dropping.AppendRecordSince(dropping.kept(), &rest);
    if (!rest.empty()) records.push_back(rest);
    ExpectRebuilt(records, ts, v);
    // The same records decoded each from the state the one before ends
    // with, nothing appended again (the store's reads of open blocks).
    CompressedSamples state;
    std::vector<int64_t> chained_ts;
    std::vector<double> chained_v;
    uint32_t count = 0;
    for (const std::string& record : records) {
      const size_t before = chained_ts.size();
      ASSERT_TRUE(state.DecodeRecord(record, "", &chained_ts, &chained_v));
      count += static_cast<uint32_t>(chained_ts.size() - before);
      ASSERT_TRUE(state.ContinueFrom(record, count));
      EXPECT_EQ(state.size(), count);
      EXPECT_FALSE(state.Decode(0, &ts_out, &v_out)) << "it holds none of them";
    }
    ASSERT_EQ(chained_ts, ts);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(Bits(chained_v[i]), Bits(v[i])) << i;
    EXPECT_FALSE(state.ContinueFrom(records.back(), 0)) << "fewer samples than the record";
    EXPECT_FALSE(state.ContinueFrom("not a record", 5));
    EXPECT_EQ(state.size(), count) << "a refused record changes nothing";
  }
}

TEST(CompressedSamplesTest, RecordDecodesOnlyAfterWhatItContinues) {
  CompressedSamples samples;
  for (int i = 0; i < 10; ++i) samples.Append(1000 * i, 1.0 + i);
  const CompressedSamples::Mark mark = samples.mark();
  for (int i = 10; i < 20; ++i) samples.Append(1000 * i, 1.0 + i);
  std::string first, second;
  samples.AppendRecordSince({}, &first);
  samples.AppendRecordSince(mark, &second);
  std::vector<int64_t> ts;
  std::vector<double> v;

  CompressedSamples empty;
  EXPECT_FALSE(empty.DecodeRecord(second, first, &ts, &v)) << "continues nothing";
  CompressedSamples other;
  for (int i = 0; i < 10; ++i) other.Append(1000 * i, 2.0 + i);
  EXPECT_FALSE(other.DecodeRecord(second, first, &ts, &v)) << "continues other samples";
  EXPECT_FALSE(other.DecodeRecord(first, "", &ts, &v)) << "a block's start, not a continuation";
  ts.clear();
  v.clear();
  ASSERT_TRUE(empty.DecodeRecord(first, "", &ts, &v));
  EXPECT_EQ(ts.size(), 20u);
  EXPECT_EQ(v.back(), 20.0);
}

TEST(CompressedSamplesTest, RecordsOfTheXorFormatStillDecode) {
  std::vector<std::string> records = testing::XorFormatRecords();
  CompressedSamples rebuilt;
  ASSERT_TRUE(Rebuild(records, &rebuilt));
  std::vector<int64_t> ts;
  std::vector<double> v;
  rebuilt.Decode(0, &ts, &v);
  std::vector<int64_t> want_ts;
  std::vector<double> want;
  testing::XorFormatSamples(&want_ts, &want);
  ASSERT_EQ(v.size(), want.size());
  EXPECT_EQ(ts, want_ts);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(Bits(v[i]), Bits(want[i])) << i;
  const int64_t t = want_ts.back();
  // A continuing one needs the record before it.
  CompressedSamples first;
  std::vector<int64_t> ts1;
  std::vector<double> v1;
  ASSERT_TRUE(first.DecodeRecord(records[0], "", &ts1, &v1));
  for (size_t i = 0; i < ts1.size(); ++i) first.Append(ts1[i], v1[i]);
  EXPECT_FALSE(first.DecodeRecord(records[1], "", &ts1, &v1));
  EXPECT_FALSE(first.DecodeRecord(records[1], records[2], &ts1, &v1));
  // The rebuilt block goes on in the current format, and a record of it
  // continues the old ones.
  const CompressedSamples::Mark mark = rebuilt.mark();
  rebuilt.Append(t + 1000, 352.5);
  rebuilt.Append(t + 2000, 353);
  std::string next;
  rebuilt.AppendRecordSince(mark, &next);
  records.push_back(next);
  CompressedSamples again;
  ASSERT_TRUE(Rebuild(records, &again));
  ts.clear();
  v.clear();
  again.Decode(22, &ts, &v);
  EXPECT_EQ(v, (std::vector<double>{350, 351, 352.5, 353}));
}

TEST(CompressedSamplesTest, DamagedRecordsAreRefusedOrDecodeExactly) {
  std::mt19937_64 rng(5);
  std::vector<int64_t> ts;
  std::vector<double> v;
  NoisySeries(rng, 120, &ts, &v);
  CompressedSamples samples;
  for (size_t i = 0; i < 60; ++i) samples.Append(ts[i], v[i]);
  const CompressedSamples::Mark mark = samples.mark();
  CompressedSamples base;  // the samples before the record, rebuilt
  for (size_t i = 0; i < 60; ++i) base.Append(ts[i], v[i]);
  for (size_t i = 60; i < ts.size(); ++i) samples.Append(ts[i], v[i]);
  std::string record;
  samples.AppendRecordSince(mark, &record);

  std::vector<int64_t> ts_out;
  std::vector<double> v_out;
  for (size_t len = 0; len < record.size(); ++len) {
    EXPECT_FALSE(base.DecodeRecord(record.substr(0, len), "", &ts_out, &v_out))
        << "cut at " << len;
  }
  EXPECT_FALSE(base.DecodeRecord(record + "x", "", &ts_out, &v_out));
  // Every single-bit flip is refused, or (a padding bit) decodes to the
  // very same samples: never to other samples.
  for (size_t bit = 0; bit < record.size() * 8; ++bit) {
    std::string damaged = record;
    damaged[bit / 8] = static_cast<char>(damaged[bit / 8] ^ (1 << (bit % 8)));
    ts_out.clear();
    v_out.clear();
    if (!base.DecodeRecord(damaged, "", &ts_out, &v_out)) continue;
    ASSERT_EQ(ts_out.size(), 60u) << "bit " << bit;
    for (size_t i = 0; i < 60; ++i) {
      ASSERT_EQ(ts_out[i], ts[60 + i]) << "bit " << bit;
      ASSERT_EQ(Bits(v_out[i]), Bits(v[60 + i])) << "bit " << bit;
    }
  }
  EXPECT_FALSE(CompressedSamples::PeekRecord("\x04" "abc").has_value())
      << "a chunk codec chunk is not a record";
}

}  // namespace
}  // namespace vigil
