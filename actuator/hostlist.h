// Slurm host lists ("gpu[001-004,007],login1") expanded to host names.
#ifndef VIGIL_ACTUATOR_HOSTLIST_H_
#define VIGIL_ACTUATOR_HOSTLIST_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vigil::actuator {

// At most this many names come out of one host list.
inline constexpr size_t kMaxHostlistNames = 1 << 16;

// The host names in `hostlist`, in the order written: comma-separated
// entries, each a name with any number of bracketed range lists
// ("n[1-3,7]", "r[1-2]n[01-02]": every combination, left to right). A range
// keeps the zero padding of its lower bound ("n[08-10]" -> n08 n09 n10).
// An empty list is empty. kInvalidArgument for unbalanced brackets, a range
// that is not "a" or "a-b" with a <= b in decimal, an empty entry, or more
// than kMaxHostlistNames names.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view hostlist);

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_HOSTLIST_H_
