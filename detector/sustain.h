// N-of-M confirmation with hysteresis, the debouncer every detector uses.
#ifndef VIGIL_DETECTOR_SUSTAIN_H_
#define VIGIL_DETECTOR_SUSTAIN_H_

#include <cstdint>

#include "detector/options.h"

namespace vigil {

// Debounces one condition. Not thread-safe; 16 bytes, no allocation.
class Sustain {
 public:
  // What one observation changed.
  enum class Edge : uint8_t { kNone, kRaised, kCleared };

  // Records one observation: `beyond` the raise threshold, or `calm`
  // (inside the clear band). kRaised once `need` of the last `window`
  // observations were beyond; kCleared after `clear` consecutive calm ones.
  Edge Observe(bool beyond, bool calm, const SustainOptions& o) {
    // The common case, a quiet condition staying quiet: nothing to shift.
    if (!beyond && mask_ == 0 && !raised_ && o.need > 0) return Edge::kNone;
    // A running count of the set bits of the window (cheaper than a
    // popcount, which is a library call without -mpopcnt).
    const int window = o.window >= 64 ? 64 : o.window;
    count_ -= static_cast<int16_t>((mask_ >> (window - 1)) & 1);
    const uint64_t keep =
        window >= 64 ? ~uint64_t{0} : (uint64_t{1} << window) - 1;
    mask_ = ((mask_ << 1) | (beyond ? 1 : 0)) & keep;
    count_ += beyond ? 1 : 0;
    if (!raised_) {
      if (count_ >= o.need) {
        raised_ = true;
        calm_ = 0;
        return Edge::kRaised;
      }
      return Edge::kNone;
    }
    calm_ = calm ? calm_ + 1 : 0;
    if (calm_ >= o.clear) {
      raised_ = false;
      mask_ = 0;
      count_ = 0;
      calm_ = 0;
      return Edge::kCleared;
    }
    return Edge::kNone;
  }

  // Forgets the history (the raised state is kept).
  void ResetWindow() {
    mask_ = 0;
    count_ = 0;
  }
  // Whether the condition is raised.
  bool raised() const { return raised_; }

 private:
  uint64_t mask_ = 0;
  int32_t calm_ = 0;
  int16_t count_ = 0;  // set bits of mask_
  bool raised_ = false;
};

}  // namespace vigil

#endif  // VIGIL_DETECTOR_SUSTAIN_H_
