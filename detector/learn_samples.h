// The samples a learning series keeps, two bytes each.
//
// A baseline is the median and MAD of up to Options::learn_buffer samples
// per series, and with every series of a 10,000-GPU cluster learning at
// once these samples are the detector's largest state (~210 MiB of 4-byte
// floats at 286 K series; bench/RESULTS.md "Restarts, split"). They are
// kept as IEEE half-precision floats of (value - reference) / 2^exponent,
// one reference and one exponent per series: each deviation from the
// reference keeps 11 significant bits, so the spread a MAD measures keeps
// them too (values themselves as halves would lose up to an eighth of a
// MAD near the 0.5 % sigma floor: half's step at 1.25 s is 0.08 %).
//
// The reference is the median of the kept values and the scale the
// largest that keeps the median deviation at least 2^-13 in half units
// (every deviation then keeps an error below 2^-11 of the median one, the
// smallest as subnormals) and fits every deviation when it can:
// deviations beyond 2^29 times the median one are clamped to the largest
// half, outliers that keep their side, which is all a median and a MAD
// need of them. Both are chosen from the first kRawValues values, kept as
// 4-byte floats until then, and again when the count of kept values
// reaches a power of two or is halved, and when a value would overflow
// the scale.
//
// Many of a training node's series hold one value while they learn (error
// counters' rates, clocks, memory totals) or a few (temperatures, whole
// degrees from NVML): values are kept exactly while they are few, first
// as a run (the value and a count, nothing allocated), then as a table of
// up to kTableValues values and a 4-bit index a value, and become codes
// only when a value a float does not keep exactly, or one more distinct
// value, comes. Becoming codes pushes the values kept so far in order, so
// the codes are what they would have been from the start; and where a
// half's 11 bits hold every deviation (small whole numbers), the values
// decode alike either way.
#ifndef VIGIL_DETECTOR_LEARN_SAMPLES_H_
#define VIGIL_DETECTOR_LEARN_SAMPLES_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vigil {
namespace detector_internal {

// IEEE half-precision bits of `f`, rounded to nearest even (finite values
// of 65520 and beyond become infinity). Bit arithmetic: GCC converts
// _Float16 through library calls, several times slower, and clang 14 on
// x86-64 has no _Float16.
uint16_t HalfBits(float f);

// The value of half-precision bits `h`.
float HalfValue(uint16_t h);

class LearnSamples {
 public:
  // Keeps `x` (NaN and infinities as such). Never fails.
  void push_back(double x);

  // The i-th kept value, as decoded (i < size()).
  float operator[](size_t i) const;

  size_t size() const {
    if (mode_ != Mode::kCoded) return count_;
    return scaled_ ? codes_.size() : codes_.size() / 2;
  }
  bool empty() const { return size() == 0; }

  // Replaces every value with `values`, kept in order, allocating at most
  // once (a snapshot's samples). Never fails.
  void Assign(std::span<const float> values);

  // Appends the values as they are kept (exactly, or their scale and
  // codes) to `out`, little-endian: u8 form, then
  //   0 none;
  //   1 a run: f32 value, u32 count;
  //   2 a table: u8 values, u32 count, the values as f32, the 4-bit
  //     indices four to a u16 (the first in the low bits);
  //   3 floats before the scale is chosen: u32 count, count f32;
  //   4 codes: f32 reference, i16 exponent, u32 count, count u16 halves.
  // LoadFrom gives back the same samples, bit for bit. Never fails.
  void SaveTo(std::string* out) const;

  // Replaces the values with those SaveTo wrote at the front of `*in` and
  // moves `*in` past them, allocating at most once. False, the values then
  // none and `*in` unspecified, when they are cut short or malformed (an
  // unknown form, more than kMaxLoadedValues values, an index past its
  // table, a scale out of range).
  bool LoadFrom(std::string_view* in);

  // The most values LoadFrom accepts: more than any learning buffer holds.
  static constexpr uint32_t kMaxLoadedValues = 1 << 16;

  // Bytes held on the heap: none while every value kept is equal, 64
  // and half a byte a value while they are a few.
  size_t heap_bytes() const { return codes_.capacity() * sizeof(uint16_t); }

  // Drops every value and the scale; keeps the allocation.
  void clear();

  // Drops every value and frees the allocation.
  void Release();

  // Keeps values 0, 2, 4, ... (the buffer's halving when full).
  void KeepEveryOther();

  // Replaces `*out` with the decoded values, in order.
  void DecodeTo(std::vector<double>* out) const;

 private:
  // Values kept as floats (two codes each) before the first choice.
  static constexpr size_t kRawValues = 8;
  // Distinct values a table holds (4-bit indices), and the codes it takes:
  // each value's float bits, then the indices, four a code.
  static constexpr size_t kTableValues = 16;
  static constexpr size_t kTableCodes = 2 * kTableValues;

  enum class Mode : uint8_t {
    kRun,    // count_ values equal to reference_ (none if count_ is 0)
    kTable,  // count_ values, as indices into a table
    kCoded,  // half codes, or raw floats before the scale is chosen
  };

  // Keeps `x` as codes.
  void PushCode(double x);
  // Turns the run into a table.
  void StartTable();
  // Keeps `f` as an index into the table; false when the table is full.
  bool PushIndexed(float f);
  // The table's value of the i-th value kept.
  float TableValue(size_t i) const;
  // Writes the values kept exactly out as codes.
  void EndExact();
  uint16_t Encode(double x) const;
  float Decode(uint16_t code) const;
  // Re-encodes every value against `reference` at scale 2^`exponent`.
  void Rescale(float reference, int exponent);
  // Chooses reference and scale from the kept values and `newest`, a value
  // about to be kept (NaN if none), and rescales to them.
  void ChooseScale(double newest);
  // The reference and exponent for `values` (finite, or ±infinity for a
  // clamped one; reordered), and their median deviation; false when all
  // are equal or none is finite.
  bool Fit(std::vector<double>* values, double newest, float* reference,
           int* exponent, double* median_deviation) const;
  // Encodes the raw floats kept so far.
  void Pack();

  // kCoded: half bits of (value - reference_) / 2^exponent_; before
  // scaled_, the two halves of each value's float bits. kTable: the table
  // and the indices.
  std::vector<uint16_t> codes_;
  float reference_ = 0;  // kRun: the run's value
  uint32_t count_ = 0;   // kRun, kTable: values kept
  int16_t exponent_ = 0;
  Mode mode_ = Mode::kRun;
  uint8_t table_size_ = 0;  // kTable: distinct values in the table
  bool scaled_ = false;     // reference_ and exponent_ were chosen
};

}  // namespace detector_internal
}  // namespace vigil

#endif  // VIGIL_DETECTOR_LEARN_SAMPLES_H_
