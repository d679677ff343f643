// KvBlockAllocator: reference counts, the free list, and prefix caching
// (registration, exact matching, eviction order, orphaned children).
#include "model/kv_block_allocator.h"

#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dikkat::model {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int32_t kBlock = 4;

std::vector<int32_t> Tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

void ExpectConsistent(const KvBlockAllocator& a) {
  EXPECT_EQ(a.num_free() + a.num_cached() + a.num_used(), a.num_blocks());
}

// A sequence that computed `tokens` into fresh blocks and registered them.
std::vector<int32_t> Computed(KvBlockAllocator& a, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> table;
  EXPECT_TRUE(a.EnsureCapacity(&table, static_cast<int64_t>(tokens.size())));
  int32_t registered = 0;
  a.RegisterFullBlocks(tokens, static_cast<int64_t>(tokens.size()), table, &registered);
  EXPECT_EQ(registered, static_cast<int32_t>(tokens.size()) / kBlock);
  return table;
}

TEST(KvBlockAllocatorTest, WithoutRegistrationReleasedBlocksAreFree) {
  KvBlockAllocator a(8, kBlock);
  std::vector<int32_t> t;
  ASSERT_TRUE(a.EnsureCapacity(&t, 9));
  EXPECT_THAT(t, ElementsAre(0, 1, 2));
  EXPECT_EQ(a.num_used(), 3);
  EXPECT_FALSE(a.EnsureCapacity(&t, 40));  // 10 blocks > 8: nothing changes
  EXPECT_EQ(t.size(), 3u);
  a.Release(&t);
  EXPECT_THAT(t, IsEmpty());
  EXPECT_EQ(a.num_free(), 8);
  EXPECT_EQ(a.num_cached(), 0);
  ExpectConsistent(a);
}

TEST(KvBlockAllocatorTest, MatchesFullBlocksOfTheLongestRegisteredPrefix) {
  KvBlockAllocator a(16, kBlock);
  const std::vector<int32_t> first = Tokens(10);  // blocks [100..103] [104..107], 2 left over
  std::vector<int32_t> held = Computed(a, first);
  ASSERT_EQ(held.size(), 3u);
  EXPECT_TRUE(a.is_registered(held[0]));
  EXPECT_TRUE(a.is_registered(held[1]));
  EXPECT_FALSE(a.is_registered(held[2]));  // partial: never shared

  // Same 8 tokens, different rest: both full blocks, shared by reference.
  std::vector<int32_t> other = Tokens(8);
  other.push_back(7);
  std::vector<int32_t> t;
  EXPECT_EQ(a.MatchPrefix(other, 100, &t), 2);
  EXPECT_THAT(t, ElementsAre(held[0], held[1]));
  EXPECT_EQ(a.ref_count(held[0]), 2);
  a.Release(&t);
  // max_tokens bounds the match: 7 tokens cover one full block only.
  EXPECT_EQ(a.MatchPrefix(other, 7, &t), 1);
  a.Release(&t);
  // A difference inside the second block stops the chain after the first.
  std::vector<int32_t> differs = Tokens(8);
  differs[6] = 0;
  EXPECT_EQ(a.MatchPrefix(differs, 100, &t), 1);
  a.Release(&t);
  // The first block decides everything after it: same second block, other first.
  std::vector<int32_t> other_start = Tokens(8);
  other_start[0] = 0;
  EXPECT_EQ(a.MatchPrefix(other_start, 100, &t), 0);
  EXPECT_THAT(t, IsEmpty());
  ExpectConsistent(a);
}

TEST(KvBlockAllocatorTest, ReleasedRegisteredBlocksStayCachedUntilNeeded) {
  KvBlockAllocator a(4, kBlock);
  std::vector<int32_t> held = Computed(a, Tokens(8));
  a.Release(&held);
  EXPECT_EQ(a.num_cached(), 2);
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_EQ(a.num_used(), 0);
  EXPECT_EQ(a.num_available(), 4);
  ExpectConsistent(a);

  // A cached block is matched back out of the eviction order.
  std::vector<int32_t> t;
  EXPECT_EQ(a.MatchPrefix(Tokens(8), 100, &t), 2);
  EXPECT_EQ(a.num_cached(), 0);
  EXPECT_EQ(a.num_used(), 2);
  a.Release(&t);

  // Free blocks go first; cached ones are evicted only when none is free,
  // and the tail of a released sequence before its head.
  std::vector<int32_t> fresh;
  ASSERT_TRUE(a.EnsureCapacity(&fresh, 8));
  EXPECT_EQ(a.num_cached(), 2);
  ASSERT_TRUE(a.EnsureCapacity(&fresh, 12));
  EXPECT_EQ(a.num_cached(), 1);
  EXPECT_EQ(a.MatchPrefix(Tokens(8), 100, &t), 1);  // the first block survived
  a.Release(&t);
  ASSERT_TRUE(a.EnsureCapacity(&fresh, 16));
  EXPECT_EQ(a.num_cached(), 0);
  EXPECT_EQ(a.MatchPrefix(Tokens(8), 100, &t), 0);
  EXPECT_FALSE(a.EnsureCapacity(&fresh, 17));
  a.Release(&fresh);
  EXPECT_EQ(a.num_free(), 4);
  ExpectConsistent(a);
}

TEST(KvBlockAllocatorTest, HeldBlocksAreNeverEvicted) {
  KvBlockAllocator a(3, kBlock);
  std::vector<int32_t> held = Computed(a, Tokens(8));
  std::vector<int32_t> t;
  EXPECT_FALSE(a.EnsureCapacity(&t, 8));  // 1 free, 0 cached: the held blocks stay
  EXPECT_TRUE(a.EnsureCapacity(&t, 4));
  // Held blocks are still shared by a match.
  std::vector<int32_t> shared;
  EXPECT_EQ(a.MatchPrefix(Tokens(8), 100, &shared), 2);
  EXPECT_EQ(a.ref_count(held[0]), 2);
  a.Release(&shared);
  a.Release(&held);
  a.Release(&t);
  EXPECT_EQ(a.num_cached(), 2);
  ExpectConsistent(a);
}

TEST(KvBlockAllocatorTest, AnEvictedParentOrphansItsChildren) {
  // Block ids are reused after eviction; a child keyed by its parent's old
  // generation must never match a new content in the same block id.
  KvBlockAllocator a(3, kBlock);
  std::vector<int32_t> seq = Computed(a, Tokens(8));  // blocks 0 (parent), 1 (child)
  const int32_t parent = seq[0];
  // Release only the parent's holder view: drop the child first so the child
  // is evicted later than the parent (order by release time).
  std::vector<int32_t> child_only = {seq[1]};
  std::vector<int32_t> parent_only = {seq[0]};
  a.Release(&parent_only);  // parent released first: oldest
  a.Release(&child_only);
  ASSERT_EQ(a.num_cached(), 2);
  // Take 2 blocks: the free one, then the oldest cached (the parent).
  std::vector<int32_t> t;
  ASSERT_TRUE(a.EnsureCapacity(&t, 8));
  EXPECT_EQ(t[1], parent);
  EXPECT_FALSE(a.is_registered(parent));
  // Register new content into the parent's id: its first block is Tokens(4).
  std::vector<int32_t> other = Tokens(4);
  other.push_back(1);
  other.push_back(2);
  other.push_back(3);
  other.push_back(4);  // second block differs from the orphaned child's
  std::vector<int32_t> table = {parent, t[0]};
  int32_t registered = 0;
  a.RegisterFullBlocks(other, 8, table, &registered);
  std::vector<int32_t> probe;
  // The old child (Tokens 104..107 after Tokens 100..103) no longer matches.
  EXPECT_EQ(a.MatchPrefix(Tokens(8), 100, &probe), 1);
  EXPECT_THAT(probe, ElementsAre(parent));
  a.Release(&probe);
  ExpectConsistent(a);
}

TEST(KvBlockAllocatorTest, DuplicateContentStaysPrivateAndTheChainContinues) {
  KvBlockAllocator a(16, kBlock);
  // Two sequences computed the same 12 tokens side by side (admitted in the
  // same step, before either registered anything).
  std::vector<int32_t> x, y;
  ASSERT_TRUE(a.EnsureCapacity(&x, 12));
  ASSERT_TRUE(a.EnsureCapacity(&y, 12));
  const std::vector<int32_t> tokens = Tokens(12);
  int32_t rx = 0, ry = 0;
  a.RegisterFullBlocks(tokens, 8, x, &rx);  // x registers blocks 0 and 1
  a.RegisterFullBlocks(tokens, 8, y, &ry);  // y's twins stay private
  EXPECT_FALSE(a.is_registered(y[0]));
  EXPECT_FALSE(a.is_registered(y[1]));
  a.Release(&x);  // x leaves; its blocks stay cached
  // y computes its third block: it is registered under x's chain.
  a.RegisterFullBlocks(tokens, 12, y, &ry);
  EXPECT_EQ(ry, 3);
  EXPECT_TRUE(a.is_registered(y[2]));
  std::vector<int32_t> t;
  EXPECT_EQ(a.MatchPrefix(tokens, 12, &t), 3);
  EXPECT_EQ(t[2], y[2]);
  a.Release(&t);
  a.Release(&y);  // y's private twins are freed, not cached
  EXPECT_EQ(a.num_cached(), 3);
  EXPECT_EQ(a.num_free(), 13);
  ExpectConsistent(a);
}

}  // namespace
}  // namespace dikkat::model
