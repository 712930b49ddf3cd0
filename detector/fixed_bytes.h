// Fixed-width values in byte strings, in the host's byte order
// (little-endian on the machines Vigil runs on): the detector's snapshot
// formats (detector/detector_state.cc, LearnSamples::SaveTo).
#ifndef VIGIL_DETECTOR_FIXED_BYTES_H_
#define VIGIL_DETECTOR_FIXED_BYTES_H_

#include <cstring>
#include <string>
#include <string_view>

namespace vigil {
namespace detector_internal {

// Appends the bytes of `v` to `out`.
template <typename T>
void PutFixed(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

// Reads `*v` from the front of `*in` and moves past it. False, nothing
// read, when `*in` is shorter than a T.
template <typename T>
bool TakeFixed(std::string_view* in, T* v) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

}  // namespace detector_internal
}  // namespace vigil

#endif  // VIGIL_DETECTOR_FIXED_BYTES_H_
