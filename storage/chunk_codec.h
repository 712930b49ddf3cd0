// Lossless compression of one series' block of samples (and of 1-minute
// rollups) into a compact byte string, the unit the stores persist.
//
// Timestamps are integer milliseconds, coded as zigzag varint
// delta-of-deltas (a regular 1 Hz series costs ~0 bits). Values use the
// cheapest of: constant; decimal scaling (smallest k in 0..6 with every
// value == integer / 10^k exactly) followed by delta or delta-of-delta
// zigzag varints; or the XOR of consecutive bit patterns for anything else
// (NaN, +-Inf, -0.0, non-decimal values). The result is then zstd-compressed
// when that is smaller. Every double, NaN payloads included, round-trips
// bit for bit. Thread-safe (per-thread zstd contexts).
#ifndef VIGIL_STORAGE_CHUNK_CODEC_H_
#define VIGIL_STORAGE_CHUNK_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/store_util.h"

namespace vigil {

struct ChunkCodecOptions {
  // zstd level for the final pass; 0 disables zstd. Default 3.
  int zstd_level = 3;
};

// Encodes samples (`ts_ms` and `values` of equal length, any order) into a
// chunk. Never fails.
std::string EncodeChunk(std::span<const int64_t> ts_ms,
                        std::span<const double> values,
                        const ChunkCodecOptions& options = {});

// Appends the samples of `chunk` to `ts_ms` and `values`. kDataLoss if the
// chunk is corrupt (the outputs may then hold a partial prefix).
absl::Status DecodeChunk(std::string_view chunk, std::vector<int64_t>* ts_ms,
                         std::vector<double>* values);

// Encodes minute rollups (sorted by minute) into a chunk. Never fails.
std::string EncodeRollupChunk(std::span<const RollupPoint> points,
                              const ChunkCodecOptions& options = {});

// The rollups of `chunk`, or kDataLoss if it is corrupt.
absl::StatusOr<std::vector<RollupPoint>> DecodeRollupChunk(
    std::string_view chunk);

}  // namespace vigil

#endif  // VIGIL_STORAGE_CHUNK_CODEC_H_
