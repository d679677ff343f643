// Scheduler with fake sequences and a bare block allocator: no model, no
// tensors. Each test drives Schedule() and then plays the engine's part
// (advance num_cached by the chunk, append a "sampled" token).
#include "server/scheduler.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dikkat::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int32_t kBlockSize = 4;

class SchedulerTest : public ::testing::Test {
 protected:
  void Make(int32_t num_blocks, int32_t max_batch_size, int32_t max_batch_tokens,
            bool prefix_caching = false, int64_t max_logit_rows = 0) {
    allocator_ = std::make_unique<model::KvBlockAllocator>(num_blocks, kBlockSize);
    SchedulerOptions options{max_batch_size, max_batch_tokens, prefix_caching};
    options.max_logit_rows = max_logit_rows;
    scheduler_ = std::make_unique<Scheduler>(options, allocator_.get());
  }

  Sequence* AddTokens(std::vector<int32_t> tokens) {
    Sequence* s = Add(1);
    s->tokens = std::move(tokens);
    return s;
  }

  Sequence* Add(int32_t prompt_len) {
    auto s = std::make_unique<Sequence>();
    s->id = sequences_.size() + 1;
    s->tokens.assign(prompt_len, 7);
    scheduler_->Add(s.get());
    sequences_.push_back(std::move(s));
    return sequences_.back().get();
  }

  // The engine's part after a forward: the chunk is cached; a sequence whose
  // prompt is all cached gets one more token.
  static void Ran(const ScheduleResult& plan) {
    for (size_t i = 0; i < plan.batch.size(); ++i) {
      Sequence* s = plan.batch[i];
      s->num_cached += plan.chunk_lens[i];
      if (s->num_cached == static_cast<int64_t>(s->tokens.size())) s->tokens.push_back(8);
    }
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<model::KvBlockAllocator> allocator_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> sequences_;
};

TEST_F(SchedulerTest, AdmitsInOrderUnderTheTokenBudget) {
  Make(/*num_blocks=*/64, /*max_batch_size=*/8, /*max_batch_tokens=*/10);
  Sequence* a = Add(6);
  Sequence* b = Add(6);
  Sequence* c = Add(3);
  ScheduleResult plan = scheduler_->Schedule(now_);
  // a takes 6 of 10; b gets the 4 left as a first prefill chunk; c waits
  // (no budget left), even though it alone would fit.
  EXPECT_THAT(plan.batch, ElementsAre(a, b));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(6, 4));
  EXPECT_THAT(plan.admitted, ElementsAre(a, b));
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(c));
  EXPECT_THAT(scheduler_->running(), ElementsAre(a, b));
}

// Sequences that score their prompt (a row of logits per token) share
// max_logit_rows a step, each running at least one token; the others take
// the token budget as usual.
TEST_F(SchedulerTest, PromptScoringChunksShareTheLogitRows) {
  Make(/*num_blocks=*/64, /*max_batch_size=*/8, /*max_batch_tokens=*/100,
       /*prefix_caching=*/false, /*max_logit_rows=*/10);
  Sequence* a = Add(25);
  Sequence* b = Add(20);
  Sequence* c = Add(12);
  a->logit_rows = true;
  b->logit_rows = true;
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.batch, ElementsAre(a, b, c));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(10, 1, 12));
  Ran(plan);
  plan = scheduler_->Schedule(now_);
  // Running first, in order: a takes the rows, b its one token, c decodes.
  EXPECT_THAT(plan.batch, ElementsAre(a, b, c));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(10, 1, 1));
  Ran(plan);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.chunk_lens, ElementsAre(5, 5, 1));  // a's prompt ends: b gets the rest
  for (size_t i = 0; i < plan.batch.size(); ++i) {
    EXPECT_LE(plan.batch[i]->num_cached + plan.chunk_lens[i],
              static_cast<int64_t>(plan.batch[i]->tokens.size()));
  }
}

// An admission's own work (an encoder-decoder's source, encoded when it is
// admitted) is charged to the step's budget: past it, the sequence waits
// for a step with no other admission, where it may pass the budget (it
// would otherwise wait for ever behind running decodes).
TEST_F(SchedulerTest, AdmissionWorkIsChargedToTheStepBudget) {
  Make(/*num_blocks=*/64, /*max_batch_size=*/8, /*max_batch_tokens=*/10);
  Sequence* a = Add(3);
  Sequence* b = Add(2);
  Sequence* c = Add(2);
  b->admission_tokens = 20;
  c->admission_tokens = 5;
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.batch, ElementsAre(a));  // b's 20 do not fit beside a's 3
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(b, c));
  Ran(plan);
  plan = scheduler_->Schedule(now_);
  // No other admission: b passes the budget, with one token of its prompt;
  // c waits.
  EXPECT_THAT(plan.admitted, ElementsAre(b));
  EXPECT_THAT(plan.batch, ElementsAre(a, b));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(1, 1));
  Ran(plan);
  b->admission_tokens = 0;  // the engine's part: encoded once
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(c));  // 2 taken, 5 of the 8 left for c
  EXPECT_THAT(plan.batch, ElementsAre(a, b, c));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(1, 1, 2));
}

TEST_F(SchedulerTest, BatchSizeLimitsAdmission) {
  Make(64, /*max_batch_size=*/2, 100);
  Add(2);
  Add(2);
  Sequence* c = Add(2);
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_EQ(plan.batch.size(), 2u);
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(c));
}

TEST_F(SchedulerTest, ChunkedPrefillContinuesAndDecodesAlwaysRun) {
  Make(64, 8, /*max_batch_tokens=*/4);
  Sequence* a = Add(10);
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.chunk_lens, ElementsAre(4));
  Ran(plan);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.batch, ElementsAre(a));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(4));
  EXPECT_THAT(plan.admitted, IsEmpty());
  Ran(plan);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.chunk_lens, ElementsAre(2));  // the rest of the prompt
  Ran(plan);
  EXPECT_EQ(a->tokens.size(), 11u);  // prompt + first token
  // A second sequence arrives; `a` decodes one token and b's prefill takes
  // what is left of the budget.
  Sequence* b = Add(8);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.batch, ElementsAre(a, b));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(1, 3));
  Ran(plan);
  // Block tables cover what the forward wrote.
  EXPECT_EQ(static_cast<int32_t>(a->blocks.size()), allocator_->BlocksFor(a->num_cached));
  EXPECT_EQ(static_cast<int32_t>(b->blocks.size()), allocator_->BlocksFor(b->num_cached));
}

TEST_F(SchedulerTest, AdmissionWaitsForFreeBlocksForTheWholePromptInOrder) {
  Make(/*num_blocks=*/3, 8, 100);
  Sequence* a = Add(8);  // needs BlocksFor(9) = 3 free; takes 2 for its 8 tokens now
  Sequence* b = Add(5);  // needs BlocksFor(6) = 2 free: only 1 is
  Sequence* c = Add(1);  // would fit, but waits behind b (FIFO)
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(a));
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(b, c));
  EXPECT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(allocator_->num_free(), 1);
}

TEST_F(SchedulerTest, FullCachePreemptsTheNewestAndRequeuesItFirst) {
  Make(/*num_blocks=*/4, 8, 100);
  Sequence* a = Add(4);
  Sequence* b = Add(3);
  Sequence* c = Add(1);
  ScheduleResult plan = scheduler_->Schedule(now_);
  ASSERT_THAT(plan.batch, ElementsAre(a, b, c));  // blocks: a 1, b 1, c 1
  Ran(plan);                                      // a: 5 tokens, b: 4, c: 2
  EXPECT_EQ(allocator_->num_free(), 1);
  // a needs a second block (takes the free one); b fits in its block; c
  // needs nothing new. Next step a is fine, b needs a block: none free, so
  // the newest (c) is preempted and goes back to the front of the queue.
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.preempted, IsEmpty());
  Ran(plan);  // a: 6, b: 5, c: 3
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.preempted, ElementsAre(c));
  EXPECT_THAT(plan.batch, ElementsAre(a, b));
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(c));
  EXPECT_EQ(c->num_cached, 0);  // recompute when readmitted
  EXPECT_THAT(c->blocks, IsEmpty());
  EXPECT_EQ(c->tokens.size(), 3u);  // its tokens are kept
  Sequence* d = Add(1);
  Ran(plan);
  // Readmission in FIFO order: c before d, as soon as blocks free up.
  scheduler_->RemoveAndFree(a);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(c, d));
  EXPECT_EQ(plan.chunk_lens[1], 3);  // c recomputes all its tokens
}

TEST_F(SchedulerTest, ASequenceThatCannotFitAloneIsRejected) {
  Make(/*num_blocks=*/2, 8, 100);
  Sequence* a = Add(7);  // BlocksFor(8) = 2
  ScheduleResult plan = scheduler_->Schedule(now_);
  Ran(plan);  // a: 8 tokens, 7 cached
  plan = scheduler_->Schedule(now_);
  Ran(plan);                          // a: 9 tokens, 8 cached
  plan = scheduler_->Schedule(now_);  // needs a third block; nothing to preempt
  EXPECT_THAT(plan.rejected, ElementsAre(a));
  EXPECT_THAT(plan.batch, IsEmpty());
  EXPECT_TRUE(scheduler_->empty());
  EXPECT_EQ(allocator_->num_free(), 2);
}

// Blocks held outside the scheduler (the engine's beam searches take theirs
// from the same allocator) are given back: a sequence that runs alone and
// fits in the whole cache waits for them instead of failing.
TEST_F(SchedulerTest, ASequenceThatFitsAloneWaitsForBlocksHeldElsewhere) {
  Make(/*num_blocks=*/4, 8, 100);
  std::vector<int32_t> elsewhere;
  ASSERT_TRUE(allocator_->EnsureCapacity(&elsewhere, 8));  // 2 of the 4 blocks
  Sequence* a = Add(7);
  Ran(scheduler_->Schedule(now_));  // a: 8 tokens, 7 cached, 2 blocks
  Ran(scheduler_->Schedule(now_));  // a: 9 tokens, 8 cached
  ScheduleResult plan = scheduler_->Schedule(now_);  // a third block: none free
  EXPECT_THAT(plan.rejected, IsEmpty());
  EXPECT_THAT(plan.preempted, ElementsAre(a));
  EXPECT_THAT(plan.batch, IsEmpty());
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(a));
  EXPECT_EQ(allocator_->num_free(), 2);
  allocator_->Release(&elsewhere);
  plan = scheduler_->Schedule(now_);  // readmitted: all 9 tokens recomputed
  EXPECT_THAT(plan.admitted, ElementsAre(a));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(9));
}

TEST_F(SchedulerTest, DeadlinesAndCancellationExpireQueuedAndRunning) {
  Make(64, 8, 100);
  Sequence* running = Add(4);
  running->deadline = now_ + absl::Seconds(5);
  Sequence* cancelled = Add(4);
  ScheduleResult plan = scheduler_->Schedule(now_);
  ASSERT_EQ(plan.batch.size(), 2u);
  Ran(plan);
  Sequence* queued = Add(4);
  queued->deadline = now_ + absl::Seconds(1);
  cancelled->cancelled = true;
  plan = scheduler_->Schedule(now_ + absl::Seconds(1));
  EXPECT_THAT(plan.expired, ElementsAre(queued, cancelled));  // waiting first, then running
  EXPECT_THAT(plan.batch, ElementsAre(running));
  EXPECT_EQ(allocator_->num_used(), static_cast<int32_t>(running->blocks.size()));
  EXPECT_THAT(cancelled->blocks, IsEmpty());
  Ran(plan);
  plan = scheduler_->Schedule(now_ + absl::Seconds(5));  // deadline is inclusive
  EXPECT_THAT(plan.expired, ElementsAre(running));
  EXPECT_TRUE(scheduler_->empty());
  EXPECT_EQ(allocator_->num_free(), 64);
}

TEST_F(SchedulerTest, RemoveAndFreeTakesFromEitherQueue) {
  Make(/*num_blocks=*/2, 8, 100);
  Sequence* a = Add(7);
  Sequence* b = Add(7);
  scheduler_->Schedule(now_);
  ASSERT_THAT(scheduler_->waiting(), ElementsAre(b));
  scheduler_->RemoveAndFree(b);  // from waiting
  EXPECT_THAT(scheduler_->waiting(), IsEmpty());
  scheduler_->RemoveAndFree(a);  // from running
  EXPECT_TRUE(scheduler_->empty());
  EXPECT_EQ(allocator_->num_free(), 2);
  scheduler_->RemoveAndFree(a);  // already gone: nothing happens
  EXPECT_EQ(allocator_->num_free(), 2);
}

// ---- prefix caching -------------------------------------------------------

std::vector<int32_t> Prompt(int n, int32_t salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 10 + i + salt;
  return t;
}

TEST_F(SchedulerTest, AdmissionMapsCachedBlocksAndRunsOnlyTheRest) {
  Make(/*num_blocks=*/32, 8, 100, /*prefix_caching=*/true);
  Sequence* a = AddTokens(Prompt(10));
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.matched_tokens, ElementsAre(0));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(10));
  Ran(plan);
  scheduler_->RemoveAndFree(a);  // registers a's 2 full blocks, keeps them cached
  EXPECT_EQ(allocator_->num_cached(), 2);
  EXPECT_EQ(allocator_->num_used(), 0);

  // Shares both full blocks: computes tokens 8.. only.
  std::vector<int32_t> tokens = Prompt(8);
  tokens.insert(tokens.end(), {1, 2, 3, 4, 5});
  Sequence* b = AddTokens(tokens);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.matched_tokens, ElementsAre(8));
  EXPECT_EQ(b->num_cached, 8);
  EXPECT_EQ(b->num_matched, 8);
  EXPECT_THAT(plan.chunk_lens, ElementsAre(5));
  EXPECT_EQ(b->blocks.size(), 4u);  // 13 tokens + room for the next one
  Ran(plan);
  scheduler_->RemoveAndFree(b);

  // The whole prompt cached (exactly 2 blocks): the block holding the last
  // token runs again, so logits come out of a forward.
  Sequence* c = AddTokens(Prompt(8));
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.matched_tokens, ElementsAre(4));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(4));
  Ran(plan);
  scheduler_->RemoveAndFree(c);

  // Sharing part of a block only: nothing is mapped.
  std::vector<int32_t> partial = Prompt(3);
  partial.insert(partial.end(), {0, 0, 0, 0});
  AddTokens(partial);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.matched_tokens, ElementsAre(0));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(7));
}

TEST_F(SchedulerTest, GeneratedBlocksAreRegisteredWhileRunning) {
  Make(32, 8, 100, true);
  Sequence* a = AddTokens(Prompt(3));
  for (int step = 0; step < 6; ++step) Ran(scheduler_->Schedule(now_));
  // 3 prompt + 6 generated tokens, 8 computed: two full blocks, registered
  // at the start of the next Schedule even though a still runs.
  ASSERT_EQ(a->num_cached, 8);
  scheduler_->Schedule(now_);
  EXPECT_EQ(a->num_registered, 2);
  EXPECT_TRUE(allocator_->is_registered(a->blocks[0]));
  EXPECT_TRUE(allocator_->is_registered(a->blocks[1]));
  // A second sequence with a's tokens so far shares both blocks while a runs.
  std::vector<int32_t> same(a->tokens.begin(), a->tokens.begin() + 9);
  Sequence* b = AddTokens(same);
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(b));
  EXPECT_THAT(plan.matched_tokens, ElementsAre(8));
  EXPECT_EQ(b->blocks[0], a->blocks[0]);
  EXPECT_EQ(allocator_->ref_count(a->blocks[1]), 2);
}

TEST_F(SchedulerTest, APreemptedSequenceMapsItsOwnBlocksBack) {
  // 5 blocks of 4: a (prompt 6) and b (prompt 6) take 2 each; b's growth
  // preempts... the newest, b; on readmission b maps its full block back.
  Make(/*num_blocks=*/5, 8, 100, true);
  Sequence* a = AddTokens(Prompt(6));
  Sequence* b = AddTokens(Prompt(6, 50));
  Ran(scheduler_->Schedule(now_));  // both prefill: 6 + 1 sampled each
  for (int i = 0; i < 4 && scheduler_->waiting().empty(); ++i) Ran(scheduler_->Schedule(now_));
  ASSERT_THAT(scheduler_->waiting(), ElementsAre(b));
  EXPECT_EQ(b->num_cached, 0);
  EXPECT_EQ(allocator_->num_cached(), 2);  // b's full blocks, kept
  scheduler_->RemoveAndFree(a);            // room for b again
  ScheduleResult plan = scheduler_->Schedule(now_);
  ASSERT_THAT(plan.admitted, ElementsAre(b));
  EXPECT_EQ(plan.matched_tokens[0], 8);
  EXPECT_EQ(b->num_cached, 8);
}

TEST_F(SchedulerTest, ASharedPrefixArrivingTogetherIsComputedOnce) {
  // Three requests with one 10-token prefix arrive in the same step: the first
  // computes it; the others wait until its 2 full blocks are cached and then
  // map them. A request sharing nothing behind them waits too (FIFO).
  Make(32, 8, /*max_batch_tokens=*/100, true);
  std::vector<int32_t> p1 = Prompt(10), p2 = Prompt(10), p3 = Prompt(10);
  p1.push_back(1);
  p2.push_back(2);
  p3.push_back(3);
  Sequence* a = AddTokens(p1);
  Sequence* b = AddTokens(p2);
  Sequence* c = AddTokens(p3);
  Sequence* d = AddTokens(Prompt(5, 500));
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(a));
  Ran(plan);
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(b, c, d));
  EXPECT_THAT(plan.matched_tokens, ElementsAre(8, 8, 0));
  EXPECT_THAT(plan.chunk_lens, ElementsAre(1, 3, 3, 5));  // a decodes; b, c run 3 tokens
  EXPECT_EQ(b->blocks[1], a->blocks[1]);
}

TEST_F(SchedulerTest, CachedBlocksNeverBlockAdmission) {
  // Cached blocks count as available: a prompt that needs them evicts them.
  Make(/*num_blocks=*/4, 8, 100, true);
  Sequence* a = AddTokens(Prompt(12));
  Ran(scheduler_->Schedule(now_));
  scheduler_->RemoveAndFree(a);
  EXPECT_EQ(allocator_->num_cached(), 3);
  Sequence* b = AddTokens(Prompt(12, 100));  // shares nothing, needs all 4 blocks
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(b));
  EXPECT_EQ(allocator_->num_used(), 3);    // the free block and 2 evicted ones
  EXPECT_EQ(allocator_->num_cached(), 1);  // a's first block, released last, goes last
  Ran(plan);
  plan = scheduler_->Schedule(now_);  // b's 13th token needs the 4th block
  EXPECT_THAT(plan.batch, ElementsAre(b));
  EXPECT_EQ(allocator_->num_used(), 4);
  EXPECT_EQ(allocator_->num_cached(), 0);
  EXPECT_THAT(plan.preempted, IsEmpty());
}

// ---- priorities ---------------------------------------------------------------

TEST_F(SchedulerTest, HigherPriorityIsAdmittedFirstEqualOnesInArrivalOrder) {
  Make(64, /*max_batch_size=*/8, /*max_batch_tokens=*/8);
  Sequence* low = Add(4);
  Sequence* normal1 = Add(4);
  Sequence* high = Add(4);
  Sequence* normal2 = Add(4);
  low->priority = -5;
  high->priority = 7;
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.admitted, ElementsAre(high, normal1));  // 8 tokens of budget
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(normal2, low));
  Ran(plan);
  plan = scheduler_->Schedule(now_);  // 2 decodes + 4 + (2 of low's 4)
  EXPECT_THAT(plan.admitted, ElementsAre(normal2, low));
  EXPECT_THAT(scheduler_->running(), ElementsAre(high, normal1, normal2, low));
}

TEST_F(SchedulerTest, AFullCachePreemptsTheLowestPriorityNewest) {
  // 6 blocks of 4. Three sequences of 7 tokens hold 2 blocks each; when they
  // grow past 8 tokens the batch's back goes first: the lowest priority,
  // then among equals the newest.
  Make(/*num_blocks=*/6, 8, 100);
  Sequence* a = Add(7);
  Sequence* b = Add(7);
  Sequence* c = Add(7);
  a->priority = 1;
  b->priority = 0;
  c->priority = 1;
  Ran(scheduler_->Schedule(now_));
  EXPECT_THAT(scheduler_->running(), ElementsAre(a, c, b));
  Ran(scheduler_->Schedule(now_));                   // the 8th tokens fit
  ScheduleResult plan = scheduler_->Schedule(now_);  // 9th token: a needs a 3rd block
  EXPECT_THAT(plan.preempted, ElementsAre(b));
  EXPECT_THAT(plan.batch, ElementsAre(a, c));
}

TEST_F(SchedulerTest, AHigherPriorityArrivalPreemptsLowerOnesToGetIn) {
  Make(/*num_blocks=*/4, 8, 100);
  Sequence* low1 = Add(7);
  Sequence* low2 = Add(7);
  Ran(scheduler_->Schedule(now_));
  ASSERT_EQ(allocator_->num_available(), 0);
  // A same-priority arrival waits for room...
  Sequence* same = Add(3);
  ScheduleResult plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.preempted, IsEmpty());
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(same));
  scheduler_->RemoveAndFree(same);
  // ...a higher one preempts the newest lower one and runs at once.
  Sequence* urgent = Add(3);
  urgent->priority = 10;
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.preempted, ElementsAre(low2));
  EXPECT_THAT(plan.admitted, ElementsAre(urgent));
  EXPECT_THAT(scheduler_->running(), ElementsAre(urgent, low1));
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(low2));
  // Preemption that would not make room does not happen: 13 tokens need 4
  // blocks, and only low1's 2 could be freed.
  Sequence* big = Add(13);
  big->priority = 10;
  plan = scheduler_->Schedule(now_);
  EXPECT_THAT(plan.preempted, IsEmpty());
}

TEST_F(SchedulerTest, AgeingBoundsTheWaitOfLowPriorities) {
  Make(64, /*max_batch_size=*/1, 100);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerOptions{1, 100, false, /*priority_aging=*/absl::Seconds(10)}, allocator_.get());
  Sequence* runner = Add(2);
  Ran(scheduler_->Schedule(now_));
  Sequence* low = Add(2);
  low->priority = -3;
  low->arrived = now_;
  Sequence* high = Add(2);
  high->priority = 0;
  high->arrived = now_ + absl::Seconds(25);
  scheduler_->RemoveAndFree(runner);
  // At +25 s low is at -3 + 2 = -1 < 0: high first.
  scheduler_->Schedule(now_ + absl::Seconds(25));
  EXPECT_THAT(scheduler_->running(), ElementsAre(high));
  scheduler_->RemoveAndFree(high);
  Sequence* newer = Add(2);
  newer->arrived = now_ + absl::Seconds(40);
  // At +40 s low is at -3 + 4 = 1 > 0: it passes the newer priority-0 arrival.
  scheduler_->Schedule(now_ + absl::Seconds(40));
  EXPECT_THAT(scheduler_->running(), ElementsAre(low));
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(newer));
}

// Ageing counts the time waited, not the time a preempted sequence ran: a
// sequence that ran long and was preempted by a higher priority does not
// come back above the arrivals of that priority.
TEST_F(SchedulerTest, RunningTimeDoesNotAgeAPreemptedSequence) {
  Make(64, /*max_batch_size=*/1, 100);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerOptions{1, 100, false, /*priority_aging=*/absl::Seconds(1)}, allocator_.get());
  Sequence* low = Add(2);
  low->arrived = now_;
  Ran(scheduler_->Schedule(now_));  // low runs from now_
  Sequence* high = Add(2);
  high->priority = 5;
  high->arrived = now_ + absl::Seconds(10);
  ScheduleResult plan = scheduler_->Schedule(now_ + absl::Seconds(10));
  EXPECT_THAT(plan.preempted, ElementsAre(low));
  EXPECT_THAT(scheduler_->running(), ElementsAre(high));
  Sequence* next = Add(2);
  next->priority = 5;
  next->arrived = now_ + absl::Seconds(10);
  scheduler_->RemoveAndFree(high);
  // At +10.5 s low has waited 0.5 s (priority 0), next 0.5 s (priority 5).
  scheduler_->Schedule(now_ + absl::Milliseconds(10500));
  EXPECT_THAT(scheduler_->running(), ElementsAre(next));
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(low));
}

// Priority preemption counts what the prefix cache maps: a higher-priority
// arrival whose prompt starts with blocks a running sequence holds needs only
// the rest.
class PriorityWithPrefixTest : public SchedulerTest {
 protected:
  // r (priority 5): a 48-token prompt; the others (priority 0): 20 tokens
  // each. All admitted, run one step and decode one more token.
  void Start(int32_t num_blocks, int lows) {
    Make(num_blocks, 8, 1000, /*prefix_caching=*/true);
    std::vector<int32_t> prefix(48);
    for (int32_t i = 0; i < 48; ++i) prefix[i] = 100 + i;
    r_ = AddTokens(prefix);
    r_->priority = 5;
    for (int i = 0; i < lows; ++i) {
      std::vector<int32_t> own(20, 200 + i);
      lows_.push_back(AddTokens(own));
    }
    Ran(scheduler_->Schedule(now_));
    Ran(scheduler_->Schedule(now_));
    // The arrival: r's 48 tokens (12 full blocks, held by r) and 16 more.
    std::vector<int32_t> tokens = prefix;
    for (int32_t i = 0; i < 16; ++i) tokens.push_back(300 + i);
    high_ = AddTokens(tokens);
    high_->priority = 5;
  }
  Sequence* r_ = nullptr;
  Sequence* high_ = nullptr;
  std::vector<Sequence*> lows_;
};

TEST_F(PriorityWithPrefixTest, NoPreemptionWhenTheUnmappedRestFits) {
  Start(/*num_blocks=*/30, /*lows=*/2);  // r 13 + 2 x 6 blocks held, 5 free
  ASSERT_EQ(allocator_->num_available(), 5);
  ScheduleResult plan = scheduler_->Schedule(now_);
  // 17 blocks for 65 tokens, 12 of them mapped: 5 needed, 5 free.
  EXPECT_THAT(plan.preempted, IsEmpty());
  EXPECT_THAT(plan.admitted, ElementsAre(high_));
  EXPECT_THAT(plan.matched_tokens, ElementsAre(48));
}

TEST_F(PriorityWithPrefixTest, PreemptsWhenTheUnmappedRestFitsOnlyThen) {
  Start(/*num_blocks=*/20, /*lows=*/1);  // r 13 + 6 blocks held, 1 free
  ASSERT_EQ(allocator_->num_available(), 1);
  ScheduleResult plan = scheduler_->Schedule(now_);
  // 5 needed, 1 free: the lower sequence's 6 make room.
  EXPECT_THAT(plan.preempted, ElementsAre(lows_[0]));
  EXPECT_THAT(plan.admitted, ElementsAre(high_));
  EXPECT_THAT(scheduler_->waiting(), ElementsAre(lows_[0]));
}

}  // namespace
}  // namespace dikkat::server
