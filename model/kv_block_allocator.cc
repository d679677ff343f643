#include "model/kv_block_allocator.h"

#include <algorithm>
#include <cassert>

#include "absl/hash/hash.h"

namespace dikkat::model {

KvBlockAllocator::KvBlockAllocator(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), blocks_(num_blocks) {
  free_list_.reserve(num_blocks);
  // Highest id first so that pop_back hands out block 0 first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

uint64_t KvBlockAllocator::KeyHash(int32_t parent, uint32_t parent_generation,
                                   absl::Span<const int32_t> tokens) {
  return absl::HashOf(parent, parent_generation, tokens);
}

int32_t KvBlockAllocator::Find(int32_t parent, uint32_t parent_generation,
                               absl::Span<const int32_t> tokens) const {
  auto it = registry_.find(KeyHash(parent, parent_generation, tokens));
  if (it == registry_.end()) return -1;
  for (int32_t b : it->second) {
    const Block& block = blocks_[b];
    if (block.parent == parent && block.parent_generation == parent_generation &&
        absl::MakeConstSpan(block.tokens) == tokens) {
      return b;
    }
  }
  return -1;
}

void KvBlockAllocator::Unregister(int32_t b) {
  Block& block = blocks_[b];
  assert(block.registered);
  auto it = registry_.find(block.hash);
  assert(it != registry_.end());
  std::vector<int32_t>& same_hash = it->second;
  same_hash.erase(std::find(same_hash.begin(), same_hash.end(), b));
  if (same_hash.empty()) registry_.erase(it);
  block.registered = false;
  block.tokens.clear();
  ++block.generation;
}

int32_t KvBlockAllocator::Take() {
  int32_t b;
  if (!free_list_.empty()) {
    b = free_list_.back();
    free_list_.pop_back();
  } else {
    assert(!eviction_order_.empty());
    b = eviction_order_.begin()->second;
    eviction_order_.erase(eviction_order_.begin());
    Unregister(b);
  }
  assert(blocks_[b].ref_count == 0 && !blocks_[b].registered);
  blocks_[b].ref_count = 1;
  return b;
}

bool KvBlockAllocator::EnsureCapacity(std::vector<int32_t>* table, int64_t tokens) {
  const int32_t needed = BlocksFor(tokens) - static_cast<int32_t>(table->size());
  if (needed <= 0) return true;
  if (needed > num_available()) return false;
  for (int32_t i = 0; i < needed; ++i) table->push_back(Take());
  return true;
}

void KvBlockAllocator::Release(std::vector<int32_t>* table) {
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    const int32_t b = *it;
    Block& block = blocks_[b];
    assert(block.ref_count > 0);
    if (--block.ref_count > 0) continue;
    if (block.registered) {
      block.released_at = ++clock_;
      eviction_order_.emplace(block.released_at, b);
    } else {
      free_list_.push_back(b);
    }
  }
  table->clear();
}

bool KvBlockAllocator::Fork(const std::vector<int32_t>& parent, int64_t tokens,
                            std::vector<int32_t>* child, std::pair<int32_t, int32_t>* copy) {
  assert(child->empty());
  const int64_t full = tokens / block_size_;
  const bool partial = tokens % block_size_ != 0;
  assert(static_cast<int64_t>(parent.size()) >= full + (partial ? 1 : 0));
  *copy = {-1, -1};
  if (partial && num_available() == 0) return false;
  for (int64_t i = 0; i < full; ++i) {
    ++blocks_[parent[i]].ref_count;
    child->push_back(parent[i]);
  }
  if (partial) {
    const int32_t b = Take();
    child->push_back(b);
    *copy = {parent[full], b};
  }
  return true;
}

int32_t KvBlockAllocator::MatchPrefix(absl::Span<const int32_t> tokens, int64_t max_tokens,
                                      std::vector<int32_t>* table) {
  assert(table->empty());
  *table = PeekPrefix(tokens, max_tokens);
  for (int32_t b : *table) {
    Block& block = blocks_[b];
    if (block.ref_count++ == 0) eviction_order_.erase({block.released_at, b});
  }
  return static_cast<int32_t>(table->size());
}

std::vector<int32_t> KvBlockAllocator::PeekPrefix(absl::Span<const int32_t> tokens,
                                                  int64_t max_tokens) const {
  std::vector<int32_t> chain;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  int32_t parent = -1;
  uint32_t parent_generation = 0;
  for (int64_t start = 0; start + block_size_ <= limit; start += block_size_) {
    const int32_t b = Find(parent, parent_generation, tokens.subspan(start, block_size_));
    if (b < 0) break;
    chain.push_back(b);
    parent = b;
    parent_generation = blocks_[b].generation;
  }
  return chain;
}

void KvBlockAllocator::RegisterFullBlocks(absl::Span<const int32_t> tokens, int64_t num_computed,
                                          const std::vector<int32_t>& table,
                                          int32_t* num_registered) {
  const int64_t full = std::min<int64_t>(num_computed / block_size_,
                                         static_cast<int64_t>(table.size()));
  if (*num_registered >= full) return;
  // The key of block i names its parent: the registered block that holds the
  // prefix before it. That is the table's own block i-1 when it is registered
  // (held blocks are never evicted, so it is current); when block i-1 stayed
  // private because a twin held its content, the chain is walked from the
  // start to find the twins (exact, and rare).
  int64_t i = *num_registered;
  int32_t parent = -1;
  uint32_t parent_generation = 0;
  if (i > 0) {
    if (blocks_[table[i - 1]].registered) {
      parent = table[i - 1];
    } else {
      for (int64_t j = 0; j < i; ++j) {
        parent = Find(parent, parent_generation, tokens.subspan(j * block_size_, block_size_));
        if (parent < 0) {  // the prefix was evicted: nothing after it can match again
          *num_registered = static_cast<int32_t>(full);
          return;
        }
        parent_generation = blocks_[parent].generation;
      }
    }
    parent_generation = blocks_[parent].generation;
  }
  for (; i < full; ++i) {
    const absl::Span<const int32_t> content = tokens.subspan(i * block_size_, block_size_);
    const int32_t b = table[i];
    if (!blocks_[b].registered) {
      const int32_t twin = Find(parent, parent_generation, content);
      if (twin >= 0) {
        parent = twin;
        parent_generation = blocks_[twin].generation;
        continue;  // b stays private
      }
      Block& block = blocks_[b];
      block.registered = true;
      block.parent = parent;
      block.parent_generation = parent_generation;
      block.tokens.assign(content.begin(), content.end());
      block.hash = KeyHash(parent, parent_generation, content);
      registry_[block.hash].push_back(b);
    }
    parent = b;
    parent_generation = blocks_[b].generation;
  }
  *num_registered = static_cast<int32_t>(full);
}

}  // namespace dikkat::model
