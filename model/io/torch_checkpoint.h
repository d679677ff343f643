// PyTorch's zip checkpoints (`torch.save`). Thread-safety: reentrant.
#ifndef DIKKAT_MODEL_IO_TORCH_CHECKPOINT_H_
#define DIKKAT_MODEL_IO_TORCH_CHECKPOINT_H_

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

#include <c10/core/Allocator.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

// The records of a checkpoint archive that its data.pkl names as storages
// ("data/<key>"): the record's bytes and their count, or NOT_FOUND when
// there is no such record.
using CheckpointRecordReader =
    std::function<absl::StatusOr<std::pair<at::DataPtr, size_t>>(const std::string& record)>;

// The unpickler alone, as ReadTorchCheckpoint runs it on the archive's
// data.pkl: runs `data_pkl`, reads the storages it names through `records`
// and flattens the dict it holds, with the same results and errors
// (`name` stands for the checkpoint's path in them). ReadTorchCheckpoint is
// this over the zip archive's records; it is exposed for the unpickler's
// fuzzer (fuzz/torch_pickle_fuzzer.cc) and tests.
absl::StatusOr<TensorMap> ParseTorchCheckpointPickle(absl::string_view data_pkl,
                                                     const std::string& name,
                                                     const CheckpointRecordReader& records);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_TORCH_CHECKPOINT_H_
