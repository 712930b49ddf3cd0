#include "storage/chunk_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace vigil {
namespace {

uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Encodes, decodes and checks bit-exact equality; returns the chunk size.
size_t RoundTrip(const std::vector<int64_t>& ts, const std::vector<double>& v,
                 ChunkCodecOptions options = {}) {
  const std::string chunk = EncodeChunk(ts, v, options);
  std::vector<int64_t> ts_out;
  std::vector<double> v_out;
  EXPECT_TRUE(DecodeChunk(chunk, &ts_out, &v_out).ok());
  EXPECT_EQ(ts_out, ts);
  EXPECT_EQ(v_out.size(), v.size());
  for (size_t i = 0; i < std::min(v.size(), v_out.size()); ++i) {
    EXPECT_EQ(Bits(v_out[i]), Bits(v[i])) << "at " << i << ": " << v[i];
  }
  return chunk.size();
}

std::vector<int64_t> Regular(size_t n, int64_t start = 1764000000000,
                             int64_t step = 1000) {
  std::vector<int64_t> ts(n);
  for (size_t i = 0; i < n; ++i) ts[i] = start + static_cast<int64_t>(i) * step;
  return ts;
}

TEST(ChunkCodecTest, EmptyChunk) {
  EXPECT_EQ(RoundTrip({}, {}), 2u);
}

TEST(ChunkCodecTest, ConstantSeriesIsNearlyFree) {
  const size_t size = RoundTrip(Regular(720), std::vector<double>(720, 0.0));
  EXPECT_LT(size, 40u);
}

TEST(ChunkCodecTest, RandomDoubles) {
  std::mt19937_64 rng(1);
  std::vector<double> v(1000);
  for (double& x : v) {
    uint64_t bits = rng();
    std::memcpy(&x, &bits, sizeof x);
  }
  RoundTrip(Regular(v.size()), v);
  std::uniform_real_distribution<double> uni(-1e6, 1e6);
  for (double& x : v) x = uni(rng);
  RoundTrip(Regular(v.size()), v);
}

TEST(ChunkCodecTest, NanAndInfinitiesRoundTripExactly) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  double payload_nan;
  const uint64_t payload = 0x7ff0000000000123;
  std::memcpy(&payload_nan, &payload, sizeof payload_nan);
  RoundTrip(Regular(8), {1.5, nan, -nan, inf, -inf, payload_nan, 0.0, -0.0});
  RoundTrip(Regular(3), {nan, nan, nan});
  RoundTrip(Regular(3), {-0.0, -0.0, 0.0});
}

TEST(ChunkCodecTest, DecimalValuesAreCompact) {
  std::mt19937_64 rng(2);
  std::normal_distribution<double> noise(0, 5);
  std::vector<double> v(720);
  for (double& x : v) x = std::round((600 + noise(rng)) * 1000) / 1000;
  const size_t size = RoundTrip(Regular(v.size()), v);
  EXPECT_LT(size, v.size() * 3);  // ~14 bits of noise per sample
}

TEST(ChunkCodecTest, CountersUseFewBytes) {
  std::mt19937_64 rng(3);
  std::vector<double> v(720);
  double c = 1e12;
  for (double& x : v) {
    c += 12'500'000'000 + static_cast<double>(rng() % 1000);
    x = c;
  }
  const size_t size = RoundTrip(Regular(v.size()), v);
  EXPECT_LT(size, v.size() * 2);
  // A perfectly regular counter collapses to ~nothing.
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1e9 + 1000.0 * i;
  EXPECT_LT(RoundTrip(Regular(v.size()), v), 64u);
}

TEST(ChunkCodecTest, NegativeHugeAndTinyValues) {
  RoundTrip(Regular(5), {-1.25, -1e6, 3.0, -0.001, 42});
  RoundTrip(Regular(4), {1e300, -1e300, 1e-300, 5e-324});
  RoundTrip(Regular(4), {9.2e18, -9.2e18, 1.8e19, 123});
  RoundTrip(Regular(3), {std::numeric_limits<double>::max(),
                         std::numeric_limits<double>::lowest(),
                         std::numeric_limits<double>::denorm_min()});
  RoundTrip(Regular(3), {0.1, 0.2, 0.30000000000000004});
}

TEST(ChunkCodecTest, IrregularAndNegativeTimestamps) {
  RoundTrip({-5000, -1, 0, 7, 1'000'000'000'000'000, 1'000'000'000'000'001},
            {1, 2, 3, 4, 5, 6});
  RoundTrip({10, 5, 20, 20}, {1, 2, 3, 4});  // any order is stored as given
}

TEST(ChunkCodecTest, UncompressedOptionRoundTrips) {
  std::vector<double> v(100);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i * 0.5;
  RoundTrip(Regular(v.size()), v, ChunkCodecOptions{.zstd_level = 0});
}

TEST(ChunkCodecTest, CorruptInputIsAnError) {
  std::vector<double> v(300);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(i) * 100;
  const std::string good = EncodeChunk(Regular(v.size()), v);
  std::vector<int64_t> ts;
  std::vector<double> out;
  EXPECT_FALSE(DecodeChunk("", &ts, &out).ok());
  EXPECT_FALSE(DecodeChunk("\x07", &ts, &out).ok());
  EXPECT_FALSE(DecodeChunk(std::string("\x01\xff\xff\xff\xff\xff\xff\x7f", 8),
                           &ts, &out)
                   .ok());
  for (size_t cut = 0; cut < good.size(); cut += 7) {
    ts.clear();
    out.clear();
    EXPECT_FALSE(DecodeChunk(good.substr(0, cut), &ts, &out).ok()) << cut;
  }
  // Flipping bytes must never crash (it may or may not be detected).
  std::mt19937 rng(4);
  for (int i = 0; i < 500; ++i) {
    std::string bad = good;
    bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    ts.clear();
    out.clear();
    (void)DecodeChunk(bad, &ts, &out);
    (void)DecodeRollupChunk(bad);
  }
}

TEST(ChunkCodecTest, RollupsRoundTrip) {
  std::vector<RollupPoint> points;
  for (int i = 0; i < 100; ++i) {
    points.push_back(RollupPoint{.minute_ms = 1764000000000 + i * 60000,
                                 .min = 1.5 * i,
                                 .max = 2.5 * i,
                                 .sum = 120.25 * i,
                                 .count = 60,
                                 .nan_count = static_cast<uint64_t>(i % 3)});
  }
  points[7].min = std::numeric_limits<double>::quiet_NaN();
  auto decoded = DecodeRollupChunk(EncodeRollupChunk(points));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ((*decoded)[i].minute_ms, points[i].minute_ms);
    EXPECT_EQ(Bits((*decoded)[i].min), Bits(points[i].min));
    EXPECT_EQ((*decoded)[i].max, points[i].max);
    EXPECT_EQ((*decoded)[i].sum, points[i].sum);
    EXPECT_EQ((*decoded)[i].count, points[i].count);
    EXPECT_EQ((*decoded)[i].nan_count, points[i].nan_count);
  }
  EXPECT_FALSE(DecodeRollupChunk("").ok());
}

}  // namespace
}  // namespace vigil
