// KvBlockAllocator: which KV-cache blocks are free, who holds the others, and
// which full blocks are kept for reuse (prefix caching).
// Metadata only: the tensors live in KvCache. Torch-free so the scheduler and
// its tests do not pull LibTorch in.
//
// Prefix caching. A *full* block (block_size tokens whose K/V are computed) can
// be registered under its content: the block before it in the sequence (its
// parent, identified by id and by that block's generation) and its own tokens.
// Because the parent is identified exactly, a key names the whole prefix up to
// and including the block, not just the block's tokens, and a match is exact
// (the 64-bit hash only finds candidates; the stored parent and tokens are
// compared). A later sequence maps the longest chain of registered blocks that
// matches its tokens and computes only the rest. Shared blocks are read-only:
// a sequence writes only past its matched prefix, into blocks it got from
// EnsureCapacity, and partial blocks are never registered.
//
// A registered block whose last holder releases it is not freed: it stays
// *cached* (evictable), in least-recently-released order. EnsureCapacity takes
// free blocks first and evicts cached ones only when none is free; evicting a
// block unregisters it and bumps its generation, which orphans any registered
// child (children then only wait to be evicted: they can never match again).
//
// Invariants (checked in debug builds, relied on everywhere):
//   * every block is in exactly one state: free (on the free list, ref 0, not
//     registered), cached (ref 0, registered, in the eviction order), or held
//     (ref >= 1, registered or not);
//   * num_free() + num_cached() + num_used() == num_blocks().
// Not thread-safe: the engine thread owns it.
#ifndef DIKKAT_MODEL_KV_BLOCK_ALLOCATOR_H_
#define DIKKAT_MODEL_KV_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace dikkat::model {

class KvBlockAllocator {
 public:
  KvBlockAllocator(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks on the free list (never registered, or evicted).
  int32_t num_free() const { return static_cast<int32_t>(free_list_.size()); }
  // Registered blocks nobody holds: reusable by a prefix match, evictable.
  int32_t num_cached() const { return static_cast<int32_t>(eviction_order_.size()); }
  // What EnsureCapacity can hand out: free plus cached.
  int32_t num_available() const { return num_free() + num_cached(); }
  // Blocks held by at least one sequence.
  int32_t num_used() const { return num_blocks() - num_available(); }

  // Blocks needed to hold `tokens` tokens.
  int32_t BlocksFor(int64_t tokens) const {
    return static_cast<int32_t>((tokens + block_size_ - 1) / block_size_);
  }

  // Grows `table` (a sequence's block table) so that it covers `tokens`
  // tokens, taking free blocks first and evicting the least recently released
  // cached blocks after. Returns false and changes nothing if not enough
  // blocks are available.
  bool EnsureCapacity(std::vector<int32_t>* table, int64_t tokens);

  // Drops one reference per block of `table` and clears it. A block whose
  // count reaches 0 becomes cached if it is registered, free otherwise. The
  // table is released back to front, so a sequence's last blocks are evicted
  // before its first ones (a prefix stays useful without its tail, not the
  // other way round).
  void Release(std::vector<int32_t>* table);

  // Prefix caching: appends to the empty `table` the longest chain of
  // registered blocks matching the full blocks of `tokens[0, max_tokens)`,
  // taking a reference on each; returns how many blocks matched.
  int32_t MatchPrefix(absl::Span<const int32_t> tokens, int64_t max_tokens,
                      std::vector<int32_t>* table);
  // The blocks MatchPrefix would append now, without taking references.
  std::vector<int32_t> PeekPrefix(absl::Span<const int32_t> tokens, int64_t max_tokens) const;

  // Registers the full blocks of `table` that `tokens[0, num_computed)` fills,
  // from block `*num_registered` on, and advances `*num_registered`. A block
  // whose content is already registered under another block stays private (it
  // is freed, not cached, when released); the chain goes on from the
  // registered twin so that the next block's key stays canonical.
  void RegisterFullBlocks(absl::Span<const int32_t> tokens, int64_t num_computed,
                          const std::vector<int32_t>& table, int32_t* num_registered);

  // Beam search: makes `*child` (empty) a copy of the table `parent` that
  // covers `tokens` tokens. Its full blocks are shared (one more reference
  // each: they are read-only from now on); a partial last block is not, the
  // child gets a fresh one, returned as (parent's block, child's block) for
  // the caller to copy the K/V of its first tokens % block_size slots; (-1,
  // -1) when there is none. False, and nothing changed, when no block is
  // available for it.
  bool Fork(const std::vector<int32_t>& parent, int64_t tokens, std::vector<int32_t>* child,
            std::pair<int32_t, int32_t>* copy);

  int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }
  bool is_registered(int32_t block) const { return blocks_[block].registered; }

 private:
  struct Block {
    int32_t ref_count = 0;
    bool registered = false;
    uint32_t generation = 0;  // bumped when evicted: orphans registered children
    // Key (valid while registered): parent block and its generation (-1, 0 for
    // the first block of a sequence) and the block's tokens.
    int32_t parent = -1;
    uint32_t parent_generation = 0;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;
    uint64_t released_at = 0;  // position in eviction_order_ while cached
  };

  static uint64_t KeyHash(int32_t parent, uint32_t parent_generation,
                          absl::Span<const int32_t> tokens);
  // The registered block with this key, or -1.
  int32_t Find(int32_t parent, uint32_t parent_generation, absl::Span<const int32_t> tokens) const;
  // Takes a block from the free list, or evicts the oldest cached one.
  int32_t Take();
  void Unregister(int32_t block);

  int32_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_list_;  // LIFO: recently freed blocks are reused first (warm in cache)
  std::set<std::pair<uint64_t, int32_t>> eviction_order_;  // cached blocks by released_at
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> registry_;  // key hash -> registered blocks
  uint64_t clock_ = 0;
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_KV_BLOCK_ALLOCATOR_H_
