// Weight files -> TensorMap. ReadWeights picks the format by the path; the
// format readers are in safetensors.h (single file, or sharded with a
// `model.safetensors.index.json`) and torch_checkpoint.h (PyTorch zip
// checkpoints, `torch.save` of a state_dict). Model code sees only a
// TensorMap; it never cares which file format the tensors came from.
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

// Dispatches on the path: a directory (model.safetensors, then
// model.safetensors.index.json, then pytorch_model.bin / *.pt), a
// `.safetensors` file, an `.index.json`, or anything else as a torch zip.
absl::StatusOr<TensorMap> ReadWeights(const std::string& path);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_WEIGHTS_H_
