// The safetensors format: an 8-byte header length, a JSON header, raw bytes.
// Reading maps the file (see weights.h on read-only tensors); writing is for
// tools and tests. Thread-safety: the functions are reentrant.
#ifndef DIKKAT_MODEL_IO_SAFETENSORS_H_
#define DIKKAT_MODEL_IO_SAFETENSORS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/io/weights.h"

namespace dikkat::model {

// Reads one .safetensors file. Supported dtypes: F32, F16, BF16, F64, I64,
// I32, I16, I8, U8, BOOL. Errors (INVALID_ARGUMENT / NOT_FOUND / DATA_LOSS)
// name the file and, where it applies, the tensor and what was expected:
// missing file, header length past the end, bad header JSON, unknown dtype,
// shape/dtype not matching the byte range, byte ranges overlapping or past
// the end of the file (truncated file).
// Codes: NOT_FOUND for a missing file; DATA_LOSS when the file is shorter than
// its header says (header length or a tensor's bytes past the end);
// INVALID_ARGUMENT for everything malformed. A tensor whose bytes are aligned
// for its dtype is a view on the mapping; a misaligned one is copied.
absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path);

// Reads every shard named by a Hugging Face `*.safetensors.index.json`
// (`weight_map`: tensor name -> shard file, relative to the index). Each shard
// is read once; the result holds exactly the tensors the index names, and a
// name its shard lacks is INVALID_ARGUMENT.
absl::StatusOr<TensorMap> ReadSafetensorsIndex(const std::string& index_path);

// The index's checks without reading any shard: parses the text of an
// `*.safetensors.index.json` and returns shard file (relative to the
// index's folder) -> the tensor names it holds, in name order. A
// weight_map that is missing, empty or not an object, an entry that is not
// a non-empty string, and a shard path that is absolute or has a ".."
// component are INVALID_ARGUMENT; `index_path` names the index in errors.
// ReadSafetensorsIndex runs this first; exposed for the fuzzer
// (fuzz/safetensors_index_fuzzer.cc) and tests.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseSafetensorsIndex(
    absl::string_view index_json, const std::string& index_path);

// Writes tensors (any device, contiguous or not) to a .safetensors file with
// an optional `__metadata__` string map. Used by tools and tests. Tensors are
// laid out widest dtype first after an 8-aligned header, so ReadSafetensors
// maps every one of them without copying.
absl::Status WriteSafetensors(const std::string& path, const TensorMap& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_SAFETENSORS_H_
