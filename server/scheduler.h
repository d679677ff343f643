// Scheduler: which Generate sequences run in the next engine step, and how
// many of their tokens.
//
// Owns the waiting queue and the running batch, and every change to the
// sequences' KV block tables. Priorities: the waiting queue is ordered by
// effective priority (the sequence's priority plus one per
// `priority_aging` waited; the time a preempted sequence ran does not
// count), then by arrival, so equal priorities are first
// come, first served and a long wait eventually beats any newer arrival; the
// running batch is ordered by priority, then admission, and preemption takes
// its back: the lowest priority, newest sequence. Each Schedule():
//   0. when the first waiting sequence cannot be admitted (no room in the KV
//      cache or the batch) and running sequences of a lower priority would
//      make room, preempts them (lowest first);
//   1. expires: sequences cancelled or past their deadline leave the queues
//      and free their blocks;
//   2. runs the running batch: each sequence decodes one token or continues
//      its chunked prefill under the token budget; when the KV cache is full
//      the most recently admitted sequence is preempted (its blocks are freed
//      and it goes back to the front of the waiting queue, to recompute its
//      tokens when readmitted); a sequence that cannot fit even alone is
//      rejected, and one that runs alone and would fit in the whole cache
//      (the rest held outside the scheduler, by beam searches) is preempted
//      to wait for it;
//   3. admits waiting sequences in order while the token budget, the batch
//      size and the free blocks allow (a whole prompt must fit in free blocks).
// With prefix caching on, a sequence being admitted first maps the longest
// chain of cached full blocks that matches its tokens (never the block that
// holds its last token, which must run to produce logits) and computes only
// the rest; full blocks a sequence has computed are registered for reuse
// before each step and when it leaves (model/kv_block_allocator.h). When a
// running sequence is still computing full blocks that the next waiting
// sequence shares beyond what the cache holds (requests with one system
// prompt arriving together), admission pauses until those blocks are cached,
// so the prefix is computed once instead of once per request.
// Nothing here knows about tensors: the engine runs the forward over the
// returned batch and then advances each sequence's num_cached.
//
// Thread-safety: none; the engine thread owns it. Torch-free on purpose (its
// tests build without a model).
#ifndef DIKKAT_SERVER_SCHEDULER_H_
#define DIKKAT_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/time/time.h"
#include "model/kv_block_allocator.h"

namespace dikkat::server {

// What the scheduler knows of a Generate request. The engine's own request
// state derives from it; the scheduler never owns a Sequence.
struct Sequence {
  uint64_t id = 0;
  absl::Time deadline = absl::InfiniteFuture();
  bool cancelled = false;  // set by Engine::Cancel, acted on in the next Schedule()
  // Decoder tokens: the prompt (with the decoder start token for
  // encoder-decoder models), then the generated ones. Not empty once added.
  std::vector<int32_t> tokens;
  int64_t num_cached = 0;       // tokens whose K/V are in the cache
  int32_t priority = 0;         // larger is admitted first and preempted last
  absl::Time arrived = absl::InfiniteFuture();  // ages the priority while waiting; future: no ageing
  // Time spent running before preemptions: not waiting, so it does not age
  // the priority (EffectivePriority).
  absl::Duration ran = absl::ZeroDuration();
  absl::Time admitted_at = absl::InfinitePast();  // the last admission's Schedule() time
  uint64_t admitted_order = 0;  // set at each admission (orders equal priorities in the batch)
  std::vector<int32_t> blocks;  // block table: covers num_cached tokens between steps
  int32_t num_registered = 0;   // leading blocks offered to the prefix cache
  int64_t num_matched = 0;      // tokens mapped from the prefix cache at the last admission
  // Computes every token itself (its prompt's logits are wanted); its full
  // blocks are still offered to the prefix cache.
  bool no_prefix_match = false;
  // Each token of its prefill chunks returns a row of logits (prompt
  // scoring): its chunks share SchedulerOptions::max_logit_rows a step.
  bool logit_rows = false;
  // Work its admission does besides its chunk, in tokens (an encoder-decoder
  // request's source, encoded when it is admitted), charged to the step's
  // token budget. One such admission a step may pass the budget (else a long
  // source would wait for ever behind running decodes); others wait.
  int64_t admission_tokens = 0;
};

struct SchedulerOptions {
  int32_t max_batch_size = 64;      // running sequences
  int32_t max_batch_tokens = 2048;  // tokens per step (decode tokens count too)
  bool prefix_caching = false;      // reuse cached full blocks across sequences
  // A waiting sequence's priority rises by one per this much waited;
  // zero or less: priorities never age.
  absl::Duration priority_aging = absl::ZeroDuration();
  // Tokens a step may run of sequences whose every token returns a row of
  // logits (Sequence::logit_rows), all together: [rows, vocab] floats are
  // far larger than the one row of the others. Each such sequence still
  // runs at least one token. Zero or less: no bound.
  int64_t max_logit_rows = 0;
};

// One step's plan. `batch[i]` runs its tokens [num_cached, num_cached +
// chunk_lens[i]); its block table already covers them.
struct ScheduleResult {
  std::vector<Sequence*> batch;
  std::vector<int64_t> chunk_lens;
  std::vector<Sequence*> admitted;   // moved from waiting to running this step (also in batch)
  std::vector<Sequence*> preempted;  // back in the waiting queue, blocks freed
  std::vector<Sequence*> rejected;   // out of the queues: cannot fit in the KV cache even alone
  // admitted[i] mapped matched_tokens[i] tokens from the prefix cache.
  std::vector<int64_t> matched_tokens;
  std::vector<Sequence*> expired;    // out of the queues: cancelled or past their deadline
};

class Scheduler {
 public:
  // `allocator` (not owned) must outlive the scheduler; the scheduler is the
  // only one that changes block tables through it.
  Scheduler(SchedulerOptions options, model::KvBlockAllocator* allocator);

  // Queues a new sequence at the back of the waiting queue.
  void Add(Sequence* sequence);

  // Plans the next step (see the file comment). `now` decides deadlines.
  ScheduleResult Schedule(absl::Time now);

  // Takes a finished sequence out of whichever queue holds it (running or
  // waiting; none is fine) and frees its blocks.
  void RemoveAndFree(Sequence* sequence);

  bool empty() const { return running_.empty() && waiting_.empty(); }
  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const model::KvBlockAllocator& allocator() const { return *allocator_; }

 private:
  void Expire(absl::Time now, ScheduleResult* result);
  // True when a running sequence still in its prefill shares with `r` full
  // blocks past the first `matched_tokens`.
  bool SharerInPrefill(const Sequence& r, int64_t matched_tokens) const;
  // Offers `sequence`'s computed full blocks to the prefix cache.
  void Register(Sequence* sequence);
  // Register, then release every block of `sequence`.
  void Free(Sequence* sequence);
  bool IsRunning(const Sequence* sequence) const;
  // Frees the blocks of the running batch's last sequence (lowest priority,
  // newest) and requeues it. False when at most one sequence runs.
  bool PreemptNewest(ScheduleResult* result);
  void PreemptBack(ScheduleResult* result);
  // Orders the waiting queue (see the file comment) as of `now`.
  void SortWaiting(absl::Time now);
  int64_t EffectivePriority(const Sequence& s, absl::Time now) const;
  // Step 0 of Schedule().
  void PreemptForPriority(ScheduleResult* result);
  // Puts an admitted sequence at its place in the running batch.
  void InsertRunning(Sequence* sequence);

  const SchedulerOptions options_;
  model::KvBlockAllocator* allocator_;  // not owned
  std::deque<Sequence*> waiting_;       // by effective priority, then arrival
  std::vector<Sequence*> running_;      // by priority, then admission: the back is preempted first
  uint64_t admissions_ = 0;
  absl::Time now_ = absl::InfinitePast();  // the Schedule() call's time, while it runs
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_SCHEDULER_H_
