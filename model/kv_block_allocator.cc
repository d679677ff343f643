#include "model/kv_block_allocator.h"

#include <cassert>

namespace dikkat::model {

KvBlockAllocator::KvBlockAllocator(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), ref_counts_(num_blocks, 0) {
  free_list_.reserve(num_blocks);
  // Highest id first so that pop_back hands out block 0 first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

bool KvBlockAllocator::EnsureCapacity(std::vector<int32_t>* table, int64_t tokens) {
  const int32_t needed = BlocksFor(tokens) - static_cast<int32_t>(table->size());
  if (needed <= 0) return true;
  if (needed > num_free()) return false;
  for (int32_t i = 0; i < needed; ++i) {
    const int32_t block = free_list_.back();
    free_list_.pop_back();
    assert(ref_counts_[block] == 0);
    ref_counts_[block] = 1;
    table->push_back(block);
  }
  return true;
}

void KvBlockAllocator::Release(std::vector<int32_t>* table) {
  for (int32_t block : *table) {
    assert(ref_counts_[block] > 0);
    if (--ref_counts_[block] == 0) free_list_.push_back(block);
  }
  table->clear();
}

}  // namespace dikkat::model
