// Base-128 varints (seven bits a byte, low groups first, the high bit set
// on every byte but the last) and zigzag mapping of signed integers, as
// the storage formats use them. Internal to storage/.
#ifndef VIGIL_STORAGE_VARINT_H_
#define VIGIL_STORAGE_VARINT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace vigil {
namespace storage_internal {

// The most bytes a 64-bit varint takes.
inline constexpr size_t kMaxVarint64Bytes = 10;

// Writes `v` at `out` (room for kMaxVarint64Bytes); returns the byte after.
inline char* EncodeVarint64(char* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<char>(v);
  return out;
}

// Appends `v` to `out`.
inline void PutVarint64(std::string* out, uint64_t v) {
  char buffer[kMaxVarint64Bytes];
  out->append(buffer, EncodeVarint64(buffer, v) - buffer);
}

// Reads a varint from the front of `in`, consuming it. False when it is
// cut short or does not fit 64 bits (`in` is then left anywhere).
inline bool GetVarint64(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift <= 63 && !in->empty(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    if (shift == 63 && byte > 1) return false;
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

// Signed integers to unsigned ones with small magnitudes small: 0, -1, 1,
// -2... -> 0, 1, 2, 3...
inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
}

}  // namespace storage_internal
}  // namespace vigil

#endif  // VIGIL_STORAGE_VARINT_H_
