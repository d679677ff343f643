// SampleGroup: the samples of one Generate call with n > 1 or best_of > 1,
// merged back into the single stream its observer expects.
//
// The engine runs each sample as its own request (they share the prompt's
// K/V through the prefix cache) and hands every sample's chunks and finish
// here. With best_of == n the chunks go on at once, tagged with their sample
// index; with best_of > n they are held until every sample has finished, and
// then the n of highest cumulative logprob are sent, re-indexed 0..n-1 best
// first (ties: the lower sample first). Each sample's end is a chunk with
// `finish` set. The observer's OnFinish comes once, after the last sample,
// with a summary of the whole call (GenerateSummary::samples > 1).
//
// A sample that ends in an error, a deadline or a cancellation ends the call
// so: the engine stops the other samples, and nothing held is sent.
//
// Memory: with best_of > n the held chunks count against the engine's
// HeldOutputBudget (EngineOptions::max_held_output_bytes, all calls
// together); the chunk that would pass it ends its call with
// RESOURCE_EXHAUSTED, and what the call held is dropped. Thread-safety: none;
// the engine thread owns it (the budget's count is atomic, for stats()).
#ifndef DIKKAT_SERVER_SAMPLE_GROUP_H_
#define DIKKAT_SERVER_SAMPLE_GROUP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "server/engine.h"

namespace dikkat::server {

// The engine's count of output held by its sample groups, and its bound.
struct HeldOutputBudget {
  explicit HeldOutputBudget(int64_t limit_bytes) : limit(limit_bytes) {}
  const int64_t limit;  // 0: no limit
  std::atomic<int64_t> used{0};
};

// The least output a call with best_of > n must hold, in ChunkBytes' bytes:
// each sample's `new_tokens` tokens (one chunk each, at least the structs of
// the token and its alternatives, no text), and the prompt's logprobs.
// `new_tokens` is the number every sample must generate: max_new_tokens when
// nothing can end it early (ignore_eos, no stop tokens or strings), else 0.
// `vocab_size` caps the alternatives. A call past the bound by this much
// cannot finish, whatever it samples: the engine refuses it before any
// compute.
int64_t LeastHeldOutputBytes(const GenerateRequest& request, int32_t best_of,
                             int64_t new_tokens, int64_t vocab_size);

class SampleGroup {
 public:
  // `seed`: the call's, when it gave one (else drawn at the first admission).
  // `budget` (may be null: no bound) counts what the group holds;
  // `call_held` (may be null: the group is the whole call) what the groups
  // of one call hold together (Engine::SubmitGenerateAll), for telling a call
  // that would pass the bound alone from calls that pass it together.
  SampleGroup(std::shared_ptr<GenerateObserver> observer, int32_t n, int32_t best_of,
              std::optional<uint64_t> seed, std::shared_ptr<HeldOutputBudget> budget = nullptr,
              std::shared_ptr<int64_t> call_held = nullptr);
  ~SampleGroup();
  SampleGroup(const SampleGroup&) = delete;
  SampleGroup& operator=(const SampleGroup&) = delete;

  int32_t n() const { return n_; }
  int32_t best_of() const { return best_of_; }
  // Engine ids of the samples' requests, by sample index.
  std::vector<RequestId>& members() { return members_; }
  const std::vector<RequestId>& members() const { return members_; }

  // The seed the call's samples derive theirs from (sample i: + i): the
  // call's, or drawn from `source` by the first sample admitted.
  uint64_t base_seed(std::mt19937_64* source) {
    if (!base_seed_.has_value()) base_seed_ = (*source)();
    return *base_seed_;
  }

  // The call scores its prompt (prompt_logprobs): sample 0's first chunk
  // carries the scores, and the observer's first chunk must. Until it comes
  // (or sample 0 ends), the other samples' chunks are held (best_of == n; a
  // sample may run ahead of sample 0, whose prefill returns every row's
  // logits in smaller chunks).
  void ExpectPromptScores() { waiting_scores_ = true; }

  // A chunk of sample `index` (its `index` field is set here). Returns true
  // when the other samples must be stopped: holding it would pass the
  // budget, and the call now ends with RESOURCE_EXHAUSTED.
  bool OnChunk(int32_t index, GeneratedChunk chunk);

  // Sample `index` finished with `summary` after tokens whose logprobs sum to
  // `cumulative_logprob`. Returns true when the other samples must be
  // stopped (this one ended in an error, a deadline or a cancellation).
  bool OnSampleFinish(int32_t index, const GenerateSummary& summary, double cumulative_logprob);

  // Every sample has finished.
  bool done() const { return finished_ == best_of_; }
  // When done(): the call's summary.
  const GenerateSummary& summary() const { return summary_; }
  // When done(): sends what is held (best_of > n) and calls OnFinish.
  void Finish();

 private:
  void Forward(GeneratedChunk chunk);
  // best_of == n: forwards sample `index`'s chunk, or holds it while sample
  // 0's first chunk (with the prompt's scores) has not come.
  void Pass(int32_t index, GeneratedChunk chunk);
  // Drops what is held and gives its bytes back to the budget.
  void ReleaseHeld();

  std::shared_ptr<GenerateObserver> observer_;
  const int32_t n_;
  const int32_t best_of_;
  std::vector<RequestId> members_;
  int32_t finished_ = 0;
  std::vector<GeneratedToken> prompt_logprobs_;  // until a chunk carries them
  bool waiting_scores_ = false;                   // ExpectPromptScores, until sample 0 sends
  std::vector<GeneratedChunk> before_scores_;     // other samples' chunks meanwhile
  // best_of > n: every sample's chunks, its finish and cumulative logprob.
  std::vector<std::vector<GeneratedChunk>> held_;
  std::vector<FinishReason> reasons_;
  std::vector<double> cumulative_;
  GenerateSummary summary_;
  std::optional<FinishReason> ended_;  // kError / kDeadline / kCancelled of the first such sample
  std::optional<uint64_t> base_seed_;
  std::shared_ptr<HeldOutputBudget> budget_;
  int64_t held_bytes_ = 0;  // of held_, counted in budget_
  std::shared_ptr<int64_t> call_held_;  // counts held_bytes_ too, when set
  absl::Status error_;      // the call's end when the budget refused a chunk
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_SAMPLE_GROUP_H_
