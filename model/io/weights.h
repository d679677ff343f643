// Reading and writing weight files: safetensors (single file, or sharded with
// a `model.safetensors.index.json`) and PyTorch zip checkpoints (`torch.save`
// of a state_dict). Model code sees only a TensorMap; it never cares which
// file format the tensors came from.
//
// Thread-safety: the free functions are reentrant. Tensors read from
// safetensors may alias a read-only memory mapping that stays alive as long
// as any tensor referring to it does. Such tensors must not be written in
// place (`mul_`, `copy_` into them, ...): the pages are PROT_READ and a write
// faults. Convert or clone first (`.to(dtype)` / `.clone()` copy).
#ifndef DIKKAT_MODEL_IO_WEIGHTS_H_
#define DIKKAT_MODEL_IO_WEIGHTS_H_

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace dikkat::model {

// Tensors by their name in the file. Ordered so that iteration (and error
// messages listing names) are deterministic.
using TensorMap = std::map<std::string, at::Tensor>;

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

// Reads a PyTorch zip checkpoint written by `torch.save(state_dict, path)`
// (the default zip format; the legacy tar/pickle format is rejected with a
// clear error). Nested dicts ({"model": state_dict}) are flattened with "."
// joined keys (integer keys in decimal); non-tensor entries are ignored.
// Tensors keep the checkpoint's storage sharing (a saved view stays a view)
// and are always on the CPU. Pickle protocols 2-5 are read by a restricted
// unpickler that executes nothing (LibTorch 1.13's own turns OrderedDicts,
// i.e. every `model.state_dict()`, into None). Errors are INVALID_ARGUMENT
// (NOT_FOUND for a missing file).
absl::StatusOr<TensorMap> ReadTorchCheckpoint(const std::string& path);

// Dispatches on the path: a directory (model.safetensors, then
// model.safetensors.index.json, then pytorch_model.bin / *.pt), a
// `.safetensors` file, an `.index.json`, or anything else as a torch zip.
absl::StatusOr<TensorMap> ReadWeights(const std::string& path);

// Writes tensors (any device, contiguous or not) to a .safetensors file with
// an optional `__metadata__` string map. Used by tools and tests. Tensors are
// laid out widest dtype first after an 8-aligned header, so ReadSafetensors
// maps every one of them without copying.
absl::Status WriteSafetensors(const std::string& path, const TensorMap& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_WEIGHTS_H_
