// The PyTorch checkpoint unpickler alone (model::ParseTorchCheckpointPickle):
// arbitrary bytes as a checkpoint's data.pkl, without the zip container that
// makes the torch_checkpoint target slow. Every storage record the pickle
// names ("data/<key>") exists and holds kRecordBytes bytes in its own heap
// block, except "data/missing", which is absent. Never crashes, hangs or
// leaks (the memo lets a pickle build cycles); every tensor it returns is
// defined and views only bytes of its record: its first and last viewed
// elements are read, so AddressSanitizer reports a view past the block.
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "model/io/torch_checkpoint.h"
#include "model/io/weights.h"

namespace {

// 16 float32, 32 float16/bfloat16, 8 int64: what the seed state_dicts
// (fuzz/make_seed_corpus.py) store in each storage.
constexpr size_t kRecordBytes = 64;

void FreeRecord(void* p) { delete[] static_cast<uint8_t*>(p); }

absl::StatusOr<std::pair<at::DataPtr, size_t>> Record(const std::string& name) {
  if (name == "data/missing") return absl::NotFoundError(name);
  auto* bytes = new uint8_t[kRecordBytes];
  for (size_t i = 0; i < kRecordBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 1);
  return std::make_pair(at::DataPtr(bytes, bytes, &FreeRecord, at::Device(at::kCPU)), kRecordBytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dikkat::model::CheckpointRecordReader records = Record;
  // DIKKAT_FUZZ_VERBOSE=1: print what each input gives (to check seeds).
  static const bool verbose = std::getenv("DIKKAT_FUZZ_VERBOSE") != nullptr;
  absl::StatusOr<dikkat::model::TensorMap> tensors = dikkat::model::ParseTorchCheckpointPickle(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pt", records);
  if (verbose) {
    std::fprintf(stderr, "%s\n",
                 tensors.ok() ? absl::StrCat(tensors->size(), " tensors").c_str()
                              : tensors.status().ToString().c_str());
  }
  if (!tensors.ok()) {
    DIKKAT_FUZZ_CHECK(!tensors.status().message().empty(), "an error without a message");
    DIKKAT_FUZZ_CHECK(tensors.status().code() == absl::StatusCode::kInvalidArgument,
                      "a malformed pickle must be INVALID_ARGUMENT, got %s",
                      tensors.status().ToString().c_str());
    return 0;
  }
  DIKKAT_FUZZ_CHECK(!tensors->empty(), "an accepted checkpoint without tensors");
  volatile uint64_t sum = 0;
  for (const auto& [name, tensor] : *tensors) {
    DIKKAT_FUZZ_CHECK(tensor.defined(), "tensor '%s' is undefined", name.c_str());
    if (tensor.numel() == 0) continue;
    // The last element the view reaches, in elements from its first.
    uint64_t span = 0;
    for (int64_t d = 0; d < tensor.dim(); ++d) {
      span += static_cast<uint64_t>(tensor.size(d) - 1) * static_cast<uint64_t>(tensor.stride(d));
    }
    const auto itemsize = static_cast<uint64_t>(tensor.element_size());
    const uint64_t first = static_cast<uint64_t>(tensor.storage_offset()) * itemsize;
    DIKKAT_FUZZ_CHECK(span <= kRecordBytes && first + (span + 1) * itemsize <= kRecordBytes,
                      "tensor '%s' views bytes past its %zu-byte record", name.c_str(),
                      kRecordBytes);
    const auto* p = static_cast<const uint8_t*>(tensor.data_ptr());
    sum = sum + p[0] + p[span * itemsize + itemsize - 1];
  }
  return 0;
}
