// CRC-32C (Castagnoli), hardware-accelerated where the CPU has SSE4.2.
#ifndef VIGIL_COMMON_CRC32C_H_
#define VIGIL_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace vigil {

// The CRC-32C of `n` bytes at `data`, continuing from `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace vigil

#endif  // VIGIL_COMMON_CRC32C_H_
