// Engine: one model, its KV cache and the thread that owns both.
//
// Every request (Generate, Encode, Attention) is queued and executed on the
// engine thread, which runs continuous batching: each step it admits waiting
// requests whose prompts fit the token budget and the free KV blocks, runs one
// batched forward for the prefill chunks and for every running sequence's next
// token, samples, and pushes results to each request's observer. Requests join
// and leave the batch between steps; a finished, cancelled or expired request
// frees its KV blocks at once.
//
// Thread-safety: all public methods may be called from any thread (the gRPC
// reactors call them). Observers and callbacks are invoked on the engine
// thread and must not block. This header is torch-free on purpose.
#ifndef DIKKAT_SERVER_ENGINE_H_
#define DIKKAT_SERVER_ENGINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/io/config.h"
#include "model/sampling_params.h"
#include "model/text/tokenizer.h"

namespace dikkat::server {

using RequestId = uint64_t;

// ---- results ----------------------------------------------------------------

// A dense float32 array, row-major.
struct DenseTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

enum class FinishReason {
  kEos,           // the model emitted its end-of-sequence token
  kLength,        // max_new_tokens reached, or the model's context is full
  kStop,          // a stop string or stop token id was produced
  kCancelled,     // the caller cancelled (or disconnected)
  kDeadline,      // the request's deadline passed (queued or mid-generation)
  kError,         // see GenerateSummary::status
};
const char* FinishReasonName(FinishReason r);

struct TokenAlternative {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct GeneratedToken {
  int32_t token_id = 0;
  float logprob = 0.0f;                 // filled when the request asked for logprobs
  std::vector<TokenAlternative> top;    // top_logprobs alternatives, best first
};

// One streamed message: the tokens produced since the last chunk and the
// text they complete (never a partial UTF-8 character).
struct GeneratedChunk {
  std::vector<GeneratedToken> tokens;
  std::string text;
  // The sample the tokens belong to (GenerateRequest::n > 1; else 0).
  int32_t index = 0;
  // Requests with several samples (n or best_of > 1): set on the chunk that
  // ends sample `index`, with the sum of its tokens' logprobs. A single-sample
  // request's finish comes only in OnFinish.
  std::optional<FinishReason> finish;
  double cumulative_logprob = 0.0;
  // First chunk, when GenerateRequest::prompt_logprobs >= 0: the prompt's
  // tokens after the first, each with its logprob given the tokens before it.
  std::vector<GeneratedToken> prompt_logprobs;
  // Beam search: the hypothesis' score (cumulative logprob / length^penalty).
  std::optional<double> beam_score;
  // Output the engine held back and hands over all at once when the call
  // ends: the best n of best_of samples, the final beams. Its bytes were in
  // the server already; a reader that keeps up receives it in a burst that
  // may pass the front doors' bound on output not yet sent, so they do not
  // cut the call for it (service.cc, openai_http.cc).
  bool held = false;
};

// The memory a chunk holds while it waits (an estimate, in bytes): its text,
// and per token the id, the logprob and the alternatives as structs (the
// wire message is smaller). The unit of the engine's and the front doors'
// bounds on output held.
inline int64_t ChunkBytes(const GeneratedChunk& chunk) {
  int64_t bytes = static_cast<int64_t>(sizeof(GeneratedChunk) + chunk.text.size());
  for (const std::vector<GeneratedToken>* list : {&chunk.tokens, &chunk.prompt_logprobs}) {
    for (const GeneratedToken& t : *list) {
      bytes += static_cast<int64_t>(sizeof(GeneratedToken) + t.top.size() * sizeof(t.top[0]));
    }
  }
  return bytes;
}

struct GenerateSummary {
  FinishReason reason = FinishReason::kLength;
  absl::Status status;                  // non-OK only with kError
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  int32_t cached_prompt_tokens = 0;     // prompt tokens whose K/V came from the prefix cache
  // Samples generated (best_of); > 1 means per-sample finishes came in the
  // chunks, and `reason` is the call's: kError, kCancelled or kDeadline when
  // one sample ended so (the others were stopped), else the last sample's.
  int32_t samples = 1;
  uint64_t seed = 0;                    // the seed actually used (reproduce with it)
  absl::Duration queue_time;            // submit -> first scheduled
  absl::Duration time_to_first_token;   // submit -> first token produced
  absl::Duration total_time;            // submit -> finish
};

// Receives one Generate request's output. Called on the engine thread:
// implementations copy/move what they need and return at once.
class GenerateObserver {
 public:
  virtual ~GenerateObserver() = default;
  virtual void OnChunk(GeneratedChunk chunk) = 0;
  // Called exactly once, after the last OnChunk.
  virtual void OnFinish(GenerateSummary summary) = 0;
};

// ---- requests ---------------------------------------------------------------

struct GenerateRequest {
  // Decoder-only: the prompt (non-empty). Encoder-decoder: an optional decoder
  // prefix (the engine prepends decoder_start_token_id when it is empty).
  std::vector<int32_t> prompt;
  std::vector<int32_t> source;          // encoder-decoder only: the encoder input
  model::SamplingParams sampling;
  int32_t max_new_tokens = 0;           // 0 -> EngineOptions::default_max_new_tokens
  // Decoder-only: a prompt plus max_new_tokens (> 0) past the model's context
  // is INVALID_ARGUMENT (OpenAI's answer) instead of max_new_tokens being
  // capped to what the context holds (the default, what gRPC callers get).
  bool strict_max_new_tokens = false;
  std::vector<int32_t> stop_token_ids;  // finish (kStop) when one is sampled
  std::vector<std::string> stop_strings;  // finish (kStop) when the text contains one
  bool ignore_eos = false;              // keep going past the EOS token
  bool include_stop_text = false;       // keep the matched stop string in the text
  int32_t priority = 0;                 // [kMinPriority, kMaxPriority]; larger runs first
  // >= 0: the logprob of every prompt token after the first and this many
  // alternatives ([0, 20]), in the first chunk; -1: none. Such a request does
  // not map the prefix cache (cached blocks carry no logits).
  int32_t prompt_logprobs = -1;
  // Score the prompt only: no token is generated (needs prompt_logprobs).
  bool prompt_only = false;
  // Samples returned (n) of samples generated (best_of >= n; 0 means n), at
  // most kMaxSamples. Sample i uses seed + i. With best_of > n the n samples
  // of highest cumulative logprob are returned, best first, once all finished.
  int32_t n = 1;
  int32_t best_of = 0;
  // Beam search with this many beams (> 1; 0 or 1: off), returning the n best
  // hypotheses (server/beam_search.h); sampling options do not apply.
  int32_t beam_width = 0;
  float length_penalty = 1.0f;  // hypothesis score = logprob sum / length^length_penalty
  bool early_stopping = false;  // stop once beam_width hypotheses have finished
  absl::Time deadline = absl::InfiniteFuture();
};
inline constexpr int32_t kMinPriority = -100;
inline constexpr int32_t kMaxPriority = 100;
inline constexpr int32_t kMaxSamples = 16;
inline constexpr int32_t kMaxBeamWidth = 16;
inline constexpr int32_t kMaxPromptLogprobs = 20;
// Prompt tokens x (1 + prompt_logprobs) a request may ask for: they all go in
// one message (about 20 bytes each on the wire).
inline constexpr int64_t kMaxPromptLogprobEntries = 1 << 17;

struct EncodeRequest {
  std::vector<std::vector<int32_t>> inputs;    // one token sequence per input
  std::vector<std::vector<int32_t>> type_ids;  // BERT segment ids; empty or one per input
  model::Pooling pooling = model::Pooling::kMean;
  bool normalize = false;                      // L2-normalize pooled embeddings
  bool return_hidden_states = false;           // per-token states of `hidden_layer`
  int32_t hidden_layer = -1;                   // 0 = embeddings, L = last layer; -1 = last
  absl::Time deadline = absl::InfiniteFuture();
};

struct EncodeResult {
  std::vector<DenseTensor> embeddings;     // per input: [embedding_dim] ([d_model] for a hidden_layer)
  std::vector<DenseTensor> hidden_states;  // per input: [tokens, d_model] (when asked)
  int32_t prompt_tokens = 0;
};

enum class AttentionKind {
  kSelf,         // decoder-only / encoder-only self-attention
  kEncoderSelf,  // encoder-decoder: encoder self-attention
  kDecoderSelf,  // encoder-decoder: masked decoder self-attention
  kCross,        // encoder-decoder: decoder -> encoder
};
enum class HeadAggregation { kNone, kMean, kMax };

struct AttentionRequest {
  std::vector<int32_t> input;   // the sequence (encoder-decoder: the source)
  std::vector<int32_t> target;  // encoder-decoder: decoder input (required for decoder/cross)
  std::vector<int32_t> layers;  // empty = all
  std::vector<int32_t> heads;   // empty = all
  AttentionKind kind = AttentionKind::kSelf;
  HeadAggregation aggregation = HeadAggregation::kNone;
  int64_t max_values = 0;       // 0 = EngineOptions::max_attention_values
  absl::Time deadline = absl::InfiniteFuture();
};

struct AttentionMap {
  int32_t layer = 0;
  int32_t head = -1;            // -1 when heads were aggregated
  AttentionKind kind = AttentionKind::kSelf;
  DenseTensor weights;          // [q_len, k_len], rows sum to 1 (or 0 when fully masked)
};

struct AttentionResult {
  std::vector<AttentionMap> maps;
  int32_t q_len = 0;
  int32_t k_len = 0;
};

using EncodeCallback = std::function<void(absl::StatusOr<EncodeResult>)>;
using AttentionCallback = std::function<void(absl::StatusOr<AttentionResult>)>;

// ---- configuration and introspection -------------------------------------------

struct EngineOptions {
  std::string device = "cpu";           // "cpu" or "cuda:N" (when LibTorch has CUDA)
  std::string dtype = "float32";        // float32 | bfloat16 | float16 | int8 (CPU only)
  // auto (the weights' dtype; float32 for int8) | float32 | bfloat16 | float16
  std::string kv_cache_dtype = "auto";
  int32_t max_batch_size = 64;          // running sequences per step
  int32_t max_batch_tokens = 2048;      // tokens per forward (prefill budget)
  int64_t kv_cache_bytes = 256ll << 20; // KV cache budget
  // Caps each model's context (prompt + generated tokens) below its
  // max_positions; 0 = the model's own. A 32K-context model whose full
  // context does not fit kv_cache_bytes is served with a shorter one.
  int64_t max_context = 0;
  int32_t kv_block_size = 16;           // tokens per KV block
  // CPU: the weights and the KV cache in memory advised for 2 MiB pages
  // (model/huge_pages.h).
  bool huge_pages = true;
  // Reuse the K/V of full blocks across requests that share a prefix
  // (decoder-only models; model/kv_block_allocator.h).
  bool prefix_caching = true;
  // A waiting Generate request's priority rises by one per this much time in
  // the queue (bounds starvation); zero or less: priorities never age.
  absl::Duration priority_aging = absl::Seconds(10);
  int32_t max_queue = 256;              // waiting requests before RESOURCE_EXHAUSTED
  int32_t max_new_tokens_cap = 4096;    // upper bound a request may ask for
  int32_t default_max_new_tokens = 64;
  int32_t max_batch_entries = 64;       // inputs per Encode call
  // Stop conditions are checked on the engine thread for every generated
  // token, so their size is a cost every running sequence pays: bounded.
  int32_t max_stop_strings = 16;        // `stop` entries per request
  int32_t max_stop_string_bytes = 256;  // bytes per stop string
  int32_t max_stop_token_ids = 32;      // `stop_token_ids` entries per request
  int64_t max_attention_values = 16ll << 20;  // floats per Attention response
  // Generate output the engine holds until its call ends (best_of > n: every
  // sample's chunks until the last sample finishes), all calls together, in
  // ChunkBytes. The call whose chunk would pass it ends with
  // RESOURCE_EXHAUSTED and its samples are stopped. 0 = no limit.
  int64_t max_held_output_bytes = 256ll << 20;
};

struct EngineStats {
  int32_t running = 0;        // sequences in the running batch
  int32_t waiting = 0;        // queued, not yet admitted
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;     // held by sequences
  int32_t kv_blocks_cached = 0;   // prefix cache: kept for reuse, evictable
  int64_t prefix_cache_hit_tokens = 0;    // prompt tokens mapped from the prefix cache
  int64_t prefix_cache_query_tokens = 0;  // prompt tokens looked up (first admissions)
  int32_t kv_block_size = 0;
  int64_t kv_cache_bytes = 0;
  int64_t weights_bytes = 0;
  int64_t requests_finished = 0;
  int64_t preemptions = 0;
  int64_t held_output_bytes = 0;  // EngineOptions::max_held_output_bytes' count
  // Generate requests waiting (queued or preempted), by priority; only
  // priorities with at least one.
  std::map<int32_t, int32_t> waiting_by_priority;
};

// Timings of one engine step, for metrics.
struct StepTiming {
  bool prefill = false;       // the step included prompt tokens
  int32_t sequences = 0;      // batch size
  int32_t tokens = 0;         // tokens through the forward
  absl::Duration duration;
};

// Optional hooks for metrics; called on the engine thread, must not block.
class EngineListener {
 public:
  virtual ~EngineListener() = default;
  virtual void OnStep(const StepTiming& step) { (void)step; }
  virtual void OnGenerateFinished(const GenerateSummary& summary) { (void)summary; }
  virtual void OnTokenEmitted(absl::Duration since_previous) { (void)since_previous; }
  virtual void OnPreemption() {}
  // A Generate request's first admission looked up `prompt_tokens` tokens in
  // the prefix cache and mapped `cached_tokens` of them.
  virtual void OnPrefixLookup(int64_t prompt_tokens, int64_t cached_tokens) {
    (void)prompt_tokens;
    (void)cached_tokens;
  }
};

// What GetModelInfo reports.
struct ModelDescription {
  std::string name;
  std::string path;
  model::ModelConfig config;
  std::string dtype;
  std::string kv_cache_dtype;  // float32 | bfloat16 | float16 (resolved, never "auto")
  std::string device;
  std::string weights_sha256;
  std::string tokenizer_kind;
  std::vector<std::string> tokenizer_sha256;
  int64_t weights_bytes = 0;
  absl::Duration load_time;
};

class Engine {
 public:
  // Loads the model folder (dikkat.json or Hugging Face config.json, weights,
  // tokenizer), allocates the KV cache and starts the engine thread.
  // Errors name the file, tensor and problem.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const std::string& name,
                                                        const std::string& model_path,
                                                        const EngineOptions& options,
                                                        EngineListener* listener = nullptr);
  virtual ~Engine() = default;

  virtual const ModelDescription& description() const = 0;
  virtual const model::Tokenizer& tokenizer() const = 0;
  virtual const EngineOptions& options() const = 0;

  // Runs one short forward of each kind the model supports; blocks. Health
  // reports SERVING only after it succeeds.
  virtual absl::Status Warmup() = 0;

  // Queue work. INVALID_ARGUMENT for bad input (the message names the field,
  // value and what is allowed), RESOURCE_EXHAUSTED when the queue is full or
  // the request can never fit in the KV cache, UNAVAILABLE while shutting down.
  // On success the observer/callback is called later on the engine thread;
  // on error it is never called.
  virtual absl::StatusOr<RequestId> SubmitGenerate(GenerateRequest request,
                                                   std::shared_ptr<GenerateObserver> observer) = 0;
  // The requests of one call that stand or fall together (an OpenAI call
  // with several prompts; observers[i] is requests[i]'s): each checked as
  // SubmitGenerate checks it, then queued all at once or none (their samples
  // take as many places in the queue). With best_of > n, what they must hold
  // counts as one call's against --max_held_output_bytes, at submission and
  // while they run: a request whose chunk would pass the bound ends with the
  // NeverFits error when the call's requests alone would pass it (a retry
  // would fail again), else with a retryable RESOURCE_EXHAUSTED. A refused
  // request's error starts with "prompt[i]: " when there are several; a call
  // with more requests (prompts x samples) than --max_queue is NeverFits.
  // Returns each request's id to Cancel it by (a sample group's: its first
  // sample's), in order. This default submits them one by one, cancelling
  // those before a refused one; the engine's own does all of the above.
  virtual absl::StatusOr<std::vector<RequestId>> SubmitGenerateAll(
      std::vector<GenerateRequest> requests,
      std::vector<std::shared_ptr<GenerateObserver>> observers);
  virtual absl::StatusOr<RequestId> SubmitEncode(EncodeRequest request, EncodeCallback done) = 0;
  virtual absl::StatusOr<RequestId> SubmitAttention(AttentionRequest request,
                                                    AttentionCallback done) = 0;

  // Stops a request wherever it is (queued or running); its observer gets
  // OnFinish(kCancelled) / its callback CANCELLED. Unknown ids are ignored.
  virtual void Cancel(RequestId id) = 0;

  // Thread-safe snapshot.
  virtual EngineStats stats() const = 0;

  // From now on refuses new work (UNAVAILABLE); returns at once. Shutdown
  // does it too; the server calls this for every engine before it reports
  // NOT_SERVING, so that no call is accepted after health says so.
  virtual void StopAccepting() {}

  // Refuses new work (UNAVAILABLE), lets running requests finish for up to
  // `grace`, then cancels what is left and stops the thread. Idempotent.
  virtual void Shutdown(absl::Duration grace) = 0;
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_ENGINE_H_
