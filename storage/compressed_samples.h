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
#include <optional>
#include <string>
#include <string_view>
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

  // A point of the sequence: the samples appended before it.
  struct Mark {
    uint32_t bit = 0;    // where the next sample's bits start
    uint32_t count = 0;  // samples before it
  };
  Mark mark() const { return {used_bits_, count_}; }

  // Appends to `out` a record of the samples after `from` (a mark taken
  // since the last Clear()): their bits as they are, and the encoder's state
  // after them, so that a sequence holding exactly the samples before
  // `from` can decode it (DecodeRecord). Costs a copy of those bits, no
  // decoding: the store checkpoints open blocks this way. Empty record (not
  // appended) when no sample follows `from`.
  void AppendRecordSince(Mark from, std::string* out) const;

  // What a record says about itself without decoding it.
  struct RecordInfo {
    uint32_t count = 0;      // samples it holds
    bool continues = false;  // its first sample follows earlier ones
    int64_t last_ts_ms = 0;  // of its last sample
  };
  // The header of a record AppendRecordSince wrote; nullopt if `record` is
  // not one (too short, another format).
  static std::optional<RecordInfo> PeekRecord(std::string_view record);

  // Appends the samples of `record` to `ts_ms` and `values`, decoding it
  // from this sequence's state: this must hold exactly the samples that
  // preceded the record's when it was written (none for one that does not
  // continue). False if the record is malformed or does not continue this
  // sequence (the encoder's state after it differs from the one recorded);
  // the outputs may then hold a partial prefix.
  bool DecodeRecord(std::string_view record, std::vector<int64_t>* ts_ms,
                    std::vector<double>* values) const;

  // Asks the CPU to start loading the buffer's tail, where the next Append
  // writes: a store appending to thousands of series in turn finds each
  // one's tail out of cache, and prefetches the next few while it writes.
  void PrefetchTail() const {
    if (bits_ != nullptr) __builtin_prefetch(bits_.get() + (used_bits_ >> 3), 1);
  }

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
