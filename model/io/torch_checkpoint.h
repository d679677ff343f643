// PyTorch's zip checkpoints (`torch.save`). Thread-safety: reentrant.
#ifndef DIKKAT_MODEL_IO_TORCH_CHECKPOINT_H_
#define DIKKAT_MODEL_IO_TORCH_CHECKPOINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/io/weights.h"

namespace dikkat::model {

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

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_TORCH_CHECKPOINT_H_
