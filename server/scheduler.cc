#include "server/scheduler.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

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
    // Prompt scoring: its prefill runs within the step's logit rows, slowly;
    // waiting for it would hold the whole queue up.
    if (s->logit_rows) continue;
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
  PreemptBack(result);
  return true;
}

void Scheduler::PreemptBack(ScheduleResult* result) {
  Sequence* victim = running_.back();
  running_.pop_back();
  Free(victim);
  victim->num_cached = 0;  // recomputed when readmitted (or mapped from the prefix cache)
  if (now_ > victim->admitted_at) victim->ran += now_ - victim->admitted_at;
  // Its place: before every waiting sequence it outranks (it arrived before
  // those of its priority that wait, since admission goes in queue order).
  auto it = waiting_.begin();
  while (it != waiting_.end() && (*it)->priority > victim->priority) ++it;
  waiting_.insert(it, victim);
  result->preempted.push_back(victim);
}

int64_t Scheduler::EffectivePriority(const Sequence& s, absl::Time now) const {
  if (options_.priority_aging <= absl::ZeroDuration() || now <= s.arrived) return s.priority;
  // Only the time it waited ages it: a preempted sequence's running time
  // does not (it would otherwise come back above the arrivals that
  // preempted it).
  const absl::Duration waited = now - s.arrived - s.ran;
  if (waited <= absl::ZeroDuration()) return s.priority;
  absl::Duration remainder;  // IDivDuration writes it; nullptr is not allowed
  return s.priority + absl::IDivDuration(waited, options_.priority_aging, &remainder);
}

void Scheduler::SortWaiting(absl::Time now) {
  if (waiting_.size() < 2) return;
  std::vector<std::pair<int64_t, Sequence*>> keyed;
  keyed.reserve(waiting_.size());
  for (Sequence* s : waiting_) keyed.emplace_back(EffectivePriority(*s, now), s);
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    if (a.second->arrived != b.second->arrived) return a.second->arrived < b.second->arrived;
    return a.second->id < b.second->id;
  });
  for (size_t i = 0; i < keyed.size(); ++i) waiting_[i] = keyed[i].second;
}

void Scheduler::InsertRunning(Sequence* sequence) {
  sequence->admitted_order = ++admissions_;
  sequence->admitted_at = now_;
  auto it = std::upper_bound(
      running_.begin(), running_.end(), sequence,
      [](const Sequence* a, const Sequence* b) { return a->priority > b->priority; });
  running_.insert(it, sequence);
}

void Scheduler::PreemptForPriority(ScheduleResult* result) {
  if (waiting_.empty() || running_.empty()) return;
  const Sequence& head = *waiting_.front();
  // Only base priorities preempt: ageing orders the queue but never evicts a
  // running sequence (two aged sequences would otherwise take turns).
  auto lower = [&head](const Sequence* r) { return r->priority < head.priority; };
  // What admission would take from the available blocks: its whole prompt
  // (+1) less the blocks the prefix cache maps that running sequences hold
  // (a cached block nobody holds is mapped out of the available ones, so it
  // counts on both sides). Recomputed as sequences are preempted: a block
  // that only a preempted one held becomes cached.
  const int64_t len = static_cast<int64_t>(head.tokens.size());
  std::vector<int32_t> match;
  if (options_.prefix_caching && !head.no_prefix_match) {
    match = allocator_->PeekPrefix(head.tokens, len - 1);
  }
  auto needed = [&] {
    int32_t held = 0;
    for (int32_t b : match) held += allocator_->ref_count(b) > 0 ? 1 : 0;
    return allocator_->BlocksFor(len + 1) - held;
  };
  // Blocks that preempting every lower sequence would make available: those
  // held by lower sequences only, but not those the match maps (counted in
  // needed() already).
  absl::flat_hash_map<int32_t, int32_t> lower_holders;
  for (const Sequence* r : running_) {
    if (!lower(r)) continue;
    for (int32_t b : r->blocks) ++lower_holders[b];
  }
  const absl::flat_hash_set<int32_t> mapped(match.begin(), match.end());
  int32_t reclaimable = 0;
  for (const auto& [b, holders] : lower_holders) {
    if (holders == allocator_->ref_count(b) && !mapped.contains(b)) ++reclaimable;
  }
  const bool batch_full = static_cast<int32_t>(running_.size()) >= options_.max_batch_size;
  const bool no_room = needed() > allocator_->num_available();
  if (!batch_full && !no_room) return;
  if (no_room && needed() > allocator_->num_available() + reclaimable) return;
  while ((static_cast<int32_t>(running_.size()) >= options_.max_batch_size ||
          needed() > allocator_->num_available()) &&
         !running_.empty() && lower(running_.back())) {
    PreemptBack(result);  // even the last runner: it is outranked
  }
}

ScheduleResult Scheduler::Schedule(absl::Time now) {
  ScheduleResult result;
  now_ = now;
  Expire(now, &result);
  int64_t budget = options_.max_batch_tokens;
  int64_t logit_rows = options_.max_logit_rows > 0 ? options_.max_logit_rows
                                                   : std::numeric_limits<int64_t>::max();
  // A chunk of `want` tokens of `r`, within the step's logit rows.
  const auto within_logit_rows = [&logit_rows](const Sequence& r, int64_t want) {
    if (!r.logit_rows) return want;
    const int64_t chunk = std::min<int64_t>(want, std::max<int64_t>(logit_rows, 1));
    logit_rows -= chunk;
    return chunk;
  };
  for (Sequence* r : running_) Register(r);
  SortWaiting(now);
  PreemptForPriority(&result);
  // Running sequences, oldest first: decode (1 token) or continue a chunked
  // prefill. A decode always runs (budget floor 1) so a long prefill never
  // starves the batch. Preemption takes the newest, so `r` itself may go.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* r = running_[i];
    const int64_t pending = static_cast<int64_t>(r->tokens.size()) - r->num_cached;
    const int64_t chunk =
        within_logit_rows(*r, std::min<int64_t>(pending, std::max<int64_t>(budget, 1)));
    while (!allocator_->EnsureCapacity(&r->blocks, r->num_cached + chunk)) {
      if (!PreemptNewest(&result) || !IsRunning(r)) break;
    }
    if (!IsRunning(r)) break;  // r was the newest: nothing after it runs either
    if (static_cast<int64_t>(r->blocks.size()) < allocator_->BlocksFor(r->num_cached + chunk)) {
      // r runs alone here (nothing newer to preempt). If it fits in the
      // whole cache, what holds the rest is outside the scheduler (beam
      // searches) and gives it back: r waits for it, as a preempted
      // sequence, instead of failing.
      if (allocator_->BlocksFor(r->num_cached + chunk) <= allocator_->num_blocks() &&
          running_.size() == 1) {
        PreemptBack(&result);
        break;
      }
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
    if (r->admission_tokens > budget && !result.admitted.empty()) break;
    const int64_t len = static_cast<int64_t>(r->tokens.size());
    const bool match = options_.prefix_caching && !r->no_prefix_match;
    if (match) {
      // The block holding the last token is never mapped: it must run.
      r->num_registered = allocator_->MatchPrefix(r->tokens, len - 1, &r->blocks);
    }
    const int64_t matched = static_cast<int64_t>(r->blocks.size()) * allocator_->block_size();
    if ((match && SharerInPrefill(*r, matched)) ||
        allocator_->BlocksFor(len + 1) - static_cast<int32_t>(r->blocks.size()) >
            allocator_->num_available()) {
      Free(r);
      break;
    }
    waiting_.pop_front();
    InsertRunning(r);
    r->num_cached = matched;
    r->num_matched = matched;
    budget -= r->admission_tokens;
    const int64_t chunk = within_logit_rows(
        *r, std::min<int64_t>(len - matched, std::max<int64_t>(budget, 1)));
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
