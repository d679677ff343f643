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
  allocator_->Release(&sequence->blocks);
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
  allocator_->Release(&victim->blocks);
  victim->num_cached = 0;  // recomputed when readmitted
  waiting_.push_front(victim);
  result->preempted.push_back(victim);
  return true;
}

ScheduleResult Scheduler::Schedule(absl::Time now) {
  ScheduleResult result;
  Expire(now, &result);
  int64_t budget = options_.max_batch_tokens;
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
    if (allocator_->BlocksFor(len + 1) > allocator_->num_free()) break;
    waiting_.pop_front();
    running_.push_back(r);
    const int64_t chunk = std::min<int64_t>(len, budget);
    allocator_->EnsureCapacity(&r->blocks, chunk);
    result.admitted.push_back(r);
    result.batch.push_back(r);
    result.chunk_lens.push_back(chunk);
    budget -= chunk;
  }
  return result;
}

}  // namespace dikkat::server
