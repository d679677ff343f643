// KvBlockAllocator: which KV-cache blocks are free and who holds the others.
// Metadata only: the tensors live in KvCache. Torch-free so the scheduler and
// its tests do not pull LibTorch in.
//
// Invariants (checked in debug builds, relied on everywhere):
//   * a block is either on the free list with ref_count 0, or off it with
//     ref_count >= 1;
//   * num_free() + (blocks with ref_count >= 1) == num_blocks().
// Not thread-safe: the engine thread owns it.
#ifndef DIKKAT_MODEL_KV_BLOCK_ALLOCATOR_H_
#define DIKKAT_MODEL_KV_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <vector>

namespace dikkat::model {

class KvBlockAllocator {
 public:
  KvBlockAllocator(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }

  // Blocks needed to hold `tokens` tokens.
  int32_t BlocksFor(int64_t tokens) const {
    return static_cast<int32_t>((tokens + block_size_ - 1) / block_size_);
  }

  // Grows `table` (a sequence's block table) so that it covers `tokens`
  // tokens. Returns false and changes nothing if not enough blocks are free.
  bool EnsureCapacity(std::vector<int32_t>* table, int64_t tokens);

  // Drops one reference per block of `table` and clears it; blocks whose
  // count reaches 0 return to the free list at once.
  void Release(std::vector<int32_t>* table);

  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }

 private:
  int32_t block_size_;
  std::vector<int32_t> free_list_;   // LIFO: recently freed blocks are reused first (warm in cache)
  std::vector<int32_t> ref_counts_;  // per block
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_KV_BLOCK_ALLOCATOR_H_
