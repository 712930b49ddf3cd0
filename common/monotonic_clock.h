// A monotonic clock for timing what the process itself does. Time that
// components reason about comes through Clock (common/clock.h) instead.
#ifndef VIGIL_COMMON_MONOTONIC_CLOCK_H_
#define VIGIL_COMMON_MONOTONIC_CLOCK_H_

namespace vigil {

// Seconds on the machine's monotonic clock (steady_clock) from an arbitrary
// start: for durations of the process's own work (latency histograms),
// never for timestamps; not faked in tests. Never fails.
double MonotonicSeconds();

}  // namespace vigil

#endif  // VIGIL_COMMON_MONOTONIC_CLOCK_H_
