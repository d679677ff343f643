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
  void Make(int32_t num_blocks, int32_t max_batch_size, int32_t max_batch_tokens) {
    allocator_ = std::make_unique<model::KvBlockAllocator>(num_blocks, kBlockSize);
    scheduler_ = std::make_unique<Scheduler>(SchedulerOptions{max_batch_size, max_batch_tokens},
                                             allocator_.get());
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

}  // namespace
}  // namespace dikkat::server
