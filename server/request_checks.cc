#include "server/request_checks.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/sampling_params.h"
#include "model/text/tokenizer.h"

namespace dikkat::server {
namespace {

using model::Architecture;

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

absl::Status CheckLength(size_t n, absl::string_view field, const model::ModelConfig& config) {
  if (config.max_positions > 0 && static_cast<int64_t>(n) > config.max_positions) {
    const bool st_limit = config.max_seq_length > 0 && config.max_seq_length == config.max_positions;
    return Invalid(absl::StrCat(
        field, " has ", n, " tokens; model '", config.name, "' accepts at most max_positions=",
        config.max_positions,
        st_limit ? " (its sentence_bert_config.json's max_seq_length: sentence-transformers "
                   "truncates there; shorten the input)"
                 : ""));
  }
  return absl::OkStatus();
}

// A model input: not empty, not longer than the model's positions, ids in
// the vocabulary.
absl::Status CheckInput(const std::vector<int32_t>& ids, absl::string_view field,
                        const model::ModelConfig& config) {
  if (ids.empty()) return Invalid(absl::StrCat(field, " is empty"));
  DIKKAT_RETURN_IF_ERROR(CheckLength(ids.size(), field, config));
  return ValidateTokenIds(ids, field, config.vocab_size);
}

// Indices must lie in [0, limit) and not repeat.
absl::Status CheckIndices(const std::vector<int32_t>& values, absl::string_view field,
                          int64_t limit, absl::string_view what) {
  std::set<int32_t> seen;
  for (size_t i = 0; i < values.size(); ++i) {
    const int32_t v = values[i];
    if (v < 0 || v >= limit) {
      return Invalid(absl::StrCat(field, "[", i, "] = ", v, " is out of range: the model has ",
                                  limit, " ", what, " (allowed 0..", limit - 1, ")"));
    }
    if (!seen.insert(v).second) {
      return Invalid(
          absl::StrCat(field, "[", i, "] = ", v, " is repeated; list each at most once"));
    }
  }
  return absl::OkStatus();
}

// The wire names (dikkat.v1.AttentionKind), which callers know.
const char* KindName(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSelf:
      return "ATTENTION_KIND_SELF";
    case AttentionKind::kEncoderSelf:
      return "ATTENTION_KIND_ENCODER_SELF";
    case AttentionKind::kDecoderSelf:
      return "ATTENTION_KIND_DECODER_SELF";
    case AttentionKind::kCross:
      return "ATTENTION_KIND_CROSS";
  }
  return "ATTENTION_KIND_UNSPECIFIED";
}

absl::Status CheckKind(AttentionKind kind, const model::ModelConfig& config) {
  const bool enc_dec = config.architecture == Architecture::kEncoderDecoder;
  if (kind == AttentionKind::kSelf && enc_dec) {
    return Invalid(absl::StrCat(
        "kind: ATTENTION_KIND_SELF is for decoder-only and encoder-only models; model '",
        config.name,
        "' is encoder-decoder: use ATTENTION_KIND_ENCODER_SELF, "
        "ATTENTION_KIND_DECODER_SELF or ATTENTION_KIND_CROSS"));
  }
  if (kind != AttentionKind::kSelf && !enc_dec) {
    return Invalid(absl::StrCat(
        "kind: ", KindName(kind), " needs an encoder-decoder model; model '", config.name, "' is ",
        model::ArchitectureName(config.architecture), ": use ATTENTION_KIND_SELF"));
  }
  return absl::OkStatus();
}

absl::Status CheckStops(const GenerateRequest& r, const model::ModelConfig& config,
                        const EngineOptions& options) {
  if (static_cast<int64_t>(r.stop_strings.size()) > options.max_stop_strings) {
    return Invalid(absl::StrCat("stop has ", r.stop_strings.size(), " strings; at most ",
                                options.max_stop_strings, " are allowed"));
  }
  if (static_cast<int64_t>(r.stop_token_ids.size()) > options.max_stop_token_ids) {
    return Invalid(absl::StrCat("stop_token_ids has ", r.stop_token_ids.size(),
                                " entries; at most ", options.max_stop_token_ids, " are allowed"));
  }
  for (size_t i = 0; i < r.stop_strings.size(); ++i) {
    const std::string& stop = r.stop_strings[i];
    if (static_cast<int64_t>(stop.size()) > options.max_stop_string_bytes) {
      return Invalid(absl::StrCat("stop[", i, "] has ", stop.size(), " bytes; at most ",
                                  options.max_stop_string_bytes, " are allowed"));
    }
    if (stop.empty()) {
      return Invalid(
          absl::StrCat("stop[", i, "] is an empty string; stop strings must be non-empty"));
    }
    if (!model::IsValidUtf8(stop)) return Invalid(absl::StrCat("stop[", i, "] is not valid UTF-8"));
  }
  return ValidateTokenIds(r.stop_token_ids, "stop_token_ids", config.vocab_size);
}

// n, best_of and prompt_logprobs, and what they cost: best_of sequences,
// and prompt_len x (1 + prompt_logprobs) scores in the first message.
absl::Status CheckSamples(const GenerateRequest& r, int64_t prompt_len) {
  if (r.n < 1 || r.n > kMaxSamples) {
    return Invalid(absl::StrCat("n = ", r.n, " is out of range: allowed 1..", kMaxSamples));
  }
  const int32_t best_of = r.best_of == 0 ? r.n : r.best_of;
  if (best_of < r.n || best_of > kMaxSamples) {
    return Invalid(absl::StrCat("best_of = ", r.best_of, " is out of range: allowed n..",
                                kMaxSamples, " (n = ", r.n, "), or unset for n"));
  }
  if (best_of > 1 && r.beam_width <= 1 && r.sampling.temperature == 0.0f) {
    return Invalid(absl::StrCat("n = ", r.n, ", best_of = ", best_of,
                                " with sampling.temperature = 0 (greedy): every sample would be "
                                "the same; set a temperature > 0 or ask for one sample"));
  }
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > kMaxPromptLogprobs) {
    return Invalid(absl::StrCat("prompt_logprobs = ", r.prompt_logprobs,
                                " is out of range: allowed 0..", kMaxPromptLogprobs,
                                ", or -1 for none"));
  }
  if (r.prompt_only && r.prompt_logprobs < 0) {
    return Invalid("max_new_tokens = 0 generates nothing: it is allowed only with prompt_logprobs");
  }
  if (r.prompt_only && best_of > 1 && r.beam_width <= 1) {
    return Invalid(absl::StrCat("max_new_tokens = 0 scores the prompt only; n = ", r.n,
                                " and best_of = ", best_of, " need tokens to generate"));
  }
  if (r.beam_width < 0 || r.beam_width > kMaxBeamWidth) {
    return Invalid(absl::StrCat("beam_width = ", r.beam_width, " is out of range: allowed 0..",
                                kMaxBeamWidth, " (0 or 1: no beam search)"));
  }
  if (r.beam_width > 1) {
    if (r.n > r.beam_width) {
      return Invalid(absl::StrCat("n = ", r.n, " hypotheses out of beam_width = ", r.beam_width,
                                  ": n must be at most beam_width"));
    }
    if (best_of != r.n) {
      return Invalid("best_of is for sampling; with beam_width > 1 leave it unset");
    }
    if (!r.stop_strings.empty()) {
      return Invalid("stop strings are not supported with beam search; use stop_token_ids");
    }
    if (r.sampling.top_logprobs > 0) {
      return Invalid("top_logprobs alternatives are not given with beam search; use 0 or -1");
    }
    if (r.prompt_logprobs >= 0 || r.prompt_only) {
      return Invalid("prompt_logprobs is not supported with beam search");
    }
    if (!r.sampling.logit_bias.empty()) {
      return Invalid(
          "sampling.logit_bias is not applied by beam search (hypotheses are scored with the "
          "model's own log-probabilities); leave it empty with beam_width > 1");
    }
    if (!std::isfinite(r.length_penalty) || std::abs(r.length_penalty) > 10.0f) {
      return Invalid(absl::StrCat("length_penalty = ", r.length_penalty,
                                  " is out of range: allowed -10..10"));
    }
  }
  if (r.prompt_logprobs >= 0) {
    const int64_t entries = prompt_len * (1 + r.prompt_logprobs);
    if (entries > kMaxPromptLogprobEntries) {
      return Invalid(absl::StrCat(
          "prompt_logprobs = ", r.prompt_logprobs, " over a prompt of ", prompt_len,
          " tokens would return ", entries, " log-probabilities in one message; at most ",
          kMaxPromptLogprobEntries, " are allowed: ask fewer alternatives or score a shorter text"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTokenIds(absl::Span<const int32_t> ids, absl::string_view field,
                              int64_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Invalid(absl::StrCat(field, "[", i, "] = ", ids[i], " is not a token id: allowed 0..",
                                  vocab_size - 1, " (vocab_size ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

int64_t DecoderLength(const GenerateRequest& r, const model::ModelConfig& config) {
  return static_cast<int64_t>(r.prompt.size()) +
         (config.architecture == model::Architecture::kEncoderDecoder ? 1 : 0);
}

int32_t MaxNewTokens(const GenerateRequest& r, int64_t decoder_len,
                     const model::ModelConfig& config, const EngineOptions& options) {
  const int32_t requested = r.max_new_tokens > 0 ? r.max_new_tokens : options.default_max_new_tokens;
  return static_cast<int32_t>(std::min<int64_t>(requested, config.max_positions - decoder_len));
}

int64_t TokensEverySampleMakes(const GenerateRequest& r, const model::ModelConfig& config,
                               const EngineOptions& options) {
  if (!r.ignore_eos || !r.stop_token_ids.empty() || !r.stop_strings.empty()) return 0;
  return std::max<int64_t>(MaxNewTokens(r, DecoderLength(r, config), config, options), 0);
}

absl::Status CheckNewTokenCount(int64_t n, const EngineOptions& options, absl::string_view field,
                                int64_t unset_default) {
  if (n < 1 || n > options.max_new_tokens_cap) {
    return Invalid(absl::StrCat(field, " = ", n, " is out of range: allowed 1..",
                                options.max_new_tokens_cap,
                                " (the server's --max_new_tokens_cap), or unset for the default ",
                                unset_default));
  }
  return absl::OkStatus();
}

absl::Status CheckMaxNewTokens(int32_t n, const EngineOptions& options) {
  return CheckNewTokenCount(n, options, "max_new_tokens", options.default_max_new_tokens);
}

absl::Status CheckGenerateRequest(const GenerateRequest& r, const model::ModelConfig& config,
                                  const EngineOptions& options) {
  const bool enc_dec = config.architecture == Architecture::kEncoderDecoder;
  if (config.architecture == Architecture::kEncoderOnly) {
    return Invalid(absl::StrCat("model '", config.name,
                                "' is encoder-only and cannot generate; use Encode or "
                                "Attention, or a decoder-only / encoder-decoder model"));
  }
  if (enc_dec) {
    if (r.source.empty()) return Invalid("input is empty; an encoder-decoder model needs a source");
    DIKKAT_RETURN_IF_ERROR(CheckInput(r.source, "input", config));
  } else if (r.prompt.empty()) {
    return Invalid("input is empty; give a prompt (text or token ids)");
  }
  // The decoder's prompt: decoder-only, the input; encoder-decoder, the
  // decoder prefix after the decoder start token the engine prepends.
  const char* field = enc_dec ? "decoder_prefix" : "input";
  DIKKAT_RETURN_IF_ERROR(ValidateTokenIds(r.prompt, field, config.vocab_size));
  const int64_t decoder_len = DecoderLength(r, config);
  if (config.max_positions > 0 && decoder_len >= config.max_positions) {
    return Invalid(absl::StrCat(field, " has ", r.prompt.size(), " tokens",
                                enc_dec ? " (plus the decoder start token)" : "",
                                ", which leaves no room to generate: model '", config.name,
                                "' has a context of max_positions=", config.max_positions,
                                " tokens in total and at least one must remain for generation"));
  }
  if (!r.prompt_only && r.max_new_tokens != 0) {
    DIKKAT_RETURN_IF_ERROR(CheckMaxNewTokens(r.max_new_tokens, options));
  }
  // Encoder-decoder: the decoder's context holds its start token, the
  // prefix and the new tokens.
  if (r.strict_max_new_tokens && r.max_new_tokens > 0 && config.max_positions > 0 &&
      decoder_len + r.max_new_tokens > config.max_positions) {
    return Invalid(absl::StrCat(
        "This model's maximum context length is ", config.max_positions,
        " tokens. However, you requested ", decoder_len + r.max_new_tokens, " tokens (",
        decoder_len, enc_dec ? " in the decoder's start and prefix, " : " in the prompt, ",
        r.max_new_tokens,
        " for the completion). Please reduce the length of the prompt or completion."));
  }
  DIKKAT_RETURN_IF_ERROR(CheckSamples(r, static_cast<int64_t>(r.prompt.size()) + (enc_dec ? 1 : 0)));
  DIKKAT_RETURN_IF_ERROR(model::Validate(r.sampling));  // names the field (sampling.top_p, ...)
  for (const model::LogitBias& entry : r.sampling.logit_bias) {
    if (entry.token_id >= config.vocab_size) {
      return Invalid(absl::StrCat("sampling.logit_bias: token id ", entry.token_id,
                                  " is not in the vocabulary: allowed 0..", config.vocab_size - 1,
                                  " (vocab_size ", config.vocab_size, ")"));
    }
  }
  if (r.priority < kMinPriority || r.priority > kMaxPriority) {
    return Invalid(absl::StrCat("priority = ", r.priority, " is out of range: allowed ",
                                kMinPriority, "..", kMaxPriority));
  }
  return CheckStops(r, config, options);
}

absl::Status CheckEncodeInputCount(int64_t count, const EngineOptions& options) {
  if (count == 0) return Invalid("inputs is empty; give at least one input");
  if (count > options.max_batch_entries) {
    return Invalid(absl::StrCat("inputs has ", count, " entries; the server accepts at most ",
                                options.max_batch_entries, " per call (--max_batch_entries)"));
  }
  return absl::OkStatus();
}

absl::Status CheckEncodeRequest(const EncodeRequest& r, const model::ModelConfig& config,
                                const EngineOptions& options) {
  DIKKAT_RETURN_IF_ERROR(CheckEncodeInputCount(static_cast<int64_t>(r.inputs.size()), options));
  // Hidden states of layer 0 (embeddings) .. L of the stack Encode runs.
  const int64_t layers = config.architecture == Architecture::kEncoderDecoder
                             ? config.n_encoder_layers
                             : config.n_layers;
  if (r.hidden_layer < -1 || r.hidden_layer > layers) {
    return Invalid(
        absl::StrCat("hidden_layer = ", r.hidden_layer,
                     " is out of range: allowed -1 (final output), 0 (embeddings) or 1..", layers,
                     " (after that layer)"));
  }
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    if (absl::Status s = CheckInput(r.inputs[i], absl::StrCat("inputs[", i, "]"), config);
        !s.ok()) {
      const bool too_long = config.max_positions > 0 &&
                            r.inputs[i].size() > static_cast<size_t>(config.max_positions);
      if (!too_long) return s;
      return Invalid(absl::StrCat(s.message(), "; or set truncate (-1: cut to the model's limit)"));
    }
  }
  if (!r.type_ids.empty()) {
    if (r.type_ids.size() != r.inputs.size()) {
      return Invalid(absl::StrCat("type_ids has ", r.type_ids.size(), " lists for ",
                                  r.inputs.size(), " inputs; give none or one per input"));
    }
    for (size_t i = 0; i < r.type_ids.size(); ++i) {
      if (!r.type_ids[i].empty() && r.type_ids[i].size() != r.inputs[i].size()) {
        return Invalid(absl::StrCat("type_ids[", i, "] has ", r.type_ids[i].size(), " entries for ",
                                    r.inputs[i].size(), " tokens"));
      }
      DIKKAT_RETURN_IF_ERROR(ValidateTokenIds(r.type_ids[i], absl::StrCat("type_ids[", i, "]"),
                                              std::max<int64_t>(config.type_vocab_size, 1)));
    }
  }
  return absl::OkStatus();
}

int64_t AttentionLayers(const model::ModelConfig& config, AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSelf:
      return config.n_layers;
    case AttentionKind::kEncoderSelf:
      return config.n_encoder_layers;
    case AttentionKind::kDecoderSelf:
    case AttentionKind::kCross:
      return config.n_decoder_layers;
  }
  return 0;
}

absl::Status CheckAttentionRequest(const AttentionRequest& r, const model::ModelConfig& config,
                                   const EngineOptions& options) {
  DIKKAT_RETURN_IF_ERROR(CheckKind(r.kind, config));
  DIKKAT_RETURN_IF_ERROR(CheckInput(r.input, "input", config));
  const bool needs_target =
      r.kind == AttentionKind::kDecoderSelf || r.kind == AttentionKind::kCross;
  if (needs_target) {
    if (r.target.empty()) {
      return Invalid(
          absl::StrCat("target is required for ", KindName(r.kind), ": give the decoder input"));
    }
    DIKKAT_RETURN_IF_ERROR(CheckInput(r.target, "target", config));
  } else if (!r.target.empty()) {
    return Invalid(
        absl::StrCat("target is only used with ATTENTION_KIND_DECODER_SELF or "
                     "ATTENTION_KIND_CROSS; this request asks for ",
                     KindName(r.kind)));
  }
  const int64_t layers = AttentionLayers(config, r.kind);
  DIKKAT_RETURN_IF_ERROR(CheckIndices(r.layers, "layers", layers, "layers of this kind"));
  DIKKAT_RETURN_IF_ERROR(CheckIndices(r.heads, "heads", config.n_heads, "heads"));

  // Rows attend to columns: the target's rows for DECODER_SELF and CROSS.
  const int64_t input = static_cast<int64_t>(r.input.size());
  const int64_t target = static_cast<int64_t>(r.target.size());
  const int64_t q_len = needs_target ? target : input;
  const int64_t k_len = r.kind == AttentionKind::kDecoderSelf ? target : input;
  const int64_t n_layers = r.layers.empty() ? layers : static_cast<int64_t>(r.layers.size());
  const int64_t n_heads = r.aggregation != HeadAggregation::kNone ? 1
                          : r.heads.empty()                       ? config.n_heads
                                            : static_cast<int64_t>(r.heads.size());
  const int64_t values = n_layers * n_heads * q_len * k_len;
  const int64_t limit = r.max_values > 0 ? r.max_values : options.max_attention_values;
  if (values > limit) {
    return Invalid(absl::StrCat(
        "the response would hold ", values, " attention weights (", n_layers, " layers x ", n_heads,
        " maps x ", q_len, " x ", k_len, "); the limit is ", limit,
        "; select fewer layers or heads, aggregate heads, or shorten the input"));
  }
  // What is computed before the maps are selected or aggregated: every
  // head's scores and weights of one layer at a time ([H, q, k] each), so a
  // mean of one layer is not H times cheaper than the response says. Bound
  // by the server's limit, whatever the call's own max_values.
  const int64_t computed = config.n_heads * q_len * k_len;
  if (computed > options.max_attention_values) {
    return Invalid(absl::StrCat(
        "computing one layer's attention weights holds ", computed, " values (all ",
        config.n_heads, " heads x ", q_len, " x ", k_len,
        ", before heads are selected or aggregated); the server's limit is ",
        options.max_attention_values, " (--max_attention_values): shorten the input"));
  }
  return absl::OkStatus();
}

}  // namespace dikkat::server
