#include "server/scheduler.h"

#include <algorithm>

namespace dikkat::server {

Scheduler::Scheduler(SchedulerOptions options, model::KvBlockAllocator* allocator)
    : options_(options), allocator_(allocator) {}

void Scheduler::Add(Sequence* sequence) { waiting_.push_back(sequence); }

bool Scheduler::IsRunning(const Sequence* sequence) const {
  return std::find(running_.begin(), running_.end(), sequence) != running_.end();
}

void Scheduler::RemoveAndFree(Sequence* sequence) {
  auto it = std::find(running_.begin(), running_.end(), sequence);
  if (it != running_.end()) {
    running_.erase(it);
  } else {
    auto wit = std::find(waiting_.begin(), waiting_.end(), sequence);
    if (wit != waiting_.end()) waiting_.erase(wit);
  }
  Free(sequence);
}

bool Scheduler::SharerInPrefill(const Sequence& r, int64_t matched_tokens) const {
  const int64_t block = allocator_->block_size();
  const int64_t limit = static_cast<int64_t>(r.tokens.size()) - 1;  // the last token always runs
  if (matched_tokens + block > limit) return false;
  for (const Sequence* s : running_) {
    const int64_t len = static_cast<int64_t>(s->tokens.size());
    // Decoding (one token left to run) or already past the blocks in question.
    if (len - s->num_cached <= 1 || s->num_cached >= matched_tokens + block) continue;
    if (len < matched_tokens + block) continue;
    if (std::equal(r.tokens.begin() + matched_tokens, r.tokens.begin() + matched_tokens + block,
                   s->tokens.begin() + matched_tokens)) {
      return true;
    }
  }
  return false;
}

void Scheduler::Register(Sequence* sequence) {
  if (!options_.prefix_caching) return;
  allocator_->RegisterFullBlocks(sequence->tokens, sequence->num_cached, sequence->blocks,
                                 &sequence->num_registered);
}

void Scheduler::Free(Sequence* sequence) {
  Register(sequence);
  allocator_->Release(&sequence->blocks);
  sequence->num_registered = 0;
}

void Scheduler::Expire(absl::Time now, ScheduleResult* result) {
  auto done = [now](const Sequence* s) { return s->cancelled || now >= s->deadline; };
  for (Sequence* s : waiting_) {
    if (done(s)) result->expired.push_back(s);
  }
  for (Sequence* s : running_) {
    if (done(s)) result->expired.push_back(s);
  }
  for (Sequence* s : result->expired) RemoveAndFree(s);
}

bool Scheduler::PreemptNewest(ScheduleResult* result) {
  if (running_.size() <= 1) return false;
  Sequence* victim = running_.back();
  running_.pop_back();
  Free(victim);
  victim->num_cached = 0;  // recomputed when readmitted (or mapped from the prefix cache)
  waiting_.push_front(victim);
  result->preempted.push_back(victim);
  return true;
}

ScheduleResult Scheduler::Schedule(absl::Time now) {
  ScheduleResult result;
  Expire(now, &result);
  int64_t budget = options_.max_batch_tokens;
  for (Sequence* r : running_) Register(r);
  // Running sequences, oldest first: decode (1 token) or continue a chunked
  // prefill. A decode always runs (budget floor 1) so a long prefill never
  // starves the batch. Preemption takes the newest, so `r` itself may go.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* r = running_[i];
    const int64_t pending = static_cast<int64_t>(r->tokens.size()) - r->num_cached;
    const int64_t chunk = std::min<int64_t>(pending, std::max<int64_t>(budget, 1));
    while (!allocator_->EnsureCapacity(&r->blocks, r->num_cached + chunk)) {
      if (!PreemptNewest(&result) || !IsRunning(r)) break;
    }
    if (!IsRunning(r)) break;  // r was the newest: nothing after it runs either
    if (static_cast<int64_t>(r->blocks.size()) < allocator_->BlocksFor(r->num_cached + chunk)) {
      RemoveAndFree(r);
      result.rejected.push_back(r);
      --i;
      continue;
    }
    result.batch.push_back(r);
    result.chunk_lens.push_back(chunk);
    budget -= chunk;
  }
  // Waiting sequences, in order, while their whole prompt (+1 for the first
  // generated token) fits in free blocks now.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < options_.max_batch_size) {
    Sequence* r = waiting_.front();
    const int64_t len = static_cast<int64_t>(r->tokens.size());
    if (options_.prefix_caching) {
      // The block holding the last token is never mapped: it must run.
      r->num_registered = allocator_->MatchPrefix(r->tokens, len - 1, &r->blocks);
    }
    const int64_t matched = static_cast<int64_t>(r->blocks.size()) * allocator_->block_size();
    if ((options_.prefix_caching && SharerInPrefill(*r, matched)) ||
        allocator_->BlocksFor(len + 1) - static_cast<int32_t>(r->blocks.size()) >
            allocator_->num_available()) {
      Free(r);
      break;
    }
    waiting_.pop_front();
    running_.push_back(r);
    r->num_cached = matched;
    r->num_matched = matched;
    const int64_t chunk = std::min<int64_t>(len - matched, budget);
    allocator_->EnsureCapacity(&r->blocks, matched + chunk);
    result.admitted.push_back(r);
    result.matched_tokens.push_back(matched);
    result.batch.push_back(r);
    result.chunk_lens.push_back(chunk);
    budget -= chunk;
  }
  return result;
}

}  // namespace dikkat::server
