// Status propagation helpers. Abseil 20220623 (Debian bookworm) ships no
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so dikkat defines its own.
#ifndef DIKKAT_COMMON_STATUS_MACROS_H_
#define DIKKAT_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DIKKAT_STATUS_CONCAT_INNER_(a, b) a##b
#define DIKKAT_STATUS_CONCAT_(a, b) DIKKAT_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define DIKKAT_RETURN_IF_ERROR(expr)                   \
  do {                                                 \
    ::absl::Status dikkat_status_ = (expr);            \
    if (!dikkat_status_.ok()) return dikkat_status_;   \
  } while (0)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or returns its status.
#define DIKKAT_ASSIGN_OR_RETURN(lhs, rexpr) \
  DIKKAT_ASSIGN_OR_RETURN_IMPL_(DIKKAT_STATUS_CONCAT_(dikkat_statusor_, __LINE__), lhs, rexpr)

#define DIKKAT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return statusor.status();             \
  lhs = std::move(statusor).value()

#endif  // DIKKAT_COMMON_STATUS_MACROS_H_
