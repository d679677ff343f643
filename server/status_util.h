// absl::Status <-> grpc::Status. The two code spaces are the same canonical
// set (OK = 0 ... UNAUTHENTICATED = 16), so the mapping is 1:1 by code and
// the message is kept verbatim.
//
// RESOURCE_EXHAUSTED tells the caller when to retry: the trailing metadata
// `retry-after-ms` carries a hint, taken from the status payload
// kRetryAfterPayloadUrl (a decimal number of milliseconds) when the engine
// attached one, else kDefaultRetryAfterMs; none when the status is marked
// NeverFits.
#ifndef DIKKAT_SERVER_STATUS_UTIL_H_
#define DIKKAT_SERVER_STATUS_UTIL_H_

#include <cstdint>

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dikkat::server {

inline constexpr char kRetryAfterMetadataKey[] = "retry-after-ms";
inline constexpr char kRetryAfterPayloadUrl[] = "type.dikkat.dev/retry-after-ms";
inline constexpr int64_t kDefaultRetryAfterMs = 200;

grpc::Status ToGrpcStatus(const absl::Status& status);

// Same, and for RESOURCE_EXHAUSTED also adds the `retry-after-ms` trailing
// metadata to `context` (must be a live call's context; may be null).
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context);

absl::Status FromGrpcStatus(const grpc::Status& status);

// The retry hint for a RESOURCE_EXHAUSTED status (payload or default).
int64_t RetryAfterMs(const absl::Status& status);

// Attaches a retry hint to a status (used by whoever produces RESOURCE_EXHAUSTED).
void SetRetryAfterMs(absl::Status& status, int64_t ms);

// RESOURCE_EXHAUSTED that no retry on this server can cure: the request can
// never fit its KV cache (a prompt needing more blocks than the cache has, a
// beam search whose worst case is larger), or a best_of > n call's output
// would pass --max_held_output_bytes by itself. gRPC keeps the code (another
// replica may have a larger bound) but sends no `retry-after-ms`; the
// OpenAI-compatible port answers 400 instead of 429 (whose clients retry).
inline constexpr char kNeverFitsPayloadUrl[] = "type.dikkat.dev/never-fits";
absl::Status NeverFitsError(absl::string_view message);
bool NeverFits(const absl::Status& status);

// `status` with `message` instead of its own, its code and payloads (the
// retry hint, NeverFits) kept.
absl::Status WithMessage(const absl::Status& status, absl::string_view message);

// The same with `prefix` before its message.
absl::Status WithMessagePrefix(const absl::Status& status, absl::string_view prefix);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_STATUS_UTIL_H_
