#include "storage/chunk_codec.h"

#include <zstd.h>

#include <cmath>
#include <cstring>
#include <memory>

namespace vigil {
namespace {

// Chunk framing: one format byte, then the body (raw or zstd).
constexpr uint8_t kFormatRaw = 1;
constexpr uint8_t kFormatZstd = 2;
// Bodies smaller than this are not worth a zstd frame.
constexpr size_t kMinCompressSize = 48;
// Refuse to inflate corrupt size fields beyond this.
constexpr uint64_t kMaxBodySize = 256 << 20;

// Value column modes.
enum ValueMode : uint8_t {
  kConstant = 0,      // 8 bytes: the bit pattern of every value
  kDecimalDelta = 1,  // k, then zigzag varint deltas of value * 10^k
  kDecimalDod = 2,    // k, then zigzag varint delta-of-deltas
  kXor = 3,           // 8 bytes BE per value: bits XOR previous bits
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

int VarintSize(uint64_t v) {
  int n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Appends to a string in place; call Reserve() before writing, Done() after.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out), pos_(out->size()) {}
  void Reserve(size_t bytes) {
    if (out_->size() < pos_ + bytes) out_->resize(pos_ + bytes);
  }
  void Byte(uint8_t b) { (*out_)[pos_++] = static_cast<char>(b); }
  void Varint(uint64_t v) {
    char* p = out_->data() + pos_;
    char* const start = p;
    while (v >= 0x80) {
      *p++ = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    pos_ += p - start;
  }
  void Fixed64BE(uint64_t v) {
    char* p = out_->data() + pos_;
    for (int s = 56; s >= 0; s -= 8) *p++ = static_cast<char>(v >> s);
    pos_ += 8;
  }
  // Shrinks the string to what was written.
  void Done() { out_->resize(pos_); }

 private:
  std::string* out_;
  size_t pos_;
};

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
  size_t remaining() const { return end_ - p_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Delta-of-delta zigzag varints of integers (wrapping arithmetic).
void PutDod(Writer* w, std::span<const uint64_t> v) {
  if (v.empty()) return;
  w->Varint(ZigZag(v[0]));
  if (v.size() == 1) return;
  uint64_t prev_delta = v[1] - v[0];
  w->Varint(ZigZag(prev_delta));
  for (size_t i = 2; i < v.size(); ++i) {
    const uint64_t delta = v[i] - v[i - 1];
    w->Varint(ZigZag(delta - prev_delta));
    prev_delta = delta;
  }
}

void PutDelta(Writer* w, std::span<const uint64_t> v) {
  if (v.empty()) return;
  w->Varint(ZigZag(v[0]));
  for (size_t i = 1; i < v.size(); ++i) w->Varint(ZigZag(v[i] - v[i - 1]));
}

bool GetDod(Reader* r, size_t n, uint64_t* out) {
  uint64_t z;
  if (n == 0) return true;
  if (!r->Varint(&z)) return false;
  out[0] = UnZigZag(z);
  if (n == 1) return true;
  if (!r->Varint(&z)) return false;
  uint64_t delta = UnZigZag(z);
  out[1] = out[0] + delta;
  for (size_t i = 2; i < n; ++i) {
    if (!r->Varint(&z)) return false;
    delta += UnZigZag(z);
    out[i] = out[i - 1] + delta;
  }
  return true;
}

bool GetDelta(Reader* r, size_t n, uint64_t* out) {
  uint64_t z;
  for (size_t i = 0; i < n; ++i) {
    if (!r->Varint(&z)) return false;
    out[i] = (i == 0 ? 0 : out[i - 1]) + UnZigZag(z);
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

void PutValues(Writer* w, std::span<const double> values) {
  if (values.empty()) return;
  const uint64_t first = Bits(values[0]);
  bool constant = true;
  for (double v : values) {
    if (Bits(v) != first) {
      constant = false;
      break;
    }
  }
  if (constant) {
    w->Reserve(9);
    w->Byte(kConstant);
    w->Fixed64BE(first);
    return;
  }
  thread_local std::vector<uint64_t> ints;
  const int k = DecimalScale(values, &ints);
  if (k < 0) {
    w->Reserve(1 + 8 * values.size());
    w->Byte(kXor);
    uint64_t prev = 0;
    for (double v : values) {
      w->Fixed64BE(Bits(v) ^ prev);
      prev = Bits(v);
    }
    return;
  }
  // Pick delta or delta-of-delta by coded size.
  size_t delta_size = 0, dod_size = 0;
  uint64_t prev_delta = 0;
  for (size_t i = 1; i < ints.size(); ++i) {
    const uint64_t delta = ints[i] - ints[i - 1];
    delta_size += VarintSize(ZigZag(delta));
    dod_size += VarintSize(ZigZag(i == 1 ? delta : delta - prev_delta));
    prev_delta = delta;
  }
  w->Reserve(2 + 10 * ints.size());
  if (dod_size < delta_size) {
    w->Byte(kDecimalDod);
    w->Byte(static_cast<uint8_t>(k));
    PutDod(w, ints);
  } else {
    w->Byte(kDecimalDelta);
    w->Byte(static_cast<uint8_t>(k));
    PutDelta(w, ints);
  }
}

bool GetValues(Reader* r, size_t n, double* out) {
  if (n == 0) return true;
  uint8_t mode;
  if (!r->Byte(&mode)) return false;
  switch (mode) {
    case kConstant: {
      uint64_t bits;
      if (!r->Fixed64BE(&bits)) return false;
      const double v = FromBits(bits);
      for (size_t i = 0; i < n; ++i) out[i] = v;
      return true;
    }
    case kXor: {
      if (r->remaining() / 8 < n) return false;
      uint64_t prev = 0, x = 0;
      for (size_t i = 0; i < n; ++i) {
        r->Fixed64BE(&x);
        prev ^= x;
        out[i] = FromBits(prev);
      }
      return true;
    }
    case kDecimalDelta:
    case kDecimalDod: {
      uint8_t k;
      if (!r->Byte(&k) || k > kMaxScale) return false;
      thread_local std::vector<uint64_t> ints;
      ints.resize(n);
      if (!(mode == kDecimalDod ? GetDod(r, n, ints.data())
                                : GetDelta(r, n, ints.data())))
        return false;
      const double p = kPow10[k];
      for (size_t i = 0; i < n; ++i)
        out[i] = static_cast<double>(static_cast<int64_t>(ints[i])) / p;
      return true;
    }
    default:
      return false;
  }
}

void PutTimestamps(Writer* w, std::span<const int64_t> ts_ms) {
  w->Reserve(10 * ts_ms.size());
  PutDod(w, std::span(reinterpret_cast<const uint64_t*>(ts_ms.data()),
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
    out.resize(1 + 10 + bound);
    out[0] = static_cast<char>(kFormatZstd);
    std::string size_prefix;
    Writer w(&size_prefix);
    w.Reserve(10);
    w.Varint(body.size());
    w.Done();
    std::memcpy(out.data() + 1, size_prefix.data(), size_prefix.size());
    const size_t start = 1 + size_prefix.size();
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
  Writer w(&body);
  w.Reserve(10);
  w.Varint(ts_ms.size());
  PutTimestamps(&w, ts_ms);
  w.Done();
  PutValues(&w, values.first(ts_ms.size()));
  w.Done();
  return Frame(body, options);
}

absl::Status DecodeChunk(std::string_view chunk, std::vector<int64_t>* ts_ms,
                         std::vector<double>* values) {
  thread_local std::string storage;
  std::string_view body;
  if (!Unframe(chunk, &storage, &body)) return Corrupt("framing");
  Reader r(body);
  uint64_t n;
  // Every timestamp takes at least one byte.
  if (!r.Varint(&n) || n > r.remaining()) return Corrupt("sample count");
  const size_t base = ts_ms->size();
  ts_ms->resize(base + n);
  values->resize(values->size() + n);
  if (!GetDod(&r, n, reinterpret_cast<uint64_t*>(ts_ms->data() + base)))
    return Corrupt("timestamps");
  if (!GetValues(&r, n, values->data() + values->size() - n))
    return Corrupt("values");
  if (r.remaining() != 0) return Corrupt("trailing bytes");
  return absl::OkStatus();
}

std::string EncodeRollupChunk(std::span<const RollupPoint> points,
                              const ChunkCodecOptions& options) {
  std::string body;
  Writer w(&body);
  w.Reserve(10);
  w.Varint(points.size());
  std::vector<int64_t> minutes(points.size());
  std::vector<double> column(points.size());
  for (size_t i = 0; i < points.size(); ++i) minutes[i] = points[i].minute_ms;
  PutTimestamps(&w, minutes);
  w.Done();
  auto put_column = [&](auto field) {
    for (size_t i = 0; i < points.size(); ++i) column[i] = field(points[i]);
    PutValues(&w, column);
    w.Done();
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
  if (!r.Varint(&n) || n > r.remaining()) return Corrupt("rollup count");
  std::vector<uint64_t> minutes(n);
  if (!GetDod(&r, n, minutes.data())) return Corrupt("rollup minutes");
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
