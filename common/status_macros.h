// Status helpers missing from Debian's Abseil 20220623.
#ifndef VIGIL_COMMON_STATUS_MACROS_H_
#define VIGIL_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define VIGIL_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status vigil_status_ = (expr);         \
    if (!vigil_status_.ok()) return vigil_status_; \
  } while (0)

#define VIGIL_STATUS_CONCAT_INNER_(a, b) a##b
#define VIGIL_STATUS_CONCAT_(a, b) VIGIL_STATUS_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status if not OK,
// otherwise moves the value into `lhs` (a declaration or an lvalue).
#define VIGIL_ASSIGN_OR_RETURN(lhs, rexpr)                                   \
  auto VIGIL_STATUS_CONCAT_(vigil_statusor_, __LINE__) = (rexpr);            \
  if (!VIGIL_STATUS_CONCAT_(vigil_statusor_, __LINE__).ok())                 \
    return VIGIL_STATUS_CONCAT_(vigil_statusor_, __LINE__).status();         \
  lhs = std::move(*VIGIL_STATUS_CONCAT_(vigil_statusor_, __LINE__))

#endif  // VIGIL_COMMON_STATUS_MACROS_H_
