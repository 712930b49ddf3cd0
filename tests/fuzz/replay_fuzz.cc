// Fuzzes the vigil-replay line parser and the detection pipeline behind it
// (server/replay/replay.h): recorded or hand-made JSONL, fed in arbitrary chunks.
// Replay must be deterministic however the input is chunked.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/replay/replay.h"

namespace {

std::string Run(std::string_view input, size_t chunk) {
  std::string out;
  vigil::ReplaySink sink;
  sink.write = [&](std::string_view line) { out.append(line); };
  sink.bad_line = [&](int64_t n, std::string_view reason) {
    out.append(std::to_string(n)).append(reason).push_back('\n');
  };
  vigil::ReplayOptions options;
  options.max_line_bytes = 1 << 16;
  vigil::Replayer replayer(options, sink);
  for (size_t at = 0; at < input.size(); at += chunk)
    replayer.Feed(input.substr(at, chunk));
  replayer.Finish();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t chunk = 1 + data[0] % 64;
  if (Run(input, input.size() + 1) != Run(input, chunk)) __builtin_trap();
  return 0;
}
