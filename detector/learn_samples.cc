#include "detector/learn_samples.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "detector/fixed_bytes.h"

namespace vigil {
namespace detector_internal {
namespace {

constexpr double kHalfMax = 65504;  // the largest finite half
constexpr uint16_t kHalfMaxBits = 0x7bff;
constexpr uint16_t kExponentBits = 0x7c00;
constexpr uint16_t kMagnitudeBits = 0x7fff;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// 2^e for e in [-1022, 1023].
double Pow2(int e) {
  return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52);
}

bool Finite(uint16_t bits) { return (bits & kExponentBits) != kExponentBits; }
bool Clamped(uint16_t bits) { return (bits & kMagnitudeBits) == kHalfMaxBits; }

bool IsPowerOfTwo(size_t n) { return (n & (n - 1)) == 0; }

// The scale's exponent stays within ±kMaxExponent: deviations smaller or
// larger would not be told apart by a baseline anyway.
constexpr int kMaxExponent = 1000;

// SaveTo's forms.
enum class Form : uint8_t { kNone = 0, kRun = 1, kTable = 2, kRaw = 3, kCoded = 4 };

// Takes `n` u16 codes into `codes` (appended).
bool TakeCodes(std::string_view* in, size_t n, std::vector<uint16_t>* codes) {
  if (in->size() / sizeof(uint16_t) < n) return false;
  const size_t at = codes->size();
  codes->resize(at + n);
  std::memcpy(codes->data() + at, in->data(), n * sizeof(uint16_t));
  in->remove_prefix(n * sizeof(uint16_t));
  return true;
}

}  // namespace

uint16_t HalfBits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x >= 0x47800000) {  // 2^16 and beyond, infinity, NaN
    return sign | (x > 0x7f800000 ? 0x7e00 : 0x7c00);
  }
  if (x < 0x38800000) {  // below 2^-14: a subnormal half or zero
    // Adding 0.5 puts the half's subnormal bits at the bottom of the
    // float's mantissa, rounded by the FPU to nearest even.
    const float shifted = std::bit_cast<float>(x) + 0.5f;
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(shifted) -
                                        std::bit_cast<uint32_t>(0.5f));
  }
  // Re-bias the exponent (127 -> 15) and round the 13 dropped bits to
  // nearest even; a carry moves into the exponent as it should.
  const uint32_t odd = (x >> 13) & 1;
  x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfff + odd;
  return sign | static_cast<uint16_t>(x >> 13);
}

float HalfValue(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h & 0x7fff) << 13;
  const uint32_t exponent = bits & 0x0f800000;
  bits += static_cast<uint32_t>(127 - 15) << 23;
  if (exponent == 0x0f800000) {  // infinity, NaN
    bits += static_cast<uint32_t>(128 - 16) << 23;
  } else if (exponent == 0) {  // zero, subnormal: normalised by the FPU
    bits = std::bit_cast<uint32_t>(std::bit_cast<float>(bits + (1u << 23)) -
                                   std::bit_cast<float>(113u << 23));
  }
  return std::bit_cast<float>(bits | static_cast<uint32_t>(h & 0x8000) << 16);
}

// Through a float: rounded twice, a deviation may differ from one rounding
// by a unit in the half's last place, only where the float falls on a tie.
uint16_t LearnSamples::Encode(double x) const {
  if (!std::isfinite(x)) return HalfBits(static_cast<float>(x));
  const double code = (x - reference_) * Pow2(-exponent_);
  return HalfBits(static_cast<float>(std::clamp(code, -kHalfMax, kHalfMax)));
}

float LearnSamples::Decode(uint16_t code) const {
  if (!Finite(code)) return HalfValue(code);
  return static_cast<float>(reference_ + HalfValue(code) * Pow2(exponent_));
}

float LearnSamples::operator[](size_t i) const {
  switch (mode_) {
    case Mode::kRun:
      return reference_;
    case Mode::kTable:
      return TableValue(i);
    case Mode::kCoded:
      break;
  }
  if (scaled_) return Decode(codes_[i]);
  uint32_t bits = static_cast<uint32_t>(codes_[2 * i]) << 16 | codes_[2 * i + 1];
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

void LearnSamples::push_back(double x) {
  if (mode_ == Mode::kCoded) return PushCode(x);
  const float f = static_cast<float>(x);
  // Values are kept exactly only where a float holds them (NaN is never
  // equal to itself).
  if (static_cast<double>(f) == x) {
    if (mode_ == Mode::kRun &&
        (count_ == 0 ||
         std::bit_cast<uint32_t>(f) == std::bit_cast<uint32_t>(reference_))) {
      reference_ = f;
      ++count_;
      return;
    }
    if (mode_ == Mode::kRun) StartTable();
    if (PushIndexed(f)) return;
  }
  EndExact();
  PushCode(x);
}

void LearnSamples::StartTable() {
  const uint32_t n = count_;
  // Room for this run and one value more, from 40 codes doubling (160 at
  // Options::learn_buffer's 512 values).
  const size_t needed = kTableCodes + (n + 1 + 3) / 4;
  size_t capacity = kTableCodes + 8;
  while (capacity < needed) capacity *= 2;
  codes_.reserve(capacity);
  codes_.assign(kTableCodes + (n + 3) / 4, 0);  // every index 0
  const uint32_t bits = std::bit_cast<uint32_t>(reference_);
  codes_[0] = static_cast<uint16_t>(bits >> 16);
  codes_[1] = static_cast<uint16_t>(bits);
  table_size_ = 1;
  reference_ = 0;
  mode_ = Mode::kTable;
}

bool LearnSamples::PushIndexed(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t high = static_cast<uint16_t>(bits >> 16);
  const uint16_t low = static_cast<uint16_t>(bits);
  size_t index = 0;
  while (index < table_size_ &&
         (codes_[2 * index] != high || codes_[2 * index + 1] != low)) {
    ++index;
  }
  if (index == table_size_) {
    if (table_size_ == kTableValues) return false;
    codes_[2 * index] = high;
    codes_[2 * index + 1] = low;
    ++table_size_;
  }
  const size_t word = kTableCodes + count_ / 4;
  if (word == codes_.size()) codes_.push_back(0);
  codes_[word] |= static_cast<uint16_t>(index << (4 * (count_ % 4)));
  ++count_;
  return true;
}

float LearnSamples::TableValue(size_t i) const {
  const size_t index = (codes_[kTableCodes + i / 4] >> (4 * (i % 4))) & 0xf;
  return std::bit_cast<float>(static_cast<uint32_t>(codes_[2 * index]) << 16 |
                              codes_[2 * index + 1]);
}

void LearnSamples::EndExact() {
  std::vector<float> values(size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = (*this)[i];
  clear();
  mode_ = Mode::kCoded;
  // The capacity growing one value at a time would have reached (fewer
  // values than Options::learn_buffer, a power of two).
  codes_.reserve(
      std::bit_ceil(std::max<size_t>(values.size() + 1, 2 * kRawValues)));
  for (float v : values) PushCode(v);
}

void LearnSamples::Assign(std::span<const float> values) {
  clear();
  for (float x : values) push_back(x);
  codes_.shrink_to_fit();
}

void LearnSamples::SaveTo(std::string* out) const {
  const auto put_codes = [&](size_t from) {
    out->append(reinterpret_cast<const char*>(codes_.data() + from),
                (codes_.size() - from) * sizeof(uint16_t));
  };
  switch (mode_) {
    case Mode::kRun:
      if (count_ == 0) return PutFixed(out, Form::kNone);
      PutFixed(out, Form::kRun);
      PutFixed(out, reference_);
      PutFixed(out, count_);
      return;
    case Mode::kTable:
      PutFixed(out, Form::kTable);
      PutFixed(out, table_size_);
      PutFixed(out, count_);
      for (size_t i = 0; i < table_size_; ++i) {
        PutFixed(out, static_cast<uint32_t>(codes_[2 * i]) << 16 | codes_[2 * i + 1]);
      }
      put_codes(kTableCodes);
      return;
    case Mode::kCoded:
      break;
  }
  const uint32_t n = static_cast<uint32_t>(size());
  if (!scaled_) {
    PutFixed(out, Form::kRaw);
    PutFixed(out, n);
    for (uint32_t i = 0; i < n; ++i) PutFixed(out, (*this)[i]);
    return;
  }
  PutFixed(out, Form::kCoded);
  PutFixed(out, reference_);
  PutFixed(out, exponent_);
  PutFixed(out, n);
  put_codes(0);
}

bool LearnSamples::LoadFrom(std::string_view* in) {
  Release();
  Form form;
  if (!TakeFixed(in, &form)) return false;
  uint32_t n = 0;
  bool ok = false;
  switch (form) {
    case Form::kNone:
      return true;
    case Form::kRun:
      ok = TakeFixed(in, &reference_) && TakeFixed(in, &n) && n >= 1 && n <= kMaxLoadedValues;
      count_ = n;
      break;
    case Form::kTable: {
      uint8_t values = 0;
      ok = TakeFixed(in, &values) && values >= 1 && values <= kTableValues &&
           TakeFixed(in, &n) && n >= 1 && n <= kMaxLoadedValues;
      if (!ok) break;
      codes_.reserve(kTableCodes + (n + 3) / 4);
      codes_.assign(kTableCodes, 0);
      for (size_t i = 0; ok && i < values; ++i) {
        uint32_t bits = 0;
        ok = TakeFixed(in, &bits);
        codes_[2 * i] = static_cast<uint16_t>(bits >> 16);
        codes_[2 * i + 1] = static_cast<uint16_t>(bits);
      }
      ok = ok && TakeCodes(in, (n + 3) / 4, &codes_);
      // Every index within the table, the nibbles past the last zero (the
      // next index is or-ed into them).
      for (size_t i = 0; ok && i < 4 * ((n + 3) / 4); ++i) {
        const int index = (codes_[kTableCodes + i / 4] >> (4 * (i % 4))) & 0xf;
        ok = i < n ? index < values : index == 0;
      }
      mode_ = Mode::kTable;
      table_size_ = values;
      count_ = n;
      break;
    }
    case Form::kRaw:
      ok = TakeFixed(in, &n) && n >= 1 && n < kRawValues;
      mode_ = Mode::kCoded;
      codes_.reserve(2 * kRawValues);
      for (uint32_t i = 0; ok && i < n; ++i) {
        uint32_t bits = 0;
        ok = TakeFixed(in, &bits);
        codes_.push_back(static_cast<uint16_t>(bits >> 16));
        codes_.push_back(static_cast<uint16_t>(bits));
      }
      break;
    case Form::kCoded:
      ok = TakeFixed(in, &reference_) && TakeFixed(in, &exponent_) &&
           std::abs(exponent_) <= kMaxExponent && TakeFixed(in, &n) && n >= 1 &&
           n <= kMaxLoadedValues;
      if (!ok) break;
      mode_ = Mode::kCoded;
      scaled_ = true;
      codes_.reserve(n);
      ok = TakeCodes(in, n, &codes_);
      break;
  }
  if (!ok) Release();
  return ok;
}

void LearnSamples::PushCode(double x) {
  if (!scaled_) {
    const float f = static_cast<float>(x);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    codes_.push_back(static_cast<uint16_t>(bits >> 16));
    codes_.push_back(static_cast<uint16_t>(bits));
    if (size() == kRawValues) Pack();
    return;
  }
  if (std::isfinite(x) &&
      std::fabs((x - reference_) * Pow2(-exponent_)) > kHalfMax) {
    ChooseScale(x);
  }
  codes_.push_back(Encode(x));
  if (IsPowerOfTwo(codes_.size())) ChooseScale(std::nan(""));
}

void LearnSamples::clear() {
  codes_.clear();
  count_ = 0;
  mode_ = Mode::kRun;
  table_size_ = 0;
  reference_ = 0;
  exponent_ = 0;
  scaled_ = false;
}

void LearnSamples::Release() {
  std::vector<uint16_t>().swap(codes_);
  clear();
}

void LearnSamples::KeepEveryOther() {
  if (mode_ != Mode::kCoded) {
    const uint32_t kept = (count_ + 1) / 2;
    if (mode_ == Mode::kTable) {
      // Index i moves from nibble 2i to nibble i: never over one still
      // to be read.
      for (uint32_t i = 0; i < kept; ++i) {
        const int index =
            (codes_[kTableCodes + i / 2] >> (8 * (i % 2))) & 0xf;
        uint16_t& word = codes_[kTableCodes + i / 4];
        const int shift = 4 * (i % 4);
        word = static_cast<uint16_t>((word & ~(0xf << shift)) |
                                     index << shift);
      }
      codes_.resize(kTableCodes + (kept + 3) / 4);
      // Indices are or-ed into their code: clear those past the last.
      if (kept % 4 != 0) {
        codes_.back() &= static_cast<uint16_t>((1u << (4 * (kept % 4))) - 1);
      }
    }
    count_ = kept;
    return;
  }
  const size_t width = scaled_ ? 1 : 2;
  const size_t kept = (size() + 1) / 2;
  for (size_t i = 0; i < kept; ++i) {
    for (size_t w = 0; w < width; ++w) {
      codes_[i * width + w] = codes_[2 * i * width + w];
    }
  }
  codes_.resize(kept * width);
  if (scaled_) ChooseScale(std::nan(""));
}

void LearnSamples::DecodeTo(std::vector<double>* out) const {
  out->resize(size());
  for (size_t i = 0; i < size(); ++i) (*out)[i] = (*this)[i];
}

void LearnSamples::Pack() {
  std::vector<float> raw(size());
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = (*this)[i];
  std::vector<double> values;
  for (float x : raw) {
    if (std::isfinite(x)) values.push_back(x);
  }
  float reference = values.empty() ? 0 : static_cast<float>(values.front());
  int exponent = 0;
  double median;
  if (!Fit(&values, std::nan(""), &reference, &exponent, &median) &&
      reference != 0) {
    // All equal: deviations of up to 2^11 times the value fit.
    exponent = std::ilogb(reference) - 5;
  }
  reference_ = reference;
  exponent_ = static_cast<int16_t>(exponent);
  scaled_ = true;
  codes_.clear();
  for (float x : raw) codes_.push_back(Encode(x));
}

void LearnSamples::Rescale(float reference, int exponent) {
  std::vector<float> values(codes_.size());
  for (size_t i = 0; i < codes_.size(); ++i) values[i] = Decode(codes_[i]);
  reference_ = reference;
  exponent_ = static_cast<int16_t>(exponent);
  for (size_t i = 0; i < codes_.size(); ++i) codes_[i] = Encode(values[i]);
}

void LearnSamples::ChooseScale(double newest) {
  // The finite values; a clamped one counts as infinitely far on its side
  // (its value is unknown but farther).
  std::vector<double> values;
  values.reserve(codes_.size() + 1);
  for (uint16_t c : codes_) {
    if (!Finite(c)) continue;
    if (Clamped(c)) {
      values.push_back(std::signbit(HalfValue(c)) ? -kInfinity : kInfinity);
    } else {
      values.push_back(Decode(c));
    }
  }
  if (std::isfinite(newest)) values.push_back(newest);
  float reference;
  int exponent;
  double median;
  if (!Fit(&values, newest, &reference, &exponent, &median)) return;
  // Re-encoding rounds every value again: only for a scale that changed or
  // a reference that moved by more than the median deviation.
  if (exponent != exponent_ || std::fabs(reference - reference_) > median) {
    Rescale(reference, exponent);
  }
}

bool LearnSamples::Fit(std::vector<double>* values, double newest,
                       float* reference, int* exponent,
                       double* median_deviation) const {
  if (values->empty()) return false;
  auto mid = values->begin() + values->size() / 2;
  std::nth_element(values->begin(), mid, values->end());
  double centre = *mid;
  if (!std::isfinite(centre)) {
    // Most values are clamped on one side: the newest, when it is among
    // them, says where they are; else they are as far as the scale reached.
    centre = std::isfinite(newest) && (newest > reference_) == (centre > 0)
                 ? newest
                 : reference_ + std::copysign(kHalfMax * Pow2(exponent_),
                                              centre);
  }
  const float ref = static_cast<float>(centre);
  // Deviations from it: the median one and the largest known one.
  double largest = 0;
  for (double& v : *values) {
    v = std::fabs(v - ref);
    if (std::isfinite(v)) largest = std::max(largest, v);
  }
  values->erase(std::remove(values->begin(), values->end(), 0.0),
                values->end());
  if (values->empty()) return false;
  mid = values->begin() + values->size() / 2;
  std::nth_element(values->begin(), mid, values->end());
  const double median = std::isfinite(*mid) ? *mid : largest;
  if (!(median > 0)) return false;
  // The largest deviation's code in [2^14, 2^15), with room for twice as
  // much; the median one's at least 2^-13 (normal).
  *exponent = std::clamp(std::min(std::ilogb(std::max(largest, median)) - 14,
                                  std::ilogb(median) + 13),
                         -kMaxExponent, kMaxExponent);
  *reference = ref;
  *median_deviation = median;
  return true;
}

}  // namespace detector_internal
}  // namespace vigil
