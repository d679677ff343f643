#include "model/forward_batch.h"

#include <utility>

#include <ATen/ops/tensor.h>

namespace dikkat::model {

at::Tensor LongTensor(const std::vector<int64_t>& values, c10::Device device) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(device);
}

BatchIndex MakeBatchIndex(const std::vector<SequenceChunk>& chunks, int32_t block_size,
                          bool paged_decode, c10::Device device) {
  const bool use_cache = block_size > 0;
  BatchIndex index;
  index.paged_decode = use_cache && paged_decode;
  std::vector<int64_t> positions, write_slots;
  for (const SequenceChunk& c : chunks) {
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    index.offsets.push_back(index.total);
    index.lens.push_back(n);
    index.total += n;
    for (int64_t j = 0; j < n; ++j) positions.push_back(c.start_pos + j);
    if (!use_cache) continue;
    const std::vector<int32_t>& table = *c.block_table;
    auto slot = [&](int64_t p) {
      return int64_t{table[p / block_size]} * block_size + p % block_size;
    };
    for (int64_t j = 0; j < n; ++j) write_slots.push_back(slot(c.start_pos + j));
    // The paged kernel reads the block table itself: no slot list for it.
    if (c.start_pos > 0 && !(index.paged_decode && n <= kPagedChunkRows)) {
      std::vector<int64_t> ctx(c.start_pos + n);
      for (int64_t p = 0; p < c.start_pos + n; ++p) ctx[p] = slot(p);
      index.context_slots.push_back(LongTensor(ctx, device));
    } else {
      index.context_slots.emplace_back();
    }
  }
  index.positions = LongTensor(positions, device);
  if (use_cache) index.write_slots = LongTensor(write_slots, device);
  index.write_slot_list = std::move(write_slots);
  return index;
}

}  // namespace dikkat::model
