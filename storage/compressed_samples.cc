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
// has at least kSlackBytes past its last bit).
class BitReader {
 public:
  BitReader(const uint8_t* bits, size_t pos) : bits_(bits), pos_(pos) {}
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
  size_t pos() const { return pos_; }

 private:
  const uint8_t* bits_;
  size_t pos_;
};

// The decoder's state after a sample: what the encoder kept.
struct DecoderState {
  int64_t ts = 0;
  int64_t delta = 0;
  uint64_t value = 0;
  int leading = 0xff;  // 0xff: no XOR window yet
  int trailing = 0;
};

// Decodes `count` samples from `r` into `emit(index, ts, value bits)`,
// continuing from `state` (or, with `raw_first`, reading the first sample
// whole, as a block starts). False, with `state` undefined, if the bits are
// malformed or run past `end_bit`: the buffer must hold 32 readable bytes
// past `end_bit` (a sample reads at most kMaxSampleBits).
template <typename Emit>
bool DecodeSamples(BitReader& r, size_t end_bit, uint32_t count,
                   bool raw_first, DecoderState& state, Emit emit) {
  uint32_t i = 0;
  if (raw_first && count > 0) {
    state.ts = static_cast<int64_t>(r.Get(64));
    state.value = r.Get(64);
    state.delta = 0;
    if (r.pos() > end_bit) return false;
    emit(i++, state.ts, state.value);
  }
  for (; i < count; ++i) {
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
    state.delta = static_cast<int64_t>(static_cast<uint64_t>(state.delta) +
                                       static_cast<uint64_t>(dod));
    state.ts = static_cast<int64_t>(static_cast<uint64_t>(state.ts) +
                                    static_cast<uint64_t>(state.delta));
    if (r.Bit()) {
      if (r.Bit()) {
        state.leading = static_cast<int>(r.Get(5));
        const int significant = static_cast<int>(r.Get(6));
        state.trailing = 64 - state.leading - (significant == 0 ? 64 : significant);
        if (state.trailing < 0) return false;
      } else if (state.leading == 0xff) {
        return false;  // a value inside a window never opened
      }
      const int significant = 64 - state.leading - state.trailing;
      state.value ^= r.Get(significant) << state.trailing;
    }
    if (r.pos() > end_bit) return false;
    emit(i, state.ts, state.value);
  }
  return r.pos() == end_bit;
}

// A checkpoint record (AppendRecordSince): kRecordFormat, flags, the sample
// count and payload bits as varints, the bit offset of the payload in its
// first byte, the encoder state after the last sample (3 x 8 bytes little
// endian, leading, trailing), then the payload bytes. The first byte tells
// it from the chunk codec's formats (storage/chunk_codec.cc: 3 and 4).
constexpr uint8_t kRecordFormat = 0x47;
constexpr uint8_t kRecordContinues = 1;
constexpr size_t kStateBytes = 3 * 8 + 2;
// Readable bytes a record's payload gets past its end when decoded.
constexpr size_t kRecordSlackBytes = 32;

void PutVarint32(std::string* out, uint32_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint32(std::string_view* in, uint32_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift <= 28 && !in->empty(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      if (result > 0xffffffffu) return false;
      *v = static_cast<uint32_t>(result);
      return true;
    }
  }
  return false;
}

void PutLittleEndian64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetLittleEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// A record split into its parts; false if it is not one.
struct ParsedRecord {
  uint8_t flags = 0;
  uint32_t count = 0;
  uint32_t bits = 0;
  uint8_t skip = 0;
  DecoderState end;
  std::string_view payload;
};

bool ParseRecord(std::string_view record, ParsedRecord* out) {
  if (record.size() < 2 || static_cast<uint8_t>(record[0]) != kRecordFormat)
    return false;
  out->flags = static_cast<uint8_t>(record[1]);
  record.remove_prefix(2);
  if ((out->flags & ~kRecordContinues) != 0) return false;
  if (!GetVarint32(&record, &out->count) || out->count == 0) return false;
  if (!GetVarint32(&record, &out->bits)) return false;
  if (record.size() < 1 + kStateBytes) return false;
  out->skip = static_cast<uint8_t>(record[0]);
  if (out->skip > 7) return false;
  const char* state = record.data() + 1;
  out->end.ts = static_cast<int64_t>(GetLittleEndian64(state));
  out->end.delta = static_cast<int64_t>(GetLittleEndian64(state + 8));
  out->end.value = GetLittleEndian64(state + 16);
  out->end.leading = static_cast<uint8_t>(state[24]);
  out->end.trailing = static_cast<uint8_t>(state[25]);
  record.remove_prefix(1 + kStateBytes);
  if (record.size() != (uint64_t{out->skip} + out->bits + 7) / 8) return false;
  out->payload = record;
  return true;
}

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
  BitReader r(bits_.get(), 0);
  DecoderState state;
  DecodeSamples(r, used_bits_, count_, /*raw_first=*/true, state,
                [&](uint32_t i, int64_t ts, uint64_t value) {
                  if (i < begin) return;
                  ts_ms->push_back(ts);
                  values->push_back(std::bit_cast<double>(value));
                });
}

void CompressedSamples::AppendRecordSince(Mark from, std::string* out) const {
  if (from.count >= count_ || from.bit >= used_bits_) return;
  out->push_back(static_cast<char>(kRecordFormat));
  out->push_back(static_cast<char>(from.count > 0 ? kRecordContinues : 0));
  PutVarint32(out, count_ - from.count);
  PutVarint32(out, used_bits_ - from.bit);
  out->push_back(static_cast<char>(from.bit & 7));
  PutLittleEndian64(out, static_cast<uint64_t>(last_ts_));
  PutLittleEndian64(out, static_cast<uint64_t>(last_delta_));
  PutLittleEndian64(out, last_value_);
  out->push_back(static_cast<char>(leading_));
  out->push_back(static_cast<char>(trailing_));
  const uint32_t first_byte = from.bit >> 3;
  const uint32_t end_byte = (used_bits_ + 7) >> 3;
  out->append(reinterpret_cast<const char*>(bits_.get()) + first_byte,
              end_byte - first_byte);
}

std::optional<CompressedSamples::RecordInfo> CompressedSamples::PeekRecord(
    std::string_view record) {
  ParsedRecord parsed;
  if (!ParseRecord(record, &parsed)) return std::nullopt;
  return RecordInfo{.count = parsed.count,
                    .continues = (parsed.flags & kRecordContinues) != 0,
                    .last_ts_ms = parsed.end.ts};
}

bool CompressedSamples::DecodeRecord(std::string_view record,
                                     std::vector<int64_t>* ts_ms,
                                     std::vector<double>* values) const {
  ParsedRecord parsed;
  if (!ParseRecord(record, &parsed)) return false;
  const bool continues = (parsed.flags & kRecordContinues) != 0;
  if (continues != (count_ > 0)) return false;
  // Every sample takes at least a bit: a count past that is corrupt (and
  // would make the outputs huge).
  if (parsed.count > parsed.bits) return false;
  thread_local std::vector<uint8_t> buffer;
  buffer.assign(parsed.payload.size() + kRecordSlackBytes, 0);
  std::memcpy(buffer.data(), parsed.payload.data(), parsed.payload.size());
  DecoderState state{.ts = last_ts_,
                     .delta = last_delta_,
                     .value = last_value_,
                     .leading = leading_,
                     .trailing = trailing_};
  BitReader r(buffer.data(), parsed.skip);
  ts_ms->reserve(ts_ms->size() + parsed.count);
  values->reserve(values->size() + parsed.count);
  const bool ok = DecodeSamples(
      r, size_t{parsed.skip} + parsed.bits, parsed.count, !continues, state,
      [&](uint32_t, int64_t ts, uint64_t value) {
        ts_ms->push_back(ts);
        values->push_back(std::bit_cast<double>(value));
      });
  // The decoder tracks what the encoder kept, the XOR window included.
  return ok && state.ts == parsed.end.ts && state.delta == parsed.end.delta &&
         state.value == parsed.end.value &&
         state.leading == parsed.end.leading &&
         state.trailing == parsed.end.trailing;
}

}  // namespace vigil
