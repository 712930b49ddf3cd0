#include "storage/compressed_samples.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace vigil {
namespace {

// Most bits one sample takes: a delta-of-delta escape (4 + 64) and a value
// with a new XOR window (2 + 5 + 6 + 64).
constexpr uint32_t kMaxSampleBits = 145;

// Zero bytes kept past the last bit, so that Put and BitReader::Get can
// load and store whole 64-bit words at any bit position.
constexpr uint32_t kSlackBytes = 8;

// Delta-of-delta classes: a prefix of `prefix_bits` bits holding `prefix`,
// then the value in `bits` bits (two's complement). The last class holds
// any 64-bit value.
struct DodClass {
  uint64_t prefix;
  int prefix_bits;
  int bits;
};
constexpr DodClass kDodClasses[] = {
    {0b10, 2, 7}, {0b110, 3, 9}, {0b1110, 4, 12}, {0b1111, 4, 64}};

bool FitsSigned(int64_t v, int bits) {
  if (bits >= 64) return true;
  const int64_t limit = int64_t{1} << (bits - 1);
  return v >= -limit && v < limit;
}

uint64_t Low(uint64_t v, int bits) {
  return bits >= 64 ? v : v & ((uint64_t{1} << bits) - 1);
}

int64_t SignExtend(uint64_t v, int bits) {
  if (bits >= 64) return static_cast<int64_t>(v);
  const uint64_t sign = uint64_t{1} << (bits - 1);
  return static_cast<int64_t>((v ^ sign) - sign);
}

uint64_t LoadBigEndian64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return std::endian::native == std::endian::little ? __builtin_bswap64(v) : v;
}

void StoreBigEndian64(uint8_t* p, uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof v);
}

// Reads what CompressedSamples::Put wrote, a word at a time (the buffer
// has kSlackBytes past its last bit).
class BitReader {
 public:
  explicit BitReader(const uint8_t* bits) : bits_(bits) {}
  // The next `n` (1..64) bits, most significant first.
  uint64_t Get(int n) {
    if (n > 56) {
      const uint64_t high = Get(n - 32);
      return (high << 32) | Get(32);
    }
    const int skip = static_cast<int>(pos_ & 7);
    const uint64_t word = LoadBigEndian64(bits_ + (pos_ >> 3)) << skip;
    pos_ += n;
    return word >> (64 - n);
  }
  bool Bit() { return Get(1) != 0; }

 private:
  const uint8_t* bits_;
  size_t pos_ = 0;
};

}  // namespace

void CompressedSamples::Put(uint64_t v, int n) {
  if (n > 56) {  // a word load holds 57..64 bits past any bit position
    Put(v >> 32, n - 32);
    Put(v & 0xffffffffu, 32);
    return;
  }
  // The bytes past used_bits_ are zero: OR the bits into the word there.
  uint8_t* at = bits_.get() + (used_bits_ >> 3);
  const int skip = static_cast<int>(used_bits_ & 7);
  const uint64_t part = v & ((uint64_t{1} << n) - 1);
  StoreBigEndian64(at, LoadBigEndian64(at) | (part << (64 - skip - n)));
  used_bits_ += n;
}

void CompressedSamples::Reserve() {
  const uint32_t need = (used_bits_ + kMaxSampleBits + 7) / 8 + kSlackBytes;
  if (need <= capacity_) return;
  // Grow by a quarter (at least 32 bytes): little slack in a buffer of
  // which the store holds one per series. New bytes are zero.
  const uint32_t grown = std::max({need, capacity_ + capacity_ / 4, 32u});
  auto bigger = std::make_unique<uint8_t[]>(grown);
  if (bits_ != nullptr) std::memcpy(bigger.get(), bits_.get(), (used_bits_ + 7) / 8);
  bits_ = std::move(bigger);
  capacity_ = grown;
}

void CompressedSamples::Append(int64_t ts_ms, double value) {
  Reserve();
  const uint64_t bits = std::bit_cast<uint64_t>(value);
  if (count_ == 0) {
    Put(static_cast<uint64_t>(ts_ms), 64);
    Put(bits, 64);
    last_ts_ = ts_ms;
    last_delta_ = 0;
    last_value_ = bits;
    ++count_;
    return;
  }
  // Wrapping arithmetic: any two timestamps have a delta.
  const int64_t delta = static_cast<int64_t>(static_cast<uint64_t>(ts_ms) -
                                             static_cast<uint64_t>(last_ts_));
  const int64_t dod = static_cast<int64_t>(static_cast<uint64_t>(delta) -
                                           static_cast<uint64_t>(last_delta_));
  if (dod == 0) {
    Put(0, 1);
  } else {
    for (const DodClass& c : kDodClasses) {
      if (!FitsSigned(dod, c.bits)) continue;
      Put(c.prefix, c.prefix_bits);
      Put(Low(static_cast<uint64_t>(dod), c.bits), c.bits);
      break;
    }
  }
  const uint64_t x = bits ^ last_value_;
  if (x == 0) {
    Put(0, 1);
  } else {
    const int leading = std::min(std::countl_zero(x), 31);
    const int trailing = std::countr_zero(x);
    if (leading_ != 0xff && leading >= leading_ && trailing >= trailing_) {
      // Inside the current window.
      Put(0b10, 2);
      Put(x >> trailing_, 64 - leading_ - trailing_);
    } else {
      const int significant = 64 - leading - trailing;
      Put(0b11, 2);
      Put(static_cast<uint64_t>(leading), 5);
      Put(static_cast<uint64_t>(significant & 63), 6);  // 64 as 0
      Put(x >> trailing, significant);
      leading_ = static_cast<uint8_t>(leading);
      trailing_ = static_cast<uint8_t>(trailing);
    }
  }
  last_ts_ = ts_ms;
  last_delta_ = delta;
  last_value_ = bits;
  ++count_;
}

void CompressedSamples::Decode(size_t begin, std::vector<int64_t>* ts_ms,
                               std::vector<double>* values) const {
  if (begin >= count_) return;
  ts_ms->reserve(ts_ms->size() + (count_ - begin));
  values->reserve(values->size() + (count_ - begin));
  BitReader r(bits_.get());
  int64_t ts = static_cast<int64_t>(r.Get(64));
  uint64_t value = r.Get(64);
  int64_t delta = 0;
  int leading = 0, trailing = 0;
  for (size_t i = 0;; ++i) {
    if (i >= begin) {
      ts_ms->push_back(ts);
      values->push_back(std::bit_cast<double>(value));
    }
    if (i + 1 == count_) break;
    int64_t dod = 0;
    if (r.Bit()) {
      for (const DodClass& c : kDodClasses) {
        // The prefix's remaining bits: a 0 ends it, except in the last.
        if (&c == &kDodClasses[std::size(kDodClasses) - 1] || !r.Bit()) {
          dod = SignExtend(r.Get(c.bits), c.bits);
          break;
        }
      }
    }
    delta = static_cast<int64_t>(static_cast<uint64_t>(delta) + static_cast<uint64_t>(dod));
    ts = static_cast<int64_t>(static_cast<uint64_t>(ts) + static_cast<uint64_t>(delta));
    if (r.Bit()) {
      if (r.Bit()) {
        leading = static_cast<int>(r.Get(5));
        const int significant = static_cast<int>(r.Get(6));
        trailing = 64 - leading - (significant == 0 ? 64 : significant);
      }
      const int significant = 64 - leading - trailing;
      value ^= r.Get(significant) << trailing;
    }
  }
}

}  // namespace vigil
