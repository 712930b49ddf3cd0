// Exponentially weighted least-squares line through (t, x) points: O(1)
// per point, no buffer. Used for memory-growth (time-to-OOM) forecasts.
#ifndef VIGIL_DETECTOR_EW_LINE_FIT_H_
#define VIGIL_DETECTOR_EW_LINE_FIT_H_

#include <cmath>

namespace vigil {

// Weighted fit where a point's weight decays as exp(-age / tau). Sums are
// kept relative to the newest point, so large timestamps lose no precision.
// Not thread-safe.
class EwLineFit {
 public:
  // Adds point (t, x); t must not decrease.
  void Add(double t, double x, double tau) {
    if (points_ > 0) {
      const double d = t - last_t_;
      // Shift the origin to t, then age every point by d.
      stt_ = stt_ - 2 * d * st_ + d * d * s0_;
      stx_ = stx_ - d * sx_;
      st_ = st_ - d * s0_;
      const double decay = std::exp(-d / tau);
      s0_ *= decay;
      st_ *= decay;
      sx_ *= decay;
      stt_ *= decay;
      stx_ *= decay;
    }
    s0_ += 1;
    sx_ += x;
    last_t_ = t;
    ++points_;
  }

  // Points added so far.
  int points() const { return points_; }
  // Slope (x per unit t); 0 while the fit is degenerate.
  double slope() const {
    const double den = s0_ * stt_ - st_ * st_;
    if (!(den > 1e-12 * s0_ * s0_)) return 0;
    return (s0_ * stx_ - st_ * sx_) / den;
  }
  // The fitted x at the newest point's t.
  double value_now() const { return s0_ > 0 ? (sx_ - slope() * st_) / s0_ : 0; }

 private:
  double last_t_ = 0;
  double s0_ = 0, st_ = 0, sx_ = 0, stt_ = 0, stx_ = 0;
  int points_ = 0;
};

}  // namespace vigil

#endif  // VIGIL_DETECTOR_EW_LINE_FIT_H_
