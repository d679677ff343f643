// Byte counts written the way people write them: "512MiB", "1.5GiB", "64k",
// "1000000". Used by the --kv_cache_bytes flag.
#ifndef DIKKAT_SERVER_BYTE_SIZE_H_
#define DIKKAT_SERVER_BYTE_SIZE_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace dikkat::server {

// A number (integer or decimal) with an optional suffix, case-insensitive:
// B; K/KB = 1000, M/MB, G/GB, T/TB (powers of 1000); KiB/Ki, MiB/Mi, GiB/Gi,
// TiB/Ti (powers of 1024). INVALID_ARGUMENT names the text and the syntax;
// negative values and values above 2^63-1 are rejected.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// The largest binary unit that divides `bytes` exactly ("256MiB", "1000B").
std::string FormatByteSize(int64_t bytes);

// An absl flag type.
struct ByteSize {
  int64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error);
std::string AbslUnparseFlag(ByteSize size);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_BYTE_SIZE_H_
