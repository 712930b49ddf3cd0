#include "storage/compressed_samples.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "storage/varint.h"

namespace vigil {
namespace {

using compressed_samples_internal::ValueModel;
using storage_internal::GetVarint64;
using storage_internal::PutVarint64;
using storage_internal::UnZigZag;
using storage_internal::ZigZag;

// A Rice code's unary part: this many ones (or more) is an escape, followed
// by 1 and a value that is not a decimal of the current scale (XOR-coded),
// or by 0 and a residual of any size: 0 in the model's units, 1 in units
// of 1 (a change its unit does not divide); its width - 1 in 6 bits, then
// its bits.
constexpr int kRiceLimit = 24;

// Most bits one sample takes: a delta-of-delta escape (4 + 64) and a
// decimal escape with a new XOR window (24 + 1 + 2 + 5 + 6 + 64; a long
// residual takes 24 + 2 + 6 + 64).
constexpr uint32_t kMaxSampleBits = 68 + 102;

// While values are XOR-coded, every this many samples the encoder and the
// decoder look again whether the last value is a decimal.
constexpr uint32_t kRedetectEvery = 8;

// The decimal scales tried: 10^0 .. 10^6, exact in a double.
constexpr double kPow10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};
// Scaled integers stay within a double's exact range.
constexpr double kMaxScaled = 9007199254740992.0;  // 2^53

// Whether `v` is exactly q / 10^k for an integer q (|q| < 2^53); sets `q`.
// Decoding divides the same way, so the value comes back bit for bit
// (-0.0 and NaN never qualify).
bool ScaledInteger(double v, int k, int64_t* q) {
  if (k == 0) {  // integers (counters, bytes): no multiply or divide
    if (!(std::fabs(v) < kMaxScaled)) return false;
    const int64_t n = static_cast<int64_t>(v);
    if (std::bit_cast<uint64_t>(static_cast<double>(n)) != std::bit_cast<uint64_t>(v))
      return false;
    *q = n;
    return true;
  }
  const double scaled = v * kPow10[k];
  if (!(std::fabs(scaled) < kMaxScaled)) return false;
  // The nearest integer, if any is q (scaled is within an ulp of it); the
  // division back checks it.
  const int64_t n = static_cast<int64_t>(scaled < 0 ? scaled - 0.5 : scaled + 0.5);
  if (std::bit_cast<uint64_t>(static_cast<double>(n) / kPow10[k]) !=
      std::bit_cast<uint64_t>(v))
    return false;
  *q = n;
  return true;
}

// The smallest scale at which `v` is a decimal, or kNoScale.
uint8_t DetectScale(double v, int64_t* q) {
  for (int k = 0; k < static_cast<int>(std::size(kPow10)); ++k) {
    if (ScaledInteger(v, k, q)) return static_cast<uint8_t>(k);
  }
  return ValueModel::kNoScale;
}

int64_t WrappingSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

int64_t WrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

// The predictor the model favours: true for change of change.
bool PredictsDod(const ValueModel& m) { return m.cost_dod < m.cost_delta; }

// The unit residuals are coded in.
int64_t Unit(const ValueModel& m) { return m.unit == 0 ? 1 : static_cast<int64_t>(m.unit); }

// The residual of integer `q` from the model's prediction, in units of
// `unit` (which divides q's change and the change before).
int64_t Residual(const ValueModel& m, int64_t q, int64_t unit) {
  const int64_t delta = WrappingSub(q, m.q);
  const int64_t r = PredictsDod(m) ? WrappingSub(delta, m.dq) : delta;
  return unit == 1 ? r : r / unit;  // most series' unit soon becomes 1
}

// The integer whose residual from the model's prediction is `r` units.
int64_t FromResidual(const ValueModel& m, int64_t r, int64_t unit) {
  const int64_t scaled = static_cast<int64_t>(static_cast<uint64_t>(r) *
                                              static_cast<uint64_t>(unit));
  return WrappingAdd(m.q, PredictsDod(m) ? WrappingAdd(scaled, m.dq) : scaled);
}

// The Rice parameter for the model's residuals: one less than their
// running mean width, so that a typical residual costs its width and two
// bits. A width average, not a mean of the residuals: a rare jump (a
// counter reset, a level change) moves it by a few bits for a few samples
// instead of inflating every code after it.
int RiceParameter(const ValueModel& m) {
  return std::max(0, static_cast<int>((m.mean + 8) >> 4) - 1);
}

// Learns from decimal `q`, just coded (residual zigzag `coded`).
void Update(ValueModel& m, int64_t q, uint64_t coded) {
  const int64_t delta = WrappingSub(q, m.q);
  if (m.unit != 1) m.unit = std::gcd(m.unit, static_cast<uint64_t>(delta < 0 ? -delta : delta));
  const auto cost = [](uint16_t c, uint64_t u) {
    return static_cast<uint16_t>(c - (c >> 3) + std::bit_width(u));
  };
  m.cost_delta = cost(m.cost_delta, ZigZag(delta));
  m.cost_dod = cost(m.cost_dod, ZigZag(WrappingSub(delta, m.dq)));
  m.mean = m.mean - (m.mean >> 4) + static_cast<uint32_t>(std::bit_width(coded));
  m.dq = delta;
  m.q = q;
}

// Starts decimal coding at value `v` (or XOR coding when it is none).
void Restart(ValueModel& m, double v) {
  int64_t q = 0;
  m.scale = DetectScale(v, &q);
  m.q = q;
  m.dq = 0;
  m.unit = 0;
}

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
  // How many of the next `limit` (< 57) bits are ones before the first
  // zero, without reading them.
  int LeadingOnes(int limit) const {
    const int skip = static_cast<int>(pos_ & 7);
    const uint64_t word = LoadBigEndian64(bits_ + (pos_ >> 3)) << skip;
    return std::min(std::countl_one(word), limit);
  }
  void Skip(int n) { pos_ += n; }
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
  ValueModel model;
};

// Reads a value's XOR with the last one (Gorilla's code) into `state`;
// false if malformed.
bool GetXor(BitReader& r, DecoderState& state) {
  if (!r.Bit()) return true;  // the same value
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
  return true;
}

// Reads the value of sample `index` (not a block's first) into `state`, in
// the decimal coding (CompressedSamples::Append); false if malformed.
bool GetValue(BitReader& r, uint32_t index, DecoderState& state) {
  ValueModel& m = state.model;
  if (m.scale == ValueModel::kNoScale) {
    if (!GetXor(r, state)) return false;
    if (index % kRedetectEvery == 0) Restart(m, std::bit_cast<double>(state.value));
    return true;
  }
  const int ones = r.LeadingOnes(kRiceLimit);
  uint64_t coded = 0;
  int64_t unit = Unit(m);
  if (ones < kRiceLimit) {
    const int k = RiceParameter(m);
    r.Skip(ones + 1);
    coded = (static_cast<uint64_t>(ones) << k) | (k > 0 ? r.Get(k) : 0);
  } else {
    r.Skip(kRiceLimit);
    if (r.Bit()) {  // not a decimal of this scale
      if (!GetXor(r, state)) return false;
      Restart(m, std::bit_cast<double>(state.value));
      return true;
    }
    if (r.Bit()) unit = 1;  // a change the unit does not divide
    const int width = static_cast<int>(r.Get(6)) + 1;
    coded = r.Get(width);
  }
  const int64_t q = FromResidual(m, UnZigZag(coded), unit);
  if (!(std::fabs(static_cast<double>(q)) < kMaxScaled)) return false;
  state.value = std::bit_cast<uint64_t>(static_cast<double>(q) / kPow10[m.scale]);
  Update(m, q, coded);
  return true;
}

// Decodes `count` samples from `r` into `emit(index, ts, value bits)`,
// continuing from `state` (or, with `raw_first`, reading the first sample
// whole, as a block starts). `first_index` is the index in its block of the
// first sample read. `legacy`: values are XOR-coded only (records of the
// first format). False, with `state` undefined, if the bits are malformed
// or run past `end_bit`: the buffer must hold 32 readable bytes past
// `end_bit` (a sample reads at most kMaxSampleBits).
template <typename Emit>
bool DecodeSamples(BitReader& r, size_t end_bit, uint32_t count,
                   bool raw_first, uint32_t first_index, bool legacy,
                   DecoderState& state, Emit emit) {
  uint32_t i = 0;
  if (raw_first && count > 0) {
    state.ts = static_cast<int64_t>(r.Get(64));
    state.value = r.Get(64);
    state.delta = 0;
    if (r.pos() > end_bit) return false;
    if (!legacy) Restart(state.model, std::bit_cast<double>(state.value));
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
    state.delta = WrappingAdd(state.delta, dod);
    state.ts = WrappingAdd(state.ts, state.delta);
    if (!(legacy ? GetXor(r, state) : GetValue(r, first_index + i, state)))
      return false;
    if (r.pos() > end_bit) return false;
    emit(i, state.ts, state.value);
  }
  return r.pos() == end_bit;
}

// A checkpoint record (AppendRecordSince): kRecordFormat, flags, the sample
// count and payload bits as varints, the bit offset of the payload in its
// first byte, the encoder state after the last sample (3 x 8 bytes little
// endian, leading, trailing; then the value model: scale, and as varints
// q and dq zigzagged, unit, mean, cost_delta, cost_dod), then the payload
// bytes.
// Records of kXorRecordFormat, written before values were decimal-coded,
// have no model and XOR-coded values. The first byte tells both from the
// chunk codec's formats (storage/chunk_codec.cc: 3 and 4).
constexpr uint8_t kRecordFormat = 0x48;
constexpr uint8_t kXorRecordFormat = 0x47;
constexpr uint8_t kRecordContinues = 1;
constexpr size_t kStateBytes = 3 * 8 + 2;
// Readable bytes a record's payload gets past its end when decoded.
constexpr size_t kRecordSlackBytes = 32;

bool GetVarint32(std::string_view* in, uint32_t* v) {
  uint64_t result = 0;
  if (!GetVarint64(in, &result) || result > 0xffffffffu) return false;
  *v = static_cast<uint32_t>(result);
  return true;
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
  bool legacy = false;  // kXorRecordFormat
  uint8_t flags = 0;
  uint32_t count = 0;
  uint32_t bits = 0;
  uint8_t skip = 0;
  DecoderState end;
  std::string_view payload;
};

bool ParseModel(std::string_view* in, ValueModel* m) {
  if (in->empty()) return false;
  m->scale = static_cast<uint8_t>(in->front());
  in->remove_prefix(1);
  if (m->scale >= std::size(kPow10) && m->scale != ValueModel::kNoScale) return false;
  uint64_t q = 0, dq = 0;
  uint32_t cost_delta = 0, cost_dod = 0;
  if (!GetVarint64(in, &q) || !GetVarint64(in, &dq) || !GetVarint64(in, &m->unit) ||
      !GetVarint32(in, &m->mean) ||
      !GetVarint32(in, &cost_delta) || !GetVarint32(in, &cost_dod) ||
      cost_delta > 0xffff || cost_dod > 0xffff || m->mean > 16 * 64)
    return false;
  m->q = UnZigZag(q);
  m->dq = UnZigZag(dq);
  m->cost_delta = static_cast<uint16_t>(cost_delta);
  m->cost_dod = static_cast<uint16_t>(cost_dod);
  return true;
}

bool ParseRecord(std::string_view record, ParsedRecord* out) {
  if (record.size() < 2) return false;
  const uint8_t format = static_cast<uint8_t>(record[0]);
  if (format != kRecordFormat && format != kXorRecordFormat) return false;
  out->legacy = format == kXorRecordFormat;
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
  if (!out->legacy && !ParseModel(&record, &out->end.model)) return false;
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
  uint8_t* at = bits_.get() + (used_bits_ >> 3) - BaseByte();
  const int skip = static_cast<int>(used_bits_ & 7);
  const uint64_t part = v & ((uint64_t{1} << n) - 1);
  StoreBigEndian64(at, LoadBigEndian64(at) | (part << (64 - skip - n)));
  used_bits_ += n;
}

void CompressedSamples::Reserve() {
  const uint32_t need =
      (used_bits_ + kMaxSampleBits + 7) / 8 - BaseByte() + kSlackBytes;
  if (need <= capacity_) return;
  // Grow by a quarter (at least 32 bytes): little slack in a buffer of
  // which the store holds one per series. New bytes are zero.
  const uint32_t grown = std::max({need, capacity_ + capacity_ / 4, 32u});
  auto bigger = std::make_unique<uint8_t[]>(grown);
  if (bits_ != nullptr)
    std::memcpy(bigger.get(), bits_.get(), (used_bits_ + 7) / 8 - BaseByte());
  bits_ = std::move(bigger);
  capacity_ = grown;
}

void CompressedSamples::DropBefore(Mark at) {
  if (at.count < kept_.count || at.bit < kept_.bit || at.count > count_ ||
      at.bit > used_bits_ || (at.count == kept_.count && at.bit == kept_.bit))
    return;
  // What is left, and room for the next sample, as Reserve() would make.
  const uint32_t from = (at.bit >> 3) - BaseByte();
  const uint32_t left = (used_bits_ + 7) / 8 - (at.bit >> 3);
  const uint32_t size = left + (kMaxSampleBits + 7) / 8 + kSlackBytes;
  auto smaller = std::make_unique<uint8_t[]>(size);  // zero past `left`
  std::memcpy(smaller.get(), bits_.get() + from, left);
  bits_ = std::move(smaller);
  capacity_ = size;
  kept_ = at;
}

void CompressedSamples::PutXor(uint64_t bits) {
  const uint64_t x = bits ^ last_value_;
  if (x == 0) {
    Put(0, 1);
    return;
  }
  const int leading = std::min(std::countl_zero(x), 31);
  const int trailing = std::countr_zero(x);
  if (leading_ != 0xff && leading >= leading_ && trailing >= trailing_) {
    // Inside the current window.
    Put(0b10, 2);
    Put(x >> trailing_, 64 - leading_ - trailing_);
    return;
  }
  const int significant = 64 - leading - trailing;
  Put(0b11, 2);
  Put(static_cast<uint64_t>(leading), 5);
  Put(static_cast<uint64_t>(significant & 63), 6);  // 64 as 0
  Put(x >> trailing, significant);
  leading_ = static_cast<uint8_t>(leading);
  trailing_ = static_cast<uint8_t>(trailing);
}

void CompressedSamples::PutDecimal(int64_t q) {
  int64_t unit = Unit(model_);
  if (unit != 1 && WrappingSub(q, model_.q) % unit != 0) unit = 1;
  const uint64_t coded = ZigZag(Residual(model_, q, unit));
  const int k = RiceParameter(model_);
  const uint64_t ones = coded >> k;
  if (ones < static_cast<uint64_t>(kRiceLimit) && unit == Unit(model_)) {
    // `ones` ones and a zero, then the low k bits.
    Put(((uint64_t{1} << ones) - 1) << 1, static_cast<int>(ones) + 1);
    if (k > 0) Put(coded, k);
  } else {
    // The escape, 0, then 0 (in the model's units) or 1 (in units of 1).
    const int width = std::max(1, static_cast<int>(std::bit_width(coded)));
    Put(((uint64_t{1} << kRiceLimit) - 1) << 2 | (unit == Unit(model_) ? 0 : 1),
        kRiceLimit + 2);
    Put(static_cast<uint64_t>(width - 1), 6);
    Put(coded, width);
  }
  Update(model_, q, coded);
}

void CompressedSamples::Clear() {
  const int64_t ts_ms = last_ts_;
  const uint64_t bits = last_value_;
  *this = CompressedSamples();
  SetLast(ts_ms, bits);
}

void CompressedSamples::SetLast(int64_t ts_ms, uint64_t bits) {
  if (count_ != 0) return;
  // The encoder writes a sequence's first sample whole, reading none of
  // its state; these two only answer last_ts_ms() and last_bits().
  last_ts_ = ts_ms;
  last_value_ = bits;
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
    Restart(model_, value);
    ++count_;
    return;
  }
  // Wrapping arithmetic: any two timestamps have a delta.
  const int64_t delta = WrappingSub(ts_ms, last_ts_);
  const int64_t dod = WrappingSub(delta, last_delta_);
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
  if (model_.scale == ValueModel::kNoScale) {
    PutXor(bits);
    if (count_ % kRedetectEvery == 0) Restart(model_, value);
  } else if (int64_t q = 0; ScaledInteger(value, model_.scale, &q)) {
    PutDecimal(q);
  } else {
    // Not a decimal of this scale: escape, XOR-code it, start afresh.
    Put(((uint64_t{1} << kRiceLimit) - 1) << 1 | 1, kRiceLimit + 1);
    PutXor(bits);
    Restart(model_, value);
  }
  last_ts_ = ts_ms;
  last_delta_ = delta;
  last_value_ = bits;
  ++count_;
}

bool CompressedSamples::Decode(size_t begin, std::vector<int64_t>* ts_ms,
                               std::vector<double>* values) const {
  if (kept_.count > 0) return false;
  if (begin >= count_) return true;
  ts_ms->reserve(ts_ms->size() + (count_ - begin));
  values->reserve(values->size() + (count_ - begin));
  BitReader r(bits_.get(), 0);
  DecoderState state;
  DecodeSamples(r, used_bits_, count_, /*raw_first=*/true, /*first_index=*/0,
                /*legacy=*/false, state, [&](uint32_t i, int64_t ts, uint64_t value) {
                  if (i < begin) return;
                  ts_ms->push_back(ts);
                  values->push_back(std::bit_cast<double>(value));
                });
  return true;
}

void CompressedSamples::AppendRecordSince(Mark from, std::string* out) const {
  if (from.count >= count_ || from.bit >= used_bits_ || from.count < kept_.count ||
      from.bit < kept_.bit)
    return;
  out->push_back(static_cast<char>(kRecordFormat));
  out->push_back(static_cast<char>(from.count > 0 ? kRecordContinues : 0));
  PutVarint64(out, count_ - from.count);
  PutVarint64(out, used_bits_ - from.bit);
  out->push_back(static_cast<char>(from.bit & 7));
  PutLittleEndian64(out, static_cast<uint64_t>(last_ts_));
  PutLittleEndian64(out, static_cast<uint64_t>(last_delta_));
  PutLittleEndian64(out, last_value_);
  out->push_back(static_cast<char>(leading_));
  out->push_back(static_cast<char>(trailing_));
  out->push_back(static_cast<char>(model_.scale));
  PutVarint64(out, ZigZag(model_.q));
  PutVarint64(out, ZigZag(model_.dq));
  PutVarint64(out, model_.unit);
  PutVarint64(out, model_.mean);
  PutVarint64(out, model_.cost_delta);
  PutVarint64(out, model_.cost_dod);
  const uint32_t first_byte = (from.bit >> 3) - BaseByte();
  const uint32_t end_byte = ((used_bits_ + 7) >> 3) - BaseByte();
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

bool CompressedSamples::ContinueFrom(std::string_view record, uint32_t count) {
  ParsedRecord parsed;
  if (!ParseRecord(record, &parsed) || parsed.legacy || parsed.count > count ||
      parsed.count == 0)
    return false;
  *this = CompressedSamples();
  count_ = count;
  kept_ = {0, count};  // none held: Decode() refuses, as after DropBefore
  last_ts_ = parsed.end.ts;
  last_delta_ = parsed.end.delta;
  last_value_ = parsed.end.value;
  leading_ = static_cast<uint8_t>(parsed.end.leading);
  trailing_ = static_cast<uint8_t>(parsed.end.trailing);
  model_ = parsed.end.model;
  return true;
}

bool CompressedSamples::DecodeRecord(std::string_view record,
                                     std::string_view previous,
                                     std::vector<int64_t>* ts_ms,
                                     std::vector<double>* values) const {
  ParsedRecord parsed;
  if (!ParseRecord(record, &parsed)) return false;
  const bool continues = (parsed.flags & kRecordContinues) != 0;
  if (continues != (count_ > 0)) return false;
  // Every sample takes at least a bit: a count past that is corrupt (and
  // would make the outputs huge).
  if (parsed.count > parsed.bits) return false;
  DecoderState state{.ts = last_ts_,
                     .delta = last_delta_,
                     .value = last_value_,
                     .leading = leading_,
                     .trailing = trailing_,
                     .model = model_};
  if (parsed.legacy && continues) {
    // Its XOR window is the one the record before it ended with (this
    // sequence, re-encoded since, has its own).
    ParsedRecord before;
    if (!ParseRecord(previous, &before) || !before.legacy ||
        before.end.ts != last_ts_ || before.end.value != last_value_)
      return false;
    state.leading = before.end.leading;
    state.trailing = before.end.trailing;
  }
  thread_local std::vector<uint8_t> buffer;
  buffer.assign(parsed.payload.size() + kRecordSlackBytes, 0);
  std::memcpy(buffer.data(), parsed.payload.data(), parsed.payload.size());
  BitReader r(buffer.data(), parsed.skip);
  ts_ms->reserve(ts_ms->size() + parsed.count);
  values->reserve(values->size() + parsed.count);
  const bool ok = DecodeSamples(
      r, size_t{parsed.skip} + parsed.bits, parsed.count, !continues, count_,
      parsed.legacy, state, [&](uint32_t, int64_t ts, uint64_t value) {
        ts_ms->push_back(ts);
        values->push_back(std::bit_cast<double>(value));
      });
  // The decoder tracks what the encoder kept, the XOR window and the value
  // model included.
  return ok && state.ts == parsed.end.ts && state.delta == parsed.end.delta &&
         state.value == parsed.end.value &&
         state.leading == parsed.end.leading &&
         state.trailing == parsed.end.trailing &&
         (parsed.legacy || state.model == parsed.end.model);
}

}  // namespace vigil
