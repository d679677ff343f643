// model::ReadSafetensors on arbitrary file contents: never crashes, and every
// tensor it returns can be read in full (its bytes lie inside the file).
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "model/io/safetensors.h"
#include "model/io/weights.h"

namespace {

// Touches every byte of the tensor's storage range that its shape covers.
uint64_t Checksum(const at::Tensor& t) {
  if (!t.is_contiguous()) return 0;
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dikkat::fuzz::WriteInputFile(data, size, ".safetensors");
  absl::StatusOr<dikkat::model::TensorMap> tensors = dikkat::model::ReadSafetensors(path);
  if (!tensors.ok()) {
    DIKKAT_FUZZ_CHECK(!tensors.status().message().empty(), "an error without a message");
    return 0;
  }
  volatile uint64_t sum = 0;
  for (const auto& [name, tensor] : *tensors) {
    DIKKAT_FUZZ_CHECK(tensor.defined(), "tensor '%s' is undefined", name.c_str());
    sum = sum + Checksum(tensor);
  }
  return 0;
}
