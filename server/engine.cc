// The engine thread: continuous batching over the paged KV cache.
//
// step() = TakeInbox -> Expire -> RunAuxiliary (Encode/Attention) ->
//          Schedule -> Forward -> Postprocess, each short (nano-vllm's shape).
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

#include <atomic>
#include <deque>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/strings/str_cat.h"
#include "common/sync.h"
#include "model/kv_cache.h"
#include "model/model_loader.h"
#include "model/sampler.h"
#include "model/status_macros.h"
#include "model/transformer.h"
#include "server/auxiliary_jobs.h"
#include "server/request_checks.h"
#include "server/scheduler.h"
#include "server/text_stream.h"

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

namespace {

using model::Architecture;

enum class RequestKind { kGenerate, kEncode, kAttention };

// One request's whole state. Owned by the engine thread once taken from the
// inbox. Its Sequence part (id, deadline, cancelled, tokens, KV block table) is
// what the scheduler sees of a Generate request.
struct Request : Sequence {
  RequestKind kind = RequestKind::kGenerate;
  absl::Time submitted;

  // ---- Generate ----
  GenerateRequest gen;
  std::shared_ptr<GenerateObserver> observer;
  int32_t prompt_len = 0;           // set at the first admission
  std::unique_ptr<model::Sampler> sampler;
  std::unique_ptr<model::CrossAttentionCache> cross;
  std::unique_ptr<TextStream> text;
  int32_t generated = 0;
  int32_t max_new = 0;
  std::optional<absl::Time> scheduled_at, first_token_at, last_token_at;

  // ---- Encode / Attention ----
  EncodeRequest enc;
  EncodeCallback enc_done;
  AttentionRequest att;
  AttentionCallback att_done;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(ModelDescription description, model::LoadedModel loaded, model::KvCache cache,
             EngineOptions options, EngineListener* listener)
      : description_(std::move(description)),
        config_(loaded.config),
        transformer_(std::move(loaded.transformer)),
        tokenizer_(std::move(loaded.tokenizer)),
        cache_(std::move(cache)),
        options_(std::move(options)),
        listener_(listener),
        scheduler_(SchedulerOptions{options_.max_batch_size, options_.max_batch_tokens},
                   &cache_.allocator()) {
    thread_ = std::thread([this] { Loop(); });
  }

  ~EngineImpl() override { Shutdown(absl::ZeroDuration()); }

  const ModelDescription& description() const override { return description_; }
  const model::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const EngineOptions& options() const override { return options_; }

  absl::Status Warmup() override;
  absl::StatusOr<RequestId> SubmitGenerate(GenerateRequest request,
                                           std::shared_ptr<GenerateObserver> observer) override;
  absl::StatusOr<RequestId> SubmitEncode(EncodeRequest request, EncodeCallback done) override;
  absl::StatusOr<RequestId> SubmitAttention(AttentionRequest request,
                                            AttentionCallback done) override;
  void Cancel(RequestId id) override;
  EngineStats stats() const override;
  void Shutdown(absl::Duration grace) override;

 private:
  // ---- submission (any thread) ----
  absl::StatusOr<RequestId> Enqueue(std::unique_ptr<Request> request);
  absl::Status ValidateGenerate(const GenerateRequest& request) const;

  // ---- engine thread ----
  void Loop();
  bool TakeInbox();
  void DrainInbox() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireAuxiliary(absl::Time now);
  void RunAuxiliary();
  void OnAuxiliaryStep(int32_t sequences, int32_t tokens, absl::Time start);
  ScheduleResult Schedule(absl::Time now);
  void Forward(const ScheduleResult& plan);
  void Admit(Request* r);
  void Emit(Request* r, const model::SampledToken& token);
  void FinishGenerate(Request* r, FinishReason reason, absl::Status status = absl::OkStatus());
  void FinishAuxiliary(Request* r, absl::Status status);
  void PublishStats();

  const ModelDescription description_;
  const model::ModelConfig config_;
  std::unique_ptr<model::Transformer> transformer_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  model::KvCache cache_;  // engine thread only
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
  Scheduler scheduler_;               // Generate: waiting and running, KV block tables
  std::deque<Request*> auxiliary_;    // Encode / Attention, FIFO
  std::mt19937_64 seed_source_{std::random_device{}()};

  // Published snapshot.
  std::atomic<int32_t> stat_running_{0}, stat_waiting_{0}, stat_blocks_used_{0};
  std::atomic<int64_t> stat_finished_{0}, stat_preemptions_{0};
};

// ---------------------------------------------------------------------------
// Submission
// ---------------------------------------------------------------------------

// The one request check (server/request_checks.h), against the config under
// the name the model is served as, plus what only the engine knows: whether
// the prompt can ever fit in the KV cache.
absl::Status EngineImpl::ValidateGenerate(const GenerateRequest& r) const {
  DIKKAT_RETURN_IF_ERROR(CheckGenerateRequest(r, description_.config, options_));
  const int64_t decoder_len = static_cast<int64_t>(r.prompt.size()) +
                              (config_.architecture == Architecture::kEncoderDecoder ? 1 : 0);
  const int64_t needed = cache_.allocator().BlocksFor(decoder_len + 1);
  if (needed > cache_.allocator().num_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the prompt needs ", needed, " KV blocks but the cache has ",
        cache_.allocator().num_blocks(), "; raise --kv_cache_bytes or shorten the prompt"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestId> EngineImpl::Enqueue(std::unique_ptr<Request> request) {
  request->id = next_id_.fetch_add(1);
  request->submitted = absl::Now();
  const RequestId id = request->id;
  dikkat::MutexLock lock(&mu_);
  if (draining_ || stop_) {
    return absl::UnavailableError("the server is shutting down; retry on another replica");
  }
  if (static_cast<int64_t>(inbox_.size()) + engine_queued_ >= options_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request queue is full (", options_.max_queue, " waiting); retry later"));
  }
  ++in_flight_;
  inbox_.push_back(std::move(request));
  return id;
}

absl::StatusOr<RequestId> EngineImpl::SubmitGenerate(GenerateRequest request,
                                                     std::shared_ptr<GenerateObserver> observer) {
  DIKKAT_RETURN_IF_ERROR(ValidateGenerate(request));
  auto r = std::make_unique<Request>();
  r->kind = RequestKind::kGenerate;
  r->deadline = request.deadline;
  if (config_.architecture == Architecture::kEncoderDecoder) {
    r->tokens.push_back(static_cast<int32_t>(config_.decoder_start_token_id >= 0
                                                 ? config_.decoder_start_token_id
                                                 : config_.bos_token_id));
  }
  r->tokens.insert(r->tokens.end(), request.prompt.begin(), request.prompt.end());
  r->gen = std::move(request);
  r->observer = std::move(observer);
  return Enqueue(std::move(r));
}

absl::StatusOr<RequestId> EngineImpl::SubmitEncode(EncodeRequest request, EncodeCallback done) {
  DIKKAT_RETURN_IF_ERROR(CheckEncodeRequest(request, description_.config, options_));
  auto r = std::make_unique<Request>();
  r->kind = RequestKind::kEncode;
  r->deadline = request.deadline;
  r->enc = std::move(request);
  r->enc_done = std::move(done);
  return Enqueue(std::move(r));
}

absl::StatusOr<RequestId> EngineImpl::SubmitAttention(AttentionRequest request,
                                                      AttentionCallback done) {
  DIKKAT_RETURN_IF_ERROR(CheckAttentionRequest(request, description_.config, options_));
  auto r = std::make_unique<Request>();
  r->kind = RequestKind::kAttention;
  r->deadline = request.deadline;
  r->att = std::move(request);
  r->att_done = std::move(done);
  return Enqueue(std::move(r));
}

void EngineImpl::Cancel(RequestId id) {
  dikkat::MutexLock lock(&mu_);
  cancels_.push_back(id);
}

EngineStats EngineImpl::stats() const {
  EngineStats s;
  s.running = stat_running_.load();
  s.waiting = stat_waiting_.load();
  s.kv_blocks_total = cache_.allocator().num_blocks();
  s.kv_blocks_used = stat_blocks_used_.load();
  s.kv_block_size = cache_.block_size();
  s.kv_cache_bytes = cache_.total_bytes();
  s.weights_bytes = description_.weights_bytes;
  s.requests_finished = stat_finished_.load();
  s.preemptions = stat_preemptions_.load();
  return s;
}

void EngineImpl::Shutdown(absl::Duration grace) {
  dikkat::MutexLock shutdown_lock(&shutdown_mu_);
  if (!thread_.joinable()) return;
  {
    dikkat::MutexLock lock(&mu_);
    draining_ = true;
    // Wait for in-flight work to finish, up to the grace period.
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    mu_.AwaitWithTimeout(absl::Condition(&idle), grace);
    stop_ = true;
  }
  thread_.join();
}

absl::Status EngineImpl::Warmup() {
  dikkat::Notification done;
  absl::Status result;
  if (config_.has_decoder()) {
    class WarmupObserver : public GenerateObserver {
     public:
      WarmupObserver(dikkat::Notification* done, absl::Status* result) : done_(done), result_(result) {}
      void OnChunk(GeneratedChunk) override {}
      void OnFinish(GenerateSummary summary) override {
        *result_ = summary.status;
        done_->Notify();
      }

     private:
      dikkat::Notification* done_;
      absl::Status* result_;
    };
    GenerateRequest req;
    const int32_t token = static_cast<int32_t>(std::max<int64_t>(config_.bos_token_id, 0));
    req.prompt = {token, token};
    if (config_.architecture == Architecture::kEncoderDecoder) req.source = {token, token};
    if (config_.architecture == Architecture::kEncoderDecoder) req.prompt.clear();
    req.max_new_tokens = 2;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    DIKKAT_RETURN_IF_ERROR(
        SubmitGenerate(std::move(req), std::make_shared<WarmupObserver>(&done, &result)).status());
    done.WaitForNotification();
    return result;
  }
  EncodeRequest req;
  req.inputs = {{0, 0}};
  DIKKAT_RETURN_IF_ERROR(SubmitEncode(std::move(req), [&](absl::StatusOr<EncodeResult> r) {
                           result = r.status();
                           done.Notify();
                         }).status());
  done.WaitForNotification();
  return result;
}

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
    const ScheduleResult plan = Schedule(now);
    if (!plan.batch.empty()) Forward(plan);
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
    } else {
      auxiliary_.push_back(raw);
    }
  }
  PublishQueued();
}

void EngineImpl::PublishQueued() {
  engine_queued_ = static_cast<int32_t>(scheduler_.waiting().size() + auxiliary_.size());
}

// Moves new requests and cancellations into engine-thread state; waits when
// idle. Returns false when the engine must stop.
bool EngineImpl::TakeInbox() {
  dikkat::MutexLock lock(&mu_);
  const bool busy = !scheduler_.empty() || !auxiliary_.empty();
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
    if (it != requests_.end()) it->second->cancelled = true;
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
    FinishAuxiliary(r, r->cancelled ? absl::CancelledError("cancelled by the caller")
                                    : absl::DeadlineExceededError("the deadline passed in the queue"));
  }
}

void EngineImpl::RunAuxiliary() {
  // Encode/Attention are prefill-only and short; run a few per step so that
  // decoding sequences are never starved for long. Each is one prefill step
  // for the metrics (docs/metrics.md), whether it succeeds or fails.
  for (int i = 0; i < 4 && !auxiliary_.empty(); ++i) {
    Request* r = auxiliary_.front();
    const absl::Time start = absl::Now();
    if (r->kind == RequestKind::kEncode) {
      absl::StatusOr<EncodeResult> result = RunEncode(*transformer_, r->enc);
      int32_t tokens = 0;
      for (const std::vector<int32_t>& input : r->enc.inputs) {
        tokens += static_cast<int32_t>(input.size());
      }
      OnAuxiliaryStep(static_cast<int32_t>(r->enc.inputs.size()), tokens, start);
      EncodeCallback done = std::move(r->enc_done);
      r->enc_done = nullptr;
      FinishAuxiliary(r, absl::OkStatus());  // bookkeeping; `done` gets the result
      done(std::move(result));
    } else {
      absl::StatusOr<AttentionResult> result = RunAttention(*transformer_, r->att);
      OnAuxiliaryStep(1, static_cast<int32_t>(r->att.input.size() + r->att.target.size()), start);
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
// K/V, which a preemption keeps (it frees only the KV blocks).
void EngineImpl::Admit(Request* r) {
  r->scheduled_at = absl::Now();
  if (r->sampler == nullptr) {
    const uint64_t seed = r->gen.sampling.seed.value_or(seed_source_());
    r->sampler = std::make_unique<model::Sampler>(r->gen.sampling, seed);
    r->text = std::make_unique<TextStream>(tokenizer_.get(), r->gen.stop_strings,
                                           r->gen.include_stop_text);
    r->prompt_len = static_cast<int32_t>(r->tokens.size());
    r->sampler->ObserveAll(r->tokens);
    const int32_t requested =
        r->gen.max_new_tokens > 0 ? r->gen.max_new_tokens : options_.default_max_new_tokens;
    r->max_new = static_cast<int32_t>(
        std::min<int64_t>(requested, config_.max_positions - r->prompt_len));
  }
  if (config_.architecture == Architecture::kEncoderDecoder && r->cross == nullptr) {
    r->cross = EncodeSource(*transformer_, r->gen.source);
  }
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
  for (Sequence* s : plan.admitted) Admit(static_cast<Request*>(s));
  {
    dikkat::MutexLock lock(&mu_);
    PublishQueued();
  }
  return plan;
}

void EngineImpl::Forward(const ScheduleResult& plan) {
  std::vector<Request*> batch;
  for (Sequence* s : plan.batch) batch.push_back(static_cast<Request*>(s));
  const std::vector<int64_t>& chunk_lens = plan.chunk_lens;
  std::vector<model::SequenceChunk> chunks;
  chunks.reserve(batch.size());
  bool prefill = false;
  int32_t tokens = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    Request* r = batch[i];
    model::SequenceChunk c;
    c.tokens = absl::MakeConstSpan(r->tokens).subspan(r->num_cached, chunk_lens[i]);
    c.start_pos = r->num_cached;
    c.block_table = &r->blocks;
    c.cross = r->cross.get();
    chunks.push_back(c);
    prefill |= chunk_lens[i] > 1 || r->num_cached == 0;
    tokens += static_cast<int32_t>(chunk_lens[i]);
  }
  const absl::Time start = absl::Now();
  at::Tensor logits;
  try {
    model::ForwardOptions opts;
    logits = transformer_->Decode(chunks, &cache_, opts).logits.to(at::kCPU).contiguous();
  } catch (const std::exception& e) {
    const absl::Status error = absl::InternalError(absl::StrCat("forward failed: ", e.what()));
    for (Request* r : batch) FinishGenerate(r, FinishReason::kError, error);
    return;
  }
  if (listener_ != nullptr) {
    listener_->OnStep(StepTiming{prefill, static_cast<int32_t>(batch.size()), tokens,
                                 absl::Now() - start});
  }
  const int64_t vocab = logits.size(1);
  const float* data = logits.data_ptr<float>();
  for (size_t i = 0; i < batch.size(); ++i) {
    Request* r = batch[i];
    r->num_cached += chunk_lens[i];
    if (r->num_cached < static_cast<int64_t>(r->tokens.size())) continue;  // prefill continues
    absl::StatusOr<model::SampledToken> token =
        r->sampler->Sample(absl::MakeConstSpan(data + i * vocab, vocab));
    if (!token.ok()) {
      FinishGenerate(r, FinishReason::kError, token.status());
      continue;
    }
    Emit(r, *token);
  }
}

// Appends a sampled token, streams its text, and finishes the request when a
// stop condition holds.
void EngineImpl::Emit(Request* r, const model::SampledToken& token) {
  const absl::Time now = absl::Now();
  if (listener_ != nullptr && r->last_token_at.has_value()) {
    listener_->OnTokenEmitted(now - *r->last_token_at);
  }
  if (!r->first_token_at) r->first_token_at = now;
  r->last_token_at = now;
  r->tokens.push_back(token.token_id);
  r->sampler->Observe(token.token_id);
  ++r->generated;

  GeneratedChunk chunk;
  GeneratedToken out;
  out.token_id = token.token_id;
  out.logprob = token.logprob;
  for (const model::TokenLogprob& alt : token.top) out.top.push_back({alt.token_id, alt.logprob});
  chunk.tokens.push_back(std::move(out));

  // EOS and stop token ids end the request without their text; the text
  // stream decides stop strings and the length limit.
  const bool is_eos = token.token_id == config_.eos_token_id && config_.eos_token_id >= 0;
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
  r->observer->OnChunk(std::move(chunk));
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
  summary.prompt_tokens = static_cast<int32_t>(r->gen.source.size()) +
                          (r->prompt_len > 0 ? r->prompt_len
                                             : static_cast<int32_t>(r->gen.prompt.size()));
  summary.generated_tokens = r->generated;
  summary.seed = r->sampler ? r->sampler->seed() : r->gen.sampling.seed.value_or(0);
  summary.queue_time = (r->scheduled_at ? *r->scheduled_at : now) - r->submitted;
  summary.time_to_first_token = r->first_token_at ? *r->first_token_at - r->submitted
                                                  : absl::ZeroDuration();
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
  stat_running_.store(static_cast<int32_t>(scheduler_.running().size()));
  stat_waiting_.store(static_cast<int32_t>(scheduler_.waiting().size() + auxiliary_.size()));
  stat_blocks_used_.store(cache_.allocator().num_used());
}

}  // namespace

// ---------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const std::string& name,
                                                       const std::string& model_path,
                                                       const EngineOptions& options,
                                                       EngineListener* listener) {
  const absl::Time start = absl::Now();
  DIKKAT_ASSIGN_OR_RETURN(c10::ScalarType dtype, model::ParseDType(options.dtype));
  DIKKAT_ASSIGN_OR_RETURN(c10::Device device, model::ParseDevice(options.device));
  if (options.max_batch_size <= 0 || options.max_batch_tokens <= 0 || options.max_queue <= 0 ||
      options.kv_block_size <= 0 || options.max_new_tokens_cap <= 0 ||
      options.default_max_new_tokens <= 0 || options.max_batch_entries <= 0 ||
      options.max_attention_values <= 0) {
    return absl::InvalidArgumentError(
        "max_batch_size, max_batch_tokens, max_queue, kv_block_size, max_new_tokens_cap, "
        "default_max_new_tokens, max_batch_entries and max_attention_values must all be > 0");
  }
  model::LoadOptions load;
  load.dtype = dtype;
  load.device = device;
  absl::StatusOr<model::LoadedModel> loaded;
  try {
    loaded = model::LoadModelFolder(model_path, load);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(model_path, ": loading failed: ", e.what()));
  }
  if (!loaded.ok()) return loaded.status();
  DIKKAT_ASSIGN_OR_RETURN(model::KvCache cache,
                          model::KvCache::Create(loaded->config, options.kv_cache_bytes,
                                                 options.kv_block_size,
                                                 model::CacheDType(dtype), device));
  ModelDescription d;
  d.name = name;
  d.path = model_path;
  d.config = loaded->config;
  // Callers know the model by the name it is served under (--model=NAME=PATH),
  // not the folder's config name: errors built from the config say that name.
  d.config.name = name;
  d.dtype = options.dtype;
  d.device = device.str();
  d.weights_sha256 = loaded->weights_sha256;
  d.tokenizer_kind = loaded->tokenizer->kind();
  d.tokenizer_sha256 = loaded->tokenizer->file_fingerprints();
  d.weights_bytes = loaded->report.parameter_bytes;
  d.load_time = absl::Now() - start;
  return std::unique_ptr<Engine>(
      new EngineImpl(std::move(d), std::move(*loaded), std::move(cache), options, listener));
}

}  // namespace dikkat::server
