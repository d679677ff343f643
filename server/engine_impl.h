// EngineImpl: the Engine (server/engine.h) over one LibTorch model. Internal
// to server/engine.cc (the engine thread: schedule -> run -> postprocess, and
// the finish/notify contract) and server/engine_submit.cc (creation and what
// callers' threads do: check, enqueue, cancel, stats, shutdown, warmup).
//
// Owns the model, its KV cache, the request inbox and the engine thread.
// Thread-safety: the Engine methods may be called from any thread; the inbox
// (mu_) is the only state shared with the engine thread, everything under
// "engine-thread state" is touched by that thread alone. LibTorch-free: the
// model types are only named here.
#ifndef DIKKAT_SERVER_ENGINE_IMPL_H_
#define DIKKAT_SERVER_ENGINE_IMPL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/sync.h"
#include "model/io/config.h"
#include "model/text/tokenizer.h"
#include "server/engine.h"
#include "server/beam_search.h"
#include "server/request_checks.h"
#include "server/sample_group.h"
#include "server/scheduler.h"
#include "server/text_stream.h"

namespace at {
class Tensor;
}  // namespace at

namespace dikkat::model {
class KvCache;
class Sampler;
class Transformer;
struct CrossAttentionCache;
struct SampledToken;
}  // namespace dikkat::model

namespace dikkat::server::engine_internal {

enum class RequestKind { kGenerate, kBeam, kEncode, kAttention };

// One live beam of a beam-search request: its decoder tokens and KV blocks.
struct BeamSlot {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;  // full blocks may be shared with other beams (read-only)
  int64_t num_cached = 0;
};

// One request's whole state. Owned by the engine thread once taken from the
// inbox. Its Sequence part (id, deadline, cancelled, tokens, KV block table) is
// what the scheduler sees of a Generate request.
struct Request : Sequence {
  Request();
  ~Request();  // in engine.cc, where the model types are complete

  RequestKind kind = RequestKind::kGenerate;
  absl::Time submitted;

  // ---- Generate ----
  GenerateRequest gen;
  std::shared_ptr<GenerateObserver> observer;
  int32_t prompt_len = 0;  // set at the first admission
  int32_t cached_prompt_tokens = 0;  // mapped from the prefix cache at the first admission
  std::unique_ptr<model::Sampler> sampler;
  std::unique_ptr<model::CrossAttentionCache> cross;
  std::unique_ptr<TextStream> text;
  int32_t generated = 0;
  int32_t max_new = 0;
  std::optional<absl::Time> scheduled_at, first_token_at, last_token_at;
  double cumulative_logprob = 0.0;  // of the generated tokens (what best_of ranks by)
  // gen.prompt_logprobs >= 0: entry i scores prompt token i + 1; filled in
  // order as prefill chunks run, kept across preemptions, sent with the
  // first chunk.
  std::vector<GeneratedToken> prompt_scores;
  bool prompt_scores_sent = false;
  // n or best_of > 1: the call this request is sample `sample_index` of; its
  // output goes to the group, not to `observer` (null then).
  std::shared_ptr<SampleGroup> group;
  int32_t sample_index = 0;

  // ---- Beam search (kBeam): run by engine_beams.cc, outside the scheduler ----
  std::unique_ptr<BeamSearch> beam;  // set when started
  std::vector<BeamSlot> beam_slots;  // by live beam
  int64_t beam_worst_blocks = 0;     // beam_width x the blocks of its whole length

  // ---- Encode / Attention ----
  EncodeRequest enc;
  EncodeCallback enc_done;
  EncodeResult enc_result;  // the inputs run so far, [0, enc_next)
  size_t enc_next = 0;
  AttentionRequest att;
  AttentionCallback att_done;
};

class EngineImpl final : public Engine {
 public:
  // Starts the engine thread.
  EngineImpl(ModelDescription description, model::ModelConfig config,
             std::unique_ptr<model::Transformer> transformer,
             std::unique_ptr<model::Tokenizer> tokenizer, std::unique_ptr<model::KvCache> cache,
             EngineOptions options, EngineListener* listener);
  // Shutdown(0): cancels what is left and joins the thread.
  ~EngineImpl() override;

  const ModelDescription& description() const override { return description_; }
  const model::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const EngineOptions& options() const override { return options_; }

  absl::Status Warmup() override;
  absl::StatusOr<RequestId> SubmitGenerate(GenerateRequest request,
                                           std::shared_ptr<GenerateObserver> observer) override;
  absl::StatusOr<std::vector<RequestId>> SubmitGenerateAll(
      std::vector<GenerateRequest> requests,
      std::vector<std::shared_ptr<GenerateObserver>> observers) override;
  absl::StatusOr<RequestId> SubmitEncode(EncodeRequest request, EncodeCallback done) override;
  absl::StatusOr<RequestId> SubmitAttention(AttentionRequest request,
                                            AttentionCallback done) override;
  void Cancel(RequestId id) override;
  EngineStats stats() const override;
  void StopAccepting() override;
  void Shutdown(absl::Duration grace) override;

 private:
  // ---- submission (any thread): engine_submit.cc ----
  absl::StatusOr<RequestId> Enqueue(std::unique_ptr<Request> request);
  absl::StatusOr<RequestId> EnqueueAll(std::vector<std::unique_ptr<Request>> requests);
  absl::Status ValidateGenerate(const GenerateRequest& request) const;
  // The least output `request` must hold (LeastHeldOutputBytes; 0 when it
  // holds none: best_of <= n, beams); `what` it is, for messages, and the
  // new `tokens` every sample must make (0 when it could stop early).
  int64_t LeastHeld(const GenerateRequest& request, std::string* what = nullptr,
                    int64_t* tokens = nullptr) const;
  // A checked request's engine requests (one, or one per sample); the
  // samples' group counts what it holds in `call_held` too when that is set
  // (the held output of all of one call's requests, SubmitGenerateAll).
  std::vector<std::unique_ptr<Request>> MakeGenerate(GenerateRequest request,
                                                     std::shared_ptr<GenerateObserver> observer,
                                                     std::shared_ptr<int64_t> call_held);
  // The tokens `request` generates at most after a decoder input of
  // `decoder_len` tokens: its max_new_tokens (0: the default), capped by
  // what the context leaves (the same number at submission, admission and
  // a beam search's start).
  int32_t MaxNewTokens(const GenerateRequest& request, int64_t decoder_len) const {
    return server::MaxNewTokens(request, decoder_len, config_, options_);
  }

  // ---- engine thread: engine.cc ----
  void Loop();
  bool TakeInbox();
  void DrainInbox() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Beam-search requests not started yet (they count as queued).
  int32_t WaitingBeams() const;
  void ExpireAuxiliary(absl::Time now);
  // ---- beam search, engine thread: engine_beams.cc ----
  // One step of every beam-search request (a forward over all their live
  // beams), starting waiting ones when their worst case fits in the cache.
  void RunBeams();
  // Starts `r` if its worst case fits in the available blocks less `reserved`
  // (what the started beam searches may still take); false: it waits.
  bool StartBeam(Request* r, int64_t reserved);
  // Moves or forks the parents' slots into the next live beams.
  void AdvanceBeams(Request* r, const std::vector<BeamSearch::Choice>& choices);
  void FinishBeam(Request* r, FinishReason reason, absl::Status status = absl::OkStatus());
  void RunAuxiliary();
  void OnAuxiliaryStep(int32_t sequences, int32_t tokens, absl::Time start);
  ScheduleResult Schedule(absl::Time now);
  std::optional<at::Tensor> Run(const ScheduleResult& plan);
  void Postprocess(const ScheduleResult& plan, const at::Tensor& logits);
  absl::Status Admit(Request* r);
  void Emit(Request* r, const model::SampledToken& token);
  // Whether `r`'s next chunk of `chunk_len` tokens returns every row's logits
  // (it holds prompt positions still to score).
  static bool WantsPromptLogits(const Request& r, int64_t chunk_len);
  // Scores the prompt positions of the chunk at `r`'s num_cached whose
  // logits are rows [row, row + chunk_len) of `logits` [rows, vocab].
  void ScorePrompt(Request* r, int64_t chunk_len, const float* logits, int64_t row, int64_t vocab);
  // Hands a chunk to the request's observer or sample group.
  void Deliver(Request* r, GeneratedChunk chunk);
  // Stops every sample of `group` (its call has ended).
  void StopSamples(const SampleGroup& group);
  void FinishGenerate(Request* r, FinishReason reason, absl::Status status = absl::OkStatus());
  void FinishAuxiliary(Request* r, absl::Status status);
  void PublishStats();

  const ModelDescription description_;
  const model::ModelConfig config_;
  std::unique_ptr<model::Transformer> transformer_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<model::KvCache> cache_;  // the tensors: engine thread only
  const EngineOptions options_;
  EngineListener* listener_;  // not owned; may be null

  // Inbox shared with submitters.
  mutable dikkat::Mutex mu_;
  std::deque<std::unique_ptr<Request>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancels_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Waiting Generate + queued Encode/Attention requests as the engine thread
  // last published them; with inbox_ it is the queue that backpressure bounds.
  int32_t engine_queued_ ABSL_GUARDED_BY(mu_) = 0;
  // Accepted and not yet finished, wherever they are (inbox, waiting,
  // running, auxiliary). Shutdown waits for it to reach 0: the published
  // stat_running_ lags a step behind admission, so a drain that waited on it
  // took a request admitted from the queue for idleness and cut it.
  int32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> next_id_{1};
  std::thread thread_;
  dikkat::Mutex shutdown_mu_;

  // Engine-thread state.
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  Scheduler scheduler_;             // Generate: waiting and running, KV block tables
  std::deque<Request*> auxiliary_;  // Encode / Attention, FIFO
  std::vector<Request*> beam_jobs_;  // beam search, in arrival order
  std::mt19937_64 seed_source_{std::random_device{}()};

  // Published snapshot.
  std::atomic<int32_t> stat_running_{0}, stat_waiting_{0}, stat_blocks_used_{0},
      stat_blocks_cached_{0};
  std::atomic<int64_t> stat_prefix_hit_tokens_{0}, stat_prefix_query_tokens_{0};
  mutable dikkat::Mutex stats_mu_;
  std::map<int32_t, int32_t> waiting_by_priority_ ABSL_GUARDED_BY(stats_mu_);
  std::atomic<int64_t> stat_finished_{0}, stat_preemptions_{0};
  // Output held by sample groups (best_of > n), shared with each group.
  const std::shared_ptr<HeldOutputBudget> held_budget_ =
      std::make_shared<HeldOutputBudget>(options_.max_held_output_bytes);
};

}  // namespace dikkat::server::engine_internal

#endif  // DIKKAT_SERVER_ENGINE_IMPL_H_
