#include "model/kv_cache.h"

#include <ATen/ops/zeros.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/huge_pages.h"

namespace dikkat::model {

int64_t KvCache::BytesPerToken(const ModelConfig& config, c10::ScalarType dtype) {
  return 2 * config.cached_layers() * config.kv_heads() * config.head_size() *
         static_cast<int64_t>(c10::elementSize(dtype));
}

absl::Status KvCache::CheckBudget(const ModelConfig& config, int64_t budget_bytes,
                                  int32_t block_size, c10::ScalarType dtype) {
  if (block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block size is ", block_size, "; it must be > 0"));
  }
  const int64_t per_block = BytesPerToken(config, dtype) * block_size;
  const int64_t blocks_for_context = (config.max_positions + block_size - 1) / block_size;
  const int64_t num_blocks = per_block > 0 ? budget_bytes / per_block : 0;
  if (config.cached_layers() > 0 && num_blocks < blocks_for_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache budget of ", budget_bytes, " bytes holds ", num_blocks, " blocks of ", block_size,
        " tokens; one full-context sequence (", config.max_positions, " tokens) needs ",
        blocks_for_context * per_block, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvCache> KvCache::Create(const ModelConfig& config, int64_t budget_bytes,
                                        int32_t block_size, c10::ScalarType dtype,
                                        c10::Device device, bool huge_pages) {
  if (block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block size is ", block_size, "; it must be > 0"));
  }
  DIKKAT_RETURN_IF_ERROR(CheckBudget(config, budget_bytes, block_size, dtype));
  const int64_t per_token = BytesPerToken(config, dtype);
  const int64_t per_block = per_token * block_size;
  const int64_t num_blocks = per_block > 0 ? budget_bytes / per_block : 0;
  std::vector<at::Tensor> keys, values;
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  // One region for every layer's keys and values (each kAlign-aligned).
  HugePageArena arena(huge_pages && device.is_cpu(),
                      num_blocks * per_block + HugePageArena::kAlign * 2 * config.cached_layers());
  const std::vector<int64_t> shape{num_blocks * block_size, config.kv_heads(), config.head_size()};
  auto slots = [&] {  // [slots, kv_heads, head_dim]
    return device.is_cpu() ? arena.Empty(shape, dtype).zero_() : at::zeros(shape, options);
  };
  for (int64_t l = 0; l < config.cached_layers(); ++l) {
    keys.push_back(slots());
    values.push_back(slots());
  }
  return KvCache(std::move(keys), std::move(values), static_cast<int32_t>(num_blocks), block_size,
                 num_blocks * per_block);
}

KvCache::KvCache(std::vector<at::Tensor> keys, std::vector<at::Tensor> values, int32_t num_blocks,
                 int32_t block_size, int64_t total_bytes)
    : keys_(std::move(keys)),
      values_(std::move(values)),
      allocator_(num_blocks, block_size),
      total_bytes_(total_bytes) {}

void KvCache::CopySlots(int32_t src, int32_t dst, int64_t slots) {
  const int64_t bs = block_size();
  for (size_t l = 0; l < keys_.size(); ++l) {
    // [blocks * bs, Hkv, D]: a block's slots are consecutive rows.
    keys_[l].narrow(0, dst * bs, slots).copy_(keys_[l].narrow(0, src * bs, slots));
    values_[l].narrow(0, dst * bs, slots).copy_(values_[l].narrow(0, src * bs, slots));
  }
}

}  // namespace dikkat::model
