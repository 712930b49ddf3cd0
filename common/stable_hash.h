// A hash of text that stays the same across processes, builds and
// machines (absl::Hash is seeded per process): for anything derived from
// it that must survive a restart, such as a job's detection shard or an
// outbox item's retry jitter.
#ifndef VIGIL_COMMON_STABLE_HASH_H_
#define VIGIL_COMMON_STABLE_HASH_H_

#include <cstdint>
#include <string_view>

namespace vigil {

// 64-bit FNV-1a of `text`. Never fails.
inline uint64_t StableHash(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace vigil

#endif  // VIGIL_COMMON_STABLE_HASH_H_
