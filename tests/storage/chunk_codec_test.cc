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

TEST(ChunkCodecTest, EmptyChunk) { EXPECT_EQ(RoundTrip({}, {}), 2u); }

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

TEST(ChunkCodecTest, QuantizedCountersDivideOutTheUnit) {
  // NVML NVLink counts KiB, InfiniBand 4-byte words, the caching allocator
  // 512-byte blocks: the codec must not pay for the zero low bits.
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0, 4e6);
  for (double unit : {1024.0, 4.0, 512.0}) {
    std::vector<double> fine(720), coarse(720);
    double a = 5e11, b = 5e11;
    for (size_t i = 0; i < fine.size(); ++i) {
      const int64_t units = 180'000'000 + static_cast<int64_t>(noise(rng));
      a += units;
      b += units * unit;
      fine[i] = a;
      coarse[i] = b;
    }
    const size_t fine_size = RoundTrip(Regular(fine.size()), fine);
    const size_t coarse_size = RoundTrip(Regular(coarse.size()), coarse);
    EXPECT_LE(coarse_size, fine_size + 16) << unit;
  }
}

TEST(ChunkCodecTest, GaugesAroundALevelUseTheirRange) {
  // Allocator bytes: a level times a uniform factor, in 512-byte blocks.
  std::mt19937_64 rng(6);
  std::vector<double> v(720);
  for (double& x : v) x = 512.0 * (140'000'000 + rng() % (1 << 23));
  EXPECT_LT(RoundTrip(Regular(v.size()), v), v.size() * 23 / 8 + 64);
}

TEST(ChunkCodecTest, Float32ValuesAreCompact) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 0.015);
  std::vector<double> v(720);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(3.2 * (1 + noise(rng)) - 1e-4 * i);
  }
  // ~20 bits of float32 noise, against 64 for a full double.
  EXPECT_LT(RoundTrip(Regular(v.size()), v), v.size() * 7 / 2);
  // Non-finite float32 values stay in the float32 path and round-trip.
  v[3] = std::numeric_limits<double>::quiet_NaN();
  v[4] = -std::numeric_limits<double>::infinity();
  v[5] = -0.0;
  v[6] = std::numeric_limits<float>::max();
  v[7] = std::numeric_limits<float>::denorm_min();
  EXPECT_LT(RoundTrip(Regular(v.size()), v), v.size() * 4);
  // A double just beyond float range must not take the float32 path.
  v[8] = 1e39;
  RoundTrip(Regular(v.size()), v);
}

TEST(ChunkCodecTest, ValuesRepeatingBetweenStepsAreCodedAsRuns) {
  // Training metrics arrive per tick but change per step (1-3 ticks).
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> step_time(1.6, 1.8);
  std::vector<double> v;
  while (v.size() < 720) {
    const double x = step_time(rng);
    for (size_t r = 1 + rng() % 3; r > 0 && v.size() < 720; --r) v.push_back(x);
  }
  std::vector<double> distinct(v.size());
  for (double& x : distinct) x = step_time(rng);
  EXPECT_LT(RoundTrip(Regular(v.size()), v) * 3 / 2,
            RoundTrip(Regular(distinct.size()), distinct));
  // Runs keep NaN payloads and signed zeros apart.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RoundTrip(Regular(12), {0.0, -0.0, -0.0, -0.0, 0.0, 0.0, nan, nan, -nan, -nan,
                          1.25, 1.25});
}

TEST(ChunkCodecTest, ShortChunksAndExtremeIntegers) {
  for (size_t n = 1; n <= 4; ++n) {
    RoundTrip(Regular(n), std::vector<double>(n, 7.0));
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = i * 0.1 + 2;
    RoundTrip(Regular(n), v);
    std::vector<int64_t> extreme = {std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min(), -1,
                                    std::numeric_limits<int64_t>::max()};
    extreme.resize(n);
    RoundTrip(extreme, v);
  }
  RoundTrip(
      {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
       0, std::numeric_limits<int64_t>::min()},
      {9e18, -9e18, 0, 9e18});
  RoundTrip(Regular(4), {-9.2e18, 9.2e18, -9.2e18, 9.2e18});
}

TEST(ChunkCodecTest, OutliersAndJitter) {
  // Mostly small residuals with rare huge ones (Rice escapes), and
  // timestamps with millisecond jitter.
  std::mt19937_64 rng(9);
  std::vector<int64_t> ts(720);
  std::vector<double> v(720);
  for (size_t i = 0; i < v.size(); ++i) {
    ts[i] = 1764000000000 + 1000 * static_cast<int64_t>(i) + rng() % 7;
    v[i] = 600 + static_cast<double>(rng() % 16);
    if (i % 97 == 0) v[i] = 1e15 * (1 + i);
    if (i % 131 == 0) v[i] = -3e14;
  }
  EXPECT_LT(RoundTrip(ts, v), v.size() * 2);
}

// Chunks exercising every value mode and integer coding.
std::vector<std::string> VariedChunks() {
  std::mt19937_64 rng(10);
  std::vector<std::string> chunks;
  auto add = [&](const std::vector<double>& v) {
    chunks.push_back(EncodeChunk(Regular(v.size()), v));
    chunks.push_back(
        EncodeChunk(Regular(v.size()), v, ChunkCodecOptions{.zstd_level = 0}));
  };
  std::vector<double> v(300);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(i) * 100;  // bits
  add(v);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::round(v[i] * 1000) / 1000;
  add(v);  // decimal
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(v[i]);
  add(v);  // float32
  for (size_t i = 0; i < v.size(); ++i) v[i] = v[i / 3 * 3];
  add(v);  // runs
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1024.0 * (rng() % 1000);
  add(v);                             // gcd, fixed width
  add(std::vector<double>(50, 2.5));  // constant
  return chunks;
}

TEST(ChunkCodecTest, CorruptInputIsAnError) {
  std::vector<int64_t> ts;
  std::vector<double> out;
  EXPECT_FALSE(DecodeChunk("", &ts, &out).ok());
  EXPECT_FALSE(DecodeChunk("\x07", &ts, &out).ok());
  EXPECT_FALSE(
      DecodeChunk(std::string("\x03\xff\xff\xff\xff\xff\xff\x7f", 8), &ts, &out)
          .ok());
  // The earlier, never-persisted layout is not decoded.
  EXPECT_FALSE(DecodeChunk(std::string("\x01\x00", 2), &ts, &out).ok());
  // A count beyond kMaxChunkSamples is refused before allocating.
  EXPECT_FALSE(
      DecodeChunk(std::string("\x03\x81\x80\x80\x08\x00", 6), &ts, &out).ok());
  for (const std::string& good : VariedChunks()) {
    for (size_t cut = 0; cut < good.size(); ++cut) {
      ts.clear();
      out.clear();
      EXPECT_FALSE(DecodeChunk(good.substr(0, cut), &ts, &out).ok()) << cut;
    }
    ts.clear();
    out.clear();
    EXPECT_FALSE(DecodeChunk(good + '\0', &ts, &out).ok());
    // Flipping bytes must never crash (it may or may not be detected).
    std::mt19937 rng(4);
    for (int i = 0; i < 300; ++i) {
      std::string bad = good;
      bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
      if (i % 2 == 0)
        bad[rng() % bad.size()] ^= static_cast<char>(1 << (rng() % 8));
      ts.clear();
      out.clear();
      const absl::Status s = DecodeChunk(bad, &ts, &out);
      if (!s.ok()) {
        EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
      }
      (void)DecodeRollupChunk(bad);
    }
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
