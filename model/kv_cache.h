// KvCache: the preallocated key/value storage of a decoder, split into blocks.
//
// One tensor pair per cached layer, each [num_blocks * block_size,
// n_kv_heads, head_dim]: slot s = block * block_size + offset holds one
// token's keys (values) for every KV head. Allocated once, sized by a byte
// budget; nothing is reallocated per step. Block bookkeeping lives in the
// KvBlockAllocator beside it.
//
// Not thread-safe: the engine thread owns it.
#ifndef DIKKAT_MODEL_KV_CACHE_H_
#define DIKKAT_MODEL_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "model/io/config.h"
#include "model/kv_block_allocator.h"

namespace dikkat::model {

class KvCache {
 public:
  // Bytes one token occupies: 2 (K and V) * layers * kv_heads * head_dim * itemsize.
  static int64_t BytesPerToken(const ModelConfig& config, c10::ScalarType dtype);

  // OK if `budget_bytes` holds one full-context sequence (what Create
  // needs); else INVALID_ARGUMENT saying how much is needed. Cheap: callers
  // check before loading the weights.
  static absl::Status CheckBudget(const ModelConfig& config, int64_t budget_bytes,
                                  int32_t block_size, c10::ScalarType dtype);

  // As many blocks as fit in `budget_bytes` (at least one full-context
  // sequence must fit, else INVALID_ARGUMENT says how much is needed),
  // zeroed. On the CPU with `huge_pages`, in one region advised for 2 MiB
  // pages (HugePageArena, huge_pages.h).
  static absl::StatusOr<KvCache> Create(const ModelConfig& config, int64_t budget_bytes,
                                        int32_t block_size, c10::ScalarType dtype,
                                        c10::Device device, bool huge_pages = true);

  const at::Tensor& keys(int64_t layer) const { return keys_[layer]; }
  const at::Tensor& values(int64_t layer) const { return values_[layer]; }
  at::Tensor& keys(int64_t layer) { return keys_[layer]; }
  at::Tensor& values(int64_t layer) { return values_[layer]; }

  // Copies the K/V of the first `slots` token slots of block `src` into block
  // `dst`, in every layer (a forked sequence's own copy of a partial block).
  void CopySlots(int32_t src, int32_t dst, int64_t slots);

  KvBlockAllocator& allocator() { return allocator_; }
  const KvBlockAllocator& allocator() const { return allocator_; }
  int32_t block_size() const { return allocator_.block_size(); }
  int64_t total_bytes() const { return total_bytes_; }

 private:
  KvCache(std::vector<at::Tensor> keys, std::vector<at::Tensor> values, int32_t num_blocks,
          int32_t block_size, int64_t total_bytes);

  std::vector<at::Tensor> keys_;
  std::vector<at::Tensor> values_;
  KvBlockAllocator allocator_;
  int64_t total_bytes_;
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_KV_CACHE_H_
