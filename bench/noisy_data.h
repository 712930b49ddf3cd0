// Noisier frames than the simulator's, and the entropy of a load: what the
// storage comparison reports its bytes per sample against (issue 15).
#ifndef VIGIL_BENCH_NOISY_DATA_H_
#define VIGIL_BENCH_NOISY_DATA_H_

#include <cstdint>
#include <vector>

#include "bench/bench_load.h"

namespace vigil::bench {

// Makes `load`'s frames as noisy as a real node's, in place, from `seed`:
//   - every frame's timestamp jitters by up to +-20 ms (millisecond
//     resolution), as a tick loop on a busy host does;
//   - GPU power gains up to +-0.5 W of noise at 1 mW resolution (NVML
//     reports milliwatts);
//   - NIC and NVLink byte counters advance by an extra 0..65535 bytes a
//     tick, so their increments carry real entropy.
void MakeNoisy(NodeLoad* load, uint64_t seed);

// An estimate of the entropy of `loads`' samples in bytes per sample, the
// floor a lossless coder that models each series on its own (as both
// Vigil's blocks and Prometheus' chunks do) cannot beat by much. Per
// series, timestamps (ms) and values (their exact decimal integers,
// smallest scale 10^k with k <= 6) are coded as themselves, their deltas
// or their delta-of-deltas, whichever is cheapest, over the GCD of what is
// coded; values no decimal scale makes exact as the XOR of successive bit
// patterns. Each coded integer costs the empirical entropy of its
// magnitude class (bit length, over the series) plus a sign bit and the
// bits below the leading one, taken as uniform. It is an estimate under
// this model, not a proof: a coder that shares structure across series
// (identical readings on every GPU of a job) can go below it.
double EntropyBytesPerSample(const std::vector<NodeLoad>& loads);

}  // namespace vigil::bench

#endif  // VIGIL_BENCH_NOISY_DATA_H_
