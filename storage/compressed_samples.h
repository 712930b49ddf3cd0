// The samples of an open block, compressed as they arrive: timestamps as
// delta-of-deltas and values XORed with their predecessor, bit-packed (the
// scheme of Gorilla and Prometheus' head chunks). A regular 1 Hz series
// costs ~1 bit a timestamp and a value that did not change 1 bit; every
// double, NaN payloads included, comes back bit for bit. Where the open
// blocks of the RocksDB store took 12 bytes a sample as two vectors
// (bench/RESULTS.md, issue 14). Internal to storage/.
#ifndef VIGIL_STORAGE_COMPRESSED_SAMPLES_H_
#define VIGIL_STORAGE_COMPRESSED_SAMPLES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace vigil {

// An append-only sequence of (timestamp ms, value) samples, kept
// compressed. Decoding reads from the first sample. Not thread-safe.
class CompressedSamples {
 public:
  CompressedSamples() = default;
  CompressedSamples(CompressedSamples&&) = default;
  CompressedSamples& operator=(CompressedSamples&&) = default;

  // Samples appended since the last Clear().
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }

  // Appends one sample (any timestamp; the store's are increasing).
  void Append(int64_t ts_ms, double value);

  // Appends samples [begin, size()) to `ts_ms` and `values`.
  void Decode(size_t begin, std::vector<int64_t>* ts_ms,
              std::vector<double>* values) const;

  // Drops every sample and frees the buffer.
  void Clear() { *this = CompressedSamples(); }

  // Bytes of the buffer (for tests and accounting).
  size_t capacity_bytes() const { return capacity_; }

 private:
  // Writes the low `n` (1..64) bits of `v`, most significant first.
  void Put(uint64_t v, int n);
  // Makes room for one more sample (at most kMaxSampleBits).
  void Reserve();

  std::unique_ptr<uint8_t[]> bits_;
  uint32_t capacity_ = 0;  // bytes of bits_
  uint32_t used_bits_ = 0;
  uint32_t count_ = 0;
  // The encoder's state: the last sample and the XOR window in use.
  uint8_t leading_ = 0xff;  // 0xff: no window yet
  uint8_t trailing_ = 0;
  int64_t last_ts_ = 0;
  int64_t last_delta_ = 0;
  uint64_t last_value_ = 0;
};

}  // namespace vigil

#endif  // VIGIL_STORAGE_COMPRESSED_SAMPLES_H_
