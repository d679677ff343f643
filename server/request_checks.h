// Request checks: the one place where the values of a Generate, Encode or
// Attention request (the engine's structs, server/engine.h) are checked
// against the model and the server's limits.
//
// Engine::Submit* run the check, once per request, whoever built it: the
// gRPC service (server/convert.cc maps the wire messages to these structs
// and rejects only what the wire form makes wrong and what must be bounded
// before tokenizing), Warmup, benchmarks and tests. An invalid request is
// refused by Submit* before it is queued. (convert.cc used to run the same
// check before submitting, so on the gRPC path it ran twice.) Errors are
// INVALID_ARGUMENT whose message names the field, the value and what is
// allowed.
//
// Pure functions; thread-safe.
#ifndef DIKKAT_SERVER_REQUEST_CHECKS_H_
#define DIKKAT_SERVER_REQUEST_CHECKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/io/config.h"
#include "server/engine.h"

namespace dikkat::server {

// Every id in [0, vocab_size). `field` names the list in errors. A span, so
// that ids still in a request message are checked without a copy.
absl::Status ValidateTokenIds(absl::Span<const int32_t> ids, absl::string_view field,
                              int64_t vocab_size);

// `max_new_tokens` asked for explicitly: 1..options.max_new_tokens_cap.
absl::Status CheckMaxNewTokens(int32_t max_new_tokens, const EngineOptions& options);

// The same check for a door's own name of the field and its own default
// (OpenAI's max_tokens: 16 for completions).
absl::Status CheckNewTokenCount(int64_t n, const EngineOptions& options, absl::string_view field,
                                int64_t unset_default);

// The decoder's input as the engine runs it: the prompt, after an
// encoder-decoder's decoder start token.
int64_t DecoderLength(const GenerateRequest& request, const model::ModelConfig& config);

// The tokens `request` generates at most after a decoder input of
// `decoder_len` tokens: its max_new_tokens (0: options.default_max_new_tokens),
// capped by what the model's context leaves (the same number at submission,
// admission and a beam search's start).
int32_t MaxNewTokens(const GenerateRequest& request, int64_t decoder_len,
                     const model::ModelConfig& config, const EngineOptions& options);

// The tokens every sample of `request` must make: MaxNewTokens when nothing
// can end it early (ignore_eos, no stop tokens or strings), else 0 (never
// below 0).
int64_t TokensEverySampleMakes(const GenerateRequest& request, const model::ModelConfig& config,
                               const EngineOptions& options);

// Architecture (encoder-only models cannot generate), prompt / source
// lengths and ids (at least one position must remain for generation),
// max_new_tokens (0 = the server default), sampling (model::Validate, and
// logit_bias ids in the vocabulary; no logit_bias with beam search), stop
// strings and stop token ids (counts, sizes, UTF-8, ids).
absl::Status CheckGenerateRequest(const GenerateRequest& request, const model::ModelConfig& config,
                                  const EngineOptions& options);

// 1..max_batch_entries inputs: part of CheckEncodeRequest, and also run by
// convert.cc before any input is tokenized (bound the work before doing it).
absl::Status CheckEncodeInputCount(int64_t count, const EngineOptions& options);

// Number of inputs, each input's length and ids, type_ids (empty or one list
// per input, each empty or as long as its input), hidden_layer.
absl::Status CheckEncodeRequest(const EncodeRequest& request, const model::ModelConfig& config,
                                const EngineOptions& options);

// The kind against the architecture, input and target (a target exactly for
// DECODER_SELF and CROSS), layers and heads (in range, not repeated), and
// the number of attention values against max_values or the server's
// max_attention_values.
absl::Status CheckAttentionRequest(const AttentionRequest& request,
                                   const model::ModelConfig& config, const EngineOptions& options);

// Layers an Attention request of `kind` can select (0..n-1).
int64_t AttentionLayers(const model::ModelConfig& config, AttentionKind kind);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_REQUEST_CHECKS_H_
