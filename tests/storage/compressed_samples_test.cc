#include "storage/compressed_samples.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

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

TEST(CompressedSamplesTest, ClearFreesAndStartsAgain) {
  CompressedSamples samples;
  for (int i = 0; i < 100; ++i) samples.Append(1000 * i, i);
  samples.Clear();
  EXPECT_TRUE(samples.empty());
  EXPECT_EQ(samples.capacity_bytes(), 0u);
  samples.Append(5, 1.5);
  std::vector<int64_t> ts;
  std::vector<double> v;
  samples.Decode(0, &ts, &v);
  EXPECT_EQ(ts, std::vector<int64_t>{5});
  EXPECT_EQ(v, std::vector<double>{1.5});
}

}  // namespace
}  // namespace vigil
