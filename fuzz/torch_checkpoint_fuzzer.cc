// model::ReadTorchCheckpoint (zip container + restricted unpickler) on
// arbitrary file contents: never crashes, and every tensor it returns can be
// read in full.
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "model/io/torch_checkpoint.h"
#include "model/io/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dikkat::fuzz::WriteInputFile(data, size, ".pt");
  absl::StatusOr<dikkat::model::TensorMap> tensors = dikkat::model::ReadTorchCheckpoint(path);
  if (!tensors.ok()) {
    DIKKAT_FUZZ_CHECK(!tensors.status().message().empty(), "an error without a message");
    return 0;
  }
  volatile uint64_t sum = 0;
  for (const auto& [name, tensor] : *tensors) {
    DIKKAT_FUZZ_CHECK(tensor.defined(), "tensor '%s' is undefined", name.c_str());
    if (!tensor.is_contiguous()) continue;
    const auto* p = static_cast<const uint8_t*>(tensor.data_ptr());
    const int64_t n = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    for (int64_t i = 0; i < n; ++i) sum = sum + p[i];
  }
  return 0;
}
