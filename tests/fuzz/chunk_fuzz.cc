// Fuzzes chunk and rollup decoding (storage/chunk_codec.h): what the store
// reads back from disk, where a torn write or a bad sector leaves anything.
// A chunk that decodes must encode and decode to the same samples.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "storage/chunk_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view chunk(reinterpret_cast<const char*>(data), size);
  std::vector<int64_t> ts;
  std::vector<double> values;
  if (vigil::DecodeChunk(chunk, &ts, &values).ok() &&
      ts.size() <= vigil::kMaxChunkSamples) {
    if (ts.size() != values.size()) __builtin_trap();
    std::string again = vigil::EncodeChunk(ts, values);
    std::vector<int64_t> ts2;
    std::vector<double> values2;
    // Bit for bit: NaN payloads and -0.0 must survive too.
    if (!vigil::DecodeChunk(again, &ts2, &values2).ok() || ts2 != ts ||
        values2.size() != values.size() ||
        (!values.empty() &&
         std::memcmp(values2.data(), values.data(),
                     values.size() * sizeof(double)) != 0))
      __builtin_trap();
  }
  (void)vigil::DecodeRollupChunk(chunk);
  return 0;
}
