// The Engine's callers' side (any thread): creation, the request check and
// the inbox, cancellation, stats, shutdown and warmup. The engine thread's
// side is server/engine.cc; the class is server/engine_impl.h.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/io/model_folder.h"
#include "model/kv_cache.h"
#include "model/model_loader.h"
#include "model/sampler.h"
#include "model/transformer.h"
#include "server/engine.h"
#include "server/engine_impl.h"
#include "server/request_checks.h"
#include "server/sample_group.h"
#include "server/status_util.h"

namespace dikkat::server {
namespace engine_internal {

using model::Architecture;

namespace {

// The logits a step may return for prompt scoring, all sequences together:
// [rows, vocab] floats, copied a few times on their way to the scores (a
// Qwen2.5 chunk of 2048 prompt tokens would be 1.2 GB each time).
constexpr int64_t kScoredLogitBytes = 32ll << 20;

int64_t MaxLogitRows(const model::ModelConfig& config) {
  const int64_t row_bytes = std::max<int64_t>(config.vocab_size, 1) * sizeof(float);
  return std::max<int64_t>(kScoredLogitBytes / row_bytes, 1);
}

}  // namespace

EngineImpl::EngineImpl(ModelDescription description, model::ModelConfig config,
                       std::unique_ptr<model::Transformer> transformer,
                       std::unique_ptr<model::Tokenizer> tokenizer,
                       std::unique_ptr<model::KvCache> cache, EngineOptions options,
                       EngineListener* listener)
    : description_(std::move(description)),
      config_(std::move(config)),
      transformer_(std::move(transformer)),
      tokenizer_(std::move(tokenizer)),
      cache_(std::move(cache)),
      options_(std::move(options)),
      listener_(listener),
      scheduler_(SchedulerOptions{options_.max_batch_size, options_.max_batch_tokens,
                                  // An encoder-decoder's decoder K/V depend on the
                                  // source too, which block keys do not name.
                                  options_.prefix_caching &&
                                      config_.architecture != Architecture::kEncoderDecoder,
                                  options_.priority_aging, MaxLogitRows(config_)},
                 &cache_->allocator()) {
  thread_ = std::thread([this] { Loop(); });
}

EngineImpl::~EngineImpl() { Shutdown(absl::ZeroDuration()); }

// ---------------------------------------------------------------------------
// Submission
// ---------------------------------------------------------------------------

// The one request check (server/request_checks.h), against the config under
// the name the model is served as, plus what only the engine knows: whether
// the prompt can ever fit in the KV cache.
absl::Status EngineImpl::ValidateGenerate(const GenerateRequest& r) const {
  DIKKAT_RETURN_IF_ERROR(CheckGenerateRequest(r, description_.config, options_));
  const int64_t decoder_len = DecoderLength(r, config_);
  const int64_t needed = cache_->allocator().BlocksFor(decoder_len + 1);
  if (needed > cache_->allocator().num_blocks()) {
    return NeverFitsError(absl::StrCat(
        "the prompt needs ", needed, " KV blocks but the cache has ",
        cache_->allocator().num_blocks(), "; raise --kv_cache_bytes or shorten the prompt"));
  }
  const int64_t least = LeastHeld(r);
  if (options_.max_held_output_bytes > 0 && least > options_.max_held_output_bytes) {
    std::string what;
    int64_t new_tokens = 0;
    LeastHeld(r, &what, &new_tokens);
    const int32_t best_of = r.best_of == 0 ? r.n : r.best_of;
    return NeverFitsError(absl::StrCat(
        "best_of = ", best_of, " > n = ", r.n,
        " holds every sample's output until the last sample ends, and this call's ", what,
        " need at least ", least, " bytes held, past the server's bound of ",
        options_.max_held_output_bytes, " bytes (--max_held_output_bytes); ",
        new_tokens > 0 ? "ask for fewer samples, tokens or logprobs"
                       : "ask for fewer prompt_logprobs or send a shorter prompt"));
  }
  if (r.beam_width > 1) {
    // Started only when its worst case fits (engine_beams.cc): it must fit in
    // the whole cache.
    const int64_t length = decoder_len + MaxNewTokens(r, decoder_len);
    const int64_t worst = static_cast<int64_t>(r.beam_width) * cache_->allocator().BlocksFor(length);
    if (worst > cache_->allocator().num_blocks()) {
      return NeverFitsError(absl::StrCat(
          "beam_width = ", r.beam_width, " over ", length, " tokens needs up to ", worst,
          " KV blocks but the cache has ", cache_->allocator().num_blocks(),
          "; use fewer beams, fewer new tokens, or raise --kv_cache_bytes"));
    }
  }
  return absl::OkStatus();
}

int64_t EngineImpl::LeastHeld(const GenerateRequest& r, std::string* what,
                              int64_t* tokens) const {
  const int32_t best_of = r.best_of == 0 ? r.n : r.best_of;
  if (best_of <= r.n || r.beam_width > 1) return 0;
  // best_of > n holds every sample's output until the last ends
  // (SampleGroup). A call that must produce more than the bound would run
  // until it passed it: refused at submission, before any compute.
  const int64_t new_tokens = TokensEverySampleMakes(r, config_, options_);
  if (tokens != nullptr) *tokens = new_tokens;
  if (what != nullptr) {
    // With no tokens it must make, the prompt's logprobs alone count.
    *what = new_tokens > 0
                ? absl::StrCat(best_of, " x ", new_tokens, " tokens",
                               r.sampling.top_logprobs > 0
                                   ? absl::StrCat(" with ", r.sampling.top_logprobs,
                                                  " logprobs each")
                                   : "",
                               r.prompt_logprobs >= 0 ? " and the prompt's logprobs" : "")
                : absl::StrCat("prompt logprobs (", r.prompt.size(), " tokens x ",
                               r.prompt_logprobs + 1, " entries)");
  }
  return LeastHeldOutputBytes(r, best_of, new_tokens, config_.vocab_size);
}

absl::StatusOr<RequestId> EngineImpl::Enqueue(std::unique_ptr<Request> request) {
  std::vector<std::unique_ptr<Request>> one;
  one.push_back(std::move(request));
  return EnqueueAll(std::move(one));
}

// All or nothing: the requests of one call (the samples of a group) take as
// many places in the queue as they are. Returns the first one's id.
absl::StatusOr<RequestId> EngineImpl::EnqueueAll(std::vector<std::unique_ptr<Request>> requests) {
  const absl::Time now = absl::Now();
  const int64_t count = static_cast<int64_t>(requests.size());
  RequestId next = next_id_.fetch_add(static_cast<uint64_t>(count));
  for (std::unique_ptr<Request>& r : requests) {
    r->id = next++;
    r->submitted = now;
    r->arrived = now;
    // Published to the engine thread by the inbox's lock below.
    if (r->group != nullptr) r->group->members().push_back(r->id);
  }
  const RequestId id = requests.front()->id;
  dikkat::MutexLock lock(&mu_);
  if (draining_ || stop_) {
    return absl::UnavailableError("the server is shutting down; retry on another replica");
  }
  if (count > options_.max_queue) {
    return NeverFitsError(absl::StrCat(
        "this call's ", count, " requests (prompts x samples) would take as many places in the "
        "queue, more than the server's --max_queue of ", options_.max_queue,
        "; send fewer prompts or ask for fewer samples"));
  }
  if (static_cast<int64_t>(inbox_.size()) + engine_queued_ + count > options_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request queue is full (", options_.max_queue, " waiting",
        count > 1 ? absl::StrCat("; this call's ", count, " prompts and samples take as many places")
                  : "",
        "); retry later"));
  }
  in_flight_ += static_cast<int32_t>(count);
  for (std::unique_ptr<Request>& r : requests) inbox_.push_back(std::move(r));
  return id;
}

std::vector<std::unique_ptr<Request>> EngineImpl::MakeGenerate(
    GenerateRequest request, std::shared_ptr<GenerateObserver> observer,
    std::shared_ptr<int64_t> call_held) {
  std::vector<std::unique_ptr<Request>> out;
  auto r = std::make_unique<Request>();
  r->kind = RequestKind::kGenerate;
  r->deadline = request.deadline;
  r->priority = request.priority;
  if (config_.architecture == Architecture::kEncoderDecoder) {
    r->tokens.push_back(static_cast<int32_t>(config_.decoder_start_token_id >= 0
                                                 ? config_.decoder_start_token_id
                                                 : config_.bos_token_id));
  }
  r->tokens.insert(r->tokens.end(), request.prompt.begin(), request.prompt.end());
  // Prompt logprobs need the logits of every prompt position: computed, not
  // mapped from the prefix cache.
  r->no_prefix_match = request.prompt_logprobs >= 0;
  r->logit_rows = request.prompt_logprobs >= 0;
  // The source is encoded when the request is admitted: that step's work.
  r->admission_tokens = static_cast<int64_t>(request.source.size());
  if (request.best_of == 0) request.best_of = request.n;
  if (request.beam_width > 1 || (request.n == 1 && request.best_of == 1)) {
    // Beam search runs outside the scheduler (engine_beams.cc).
    if (request.beam_width > 1) r->kind = RequestKind::kBeam;
    r->gen = std::move(request);
    r->observer = std::move(observer);
    out.push_back(std::move(r));
    return out;
  }
  // Several samples: one request each, sharing the prompt through the prefix
  // cache; sample 0 alone scores the prompt.
  auto group = std::make_shared<SampleGroup>(std::move(observer), request.n, request.best_of,
                                             request.sampling.seed, held_budget_,
                                             std::move(call_held));
  if (request.prompt_logprobs >= 0) group->ExpectPromptScores();
  for (int32_t i = 0; i < request.best_of; ++i) {
    auto sample = std::make_unique<Request>();
    sample->kind = RequestKind::kGenerate;
    sample->deadline = r->deadline;
    sample->priority = r->priority;
    sample->tokens = r->tokens;
    sample->gen = request;
    if (i > 0) sample->gen.prompt_logprobs = -1;
    sample->no_prefix_match = sample->gen.prompt_logprobs >= 0;
    sample->logit_rows = sample->gen.prompt_logprobs >= 0;
    sample->admission_tokens = r->admission_tokens;
    sample->group = group;
    sample->sample_index = i;
    out.push_back(std::move(sample));
  }
  return out;
}

absl::StatusOr<RequestId> EngineImpl::SubmitGenerate(GenerateRequest request,
                                                     std::shared_ptr<GenerateObserver> observer) {
  DIKKAT_RETURN_IF_ERROR(ValidateGenerate(request));
  return EnqueueAll(MakeGenerate(std::move(request), std::move(observer), nullptr));
}

absl::StatusOr<std::vector<RequestId>> EngineImpl::SubmitGenerateAll(
    std::vector<GenerateRequest> requests,
    std::vector<std::shared_ptr<GenerateObserver>> observers) {
  if (requests.empty() || requests.size() != observers.size()) {
    return absl::InvalidArgumentError("SubmitGenerateAll: one observer per request, at least one");
  }
  int64_t least = 0;
  int32_t holding = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::Status valid = ValidateGenerate(requests[i]);
    if (!valid.ok()) {
      // The OpenAI door's prefix for a prompt's error (its `param`).
      if (requests.size() == 1) return valid;
      return WithMessagePrefix(valid, absl::StrCat("prompt[", i, "]: "));
    }
    const int64_t bytes = LeastHeld(requests[i]);
    least += bytes;
    holding += bytes > 0 ? 1 : 0;
  }
  if (options_.max_held_output_bytes > 0 && least > options_.max_held_output_bytes) {
    // Each fits (ValidateGenerate), but not together.
    return NeverFitsError(absl::StrCat(
        "best_of > n holds every sample's output until the last sample ends, and this call's ",
        holding, " prompts together need at least ", least,
        " bytes held, past the server's bound of ", options_.max_held_output_bytes,
        " bytes (--max_held_output_bytes); send fewer prompts, or ask for fewer samples, "
        "tokens or logprobs"));
  }
  // What the call's sample groups hold, together: touched by the engine
  // thread only once queued (a refused call's groups release nothing).
  auto call_held = requests.size() > 1 ? std::make_shared<int64_t>(0) : nullptr;
  std::vector<std::unique_ptr<Request>> all;
  std::vector<size_t> first(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    first[i] = all.size();
    for (std::unique_ptr<Request>& r :
         MakeGenerate(std::move(requests[i]), std::move(observers[i]), call_held)) {
      all.push_back(std::move(r));
    }
  }
  // EnqueueAll numbers them in order from the first one's id.
  absl::StatusOr<RequestId> id = EnqueueAll(std::move(all));
  if (!id.ok()) return id.status();
  std::vector<RequestId> ids;
  for (size_t f : first) ids.push_back(*id + static_cast<RequestId>(f));
  return ids;
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
  s.kv_blocks_total = cache_->allocator().num_blocks();
  s.kv_blocks_used = stat_blocks_used_.load();
  s.kv_blocks_cached = stat_blocks_cached_.load();
  s.prefix_cache_hit_tokens = stat_prefix_hit_tokens_.load();
  s.prefix_cache_query_tokens = stat_prefix_query_tokens_.load();
  s.kv_block_size = cache_->block_size();
  s.kv_cache_bytes = cache_->total_bytes();
  s.weights_bytes = description_.weights_bytes;
  s.requests_finished = stat_finished_.load();
  s.preemptions = stat_preemptions_.load();
  s.held_output_bytes = held_budget_->used.load(std::memory_order_relaxed);
  {
    dikkat::MutexLock lock(&stats_mu_);
    s.waiting_by_priority = waiting_by_priority_;
  }
  return s;
}

void EngineImpl::StopAccepting() {
  dikkat::MutexLock lock(&mu_);
  draining_ = true;
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
      WarmupObserver(dikkat::Notification* done, absl::Status* result)
          : done_(done), result_(result) {}
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

}  // namespace engine_internal

// The base class's: one by one (EngineImpl's own is above).
absl::StatusOr<std::vector<RequestId>> Engine::SubmitGenerateAll(
    std::vector<GenerateRequest> requests,
    std::vector<std::shared_ptr<GenerateObserver>> observers) {
  if (requests.empty() || requests.size() != observers.size()) {
    return absl::InvalidArgumentError("SubmitGenerateAll: one observer per request, at least one");
  }
  std::vector<RequestId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<RequestId> id =
        SubmitGenerate(std::move(requests[i]), std::move(observers[i]));
    if (!id.ok()) {
      for (RequestId before : ids) Cancel(before);
      return id.status();
    }
    ids.push_back(*id);
  }
  return ids;
}

// ---------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const std::string& name,
                                                       const std::string& model_path,
                                                       const EngineOptions& options,
                                                       EngineListener* listener) {
  const absl::Time start = absl::Now();
  // auto: the dtype the checkpoint was saved in (bfloat16 weights stay
  // bfloat16: half the memory of float32, nothing lost), float32 when the
  // folder does not say (dikkat.json folders, older checkpoints).
  std::string dtype_name = options.dtype;
  if (dtype_name == "auto") {
    absl::StatusOr<model::ModelConfig> saved = model::ReadModelConfig(model_path);
    dtype_name = saved.ok() && !saved->saved_dtype.empty() ? saved->saved_dtype : "float32";
    if (!model::ParseDType(dtype_name).ok() || dtype_name == "int8") dtype_name = "float32";
  }
  DIKKAT_ASSIGN_OR_RETURN(c10::ScalarType dtype, model::ParseDType(dtype_name));
  DIKKAT_ASSIGN_OR_RETURN(c10::ScalarType cache_dtype,
                          model::ParseKvCacheDType(options.kv_cache_dtype, dtype));
  DIKKAT_ASSIGN_OR_RETURN(c10::Device device, model::ParseDevice(options.device));
  if (options.max_batch_size <= 0 || options.max_batch_tokens <= 0 || options.max_queue <= 0 ||
      options.kv_block_size <= 0 || options.max_new_tokens_cap <= 0 ||
      options.default_max_new_tokens <= 0 || options.max_batch_entries <= 0 ||
      options.max_attention_values <= 0) {
    return absl::InvalidArgumentError(
        "max_batch_size, max_batch_tokens, max_queue, kv_block_size, max_new_tokens_cap, "
        "default_max_new_tokens, max_batch_entries and max_attention_values must all be > 0");
  }
  if (options.max_held_output_bytes < 0) {
    return absl::InvalidArgumentError("max_held_output_bytes must be >= 0 (0: no limit)");
  }
  if (options.max_context < 0) {
    return absl::InvalidArgumentError("max_context must be >= 0 (0: the model's max_positions)");
  }
  // The context a model is served with: its own, or max_context or a
  // sentence-transformers folder's max_seq_length if shorter.
  const auto cap_context = [&](model::ModelConfig* c) {
    int64_t cap = options.max_context;
    if (c->max_seq_length > 0 && (cap == 0 || c->max_seq_length < cap)) cap = c->max_seq_length;
    if (cap > 0 && c->max_positions > cap) c->max_positions = cap;
  };
  const auto with_hint = [&](const absl::Status& s, const model::ModelConfig& c) {
    const int64_t per_token = model::KvCache::BytesPerToken(c, cache_dtype);
    const int64_t fits = per_token > 0 ? options.kv_cache_bytes / per_token : 0;
    return absl::Status(
        s.code(), absl::StrCat(model_path, ": ", s.message(), "; raise --kv_cache_bytes, or serve a ",
                               "shorter context with --max_context (", fits, " tokens fit)"));
  };
  // The KV budget is checked before the weights are read: a 30 GB load
  // should not come before an error a flag fixes.
  int64_t served_positions = 0;  // 0: the model's own
  if (absl::StatusOr<model::ModelConfig> early = model::ReadModelConfig(model_path); early.ok()) {
    cap_context(&*early);
    served_positions = early->max_positions;
    if (absl::Status s = model::KvCache::CheckBudget(*early, options.kv_cache_bytes,
                                                     options.kv_block_size, cache_dtype);
        !s.ok()) {
      return with_hint(s, *early);
    }
  }
  model::LoadOptions load;
  load.dtype = dtype;
  load.device = device;
  load.huge_pages = options.huge_pages;
  // RoPE tables only for the context served (a YaRN or Gemma 3 config says
  // 131072 positions: ~67 MB of tables a head_dim of 128).
  load.max_positions = served_positions;
  absl::StatusOr<model::LoadedModel> loaded;
  try {
    loaded = model::LoadModelFolder(model_path, load);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(model_path, ": loading failed: ", e.what()));
  }
  if (!loaded.ok()) return loaded.status();
  cap_context(&loaded->config);
  absl::StatusOr<model::KvCache> cache =
      model::KvCache::Create(loaded->config, options.kv_cache_bytes, options.kv_block_size,
                             cache_dtype, device, options.huge_pages);
  if (!cache.ok()) return with_hint(cache.status(), loaded->config);
  ModelDescription d;
  d.name = name;
  d.path = model_path;
  d.config = loaded->config;
  // Callers know the model by the name it is served under (--model=NAME=PATH),
  // not the folder's config name: errors built from the config say that name.
  d.config.name = name;
  d.dtype = model::DTypeName(dtype);
  d.kv_cache_dtype = model::DTypeName(cache_dtype);
  d.device = device.str();
  d.weights_sha256 = loaded->weights_sha256;
  d.tokenizer_kind = loaded->tokenizer->kind();
  d.tokenizer_sha256 = loaded->tokenizer->file_fingerprints();
  d.weights_bytes = loaded->report.parameter_bytes;
  d.load_time = absl::Now() - start;
  return std::unique_ptr<Engine>(new engine_internal::EngineImpl(
      std::move(d), loaded->config, std::move(loaded->transformer), std::move(loaded->tokenizer),
      std::make_unique<model::KvCache>(std::move(*cache)), options, listener));
}

}  // namespace dikkat::server
