// Fuzzes a learning series' saved samples (LearnSamples::LoadFrom in
// detector/learn_samples.h): the part of a detection snapshot
// (detector/detector_state.cc) read back from the data dir, where a bad
// sector leaves anything. Samples that load must save to the very bytes
// they were read from, and go on learning (more values, halvings, decoding)
// without a fault; samples refused leave none.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "detector/learn_samples.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using vigil::detector_internal::LearnSamples;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view in = input;
  LearnSamples samples;
  if (!samples.LoadFrom(&in)) {
    if (!samples.empty() || samples.heap_bytes() != 0) __builtin_trap();
    return 0;
  }
  std::string saved;
  samples.SaveTo(&saved);
  if (saved != input.substr(0, input.size() - in.size())) __builtin_trap();
  // The rest of the input: values pushed as a learning series pushes them.
  std::vector<double> decoded;
  samples.DecodeTo(&decoded);
  while (in.size() >= sizeof(double)) {
    double x;
    std::memcpy(&x, in.data(), sizeof x);
    in.remove_prefix(sizeof x);
    samples.push_back(x);
    if (samples.size() >= 512) samples.KeepEveryOther();
  }
  samples.DecodeTo(&decoded);
  if (decoded.size() != samples.size()) __builtin_trap();
  return 0;
}
