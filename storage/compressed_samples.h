// The samples of an open block, compressed as they arrive. Timestamps are
// delta-of-deltas (a regular 1 Hz series costs ~1 bit a sample). Values
// that are decimals (an integer over 10^k, k in 0..6: watts to the
// milliwatt, byte counters, ratios to the percent - most of what agents
// read) are coded as that integer's change, or change of change, whichever
// the series' recent samples favour, in units of the changes' common
// divisor, Rice-coded with a parameter that follows the changes' size. Any
// other value (full-precision doubles, NaN, -0.0) is coded as its XOR with
// the previous one, bit-packed (the scheme of Gorilla and Prometheus' head
// chunks). Decoder and encoder adapt alike, so no side information is
// written. Every double, NaN payloads included, comes back bit for bit.
// 1.23 bytes a sample on the simulator's frames, against 1.74 with XOR
// alone and 12 as two vectors (bench/RESULTS.md, issue 14). Internal to
// storage/.
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
namespace compressed_samples_internal {

// What encoder and decoder both know about a series' decimal values besides
// the last value: its scale, its last integer and that integer's last
// change, the running costs of the two predictors (change, change of
// change) and the running size of the residuals coded.
struct ValueModel {
  static constexpr uint8_t kNoScale = 0xff;
  int64_t q = 0;   // the last value times 10^scale
  int64_t dq = 0;  // q minus the integer before it
  // The greatest common divisor of the integer's changes since the scale
  // was set (0: none yet): residuals are coded in its units (memory in
  // 2 MiB pages, disk in 512-byte sectors cost no bits for the zeros).
  uint64_t unit = 0;
  uint32_t mean = 0;  // 16 x the running mean width of coded residuals
  uint16_t cost_delta = 0, cost_dod = 0;
  uint8_t scale = kNoScale;  // kNoScale: values are XOR-coded
  bool operator==(const ValueModel&) const = default;
};

}  // namespace compressed_samples_internal

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

  // Appends samples [begin, size()) to `ts_ms` and `values`. False (and
  // nothing appended) once samples were dropped (DropBefore): decoding
  // starts at the first sample.
  bool Decode(size_t begin, std::vector<int64_t>* ts_ms,
              std::vector<double>* values) const;

  // Drops every sample and frees the buffer. last_ts_ms() and last_bits()
  // still give the last sample until the next Append.
  void Clear();

  // The last sample appended (its time, its value's bit pattern), also
  // after Clear(), or the one SetLast() gave; 0 and 0 for none. The store
  // keeps each series' last sample, its cursor, here rather than twice.
  int64_t last_ts_ms() const { return last_ts_; }
  uint64_t last_bits() const { return last_value_; }
  // Makes (ts_ms, bits) what last_ts_ms() and last_bits() give until the
  // next Append: a cursor loaded from disk. Does nothing unless empty().
  void SetLast(int64_t ts_ms, uint64_t bits);

  // A point of the sequence: the samples appended before it.
  struct Mark {
    uint32_t bit = 0;    // where the next sample's bits start
    uint32_t count = 0;  // samples before it
  };
  Mark mark() const { return {used_bits_, count_}; }

  // Frees the bits of the samples before `at`, a mark taken since the last
  // Clear() and not before kept(), into a buffer sized to what is left.
  // The caller holds those samples elsewhere (the store: in pieces it has
  // written); the sequence still counts them (size()) and appends on, and
  // its samples from kept() on are the record AppendRecordSince(kept())
  // for decoding after the dropped ones. Does nothing for a mark outside
  // [kept(), mark()].
  void DropBefore(Mark at);
  // The first sample whose bits are still held ({0, 0} if none dropped).
  Mark kept() const { return kept_; }

  // Appends to `out` a record of the samples after `from` (a mark taken
  // since the last Clear(), not before kept()): their bits as they are, and
  // the encoder's state
  // after them, so that a sequence holding exactly the samples before
  // `from` can decode it (DecodeRecord). Costs a copy of those bits, no
  // decoding: the store checkpoints open blocks this way. Empty record (not
  // appended) when no sample follows `from`, or `from` is before kept().
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
  // continue). `previous` is the record it continues (empty for none): a
  // record written before values were decimal-coded (XOR only) continues
  // from the XOR state that record ends with. False if the record is
  // malformed or does not continue this sequence (the encoder's state
  // after it differs from the one recorded); the outputs may then hold a
  // partial prefix.
  bool DecodeRecord(std::string_view record, std::string_view previous,
                    std::vector<int64_t>* ts_ms,
                    std::vector<double>* values) const;

  // Makes this a sequence of the `count` samples up to and including
  // those of `record` (a record of the format AppendRecordSince writes
  // now) that holds none of their bits, in the state the record ends
  // with: DecodeRecord then decodes the record that continues it, and
  // those before need not be appended again. False (this left as it was)
  // if `record` is not such a record (the XOR-only format, a chunk), or
  // holds more than `count` samples.
  bool ContinueFrom(std::string_view record, uint32_t count);

  // Asks the CPU to start loading the buffer's tail, where the next Append
  // writes: a store appending to thousands of series in turn finds each
  // one's tail out of cache, and prefetches the next few while it writes.
  // Unconditional, in integer arithmetic: GCC 12 deletes a prefetch
  // guarded by `if (bits_ != nullptr)` (checked in the disassembly), and
  // a prefetch of an address near 0 (no buffer yet) is harmless.
  void PrefetchTail() const {
    const uintptr_t tail = reinterpret_cast<uintptr_t>(bits_.get()) +
                           (used_bits_ >> 3) - BaseByte();
    __builtin_prefetch(reinterpret_cast<const void*>(tail), 1);
  }

  // Bytes of the buffer (for tests and accounting).
  size_t capacity_bytes() const { return capacity_; }

 private:
  // Writes the low `n` (1..64) bits of `v`, most significant first.
  void Put(uint64_t v, int n);
  // Writes `bits`, a value's XOR with the last one, in Gorilla's code.
  void PutXor(uint64_t bits);
  // Writes a decimal value's integer `q` as a residual from the predictor
  // the model favours, and updates the model.
  void PutDecimal(int64_t q);
  // Makes room for one more sample (at most kMaxSampleBits).
  void Reserve();
  // The byte of the sequence that bits_[0] holds (DropBefore).
  uint32_t BaseByte() const { return kept_.bit >> 3; }

  std::unique_ptr<uint8_t[]> bits_;
  uint32_t capacity_ = 0;  // bytes of bits_
  uint32_t used_bits_ = 0;  // of the whole sequence, dropped bits included
  uint32_t count_ = 0;
  Mark kept_;  // the first sample held (DropBefore)
  // The encoder's state: the last sample and the XOR window in use.
  uint8_t leading_ = 0xff;  // 0xff: no window yet
  uint8_t trailing_ = 0;
  int64_t last_ts_ = 0;
  int64_t last_delta_ = 0;
  uint64_t last_value_ = 0;
  compressed_samples_internal::ValueModel model_;
};

}  // namespace vigil

#endif  // VIGIL_STORAGE_COMPRESSED_SAMPLES_H_
