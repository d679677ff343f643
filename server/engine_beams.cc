// Beam search on the engine thread (server/beam_search.h for the algorithm).
//
// Beam-search requests run beside the scheduler's batch, not in it: every
// engine step runs one forward over the live beams of all of them (the
// prompt's prefill first, in chunks within --max_batch_tokens), then each
// request's BeamSearch picks the next beams and this file rearranges their
// KV blocks: a parent's first surviving child takes its block table over,
// the others fork it (full blocks shared by reference, the partial last
// block copied: model/kv_block_allocator.h
// Fork, KvCache::CopySlots), parents without a child release theirs. A
// request starts only when its worst case (beam_width x its whole length)
// fits in the blocks available beside what the started ones may still take,
// so it does not run out halfway in a quiet cache; if the scheduler's
// requests take the blocks meanwhile it ends with RESOURCE_EXHAUSTED.
// Requests start in arrival order (one that waits holds back those after
// it); priorities do not apply to them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/full_like.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "model/cpu_elementwise.h"
#include "model/kv_cache.h"
#include "model/transformer.h"
#include "server/auxiliary_jobs.h"
#include "server/engine_impl.h"

namespace dikkat::server::engine_internal {

using model::Architecture;

bool EngineImpl::StartBeam(Request* r, int64_t reserved) {
  model::KvBlockAllocator& allocator = cache_->allocator();
  const int64_t prompt = static_cast<int64_t>(r->tokens.size());
  const int32_t max_new = MaxNewTokens(r->gen, prompt);
  const int64_t worst = static_cast<int64_t>(r->gen.beam_width) * allocator.BlocksFor(prompt + max_new);
  if (worst > allocator.num_available() - reserved) return false;  // waits
  r->beam_worst_blocks = worst;
  r->scheduled_at = absl::Now();
  r->prompt_len = static_cast<int32_t>(prompt);
  if (config_.architecture == Architecture::kEncoderDecoder) {
    try {
      r->cross = EncodeSource(*transformer_, r->gen.source);
    } catch (const std::exception& e) {
      FinishBeam(r, FinishReason::kError,
                 absl::InternalError(absl::StrCat("encoder forward failed: ", e.what())));
      return false;
    }
  }
  BeamOptions options;
  options.width = r->gen.beam_width;
  options.length_penalty = r->gen.length_penalty;
  options.early_stopping = r->gen.early_stopping;
  options.max_new = max_new;
  options.end_tokens = r->gen.stop_token_ids;
  if (!r->gen.ignore_eos) {
    for (int64_t id : model::EosTokenIds(config_)) {
      options.end_tokens.push_back(static_cast<int32_t>(id));
      options.eos_tokens.push_back(static_cast<int32_t>(id));
    }
  }
  r->beam = std::make_unique<BeamSearch>(std::move(options));
  r->beam_slots.assign(1, BeamSlot{r->tokens, {}, 0});
  return true;
}

void EngineImpl::RunBeams() {
  if (beam_jobs_.empty()) return;
  const absl::Time now = absl::Now();
  std::vector<Request*> running;
  for (Request* r : std::vector<Request*>(beam_jobs_)) {
    if (r->cancelled || now >= r->deadline) {
      FinishBeam(r, r->cancelled ? FinishReason::kCancelled : FinishReason::kDeadline);
      continue;
    }
    if (r->beam != nullptr) running.push_back(r);
  }
  // What the started searches may still take: each holds at most its worst
  // case at any time, so beyond the blocks it holds now it needs at most the
  // difference. A search starts only when its own worst case fits beside
  // theirs, and in arrival order (a large one is not overtaken for ever by
  // smaller ones).
  int64_t reserved = 0;
  for (const Request* r : running) {
    absl::flat_hash_set<int32_t> held;
    for (const BeamSlot& slot : r->beam_slots) held.insert(slot.blocks.begin(), slot.blocks.end());
    reserved += std::max<int64_t>(0, r->beam_worst_blocks - static_cast<int64_t>(held.size()));
  }
  // The step's token budget: sources encoded at the start, then the slots'
  // tokens (below).
  int64_t budget = options_.max_batch_tokens;
  bool started = false;
  for (Request* r : std::vector<Request*>(beam_jobs_)) {
    if (r->beam != nullptr) continue;
    // One search a step may encode a source past the budget; others wait.
    if (started && r->admission_tokens > budget) break;
    // False: it waits, and so do those after it (or its encoder pass failed
    // and it is gone; the next step starts the others).
    if (!StartBeam(r, reserved)) break;
    budget -= r->admission_tokens;
    r->admission_tokens = 0;
    started = true;
    reserved += r->beam_worst_blocks;
    running.push_back(r);
  }
  // Blocks for what this forward writes. A search's prompt (its one slot
  // before the first step) is run in chunks within the step's token budget,
  // as the scheduler chunks prefills: each search still runs at least one
  // token a step.
  std::vector<model::SequenceChunk> chunks;
  std::vector<Request*> stepped;
  std::vector<int64_t> chunk_lens;  // per slot of the stepped searches, in order
  bool prefill = false;
  int32_t tokens = 0;
  for (Request* r : running) {
    bool ok = true;
    const size_t first_len = chunk_lens.size();
    for (BeamSlot& slot : r->beam_slots) {
      const int64_t pending = static_cast<int64_t>(slot.tokens.size()) - slot.num_cached;
      const int64_t len = std::min<int64_t>(pending, std::max<int64_t>(budget, 1));
      budget -= len;
      chunk_lens.push_back(len);
      // Blocks for the whole prompt at once, as the search's start counted
      // them: the scheduler does not know of beam reservations, and could
      // take them between two chunks.
      ok = ok && cache_->allocator().EnsureCapacity(&slot.blocks,
                                                    static_cast<int64_t>(slot.tokens.size()));
    }
    if (!ok) {
      chunk_lens.resize(first_len);
      FinishBeam(r, FinishReason::kError,
                 absl::ResourceExhaustedError(
                     "the KV cache filled up during beam search; retry later or with fewer beams"));
      continue;
    }
    stepped.push_back(r);
    for (size_t i = 0; i < r->beam_slots.size(); ++i) {
      BeamSlot& slot = r->beam_slots[i];
      model::SequenceChunk c;
      c.tokens =
          absl::MakeConstSpan(slot.tokens).subspan(slot.num_cached, chunk_lens[first_len + i]);
      c.start_pos = slot.num_cached;
      c.block_table = &slot.blocks;
      c.cross = r->cross.get();
      prefill |= c.tokens.size() > 1;
      tokens += static_cast<int32_t>(c.tokens.size());
      chunks.push_back(c);
    }
  }
  if (chunks.empty()) return;
  const absl::Time start = absl::Now();
  at::Tensor logits;
  try {
    logits = transformer_->Decode(chunks, cache_.get(), model::ForwardOptions{})
                 .logits.to(at::kCPU)
                 .contiguous();
    if (FailpointArmed("engine.nan_logits")) logits = at::full_like(logits, std::nanf(""));
  } catch (const std::exception& e) {
    const absl::Status error = absl::InternalError(absl::StrCat("forward failed: ", e.what()));
    for (Request* r : stepped) FinishBeam(r, FinishReason::kError, error);
    return;
  }
  if (listener_ != nullptr) {
    listener_->OnStep(StepTiming{prefill, static_cast<int32_t>(chunks.size()), tokens,
                                 absl::Now() - start});
  }
  const int64_t vocab = logits.size(1);
  const float* row = logits.data_ptr<float>();
  size_t slot_index = 0;
  for (Request* r : stepped) {
    std::vector<absl::Span<const float>> rows;
    bool whole = true;  // every slot's tokens are cached: the search steps
    for (BeamSlot& slot : r->beam_slots) {
      slot.num_cached += chunk_lens[slot_index++];
      whole = whole && slot.num_cached == static_cast<int64_t>(slot.tokens.size());
      rows.emplace_back(row, vocab);
      row += vocab;
    }
    if (!whole) continue;  // its prompt continues next step
    if (!r->first_token_at) r->first_token_at = absl::Now();
    // NaN or +inf (a float16 overflow, say) would rank every proposal as
    // NaN: garbage hypotheses and a search that never ends early.
    bool bad = false;
    for (absl::Span<const float> logits : rows) {
      model::CpuMaxChecked(logits.data(), static_cast<int64_t>(logits.size()), &bad);
      if (bad) break;
    }
    if (bad) {
      FinishBeam(r, FinishReason::kError,
                 absl::InternalError("the model produced NaN or +inf logits"));
      continue;
    }
    const std::vector<BeamSearch::Choice> choices = r->beam->Step(rows);
    if (r->beam->done()) {
      FinishBeam(r, FinishReason::kLength);
      continue;
    }
    AdvanceBeams(r, choices);
  }
}

void EngineImpl::AdvanceBeams(Request* r, const std::vector<BeamSearch::Choice>& choices) {
  model::KvBlockAllocator& allocator = cache_->allocator();
  std::vector<BeamSlot>& parents = r->beam_slots;
  std::vector<int32_t> children(parents.size(), 0);
  for (const BeamSearch::Choice& c : choices) ++children[c.parent];
  std::vector<BeamSlot> next(choices.size());
  // A parent's last child takes its slot over; the ones before fork it
  // (while it is still intact).
  for (size_t i = 0; i < choices.size(); ++i) {
    BeamSlot& parent = parents[choices[i].parent];
    if (--children[choices[i].parent] == 0) {
      next[i] = std::move(parent);
    } else {
      std::pair<int32_t, int32_t> copy;
      if (!allocator.Fork(parent.blocks, parent.num_cached, &next[i].blocks, &copy)) {
        for (BeamSlot& slot : next) allocator.Release(&slot.blocks);
        FinishBeam(r, FinishReason::kError,
                   absl::ResourceExhaustedError(
                       "the KV cache filled up during beam search; retry later or with fewer "
                       "beams"));
        return;
      }
      if (copy.first >= 0) cache_->CopySlots(copy.first, copy.second, parent.num_cached % allocator.block_size());
      next[i].tokens = parent.tokens;
      next[i].num_cached = parent.num_cached;
    }
    next[i].tokens.push_back(choices[i].token);
  }
  for (BeamSlot& parent : parents) allocator.Release(&parent.blocks);  // childless ones (moved: empty)
  parents = std::move(next);
}

void EngineImpl::FinishBeam(Request* r, FinishReason reason, absl::Status status) {
  auto it = std::find(beam_jobs_.begin(), beam_jobs_.end(), r);
  if (it != beam_jobs_.end()) beam_jobs_.erase(it);
  for (BeamSlot& slot : r->beam_slots) cache_->allocator().Release(&slot.blocks);
  r->beam_slots.clear();
  const absl::Time now = absl::Now();
  GenerateSummary summary;
  summary.reason = reason;
  summary.status = std::move(status);
  summary.prompt_tokens = static_cast<int32_t>(r->gen.source.size() + r->tokens.size());
  summary.samples = r->gen.n;
  summary.queue_time = (r->scheduled_at ? *r->scheduled_at : now) - r->submitted;
  summary.time_to_first_token =
      r->first_token_at ? *r->first_token_at - r->submitted : absl::ZeroDuration();
  if (reason == FinishReason::kLength && r->beam != nullptr && r->beam->done()) {
    const std::vector<BeamHypothesis> best = r->beam->Best(r->gen.n);
    for (size_t i = 0; i < best.size(); ++i) {
      const BeamHypothesis& h = best[i];
      GeneratedChunk chunk;
      chunk.index = static_cast<int32_t>(i);
      chunk.tokens = h.tokens;
      std::vector<int32_t> ids;
      for (const GeneratedToken& t : h.tokens) ids.push_back(t.token_id);
      if (h.reason != FinishReason::kLength && !ids.empty()) ids.pop_back();  // the ending token
      chunk.text = DecodeAfter(*tokenizer_, r->gen.prompt, ids);
      chunk.finish = h.reason;
      chunk.cumulative_logprob = h.sum;
      chunk.beam_score = h.score;
      chunk.held = true;
      summary.generated_tokens += static_cast<int32_t>(h.tokens.size());
      if (i == 0) summary.reason = h.reason;
      r->observer->OnChunk(std::move(chunk));
    }
  }
  summary.total_time = now - r->submitted;
  if (listener_ != nullptr) listener_->OnGenerateFinished(summary);
  std::shared_ptr<GenerateObserver> observer = std::move(r->observer);
  requests_.erase(r->id);  // r is gone from here on
  stat_finished_.fetch_add(1);
  {
    dikkat::MutexLock lock(&mu_);
    --in_flight_;
    PublishQueued();
  }
  observer->OnFinish(std::move(summary));
}

}  // namespace dikkat::server::engine_internal
