// Lossless compression of one series' block of samples (and of 1-minute
// rollups) into a compact byte string, the unit the stores persist.
//
// Every column is a sequence of 64-bit integers coded the cheapest way of:
// the integers themselves, their deltas or their delta-of-deltas; divided by
// the GCD of their differences from the minimum (sources quantised in KiB,
// 4-byte words or 512-byte blocks cost no bits for the zeros); then either
// bit-packed at the minimal fixed width or Rice-coded around their mean.
// Timestamps are integer milliseconds (a regular 1 Hz series costs ~0 bits).
// Values use the first of: constant; decimal scaling (smallest k in 0..6 with
// every value == integer / 10^k exactly); the bit patterns of float32 values
// (losses and gradient norms from float32 tensors); or the raw double bit
// patterns (anything else: NaN payloads, +-Inf, -0.0, full-precision
// doubles). Values that repeat (training metrics change per step, not per
// tick) may instead be coded as run lengths plus the distinct runs. The body
// is then zstd-compressed when that is smaller. Every double, NaN payloads
// included, round-trips bit for bit. Thread-safe (per-thread scratch).
#ifndef VIGIL_STORAGE_CHUNK_CODEC_H_
#define VIGIL_STORAGE_CHUNK_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/store_util.h"

namespace vigil {

// Most samples (or rollup points) one chunk holds; the decoder rejects a
// larger count as corrupt before allocating for it.
inline constexpr size_t kMaxChunkSamples = size_t{1} << 24;

struct ChunkCodecOptions {
  // zstd level for the final pass; 0 disables zstd. Default 3.
  int zstd_level = 3;
};

// Encodes samples (`ts_ms` and `values` of equal length, at most
// kMaxChunkSamples, any order) into a chunk. Never fails.
std::string EncodeChunk(std::span<const int64_t> ts_ms,
                        std::span<const double> values,
                        const ChunkCodecOptions& options = {});

// Appends the samples of `chunk` to `ts_ms` and `values`. kDataLoss if the
// chunk is corrupt (the outputs may then hold a partial prefix).
absl::Status DecodeChunk(std::string_view chunk, std::vector<int64_t>* ts_ms,
                         std::vector<double>* values);

// Encodes minute rollups (sorted by minute, at most kMaxChunkSamples) into a
// chunk. Never fails.
std::string EncodeRollupChunk(std::span<const RollupPoint> points,
                              const ChunkCodecOptions& options = {});

// The rollups of `chunk`, or kDataLoss if it is corrupt.
absl::StatusOr<std::vector<RollupPoint>> DecodeRollupChunk(
    std::string_view chunk);

}  // namespace vigil

#endif  // VIGIL_STORAGE_CHUNK_CODEC_H_
