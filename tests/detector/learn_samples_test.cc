// LearnSamples: a learning series' samples at two bytes each must keep
// what a median and a MAD read (detector/learn_samples.h).
#include "detector/learn_samples.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace vigil {
namespace detector_internal {
namespace {

// Half precision keeps 11 significant bits: half an ulp is 2^-11 of the
// value at most.
constexpr double kRelative = 1.0 / 2048;

double Median(std::vector<double> v) {
  auto mid = v.begin() + v.size() / 2;
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

double Mad(const std::vector<double>& v) {
  const double m = Median(v);
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return Median(dev);
}

// `n` normal samples of `mean` and `sd`, from `seed`.
std::vector<double> Normal(double mean, double sd, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(mean, sd);
  std::vector<double> out(n);
  for (double& x : out) x = noise(rng);
  return out;
}

std::vector<double> Decoded(const LearnSamples& s) {
  std::vector<double> out;
  s.DecodeTo(&out);
  return out;
}

// An arithmetic reference for the bit arithmetic, written from the format's
// definition (IEEE 754 binary16: 1 sign, 5 exponent, 10 fraction bits).
// Not the compiler's _Float16: clang 14 on x86-64, which CI's sanitizer
// build uses, does not have it.
double ReferenceValue(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int fraction = bits & 0x3ff;
  double value;
  if (exponent == 0x1f) {
    value = fraction != 0 ? std::numeric_limits<double>::quiet_NaN()
                          : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    value = std::ldexp(fraction, -24);
  } else {
    value = std::ldexp(1024 + fraction, exponent - 25);
  }
  return (bits & 0x8000) != 0 ? -value : value;
}

// The nearest half to `f`: |f| in units of its binade's half quantum,
// rounded to nearest even by the default rounding mode (exact in double).
uint16_t ReferenceBits(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(f));
  if (std::isinf(magnitude)) return sign | 0x7c00;
  const int binade = magnitude == 0 ? -14 : std::max(std::ilogb(magnitude), -14);
  const double units = std::nearbyint(magnitude / std::ldexp(1.0, binade - 10));
  if (binade == -14 && units < 1024) {
    return sign | static_cast<uint16_t>(units);  // subnormal
  }
  int exponent = binade + 15;
  int significand = static_cast<int>(units);
  if (significand == 2048) {  // rounded up into the next binade
    ++exponent;
    significand = 1024;
  }
  if (exponent >= 0x1f) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(exponent << 10) |
         static_cast<uint16_t>(significand - 1024);
}

TEST(HalfTest, EveryHalfDecodesAsTheFormatSays) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const double want = ReferenceValue(bits);
    const float got = HalfValue(bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got),
                std::bit_cast<uint32_t>(static_cast<float>(want)))
          << std::hex << h;
    }
  }
}

TEST(HalfTest, FloatsRoundToTheNearestEvenHalf) {
  // Every half's value, the midpoints between neighbours (ties), and
  // random floats across the whole range.
  std::vector<float> floats = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f,
                               1e-8f, 2.98e-8f, 1e30f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity()};
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = HalfValue(static_cast<uint16_t>(h));
    const float next = HalfValue(static_cast<uint16_t>(h + 1));
    floats.push_back(v);
    floats.push_back(-v);
    floats.push_back(v + (next - v) / 2);
    floats.push_back(-(v + (next - v) / 2));
  }
  std::mt19937 rng(13);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (!std::isnan(f)) floats.push_back(f);
  }
  for (float f : floats) {
    EXPECT_EQ(HalfBits(f), ReferenceBits(f)) << f;
  }
  EXPECT_EQ(HalfBits(std::nanf("")) & 0x7fff, 0x7e00);
}

TEST(LearnSamplesTest, KeepsElevenBitsAtEveryLevel) {
  // Step times, temperatures, watts, bytes/s, a dataloader's wait, a
  // trending series' deviations from its level.
  for (double level : {1.25, 67.0, 310.0, 2.4e10, 3e-4, -0.02}) {
    const std::vector<double> raw =
        Normal(level, std::fabs(level) * 0.01, 400, 7);
    LearnSamples s;
    for (double x : raw) s.push_back(x);
    ASSERT_EQ(s.size(), raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      EXPECT_NEAR(s[i], raw[i], std::fabs(raw[i]) * kRelative)
          << "level " << level << " sample " << i;
    }
  }
}

TEST(LearnSamplesTest, MedianAndMadAgreeWithFloats) {
  // A steady job's step time: 1.25 s with 0.1 % jitter, where half's step
  // is 0.08 %: halves of the values would move the MAD by ~12 %, halves of
  // their deviations move it by less than 0.1 %.
  const std::vector<double> raw = Normal(1.25, 0.00125, 512, 11);
  LearnSamples s;
  for (double x : raw) s.push_back(x);
  const std::vector<double> got = Decoded(s);
  EXPECT_NEAR(Median(got), Median(raw), 0.001 * Mad(raw));
  EXPECT_NEAR(Mad(got), Mad(raw), 0.001 * Mad(raw));
}

TEST(LearnSamplesTest, AHugeFirstValueDoesNotCostTheBulkItsPrecision) {
  // The first sample a billion times the rest (a counter's first rate
  // after a reset, a stall): the scale moves to the bulk.
  LearnSamples s;
  s.push_back(4e6);
  const std::vector<double> raw = Normal(0.004, 0.0001, 300, 3);
  for (double x : raw) s.push_back(x);
  EXPECT_GT(s[0], *std::max_element(raw.begin(), raw.end()))
      << "the outlier keeps its side";
  size_t precise = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (std::fabs(s[i + 1] - raw[i]) <= std::fabs(raw[i]) * kRelative) {
      ++precise;
    }
  }
  EXPECT_GE(precise, raw.size() - 31) << "only values before the first check";
  std::vector<double> got = Decoded(s);
  got.erase(got.begin());
  EXPECT_NEAR(Median(got), Median(raw), 0.01 * 0.0001);
}

TEST(LearnSamplesTest, ATinyFirstValueIsRescaledBeforeItMatters) {
  // An idle reading, then the busy level nine orders of magnitude higher.
  LearnSamples s;
  s.push_back(1e-6);
  for (int i = 0; i < 100; ++i) s.push_back(1e9 + i * 1e5);
  for (int i = 0; i < 100; ++i) {
    const double want = 1e9 + i * 1e5;
    EXPECT_NEAR(s[i + 1], want, want * kRelative) << i;
  }
  EXPECT_LT(s[0], 1e6) << "the outlier keeps its side";
}

TEST(LearnSamplesTest, ALevelShiftLaterIsFollowed) {
  // 100 samples near 1, then the series settles 10^6 times higher (10^8
  // times the spread). Until the new values are the bulk they are kept
  // against the old reference (11 bits of the value, as plain halves);
  // once the reference follows, every value keeps 11 bits of its deviation
  // from the new bulk (the old values, outliers now, too). No value is off
  // by more than a rounding of its distance from each bulk, and the median
  // and the MAD are the new bulk's.
  LearnSamples s;
  std::vector<double> raw;
  for (int i = 0; i < 100; ++i) raw.push_back(1.0 + i * 1e-3);
  for (int i = 0; i < 400; ++i) raw.push_back(2e6 + i * 10.0);
  for (double x : raw) s.push_back(x);
  for (size_t i = 0; i < raw.size(); ++i) {
    const double distances = std::fabs(raw[i] - 1) + std::fabs(raw[i] - 2e6);
    EXPECT_NEAR(s[i], raw[i], distances * kRelative + 1) << i;
  }
  const std::vector<double> got = Decoded(s);
  EXPECT_NEAR(Median(got), Median(raw), Median(raw) * kRelative);
  EXPECT_NEAR(Mad(got), Mad(raw), 0.01 * Mad(raw));
}

TEST(LearnSamplesTest, FarOutliersAreClampedOnTheirSide) {
  // Deviations of more than 2^29 times the median one: clamped, above or
  // below every other value as they were.
  std::vector<double> raw = Normal(300, 0.5, 300, 5);
  raw[100] = 1e15;
  raw[200] = -1e15;
  LearnSamples s;
  for (double x : raw) s.push_back(x);
  const std::vector<double> got = Decoded(s);
  std::vector<double> bulk = got;
  bulk.erase(bulk.begin() + 200);
  bulk.erase(bulk.begin() + 100);
  EXPECT_GT(s[100], *std::max_element(bulk.begin(), bulk.end()));
  EXPECT_LT(s[200], *std::min_element(bulk.begin(), bulk.end()));
  EXPECT_NEAR(Median(got), Median(raw), 0.5 * kRelative * 300);
  EXPECT_NEAR(Mad(got), Mad(raw), Mad(raw) * 4 * kRelative);
}

TEST(LearnSamplesTest, ZerosNaNsAndInfinitiesAreKept) {
  LearnSamples s;
  s.push_back(0.0);
  s.push_back(0.0);
  s.push_back(std::numeric_limits<double>::quiet_NaN());
  s.push_back(std::numeric_limits<double>::infinity());
  s.push_back(-std::numeric_limits<double>::infinity());
  s.push_back(42.0);
  s.push_back(0.0);
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], std::numeric_limits<float>::infinity());
  EXPECT_EQ(s[4], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(s[5], 42.0f);
  EXPECT_EQ(s[6], 0.0f);
}

TEST(LearnSamplesTest, KeepEveryOtherHalvesInOrder) {
  LearnSamples s;
  for (int i = 0; i < 10; ++i) s.push_back(100 + i);
  s.KeepEveryOther();
  ASSERT_EQ(s.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s[i], 100 + 2 * i);
}

TEST(LearnSamplesTest, ClearForgetsTheScale) {
  LearnSamples s;
  for (int i = 0; i < 20; ++i) s.push_back(1e12);
  s.clear();
  EXPECT_TRUE(s.empty());
  s.push_back(0.001);
  EXPECT_NEAR(s[0], 0.001, 0.001 * kRelative);
  s.Release();
  EXPECT_TRUE(s.empty());
  s.push_back(-7.5);
  EXPECT_EQ(s[0], -7.5f);
}

TEST(LearnSamplesTest, AConstantSeriesHoldsNothingOnTheHeap) {
  LearnSamples s;
  for (int i = 0; i < 512; ++i) s.push_back(1410.0);
  s.KeepEveryOther();
  for (int i = 0; i < 100; ++i) s.push_back(1410.0);
  EXPECT_EQ(s.size(), 356u);
  EXPECT_EQ(s.heap_bytes(), 0u);
  EXPECT_EQ(s[0], 1410.0f);
  EXPECT_EQ(s[355], 1410.0f);
}

TEST(LearnSamplesTest, ARunEndsIntoCodesWithItsValuesInOrder) {
  for (int run : {1, 7, 8, 9, 255, 300}) {
    SCOPED_TRACE(run);
    LearnSamples s;
    std::vector<double> raw(run, 0.0);  // an error counter's rate
    for (double x : Normal(3.0, 0.5, 200, run)) raw.push_back(x);
    for (double x : raw) s.push_back(x);
    ASSERT_EQ(s.size(), raw.size());
    EXPECT_GT(s.heap_bytes(), 0u);
    const std::vector<double> got = Decoded(s);
    // Each value is a deviation from a reference near 3, of 4 at most.
    for (size_t i = 0; i < raw.size(); ++i) {
      ASSERT_NEAR(got[i], raw[i], 4 * kRelative) << i;
    }
    EXPECT_NEAR(Median(got), Median(raw), Median(raw) * kRelative);
  }
}

TEST(LearnSamplesTest, ValuesAFloatDoesNotKeepAreNeverARun) {
  LearnSamples s;
  for (int i = 0; i < 20; ++i) s.push_back(0.1);
  EXPECT_GT(s.heap_bytes(), 0u);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(s[i], 0.1, 0.1 * kRelative);
}

// `n` whole temperatures around `centre` (NVML reports whole degrees).
std::vector<double> Temperatures(double centre, int n, unsigned seed) {
  std::vector<double> out = Normal(centre, 2, n, seed);
  for (double& x : out) x = std::round(x);
  return out;
}

TEST(LearnSamplesTest, AFewValuesAreKeptExactlyAtHalfAByteEach) {
  LearnSamples s;
  const std::vector<double> raw = Temperatures(65, 600, 1);
  for (int i = 0; i < 509; ++i) s.push_back(raw[i]);
  EXPECT_LE(s.heap_bytes(), 160 * sizeof(uint16_t));
  for (int i = 0; i < 509; ++i) ASSERT_EQ(s[i], raw[i]) << i;
}

TEST(LearnSamplesTest, HalvingATablePacksItsIndicesAgain) {
  LearnSamples s;
  // All 16 values, each index standing out from the others.
  std::vector<double> raw;
  for (int i = 0; i < 600; ++i) raw.push_back(40 + (7 * i) % 16);
  for (int i = 0; i < 509; ++i) s.push_back(raw[i]);
  EXPECT_LE(s.heap_bytes(), 160 * sizeof(uint16_t));
  for (int i = 0; i < 509; ++i) ASSERT_EQ(s[i], raw[i]) << i;
  // 255 values, packed again in place (the last code holds three).
  s.KeepEveryOther();
  for (int i = 509; i < 600; ++i) s.push_back(raw[i]);
  ASSERT_EQ(s.size(), 255u + 91u);
  for (int i = 0; i < 255; ++i) ASSERT_EQ(s[i], raw[2 * i]) << i;
  for (int i = 0; i < 91; ++i) ASSERT_EQ(s[255 + i], raw[509 + i]) << i;
}

TEST(LearnSamplesTest, OneValueTooManyTurnsTheTableIntoCodes) {
  LearnSamples s;
  std::vector<double> raw;
  for (int i = 0; i < 100; ++i) raw.push_back(50 + i % 16);
  raw.push_back(66);  // the seventeenth distinct value
  for (double x : raw) s.push_back(x);
  EXPECT_EQ(s.heap_bytes(), 128 * sizeof(uint16_t));  // 101 codes, doubling
  // Whole deviations of at most 8 from the reference: exact in a half.
  ASSERT_EQ(s.size(), raw.size());
  for (size_t i = 0; i < raw.size(); ++i) ASSERT_EQ(s[i], raw[i]) << i;
}

TEST(LearnSamplesTest, AValueAFloatDoesNotKeepTurnsTheTableIntoCodes) {
  LearnSamples s;
  for (int i = 0; i < 30; ++i) s.push_back(i % 2 == 0 ? 700.0 : 698.0);
  s.push_back(699.123);
  ASSERT_EQ(s.size(), 31u);
  for (int i = 0; i < 30; ++i) ASSERT_EQ(s[i], i % 2 == 0 ? 700.0f : 698.0f);
  EXPECT_NEAR(s[30], 699.123, 2 * kRelative);
}

TEST(LearnSamplesTest, AssignKeepsRunsAndAllocatesWhatTheCodesNeed) {
  LearnSamples s;
  const std::vector<float> constant(300, 75.0f);
  s.Assign(constant);
  EXPECT_EQ(s.size(), 300u);
  EXPECT_EQ(s.heap_bytes(), 0u);
  std::vector<float> varied(300, 75.0f);
  varied[150] = 80.0f;
  s.Assign(varied);  // a table of two values
  ASSERT_EQ(s.size(), 300u);
  EXPECT_EQ(s.heap_bytes(), (32 + 75) * sizeof(uint16_t));
  EXPECT_EQ(s[149], 75.0f);
  EXPECT_EQ(s[150], 80.0f);
  for (int i = 0; i < 20; ++i) varied[200 + i] = 80.0f + 0.25f * i;
  s.Assign(varied);  // more values than a table holds: codes
  ASSERT_EQ(s.size(), 300u);
  EXPECT_EQ(s.heap_bytes(), 300 * sizeof(uint16_t));
  EXPECT_EQ(s[149], 75.0f);
  EXPECT_EQ(s[219], 84.75f);
}

// Samples in each of their forms: none, a run, a table, floats before the
// scale, half codes (with clamped outliers, NaN and infinities).
std::vector<LearnSamples> EveryForm() {
  std::vector<LearnSamples> out(5);
  for (int i = 0; i < 300; ++i) out[1].push_back(75.0);
  for (int i = 0; i < 301; ++i) out[2].push_back(60 + i % 7);
  for (int i = 0; i < 5; ++i) out[3].push_back(700 + 0.1 * i);
  for (double x : Normal(700, 3, 400, 7)) out[4].push_back(x);
  out[4].push_back(1e30);
  out[4].push_back(std::nan(""));
  out[4].push_back(-std::numeric_limits<double>::infinity());
  return out;
}

// SaveTo and LoadFrom give back the same samples, bit for bit, in each
// form, and the samples go on alike (the same values pushed to both decode
// alike, halving included).
TEST(LearnSamplesTest, SavedSamplesLoadBitForBit) {
  for (LearnSamples& saved : EveryForm()) {
    std::string bytes;
    saved.SaveTo(&bytes);
    std::string_view in = bytes;
    LearnSamples loaded;
    loaded.push_back(1.0);  // replaced
    ASSERT_TRUE(loaded.LoadFrom(&in)) << bytes.size();
    EXPECT_TRUE(in.empty());
    ASSERT_EQ(loaded.size(), saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(loaded[i]), std::bit_cast<uint32_t>(saved[i])) << i;
    }
    EXPECT_LE(loaded.heap_bytes(), saved.heap_bytes());
    std::string again;
    loaded.SaveTo(&again);
    EXPECT_EQ(again, bytes);
    for (double x : Normal(702, 4, 130, 8)) {
      saved.push_back(x);
      loaded.push_back(x);
      if (saved.size() >= 512) {
        saved.KeepEveryOther();
        loaded.KeepEveryOther();
      }
    }
    ASSERT_EQ(loaded.size(), saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(loaded[i]), std::bit_cast<uint32_t>(saved[i])) << i;
    }
  }
}

// A run takes 9 bytes, a table half a byte a value, codes two bytes.
TEST(LearnSamplesTest, SavedSamplesTakeWhatTheyHold) {
  std::vector<LearnSamples> forms = EveryForm();
  std::vector<size_t> sizes;
  for (const LearnSamples& s : forms) {
    std::string bytes;
    s.SaveTo(&bytes);
    sizes.push_back(bytes.size());
  }
  EXPECT_EQ(sizes[0], 1u);
  EXPECT_EQ(sizes[1], 9u);
  EXPECT_EQ(sizes[2], 1 + 1 + 4 + 7 * 4 + (301 + 3) / 4 * 2u);
  EXPECT_EQ(sizes[3], 1 + 4 + 5 * 4u);
  EXPECT_EQ(sizes[4], 1 + 4 + 2 + 4 + 403 * 2u);
}

// Samples cut short anywhere, or malformed, are refused and leave none.
TEST(LearnSamplesTest, MalformedSamplesAreRefused) {
  for (const LearnSamples& saved : EveryForm()) {
    std::string bytes;
    saved.SaveTo(&bytes);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      std::string_view in(bytes.data(), cut);
      LearnSamples loaded;
      EXPECT_FALSE(loaded.LoadFrom(&in)) << cut << " of " << bytes.size();
      EXPECT_TRUE(loaded.empty());
      EXPECT_EQ(loaded.heap_bytes(), 0u);
    }
  }
  const auto refused = [](std::string bytes) {
    std::string_view in = bytes;
    LearnSamples loaded;
    return !loaded.LoadFrom(&in) && loaded.empty();
  };
  EXPECT_TRUE(refused(std::string(1, '\x05')));  // no such form
  std::string run;
  EveryForm()[1].SaveTo(&run);
  const uint32_t too_many = LearnSamples::kMaxLoadedValues + 1;
  std::memcpy(run.data() + 5, &too_many, 4);
  EXPECT_TRUE(refused(run));
  std::string table;
  EveryForm()[2].SaveTo(&table);
  std::string bad_index = table;
  bad_index[1 + 1 + 4 + 7 * 4] = 0x07;  // index 7 of a 7-value table
  EXPECT_TRUE(refused(bad_index));
  std::string past_the_last = table;
  past_the_last.back() = static_cast<char>(0x10);  // a nibble after value 301
  EXPECT_TRUE(refused(past_the_last));
  std::string codes;
  EveryForm()[4].SaveTo(&codes);
  const int16_t far = 1001;
  std::memcpy(codes.data() + 5, &far, 2);
  EXPECT_TRUE(refused(codes));
}

}  // namespace
}  // namespace detector_internal
}  // namespace vigil
