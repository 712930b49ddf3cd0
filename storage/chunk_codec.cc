#include "storage/chunk_codec.h"

#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "storage/varint.h"

namespace vigil {
namespace {

using storage_internal::PutVarint64;

// Chunk framing: one format byte, then the body (raw or zstd). Formats 1 and
// 2 were an earlier body layout that never reached production data; they
// are rejected as corrupt.
constexpr uint8_t kFormatRaw = 3;
constexpr uint8_t kFormatZstd = 4;
// Bodies smaller than this are not worth a zstd frame.
constexpr size_t kMinCompressSize = 48;
// Refuse to inflate corrupt size fields beyond this.
constexpr uint64_t kMaxBodySize = 256 << 20;

// Integer column header byte: the residual order in the low two bits, then
// the body coding.
constexpr uint8_t kOrderMask = 3;
constexpr uint8_t kRiceFlag = 4;
// A Rice quotient this large is escaped: this many one bits, then the
// residual in 64 raw bits.
constexpr int kRiceEscape = 20;

// Value column modes.
enum ValueMode : uint8_t {
  kConstant = 0,  // 8 bytes BE: the bit pattern of every value
  kDecimal = 1,   // k, then the integer column of value * 10^k
  kFloat32 = 2,   // the integer column of the float32 bit patterns
  kBits = 3,      // the integer column of the double bit patterns
  kRuns = 4,      // run count, integer column of run lengths, then the value
                  // of each run in one of the modes above
};
constexpr int kMaxScale = 6;
constexpr double kPow10[kMaxScale + 1] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};

uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
double FromBits(uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
uint64_t ZigZag(uint64_t v) {
  return (v << 1) ^ static_cast<uint64_t>(static_cast<int64_t>(v) >> 63);
}
uint64_t UnZigZag(uint64_t v) { return (v >> 1) ^ (~(v & 1) + 1); }
// Bits needed to write `v` (0 for 0).
int BitWidth(uint64_t v) { return static_cast<int>(std::bit_width(v)); }


void PutFixed64BE(std::string* out, uint64_t v) {
  for (int s = 56; s >= 0; s -= 8) out->push_back(static_cast<char>(v >> s));
}

class Reader {
 public:
  explicit Reader(std::string_view in)
      : p_(reinterpret_cast<const uint8_t*>(in.data())), end_(p_ + in.size()) {}
  bool Byte(uint8_t* b) {
    if (p_ == end_) return false;
    *b = *p_++;
    return true;
  }
  bool Varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift <= 63 && p_ != end_; shift += 7) {
      const uint8_t b = *p_++;
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = result;
        return true;
      }
    }
    return false;
  }
  bool Fixed64BE(uint64_t* v) {
    if (end_ - p_ < 8) return false;
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r = (r << 8) | p_[i];
    p_ += 8;
    *v = r;
    return true;
  }
  // The next `n` bytes.
  bool Bytes(uint64_t n, std::string_view* out) {
    if (n > remaining()) return false;
    *out = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  size_t remaining() const { return end_ - p_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Appends bit fields to a string, least significant bit first.
class BitWriter {
 public:
  explicit BitWriter(std::string* out) : out_(out) {}
  // Writes the low `bits` (0..64) bits of `v`; the higher bits must be 0.
  void Put(uint64_t v, int bits) {
    if (bits == 0) return;
    acc_ |= v << fill_;
    const int total = fill_ + bits;
    if (total < 64) {
      fill_ = total;
      return;
    }
    for (int s = 0; s < 64; s += 8)
      out_->push_back(static_cast<char>(acc_ >> s));
    acc_ = fill_ == 0 ? 0 : v >> (64 - fill_);
    fill_ = total - 64;
  }
  // Writes the partial last byte.
  void Finish() {
    for (int s = 0; s < fill_; s += 8)
      out_->push_back(static_cast<char>(acc_ >> s));
    acc_ = 0;
    fill_ = 0;
  }

 private:
  std::string* out_;
  uint64_t acc_ = 0;
  int fill_ = 0;  // bits in acc_, < 64
};

// Reads what BitWriter wrote; reading past the end fails.
class BitReader {
 public:
  explicit BitReader(std::string_view in)
      : p_(reinterpret_cast<const uint8_t*>(in.data())),
        size_(in.size()),
        bits_(uint64_t{8} * in.size()) {}
  // The next 64 bits, zero past the end, without consuming them.
  uint64_t Peek() const {
    const size_t byte = pos_ >> 3;
    const int shift = static_cast<int>(pos_ & 7);
    uint64_t r = Load(byte) >> shift;
    if (shift != 0 && byte + 8 < size_) {
      r |= static_cast<uint64_t>(p_[byte + 8]) << (64 - shift);
    }
    return r;
  }
  bool Skip(uint64_t bits) {
    if (bits > bits_ - pos_) return false;
    pos_ += bits;
    return true;
  }
  // Reads `bits` (0..64) bits.
  bool Get(int bits, uint64_t* v) {
    if (bits == 0) {
      *v = 0;
      return true;
    }
    const uint64_t r = Peek();
    *v = bits == 64 ? r : r & ((uint64_t{1} << bits) - 1);
    return Skip(bits);
  }

 private:
  uint64_t Load(size_t byte) const {
    uint64_t r = 0;
    if (byte + 8 <= size_ && std::endian::native == std::endian::little) {
      std::memcpy(&r, p_ + byte, 8);
      return r;
    }
    for (size_t i = 0; i < 8 && byte + i < size_; ++i) {
      r |= static_cast<uint64_t>(p_[byte + i]) << (8 * i);
    }
    return r;
  }

  const uint8_t* p_;
  size_t size_;
  uint64_t bits_;
  uint64_t pos_ = 0;
};

// Residuals of `x` of the given order (wrapping arithmetic): order 1 keeps
// x[0] and stores deltas; order 2 keeps x[0], x[1] - x[0] and stores
// delta-of-deltas.
void Residuals(std::span<const uint64_t> x, int order,
               std::vector<uint64_t>* d) {
  d->assign(x.begin(), x.end());
  if (order >= 1) {
    for (size_t i = x.size(); i-- > 1;) (*d)[i] = x[i] - x[i - 1];
  }
  if (order >= 2) {
    for (size_t i = x.size(); i-- > 2;) (*d)[i] -= (*d)[i - 1];
  }
}

// How to code the body (residuals past the heads) of an integer column:
// u = (residual - min) / gcd, then fixed `width` bits each, or Rice with
// parameter `k` on zigzag(u - center).
struct IntPlan {
  int order = 0;  // residual order, 0..2
  bool rice = false;
  uint64_t min = 0;
  uint64_t gcd = 1;
  uint64_t center = 0;
  int width = 0;  // fixed
  int k = 0;      // rice
  uint64_t bits = 0;
};

// (v - min) / gcd, skipping the slow division in the common case.
uint64_t Unscale(uint64_t v, uint64_t min, uint64_t gcd) {
  return gcd == 1 ? v - min : (v - min) / gcd;
}

// Bits Rice coding with parameter k spends on zigzag residual z.
uint64_t RiceBits(uint64_t z, int k) {
  const uint64_t q = z >> k;
  return q < kRiceEscape ? q + 1 + k : kRiceEscape + 64;
}

// The cheapest coding of residual body `b` (non-empty).
IntPlan PlanBody(std::span<const uint64_t> b) {
  IntPlan plan;
  int64_t lo = static_cast<int64_t>(b[0]);
  for (uint64_t v : b) lo = std::min(lo, static_cast<int64_t>(v));
  plan.min = static_cast<uint64_t>(lo);
  uint64_t g = 0;
  for (uint64_t v : b) {
    g = std::gcd(g, v - plan.min);
    if (g == 1) break;
  }
  plan.gcd = g == 0 ? 1 : g;
  thread_local std::vector<uint64_t> u;
  u.resize(b.size());
  uint64_t hi = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    u[i] = Unscale(b[i], plan.min, plan.gcd);
    hi = std::max(hi, u[i]);
  }
  plan.width = BitWidth(hi);
  plan.bits = static_cast<uint64_t>(plan.width) * b.size();
  if (plan.width <= 1) return plan;
  // Rice around the median, robust to outliers. k is picked from a
  // histogram of residual widths (a residual of width w > k costs about
  // 1 + k + 1.5 * 2^(w-1-k) bits), then refined by exact costs.
  std::nth_element(u.begin(), u.begin() + u.size() / 2, u.end());
  const uint64_t center = u[u.size() / 2];
  uint64_t hist[65] = {};
  for (uint64_t v : b) {
    ++hist[BitWidth(ZigZag(Unscale(v, plan.min, plan.gcd) - center))];
  }
  int max_w = 64;
  while (max_w > 0 && hist[max_w] == 0) --max_w;
  int k0 = 0;
  uint64_t k0_cost = UINT64_MAX;
  for (int k = 0; k <= max_w; ++k) {
    uint64_t cost = 0;  // in half bits
    for (int w = 0; w <= max_w; ++w) {
      const int shift = w - 1 - k;
      cost += hist[w] * (shift < 0   ? 2 * (1 + k)
                         : shift < 4 ? 2 * (1 + k) + (uint64_t{3} << shift)
                                     : 2 * (kRiceEscape + 64));
    }
    if (cost < k0_cost) {
      k0_cost = cost;
      k0 = k;
    }
  }
  k0 = std::max(0, k0 - 1);
  uint64_t cost[3] = {0, 0, 0};
  for (uint64_t v : b) {
    const uint64_t z = ZigZag(Unscale(v, plan.min, plan.gcd) - center);
    for (int j = 0; j < 3; ++j) cost[j] += RiceBits(z, std::min(63, k0 + j));
  }
  for (int j = 0; j < 3; ++j) {
    if (cost[j] < plan.bits) {
      plan.rice = true;
      plan.center = center;
      plan.k = std::min(63, k0 + j);
      plan.bits = cost[j];
    }
  }
  return plan;
}

// The residual order (0..2) that likely codes `x` (2+ values) cheapest:
// the one whose residuals lie closest to their first, in summed bit widths.
int ChooseOrder(std::span<const uint64_t> x) {
  uint64_t cost[3] = {0, 0, 0};
  const uint64_t ref0 = x[0], ref1 = x[1] - x[0];
  for (size_t i = 1; i < x.size(); ++i) {
    const uint64_t delta = x[i] - x[i - 1];
    cost[0] += BitWidth(ZigZag(x[i] - ref0));
    cost[1] += BitWidth(ZigZag(delta - ref1));
    if (i >= 2) cost[2] += BitWidth(ZigZag(delta - (x[i - 1] - x[i - 2])));
  }
  // Order 2 has one residual fewer; charge it the average of the others.
  cost[2] += cost[2] / std::max<size_t>(1, x.size() - 2);
  return cost[0] <= cost[1] && cost[0] <= cost[2] ? 0
         : cost[1] <= cost[2]                     ? 1
                                                  : 2;
}

// Appends the integer column `x` (its length is known to the reader).
void PutInts(std::string* out, std::span<const uint64_t> x) {
  if (x.empty()) return;
  // Fewer than 3 values: order 0, so the body is never empty.
  const int order = x.size() < 3 ? 0 : ChooseOrder(x);
  thread_local std::vector<uint64_t> d;
  Residuals(x, order, &d);
  IntPlan best = PlanBody(std::span(d).subspan(order));
  best.order = order;
  const size_t heads = order;
  out->push_back(static_cast<char>(best.order | (best.rice ? kRiceFlag : 0)));
  for (size_t i = 0; i < heads; ++i) PutVarint64(out, ZigZag(d[i]));
  PutVarint64(out, ZigZag(best.min));
  PutVarint64(out, best.gcd);
  if (!best.rice) {
    out->push_back(static_cast<char>(best.width));
    BitWriter w(out);
    for (size_t i = heads; i < x.size(); ++i) {
      w.Put(Unscale(d[i], best.min, best.gcd), best.width);
    }
    w.Finish();
    return;
  }
  PutVarint64(out, best.center);
  out->push_back(static_cast<char>(best.k));
  thread_local std::string bits;
  bits.clear();
  BitWriter w(&bits);
  const uint64_t low_mask = (uint64_t{1} << best.k) - 1;
  for (size_t i = heads; i < x.size(); ++i) {
    const uint64_t z = ZigZag(Unscale(d[i], best.min, best.gcd) - best.center);
    const uint64_t q = z >> best.k;
    if (q < kRiceEscape) {
      w.Put((uint64_t{1} << q) - 1, static_cast<int>(q) + 1);
      w.Put(z & low_mask, best.k);
    } else {
      w.Put((uint64_t{1} << kRiceEscape) - 1, kRiceEscape);
      w.Put(z, 64);
    }
  }
  w.Finish();
  PutVarint64(out, bits.size());
  out->append(bits);
}

// Reads an integer column of `n` values into `out`.
bool GetInts(Reader* r, size_t n, uint64_t* out) {
  if (n == 0) return true;
  uint8_t header;
  if (!r->Byte(&header) || (header & ~(kOrderMask | kRiceFlag)) != 0) {
    return false;
  }
  const int order = header & kOrderMask;
  if (order > 2) return false;
  const size_t heads = std::min<size_t>(order, n);
  for (size_t i = 0; i < heads; ++i) {
    if (!r->Varint(&out[i])) return false;
    out[i] = UnZigZag(out[i]);
  }
  if (heads < n) {
    const size_t m = n - heads;
    uint64_t min, gcd;
    if (!r->Varint(&min) || !r->Varint(&gcd)) return false;
    min = UnZigZag(min);
    std::string_view bytes;
    if (!(header & kRiceFlag)) {
      uint8_t width;
      if (!r->Byte(&width) || width > 64 ||
          !r->Bytes((uint64_t{m} * width + 7) / 8, &bytes)) {
        return false;
      }
      BitReader br(bytes);
      for (size_t i = heads; i < n; ++i) {
        uint64_t u;
        if (!br.Get(width, &u)) return false;
        out[i] = min + u * gcd;
      }
    } else {
      uint64_t center, size;
      uint8_t k;
      if (!r->Varint(&center) || !r->Byte(&k) || k > 63 || !r->Varint(&size) ||
          !r->Bytes(size, &bytes)) {
        return false;
      }
      BitReader br(bytes);
      for (size_t i = heads; i < n; ++i) {
        const int ones = std::countr_one(br.Peek());
        uint64_t z;
        if (ones >= kRiceEscape) {
          if (!br.Skip(kRiceEscape) || !br.Get(64, &z)) return false;
        } else {
          if (!br.Skip(ones + 1) || !br.Get(k, &z)) return false;
          z |= static_cast<uint64_t>(ones) << k;
        }
        out[i] = min + (center + UnZigZag(z)) * gcd;
      }
    }
  }
  if (order >= 2) {
    for (size_t i = 2; i < n; ++i) out[i] += out[i - 1];
  }
  if (order >= 1) {
    for (size_t i = 1; i < n; ++i) out[i] += out[i - 1];
  }
  return true;
}

// Smallest decimal scale k such that every value == llrint(v*10^k) / 10^k
// bit for bit, with the scaled integers in `ints`; -1 if there is none.
int DecimalScale(std::span<const double> values, std::vector<uint64_t>* ints) {
  // Magnitudes beyond this lose integer precision in the product.
  constexpr double kLimit = 9.0e18;
  int k = 0;
  for (double v : values) {
    while (true) {
      const double x = v * kPow10[k];
      if (std::fabs(x) < kLimit &&
          Bits(static_cast<double>(std::llrint(x)) / kPow10[k]) == Bits(v))
        break;
      if (++k > kMaxScale || !(std::fabs(x) < kLimit)) return -1;
    }
  }
  ints->resize(values.size());
  const double p = kPow10[k];
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t x = std::llrint(values[i] * p);
    if (Bits(static_cast<double>(x) / p) != Bits(values[i])) return -1;
    (*ints)[i] = static_cast<uint64_t>(x);
  }
  return k;
}

// True if every value is a float32 widened to double, with the float32 bit
// patterns in `ints`.
bool Float32Bits(std::span<const double> values, std::vector<uint64_t>* ints) {
  ints->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (std::isfinite(v) && std::fabs(v) > FLT_MAX) return false;
    const float f = static_cast<float>(v);
    if (Bits(static_cast<double>(f)) != Bits(v)) return false;
    uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    (*ints)[i] = b;
  }
  return true;
}

// Appends `values` (non-empty, not all equal) without run coding.
void PutPlainValues(std::string* out, std::span<const double> values) {
  thread_local std::vector<uint64_t> ints;
  const int k = DecimalScale(values, &ints);
  if (k >= 0) {
    out->push_back(static_cast<char>(kDecimal));
    out->push_back(static_cast<char>(k));
  } else if (Float32Bits(values, &ints)) {
    out->push_back(static_cast<char>(kFloat32));
  } else {
    out->push_back(static_cast<char>(kBits));
    ints.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) ints[i] = Bits(values[i]);
  }
  PutInts(out, ints);
}

// Appends the value column `values` (its length is known to the reader).
void PutValues(std::string* out, std::span<const double> values) {
  if (values.empty()) return;
  size_t runs = 1;
  for (size_t i = 1; i < values.size(); ++i) {
    runs += Bits(values[i]) != Bits(values[i - 1]);
  }
  if (runs == 1) {
    out->push_back(static_cast<char>(kConstant));
    PutFixed64BE(out, Bits(values[0]));
    return;
  }
  const size_t start = out->size();
  PutPlainValues(out, values);
  // Worth trying when at least an eighth of the values repeat.
  if (runs > values.size() - values.size() / 8) return;
  thread_local std::vector<uint64_t> lengths;
  thread_local std::vector<double> distinct;
  thread_local std::string coded;
  lengths.clear();
  distinct.clear();
  for (size_t i = 0; i < values.size(); ++i) {
    if (i == 0 || Bits(values[i]) != Bits(values[i - 1])) {
      distinct.push_back(values[i]);
      lengths.push_back(0);
    }
    ++lengths.back();
  }
  coded.clear();
  coded.push_back(static_cast<char>(kRuns));
  PutVarint64(&coded, runs);
  PutInts(&coded, lengths);
  PutPlainValues(&coded, distinct);
  if (coded.size() < out->size() - start) {
    out->resize(start);
    out->append(coded);
  }
}

// Reads a value column of `n` values into `out`; run coding is allowed only
// at the top level.
bool GetValues(Reader* r, size_t n, double* out, bool allow_runs = true) {
  if (n == 0) return true;
  uint8_t mode;
  if (!r->Byte(&mode)) return false;
  thread_local std::vector<uint64_t> ints;
  switch (mode) {
    case kConstant: {
      uint64_t bits;
      if (!r->Fixed64BE(&bits)) return false;
      const double v = FromBits(bits);
      for (size_t i = 0; i < n; ++i) out[i] = v;
      return true;
    }
    case kDecimal: {
      uint8_t k;
      if (!r->Byte(&k) || k > kMaxScale) return false;
      ints.resize(n);
      if (!GetInts(r, n, ints.data())) return false;
      const double p = kPow10[k];
      for (size_t i = 0; i < n; ++i) {
        out[i] = static_cast<double>(static_cast<int64_t>(ints[i])) / p;
      }
      return true;
    }
    case kFloat32: {
      ints.resize(n);
      if (!GetInts(r, n, ints.data())) return false;
      for (size_t i = 0; i < n; ++i) {
        if (ints[i] > UINT32_MAX) return false;
        const uint32_t b = static_cast<uint32_t>(ints[i]);
        float f;
        std::memcpy(&f, &b, sizeof f);
        out[i] = f;
      }
      return true;
    }
    case kBits: {
      ints.resize(n);
      if (!GetInts(r, n, ints.data())) return false;
      for (size_t i = 0; i < n; ++i) out[i] = FromBits(ints[i]);
      return true;
    }
    case kRuns: {
      uint64_t runs;
      if (!allow_runs || !r->Varint(&runs) || runs == 0 || runs > n) {
        return false;
      }
      thread_local std::vector<uint64_t> lengths;
      lengths.resize(runs);
      if (!GetInts(r, runs, lengths.data())) return false;
      uint64_t total = 0;
      for (uint64_t len : lengths) {
        if (len == 0 || len > n) return false;
        total += len;
      }
      if (total != n) return false;
      if (!GetValues(r, runs, out, /*allow_runs=*/false)) return false;
      // Expand in place from the back: run j lands at or after index j.
      size_t pos = n;
      for (size_t j = runs; j-- > 0;) {
        const double v = out[j];
        for (uint64_t i = 0; i < lengths[j]; ++i) out[--pos] = v;
      }
      return true;
    }
    default:
      return false;
  }
}

void PutTimestamps(std::string* out, std::span<const int64_t> ts_ms) {
  PutInts(out, std::span(reinterpret_cast<const uint64_t*>(ts_ms.data()),
                         ts_ms.size()));
}

struct ZstdContexts {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> c{ZSTD_createCCtx(),
                                                       ZSTD_freeCCtx};
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d{ZSTD_createDCtx(),
                                                       ZSTD_freeDCtx};
};
ZstdContexts& Zstd() {
  thread_local ZstdContexts contexts;
  return contexts;
}

// Frames `body` (format byte + optional zstd).
std::string Frame(const std::string& body, const ChunkCodecOptions& options) {
  std::string out;
  if (options.zstd_level > 0 && body.size() >= kMinCompressSize) {
    const size_t bound = ZSTD_compressBound(body.size());
    out.push_back(static_cast<char>(kFormatZstd));
    PutVarint64(&out, body.size());
    const size_t start = out.size();
    out.resize(start + bound);
    const size_t n =
        ZSTD_compressCCtx(Zstd().c.get(), out.data() + start, bound,
                          body.data(), body.size(), options.zstd_level);
    if (!ZSTD_isError(n) && start + n < 1 + body.size()) {
      out.resize(start + n);
      return out;
    }
  }
  out.clear();
  out.reserve(1 + body.size());
  out.push_back(static_cast<char>(kFormatRaw));
  out.append(body);
  return out;
}

// The body of `chunk`, in `storage` if it had to be decompressed.
bool Unframe(std::string_view chunk, std::string* storage,
             std::string_view* body) {
  if (chunk.empty()) return false;
  const uint8_t format = static_cast<uint8_t>(chunk[0]);
  chunk.remove_prefix(1);
  if (format == kFormatRaw) {
    *body = chunk;
    return true;
  }
  if (format != kFormatZstd) return false;
  Reader r(chunk);
  uint64_t size;
  if (!r.Varint(&size) || size > kMaxBodySize) return false;
  chunk.remove_prefix(chunk.size() - r.remaining());
  storage->resize(size);
  const size_t n = ZSTD_decompressDCtx(Zstd().d.get(), storage->data(), size,
                                       chunk.data(), chunk.size());
  if (ZSTD_isError(n) || n != size) return false;
  *body = *storage;
  return true;
}

absl::Status Corrupt(const char* what) {
  return absl::DataLossError(std::string("corrupt chunk: ") + what);
}

}  // namespace

std::string EncodeChunk(std::span<const int64_t> ts_ms,
                        std::span<const double> values,
                        const ChunkCodecOptions& options) {
  thread_local std::string body;
  body.clear();
  PutVarint64(&body, ts_ms.size());
  PutTimestamps(&body, ts_ms);
  PutValues(&body, values.first(ts_ms.size()));
  return Frame(body, options);
}

absl::Status DecodeChunk(std::string_view chunk, std::vector<int64_t>* ts_ms,
                         std::vector<double>* values) {
  thread_local std::string storage;
  std::string_view body;
  if (!Unframe(chunk, &storage, &body)) return Corrupt("framing");
  Reader r(body);
  uint64_t n;
  if (!r.Varint(&n) || n > kMaxChunkSamples) return Corrupt("sample count");
  const size_t base = ts_ms->size();
  ts_ms->resize(base + n);
  values->resize(values->size() + n);
  if (!GetInts(&r, n, reinterpret_cast<uint64_t*>(ts_ms->data() + base)))
    return Corrupt("timestamps");
  if (!GetValues(&r, n, values->data() + values->size() - n))
    return Corrupt("values");
  if (r.remaining() != 0) return Corrupt("trailing bytes");
  return absl::OkStatus();
}

std::string EncodeRollupChunk(std::span<const RollupPoint> points,
                              const ChunkCodecOptions& options) {
  std::string body;
  PutVarint64(&body, points.size());
  std::vector<int64_t> minutes(points.size());
  std::vector<double> column(points.size());
  for (size_t i = 0; i < points.size(); ++i) minutes[i] = points[i].minute_ms;
  PutTimestamps(&body, minutes);
  auto put_column = [&](auto field) {
    for (size_t i = 0; i < points.size(); ++i) column[i] = field(points[i]);
    PutValues(&body, column);
  };
  put_column([](const RollupPoint& p) { return p.min; });
  put_column([](const RollupPoint& p) { return p.max; });
  put_column([](const RollupPoint& p) { return p.sum; });
  put_column([](const RollupPoint& p) { return static_cast<double>(p.count); });
  put_column(
      [](const RollupPoint& p) { return static_cast<double>(p.nan_count); });
  return Frame(body, options);
}

absl::StatusOr<std::vector<RollupPoint>> DecodeRollupChunk(
    std::string_view chunk) {
  std::string storage;
  std::string_view body;
  if (!Unframe(chunk, &storage, &body)) return Corrupt("framing");
  Reader r(body);
  uint64_t n;
  if (!r.Varint(&n) || n > kMaxChunkSamples) return Corrupt("rollup count");
  std::vector<uint64_t> minutes(n);
  if (!GetInts(&r, n, minutes.data())) return Corrupt("rollup minutes");
  std::vector<double> columns[5];
  for (auto& c : columns) {
    c.resize(n);
    if (!GetValues(&r, n, c.data())) return Corrupt("rollup values");
  }
  if (r.remaining() != 0) return Corrupt("trailing bytes");
  // Counts must be exact non-negative integers.
  for (int c = 3; c < 5; ++c) {
    for (double v : columns[c]) {
      if (!(v >= 0 && v <= 9007199254740992.0) || v != std::floor(v))
        return Corrupt("rollup counts");
    }
  }
  std::vector<RollupPoint> points(n);
  for (size_t i = 0; i < n; ++i) {
    points[i] = RollupPoint{.minute_ms = static_cast<int64_t>(minutes[i]),
                            .min = columns[0][i],
                            .max = columns[1][i],
                            .sum = columns[2][i],
                            .count = static_cast<uint64_t>(columns[3][i]),
                            .nan_count = static_cast<uint64_t>(columns[4][i])};
  }
  return points;
}

}  // namespace vigil
