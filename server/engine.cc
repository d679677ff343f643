// The engine thread: continuous batching over the paged KV cache.
//
// One step of Loop() = TakeInbox -> ExpireAuxiliary, RunAuxiliary
// (Encode/Attention) -> Schedule -> Run (the batched forward) -> Postprocess
// (sample, stream text, finish), each short (nano-vllm's shape).
//
// Invariants owned by the engine thread:
//   * a Generate request is in exactly one of the scheduler's waiting and
//     running queues until it finishes, and then in neither; its blocks are
//     released in FinishGenerate() (or by the scheduler when it expires or
//     rejects it);
//   * a running sequence's block table covers num_cached tokens, and is
//     grown before each forward to cover what that forward writes;
//   * every request's observer/callback is called exactly once with a final
//     result (OnFinish / done), and never after.
#include "server/engine.h"

#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>
#include <ATen/ops/full_like.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "common/sync.h"
#include "model/kv_cache.h"
#include "model/sampler.h"
#include "model/token_logprobs.h"
#include "model/transformer.h"
#include "model/work_team.h"
#include "server/auxiliary_jobs.h"
#include "server/engine_impl.h"

namespace dikkat::server {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kDeadline:
      return "deadline";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

namespace engine_internal {

using model::Architecture;

Request::Request() = default;
Request::~Request() = default;

// ---------------------------------------------------------------------------
// Engine thread
// ---------------------------------------------------------------------------

void EngineImpl::Loop() {
  at::init_num_threads();
  while (true) {
    if (!TakeInbox()) break;
    const absl::Time now = absl::Now();
    ExpireAuxiliary(now);
    RunAuxiliary();
    RunBeams();
    const ScheduleResult plan = Schedule(now);
    if (!plan.batch.empty()) {
      std::optional<at::Tensor> logits = Run(plan);
      if (logits.has_value()) Postprocess(plan, *logits);
    }
    PublishStats();
  }
  // Stopping: everything still here is cancelled.
  {
    dikkat::MutexLock lock(&mu_);
    DrainInbox();
  }
  std::vector<Sequence*> left(scheduler_.running().begin(), scheduler_.running().end());
  left.insert(left.end(), scheduler_.waiting().begin(), scheduler_.waiting().end());
  for (Sequence* s : left) FinishGenerate(static_cast<Request*>(s), FinishReason::kCancelled);
  std::vector<Request*> aux(auxiliary_.begin(), auxiliary_.end());
  for (Request* r : aux) FinishAuxiliary(r, absl::UnavailableError("the server is shutting down"));
  for (Request* r : std::vector<Request*>(beam_jobs_)) FinishBeam(r, FinishReason::kCancelled);
  PublishStats();
}

// Takes ownership of every submitted request: Generate to the scheduler, the rest
// to auxiliary_.
void EngineImpl::DrainInbox() {
  while (!inbox_.empty()) {
    std::unique_ptr<Request> r = std::move(inbox_.front());
    inbox_.pop_front();
    Request* raw = r.get();
    requests_[raw->id] = std::move(r);
    if (raw->kind == RequestKind::kGenerate) {
      scheduler_.Add(raw);
    } else if (raw->kind == RequestKind::kBeam) {
      beam_jobs_.push_back(raw);
    } else {
      auxiliary_.push_back(raw);
    }
  }
  PublishQueued();
}

int32_t EngineImpl::WaitingBeams() const {
  return static_cast<int32_t>(std::count_if(beam_jobs_.begin(), beam_jobs_.end(),
                                            [](const Request* r) { return r->beam == nullptr; }));
}

void EngineImpl::PublishQueued() {
  engine_queued_ = static_cast<int32_t>(scheduler_.waiting().size() + auxiliary_.size()) +
                   WaitingBeams();
}

// Moves new requests and cancellations into engine-thread state; waits when
// idle. Returns false when the engine must stop.
bool EngineImpl::TakeInbox() {
  dikkat::MutexLock lock(&mu_);
  const bool busy = !scheduler_.empty() || !auxiliary_.empty() || !beam_jobs_.empty();
  if (!busy) {
    auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stop_ || !inbox_.empty() || !cancels_.empty();
    };
    mu_.AwaitWithTimeout(absl::Condition(&has_work), absl::Milliseconds(200));
  }
  if (stop_) return false;
  DrainInbox();
  for (RequestId id : cancels_) {
    auto it = requests_.find(id);
    if (it != requests_.end() && it->second->group == nullptr) {
      it->second->cancelled = true;
      continue;
    }
    // A call with several samples is known by its first sample's id, which
    // may have finished already.
    for (auto& [unused, r] : requests_) {
      if (r->group != nullptr && r->group->members().front() == id) r->cancelled = true;
    }
  }
  cancels_.clear();
  return true;
}

// Generate requests expire in the scheduler; Encode/Attention ones here.
void EngineImpl::ExpireAuxiliary(absl::Time now) {
  std::vector<Request*> done;
  for (Request* r : auxiliary_) {
    if (r->cancelled || now >= r->deadline) done.push_back(r);
  }
  for (Request* r : done) {
    FinishAuxiliary(r, r->cancelled
                           ? absl::CancelledError("cancelled by the caller")
                           : absl::DeadlineExceededError("the deadline passed in the queue"));
  }
}

void EngineImpl::RunAuxiliary() {
  // Encode/Attention are prefill-only. Each step gives them at most
  // max_batch_tokens of work (an Encode runs a group of its inputs at a time,
  // an Attention request whole: one sequence, bounded by the request checks),
  // so decoding sequences wait at most about one prefill step for them. Each
  // forward is one prefill step for the metrics (docs/metrics.md), whether it
  // succeeds or fails.
  int64_t budget = options_.max_batch_tokens;
  while (budget > 0 && !auxiliary_.empty()) {
    Request* r = auxiliary_.front();
    const absl::Time start = absl::Now();
    if (r->kind == RequestKind::kEncode) {
      const int64_t before = r->enc_result.prompt_tokens;
      absl::StatusOr<size_t> ran =
          RunEncodeGroup(*transformer_, r->enc, r->enc_next, budget, &r->enc_result);
      if (!ran.ok()) {
        OnAuxiliaryStep(1, 0, start);
        FinishAuxiliary(r, ran.status());
        continue;
      }
      const int64_t tokens = r->enc_result.prompt_tokens - before;
      OnAuxiliaryStep(static_cast<int32_t>(*ran), static_cast<int32_t>(tokens), start);
      budget -= tokens;
      r->enc_next += *ran;
      if (r->enc_next < r->enc.inputs.size()) continue;  // more groups, in later steps
      EncodeCallback done = std::move(r->enc_done);
      r->enc_done = nullptr;
      EncodeResult result = std::move(r->enc_result);
      FinishAuxiliary(r, absl::OkStatus());  // bookkeeping; `done` gets the result
      done(std::move(result));
    } else {
      absl::StatusOr<AttentionResult> result = RunAttention(*transformer_, r->att);
      const int64_t tokens = static_cast<int64_t>(r->att.input.size() + r->att.target.size());
      OnAuxiliaryStep(1, static_cast<int32_t>(tokens), start);
      budget -= tokens;
      AttentionCallback done = std::move(r->att_done);
      r->att_done = nullptr;
      FinishAuxiliary(r, absl::OkStatus());
      done(std::move(result));
    }
  }
}

void EngineImpl::OnAuxiliaryStep(int32_t sequences, int32_t tokens, absl::Time start) {
  if (listener_ != nullptr) {
    listener_->OnStep(StepTiming{/*prefill=*/true, sequences, tokens, absl::Now() - start});
  }
}

// Makes an admitted request ready to run. On its first admission: its
// sampler, text stream and (encoder-decoder) the encoder's cross-attention
// K/V, which a preemption keeps (it frees only the KV blocks). The encoder
// pass runs outside any forward's error handling: what it throws comes back
// as INTERNAL, for this request alone.
absl::Status EngineImpl::Admit(Request* r) {
  // The queue time ends at the first admission; a readmission after a
  // preemption does not move it.
  if (!r->scheduled_at.has_value()) r->scheduled_at = absl::Now();
  if (r->sampler == nullptr) {
    // Sample i of a group uses the call's seed + i: one seed reproduces
    // every sample, and sample i alone with seed + i.
    uint64_t seed = 0;
    if (r->group != nullptr) {
      seed = r->group->base_seed(&seed_source_) + static_cast<uint64_t>(r->sample_index);
    } else {
      seed = r->gen.sampling.seed.value_or(seed_source_());
    }
    r->gen.sampling.seed = seed;
    r->sampler = std::make_unique<model::Sampler>(r->gen.sampling, seed);
    r->text = std::make_unique<TextStream>(tokenizer_.get(), r->gen.stop_strings,
                                           r->gen.include_stop_text, r->tokens);
    r->prompt_len = static_cast<int32_t>(r->tokens.size());
    r->cached_prompt_tokens = static_cast<int32_t>(r->num_matched);
    stat_prefix_hit_tokens_.fetch_add(r->num_matched);
    stat_prefix_query_tokens_.fetch_add(r->prompt_len);
    if (listener_ != nullptr) listener_->OnPrefixLookup(r->prompt_len, r->num_matched);
    r->sampler->ObservePrompt(r->tokens);
    r->max_new = r->gen.prompt_only ? 0 : MaxNewTokens(r->gen, r->prompt_len);
  }
  if (config_.architecture == Architecture::kEncoderDecoder && r->cross == nullptr) {
    try {
      if (FailpointArmed("engine.encode_source")) {
        throw std::runtime_error("failpoint engine.encode_source");
      }
      r->cross = EncodeSource(*transformer_, r->gen.source);
      r->admission_tokens = 0;  // kept across preemptions: never encoded again
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("encoder forward failed: ", e.what()));
    }
  }
  return absl::OkStatus();
}

// Asks the scheduler for the next step's batch and carries out what it
// decided about requests: finishes the expired and rejected ones, counts
// preemptions, readies the admitted ones.
ScheduleResult EngineImpl::Schedule(absl::Time now) {
  ScheduleResult plan = scheduler_.Schedule(now);
  for (Sequence* s : plan.expired) {
    FinishGenerate(static_cast<Request*>(s),
                   s->cancelled ? FinishReason::kCancelled : FinishReason::kDeadline);
  }
  for (size_t i = 0; i < plan.preempted.size(); ++i) {
    stat_preemptions_.fetch_add(1);
    if (listener_ != nullptr) listener_->OnPreemption();
  }
  for (Sequence* s : plan.rejected) {
    FinishGenerate(static_cast<Request*>(s), FinishReason::kError,
                   absl::ResourceExhaustedError("the KV cache cannot hold this sequence"));
  }
  std::vector<std::pair<Request*, absl::Status>> failed;
  for (Sequence* s : plan.admitted) {
    absl::Status admitted = Admit(static_cast<Request*>(s));
    if (!admitted.ok()) failed.emplace_back(static_cast<Request*>(s), std::move(admitted));
  }
  for (auto& [r, status] : failed) {
    // Out of this step's batch before it is finished (and freed).
    for (size_t i = 0; i < plan.batch.size(); ++i) {
      if (plan.batch[i] != r) continue;
      plan.batch.erase(plan.batch.begin() + static_cast<std::ptrdiff_t>(i));
      plan.chunk_lens.erase(plan.chunk_lens.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    FinishGenerate(r, FinishReason::kError, std::move(status));
  }
  {
    dikkat::MutexLock lock(&mu_);
    PublishQueued();
  }
  return plan;
}

// One batched forward over the plan's chunks; the logits of each chunk's last
// token (of every token for a chunk that scores its prompt), [rows, vocab] on
// the CPU. On failure every request of the batch is
// finished with the error and nothing is returned.
std::optional<at::Tensor> EngineImpl::Run(const ScheduleResult& plan) {
  std::vector<model::SequenceChunk> chunks;
  chunks.reserve(plan.batch.size());
  bool prefill = false;
  int32_t tokens = 0;
  for (size_t i = 0; i < plan.batch.size(); ++i) {
    Request* r = static_cast<Request*>(plan.batch[i]);
    model::SequenceChunk c;
    c.tokens = absl::MakeConstSpan(r->tokens).subspan(r->num_cached, plan.chunk_lens[i]);
    c.start_pos = r->num_cached;
    c.block_table = &r->blocks;
    c.cross = r->cross.get();
    c.all_logits = WantsPromptLogits(*r, plan.chunk_lens[i]);
    chunks.push_back(c);
    prefill |= plan.chunk_lens[i] > 1 || r->num_cached == 0;
    tokens += static_cast<int32_t>(plan.chunk_lens[i]);
  }
  const absl::Time start = absl::Now();
  at::Tensor logits;
  try {
    model::ForwardOptions opts;
    logits = transformer_->Decode(chunks, cache_.get(), opts).logits.to(at::kCPU).contiguous();
    if (FailpointArmed("engine.nan_logits")) logits = at::full_like(logits, std::nanf(""));
  } catch (const std::exception& e) {
    const absl::Status error = absl::InternalError(absl::StrCat("forward failed: ", e.what()));
    for (Sequence* s : plan.batch)
      FinishGenerate(static_cast<Request*>(s), FinishReason::kError, error);
    return std::nullopt;
  }
  if (listener_ != nullptr) {
    listener_->OnStep(
        StepTiming{prefill, static_cast<int32_t>(plan.batch.size()), tokens, absl::Now() - start});
  }
  return logits;
}

// Advances each sequence past its chunk; one whose prompt is all in the
// cache samples its next token from its row of `logits` and emits it.
// The draws run on the work team: each reads its own row with its own
// sampler and generator (and thread-local scratch), so they are independent
// and their results do not depend on the threads; everything that changes
// a request's state (its tokens, penalties' counts, text, delivery) runs
// here, in batch order. A greedy draw over GPT-2's 50257 logits costs ~85
// us, ~2.7 ms of a 32-sequence step on one thread.
void EngineImpl::Postprocess(const ScheduleResult& plan, const at::Tensor& logits) {
  const int64_t vocab = logits.size(1);
  const float* data = logits.data_ptr<float>();
  struct Draw {
    Request* request;
    const float* logits;  // its row
    absl::StatusOr<model::SampledToken> token;  // drawn on the team
  };
  std::vector<Draw> draws;
  draws.reserve(plan.batch.size());
  int64_t row = 0;  // the chunk's first row in `logits`
  for (size_t i = 0; i < plan.batch.size(); ++i) {
    Request* r = static_cast<Request*>(plan.batch[i]);
    const int64_t len = plan.chunk_lens[i];
    const bool scored = WantsPromptLogits(*r, len);
    const int64_t rows = scored ? len : 1;
    // A chunk of one prompt token is scored too (a small token budget left).
    if (scored) ScorePrompt(r, len, data, row, vocab);
    const float* last = data + (row + rows - 1) * vocab;
    row += rows;
    r->num_cached += len;
    if (r->num_cached < static_cast<int64_t>(r->tokens.size())) continue;  // prefill continues
    if (r->max_new == 0) {  // prompt_only: the scores are the result
      Deliver(r, GeneratedChunk{});
      FinishGenerate(r, FinishReason::kLength);
      continue;
    }
    draws.push_back(Draw{r, last, absl::StatusOr<model::SampledToken>()});
  }
  model::TeamParallelFor(static_cast<int64_t>(draws.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      Draw& d = draws[j];
      try {  // the team's bodies must not throw
        d.token = d.request->sampler->Sample(absl::MakeConstSpan(d.logits, vocab));
      } catch (const std::bad_alloc&) {
        d.token = absl::ResourceExhaustedError("out of memory while sampling the next token");
      }
    }
  });
  for (Draw& d : draws) {
    if (!d.token.ok()) {
      // The logits are the model's, not the caller's: NaN or +inf in them
      // is the server's failure, not an invalid request. (Out of memory
      // stays RESOURCE_EXHAUSTED: retryable.)
      absl::Status status = d.token.status();
      if (absl::IsInvalidArgument(status)) {
        status = absl::InternalError(absl::StrCat("sampling failed: ", status.message()));
      }
      FinishGenerate(d.request, FinishReason::kError, std::move(status));
      continue;
    }
    // What throws while a token is emitted (out of memory in the text stream
    // or the delivery, say) fails this request alone; the engine thread and
    // the other requests go on. Emit may have finished the request before
    // it threw, so it is looked up again by id.
    const RequestId id = d.request->id;
    try {
      Emit(d.request, *d.token);
    } catch (const std::exception& e) {
      auto it = requests_.find(id);
      if (it != requests_.end()) {
        FinishGenerate(it->second.get(), FinishReason::kError,
                       absl::InternalError(absl::StrCat("emitting a token failed: ", e.what())));
      }
    }
  }
}

bool EngineImpl::WantsPromptLogits(const Request& r, int64_t chunk_len) {
  if (r.gen.prompt_logprobs < 0 || r.prompt_scores_sent) return false;
  // Rows p predict token p + 1; positions [1, prompt_len) are scored, in
  // order, so rows [scored, prompt_len - 1) are still wanted.
  const int64_t scored = static_cast<int64_t>(r.prompt_scores.size());
  return scored < r.prompt_len - 1 && r.num_cached + chunk_len > scored;
}

void EngineImpl::ScorePrompt(Request* r, int64_t chunk_len, const float* logits, int64_t row,
                             int64_t vocab) {
  for (int64_t j = 0; j < chunk_len; ++j) {
    const int64_t pos = r->num_cached + j;
    if (pos != static_cast<int64_t>(r->prompt_scores.size()) || pos + 1 >= r->prompt_len) continue;
    const model::ScoredToken scored =
        model::ScoreToken(absl::MakeConstSpan(logits + (row + j) * vocab, vocab),
                          r->tokens[pos + 1], r->gen.prompt_logprobs);
    GeneratedToken out;
    out.token_id = r->tokens[pos + 1];
    out.logprob = scored.logprob;
    for (const model::TokenLogprob& alt : scored.top) out.top.push_back({alt.token_id, alt.logprob});
    r->prompt_scores.push_back(std::move(out));
  }
}

void EngineImpl::Deliver(Request* r, GeneratedChunk chunk) {
  if (r->gen.prompt_logprobs >= 0 && !r->prompt_scores_sent) {
    chunk.prompt_logprobs = std::move(r->prompt_scores);
    r->prompt_scores.clear();
    r->prompt_scores_sent = true;
    r->logit_rows = false;  // a prefill after a preemption returns one row a chunk
  }
  if (r->group != nullptr) {
    // Past the engine's bound on held output the call ends (SampleGroup).
    if (r->group->OnChunk(r->sample_index, std::move(chunk))) StopSamples(*r->group);
  } else {
    r->observer->OnChunk(std::move(chunk));
  }
}

void EngineImpl::StopSamples(const SampleGroup& group) {
  for (RequestId id : group.members()) {
    auto it = requests_.find(id);
    if (it != requests_.end()) it->second->cancelled = true;
  }
}

// Appends a sampled token, streams its text, and finishes the request when a
// stop condition holds.
void EngineImpl::Emit(Request* r, const model::SampledToken& token) {
  if (FailpointArmed("engine.emit")) throw std::bad_alloc();
  const absl::Time now = absl::Now();
  if (listener_ != nullptr && r->last_token_at.has_value()) {
    listener_->OnTokenEmitted(now - *r->last_token_at);
  }
  if (!r->first_token_at) r->first_token_at = now;
  r->last_token_at = now;
  r->tokens.push_back(token.token_id);
  r->sampler->Observe(token.token_id);
  ++r->generated;
  r->cumulative_logprob += token.logprob;

  GeneratedChunk chunk;
  GeneratedToken out;
  out.token_id = token.token_id;
  out.logprob = token.logprob;
  for (const model::TokenLogprob& alt : token.top) out.top.push_back({alt.token_id, alt.logprob});
  chunk.tokens.push_back(std::move(out));

  // EOS and stop token ids end the request without their text; the text
  // stream decides stop strings and the length limit.
  const bool is_eos = model::IsEosToken(config_, token.token_id);
  const std::vector<int32_t>& stop_ids = r->gen.stop_token_ids;
  TextPiece piece;
  if (is_eos && !r->gen.ignore_eos) {
    piece = r->text->End(FinishReason::kEos);
  } else if (std::find(stop_ids.begin(), stop_ids.end(), token.token_id) != stop_ids.end()) {
    piece = r->text->End(FinishReason::kStop);
  } else {
    piece = r->text->Push(token.token_id, /*last=*/r->generated >= r->max_new);
  }
  chunk.text = std::move(piece.text);
  Deliver(r, std::move(chunk));
  if (piece.finish) FinishGenerate(r, *piece.finish);
}

void EngineImpl::FinishGenerate(Request* r, FinishReason reason, absl::Status status) {
  scheduler_.RemoveAndFree(r);
  const absl::Time now = absl::Now();
  GenerateSummary summary;
  summary.reason = reason;
  summary.status = std::move(status);
  // Every token the model read as input: the encoder's source (encoder-decoder)
  // plus the decoder's prompt (with its start token).
  summary.prompt_tokens =
      static_cast<int32_t>(r->gen.source.size()) +
      (r->prompt_len > 0 ? r->prompt_len : static_cast<int32_t>(r->gen.prompt.size()));
  summary.generated_tokens = r->generated;
  summary.cached_prompt_tokens = r->cached_prompt_tokens;
  summary.seed = r->sampler ? r->sampler->seed() : r->gen.sampling.seed.value_or(0);
  summary.queue_time = (r->scheduled_at ? *r->scheduled_at : now) - r->submitted;
  summary.time_to_first_token =
      r->first_token_at ? *r->first_token_at - r->submitted : absl::ZeroDuration();
  summary.total_time = now - r->submitted;
  std::shared_ptr<GenerateObserver> observer = std::move(r->observer);
  std::shared_ptr<SampleGroup> group = std::move(r->group);
  const int32_t sample = r->sample_index;
  const double cumulative = r->cumulative_logprob;
  requests_.erase(r->id);  // r is gone from here on
  {
    dikkat::MutexLock lock(&mu_);
    --in_flight_;
    PublishQueued();
  }
  if (group != nullptr) {
    // The others stop in the next Schedule(); the call ends after the last.
    if (group->OnSampleFinish(sample, summary, cumulative)) StopSamples(*group);
    if (!group->done()) return;
    if (listener_ != nullptr) listener_->OnGenerateFinished(group->summary());
    stat_finished_.fetch_add(1);
    group->Finish();
    return;
  }
  if (listener_ != nullptr) listener_->OnGenerateFinished(summary);
  stat_finished_.fetch_add(1);
  observer->OnFinish(std::move(summary));
}

void EngineImpl::FinishAuxiliary(Request* r, absl::Status status) {
  auto it = std::find(auxiliary_.begin(), auxiliary_.end(), r);
  if (it != auxiliary_.end()) auxiliary_.erase(it);
  {
    dikkat::MutexLock lock(&mu_);
    --in_flight_;
    PublishQueued();
  }
  EncodeCallback enc_done = std::move(r->enc_done);
  AttentionCallback att_done = std::move(r->att_done);
  requests_.erase(r->id);
  stat_finished_.fetch_add(1);
  if (!status.ok()) {
    if (enc_done) enc_done(status);
    if (att_done) att_done(status);
  }
}

void EngineImpl::PublishStats() {
  const int32_t waiting_beams = WaitingBeams();
  stat_running_.store(static_cast<int32_t>(scheduler_.running().size() + beam_jobs_.size()) -
                      waiting_beams);
  stat_waiting_.store(static_cast<int32_t>(scheduler_.waiting().size() + auxiliary_.size()) +
                      waiting_beams);
  stat_blocks_used_.store(cache_->allocator().num_used());
  stat_blocks_cached_.store(cache_->allocator().num_cached());
  std::map<int32_t, int32_t> by_priority;
  for (const Sequence* s : scheduler_.waiting()) ++by_priority[s->priority];
  dikkat::MutexLock lock(&stats_mu_);
  waiting_by_priority_ = std::move(by_priority);
}

}  // namespace engine_internal
}  // namespace dikkat::server
