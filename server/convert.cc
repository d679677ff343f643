#include "server/convert.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/tensor_codec.h"
#include "model/cpu_isa.h"
#include "model/sampling_params.h"
#include "server/request_checks.h"

namespace dikkat::server {
namespace {

static_assert(sizeof(float) == 4, "float must be IEEE 754 binary32");

absl::Status Invalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// Prefixes the field name to an error from a lower layer (tokenizer, sampler).
absl::Status InField(absl::string_view field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

// UNSPECIFIED means the model's own self-attention; whether the kind fits
// the architecture is CheckAttentionRequest's.
absl::StatusOr<AttentionKind> ToAttentionKind(v1::AttentionKind kind,
                                              const model::ModelConfig& config) {
  switch (kind) {
    case v1::ATTENTION_KIND_UNSPECIFIED:
      return config.architecture == model::Architecture::kEncoderDecoder
                 ? AttentionKind::kEncoderSelf
                 : AttentionKind::kSelf;
    case v1::ATTENTION_KIND_SELF:
      return AttentionKind::kSelf;
    case v1::ATTENTION_KIND_ENCODER_SELF:
      return AttentionKind::kEncoderSelf;
    case v1::ATTENTION_KIND_DECODER_SELF:
      return AttentionKind::kDecoderSelf;
    case v1::ATTENTION_KIND_CROSS:
      return AttentionKind::kCross;
    default:
      return Invalid(absl::StrCat("kind: unknown AttentionKind value ", static_cast<int>(kind),
                                  "; allowed: 0..4"));
  }
}

}  // namespace

// ---- inputs -----------------------------------------------------------------

int64_t TextByteLimit(const ModelLimits& limits) {
  if (limits.max_text_bytes > 0) return limits.max_text_bytes;
  if (limits.config == nullptr || limits.config->max_positions <= 0) return 0;
  return limits.config->max_positions * kTextBytesPerToken;
}

absl::Status CheckTextBytes(size_t bytes, absl::string_view field, const ModelLimits& limits) {
  const int64_t limit = TextByteLimit(limits);
  if (limit <= 0 || static_cast<int64_t>(bytes) <= limit) return absl::OkStatus();
  const std::string model = limits.config != nullptr ? limits.config->name : "";
  const std::string default_note =
      limits.max_text_bytes > 0 ? ""
                                : absl::StrCat(", by default max_positions=",
                                               limits.config->max_positions, " x ",
                                               kTextBytesPerToken, " bytes");
  return Invalid(absl::StrCat(field, " has ", bytes, " bytes; model '", model, "' takes at most ",
                              limit, " bytes of text per field (--max_text_bytes", default_note,
                              "), checked before tokenizing: shorten the text or send it in "
                              "several calls"));
}

absl::StatusOr<std::vector<int32_t>> InputToIds(const v1::Input& input, absl::string_view field,
                                                bool default_add_special_tokens,
                                                const ModelLimits& limits,
                                                std::vector<int32_t>* type_ids,
                                                int64_t truncate_to) {
  if (type_ids != nullptr) type_ids->clear();
  std::vector<int32_t> ids;
  switch (input.content_case()) {
    case v1::Input::kText: {
      if (input.text().empty()) {
        return Invalid(absl::StrCat(field, ".text is empty; give some text or ", field,
                                    ".tokens"));
      }
      DIKKAT_RETURN_IF_ERROR(
          CheckTextBytes(input.text().size(), absl::StrCat(field, ".text"), limits));
      // Parsed text adds nothing around it unless asked: it usually carries
      // its own special tokens (a rendered chat template).
      const bool add_special =
          input.has_add_special_tokens()
              ? input.add_special_tokens()
              : default_add_special_tokens && !input.parse_special_tokens();
      absl::StatusOr<model::Encoding> encoding =
          input.parse_special_tokens()
              ? model::EncodeParsingSpecialTokens(*limits.tokenizer, input.text(), add_special)
              : limits.tokenizer->Encode(input.text(), add_special);
      if (!encoding.ok()) return InField(absl::StrCat(field, ".text"), encoding.status());
      ids = std::move(encoding->ids);
      if (type_ids != nullptr) *type_ids = std::move(encoding->type_ids);
      if (ids.empty()) {
        return Invalid(absl::StrCat(field, ".text tokenizes to no tokens"));
      }
      if (truncate_to > 0 && static_cast<int64_t>(ids.size()) > truncate_to) {
        // The first tokens of the text, between the special tokens the
        // tokenizer added around it.
        int64_t after = 0, around = 0;
        if (add_special) {
          const model::Tokenizer::AddedTokens added = limits.tokenizer->SpecialTokensAround();
          after = static_cast<int64_t>(added.after.size());
          around = static_cast<int64_t>(added.before.size()) + after;
        }
        if (truncate_to <= around) {
          return Invalid(absl::StrCat("truncating ", field, " to ", truncate_to,
                                      " tokens leaves no room for its text between the ", around,
                                      " special tokens the tokenizer adds around it"));
        }
        const auto cut = [&](std::vector<int32_t>& v) {
          if (static_cast<int64_t>(v.size()) != static_cast<int64_t>(ids.size())) return;
          v.erase(v.begin() + (truncate_to - after), v.end() - after);
        };
        if (type_ids != nullptr) cut(*type_ids);
        cut(ids);
      }
      break;
    }
    case v1::Input::kTokens: {
      const int64_t n = input.tokens().ids_size();
      if (n == 0) {
        return Invalid(absl::StrCat(field, ".tokens.ids is empty; give at least one token id"));
      }
      // Before any copy: a message of 1-byte varint ids would otherwise be
      // held several times over (4 bytes each) before the engine's check.
      const model::ModelConfig* config = limits.config;
      if (truncate_to > 0 && n > truncate_to) {
        ids.assign(input.tokens().ids().begin(), input.tokens().ids().begin() + truncate_to);
        break;
      }
      if (config != nullptr && config->max_positions > 0 && n > config->max_positions) {
        return Invalid(absl::StrCat(field, ".tokens.ids has ", n, " tokens, more than model '",
                                    config->name, "' has positions (max_positions=",
                                    config->max_positions, ")"));
      }
      ids.assign(input.tokens().ids().begin(), input.tokens().ids().end());
      break;
    }
    case v1::Input::CONTENT_NOT_SET:
      return Invalid(absl::StrCat(field, " is empty; set ", field, ".text or ", field,
                                  ".tokens"));
  }
  return ids;
}

// ---- Generate ---------------------------------------------------------------

model::SamplingParams ToSamplingParams(const v1::SamplingOptions& options, int32_t top_logprobs,
                                       const model::ModelConfig::SamplingDefaults& defaults) {
  model::SamplingParams params;
  // Unset: the model's recommended value (generation_config.json), else
  // the neutral one.
  params.temperature =
      options.has_temperature() ? options.temperature() : defaults.temperature.value_or(1.0f);
  // top_k: 0 is unset, -1 off.
  params.top_k = options.top_k() == 0    ? defaults.top_k.value_or(0)
                 : options.top_k() == -1 ? 0
                                         : options.top_k();
  params.top_p = options.has_top_p() ? options.top_p() : defaults.top_p.value_or(1.0f);
  params.min_p = options.min_p();
  params.repetition_penalty = options.has_repetition_penalty()
                                  ? options.repetition_penalty()
                                  : defaults.repetition_penalty.value_or(1.0f);
  params.presence_penalty = options.presence_penalty();
  params.frequency_penalty = options.frequency_penalty();
  if (options.has_seed()) params.seed = options.seed();
  params.top_logprobs = top_logprobs;
  // In id order: the wire map's order is unspecified.
  params.logit_bias.reserve(options.logit_bias_size());
  for (const auto& [token_id, bias] : options.logit_bias()) {
    params.logit_bias.push_back(model::LogitBias{token_id, bias});
  }
  std::sort(
      params.logit_bias.begin(), params.logit_bias.end(),
      [](const model::LogitBias& a, const model::LogitBias& b) { return a.token_id < b.token_id; });
  return params;
}

absl::StatusOr<GenerateConversion> ToGenerateRequest(const v1::GenerateRequest& request,
                                                     const ModelLimits& limits) {
  const model::ModelConfig& config = *limits.config;
  const EngineOptions& options = *limits.options;
  GenerateConversion out;
  GenerateRequest& r = out.request;

  // The lists' counts first, on the message itself: a refused request's
  // entries are not copied, sorted or tokenized for (a 64 MB message holds
  // millions of logit_bias entries). The same messages as the later checks.
  if (request.sampling().logit_bias_size() > model::kMaxLogitBiasEntries) {
    return Invalid(absl::StrCat("sampling.logit_bias has ", request.sampling().logit_bias_size(),
                                " entries; at most ", model::kMaxLogitBiasEntries,
                                " are allowed"));
  }
  if (request.stop_size() > options.max_stop_strings) {
    return Invalid(absl::StrCat("stop has ", request.stop_size(), " strings; at most ",
                                options.max_stop_strings, " are allowed"));
  }
  if (request.stop_token_ids_size() > options.max_stop_token_ids) {
    return Invalid(absl::StrCat("stop_token_ids has ", request.stop_token_ids_size(),
                                " entries; at most ", options.max_stop_token_ids,
                                " are allowed"));
  }

  DIKKAT_ASSIGN_OR_RETURN(out.input_ids, InputToIds(request.input(), "input", false, limits));
  if (config.architecture == model::Architecture::kEncoderDecoder) {
    r.source = out.input_ids;
    if (request.has_decoder_prefix()) {
      DIKKAT_ASSIGN_OR_RETURN(
          r.prompt, InputToIds(request.decoder_prefix(), "decoder_prefix", false, limits));
    }
  } else {
    if (request.has_decoder_prefix() &&
        config.architecture == model::Architecture::kDecoderOnly) {
      return Invalid(absl::StrCat("decoder_prefix is for encoder-decoder models; model '",
                                  config.name,
                                  "' is decoder-only: put the whole prompt in input"));
    }
    r.prompt = out.input_ids;
  }

  int32_t top_logprobs = 0;
  if (request.has_top_logprobs() && request.top_logprobs() != -1) {
    if (request.top_logprobs() < 0 || request.top_logprobs() > 20) {
      return Invalid(absl::StrCat("top_logprobs = ", request.top_logprobs(),
                                  " is out of range: allowed 0..20, or -1 for none"));
    }
    top_logprobs = request.top_logprobs();
    out.want_logprobs = true;
  }
  if (request.sampling().top_k() < -1) {
    return Invalid(absl::StrCat("sampling.top_k = ", request.sampling().top_k(),
                                " is out of range: 0 (the model's default), -1 (off) or >= 1"));
  }
  r.sampling = ToSamplingParams(request.sampling(), top_logprobs, config.sampling_defaults);

  if (request.has_prompt_logprobs() && request.prompt_logprobs() != -1) {
    if (request.prompt_logprobs() < 0 || request.prompt_logprobs() > kMaxPromptLogprobs) {
      return Invalid(absl::StrCat("prompt_logprobs = ", request.prompt_logprobs(),
                                  " is out of range: allowed 0..", kMaxPromptLogprobs,
                                  ", or -1 for none"));
    }
    r.prompt_logprobs = request.prompt_logprobs();
  }
  if (request.has_max_new_tokens()) {
    // Set means explicit: 0 scores the prompt only (with prompt_logprobs) and
    // is an error otherwise (the wire's rule), not the engine's "default".
    // Its range is the engine's check.
    if (request.max_new_tokens() == 0) {
      if (r.prompt_logprobs < 0) {
        return Invalid(absl::StrCat(
            "max_new_tokens = 0 generates nothing: it is allowed only with prompt_logprobs (to "
            "score the prompt); otherwise allowed 1..",
            options.max_new_tokens_cap, ", or unset for the default ",
            options.default_max_new_tokens));
      }
      r.prompt_only = true;
    }
    r.max_new_tokens = request.max_new_tokens();
    r.strict_max_new_tokens = request.strict_max_new_tokens();
  } else {
    if (request.strict_max_new_tokens()) {
      return Invalid(
          "strict_max_new_tokens is set without max_new_tokens: set the number of tokens that "
          "must fit in the context, or leave strict_max_new_tokens false");
    }
    r.max_new_tokens = options.default_max_new_tokens;
  }
  r.stop_strings.assign(request.stop().begin(), request.stop().end());
  r.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  r.ignore_eos = request.ignore_eos();
  r.include_stop_text = request.include_stop_text();
  r.priority = request.priority();
  // The wire's 0 means unset: one sample, best of n.
  r.n = request.n() == 0 ? 1 : request.n();
  r.best_of = request.best_of() == 0 ? r.n : request.best_of();
  r.beam_width = request.beam_width();
  if (request.has_length_penalty()) r.length_penalty = request.length_penalty();
  r.early_stopping = request.early_stopping();
  return out;
}

v1::FinishReason ToProtoFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline:
      return v1::FINISH_REASON_DEADLINE;
    case FinishReason::kError:
      return v1::FINISH_REASON_UNSPECIFIED;  // errors end the call with a status instead
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

namespace {

void AppendToken(const GeneratedToken& token, bool want_logprobs,
                 const model::Tokenizer& tokenizer, v1::GeneratedToken* out) {
  out->set_id(token.token_id);
  if (!want_logprobs) return;
  out->set_logprob(token.logprob);
  for (const TokenAlternative& alt : token.top) {
    v1::TokenLogprob* t = out->add_top_logprobs();
    t->set_token_id(alt.token_id);
    t->set_logprob(alt.logprob);
    t->set_text(tokenizer.TokenText(alt.token_id));
  }
}

}  // namespace

void AppendChunk(const GeneratedChunk& chunk, bool want_logprobs,
                 const model::Tokenizer& tokenizer, v1::GenerateResponse* response) {
  for (const GeneratedToken& token : chunk.tokens) {
    AppendToken(token, want_logprobs, tokenizer, response->add_tokens());
  }
  for (const GeneratedToken& token : chunk.prompt_logprobs) {
    AppendToken(token, /*want_logprobs=*/true, tokenizer, response->add_prompt_logprobs());
  }
  response->mutable_text()->append(chunk.text);
  response->set_index(chunk.index);
  if (chunk.finish.has_value()) {
    response->set_finish_reason(ToProtoFinishReason(*chunk.finish));
    response->set_cumulative_logprob(chunk.cumulative_logprob);
  }
  if (chunk.beam_score.has_value()) response->set_beam_score(*chunk.beam_score);
}

void FillFinish(const GenerateSummary& summary, v1::GenerateResponse* response) {
  // Several samples: each one's finish came with its last chunk.
  if (summary.samples == 1) response->set_finish_reason(ToProtoFinishReason(summary.reason));
  v1::GenerateStats* stats = response->mutable_stats();
  stats->set_prompt_tokens(summary.prompt_tokens);
  stats->set_generated_tokens(summary.generated_tokens);
  stats->set_cached_prompt_tokens(summary.cached_prompt_tokens);
  stats->set_queue_seconds(absl::ToDoubleSeconds(summary.queue_time));
  stats->set_time_to_first_token_seconds(absl::ToDoubleSeconds(summary.time_to_first_token));
  stats->set_total_seconds(absl::ToDoubleSeconds(summary.total_time));
  stats->set_seed(summary.seed);
}

// ---- Encode -----------------------------------------------------------------

model::Pooling FromProtoPooling(v1::Pooling pooling, model::Pooling model_default) {
  switch (pooling) {
    case v1::POOLING_MEAN:
      return model::Pooling::kMean;
    case v1::POOLING_FIRST:
      return model::Pooling::kFirst;
    case v1::POOLING_LAST:
      return model::Pooling::kLast;
    default:
      return model_default;
  }
}

absl::StatusOr<EncodeRequest> ToEncodeRequest(const v1::EncodeRequest& request,
                                              const ModelLimits& limits) {
  const model::ModelConfig& config = *limits.config;
  const EngineOptions& options = *limits.options;
  if (!v1::Pooling_IsValid(request.pooling())) {
    return Invalid(absl::StrCat("pooling: unknown Pooling value ",
                                static_cast<int>(request.pooling()), "; allowed 0..3"));
  }
  DIKKAT_RETURN_IF_ERROR(ResolveDType(request.output_dtype(), "output_dtype").status());

  EncodeRequest r;
  r.pooling = FromProtoPooling(request.pooling(), config.default_pooling);
  r.normalize = request.has_normalize() ? request.normalize() : config.default_normalize;
  r.return_hidden_states = request.return_hidden_states();
  if (request.has_hidden_layer()) r.hidden_layer = request.hidden_layer();

  // Bound the work before doing it: the number of inputs before any is tokenized.
  DIKKAT_RETURN_IF_ERROR(CheckEncodeInputCount(request.inputs_size(), options));
  int64_t truncate_to = 0;
  if (request.truncate() != 0) {
    if (request.truncate() < -1 || request.truncate() > config.max_positions) {
      return Invalid(absl::StrCat("truncate = ", request.truncate(),
                                  ": allowed 0 (never), -1 (to the model's limit) or 1..",
                                  config.max_positions, " (model '", config.name,
                                  "' accepts at most max_positions=", config.max_positions,
                                  " tokens)"));
    }
    truncate_to = request.truncate() == -1 ? config.max_positions : request.truncate();
  }
  // The named prompt put before each text input (sentence-transformers'
  // prompt_name; the model's default when the request names none).
  const std::string prompt_name =
      request.has_prompt_name() ? request.prompt_name() : config.default_prompt_name;
  const std::string* prompt = nullptr;
  if (!prompt_name.empty()) {
    auto it = config.prompts.find(prompt_name);
    if (it == config.prompts.end()) {
      std::vector<std::string> names;
      for (const auto& [name, text] : config.prompts) {
        if (names.size() < 20) names.push_back(absl::CHexEscape(name.substr(0, 50)));
      }
      return Invalid(absl::StrCat(
          "prompt_name '", absl::CHexEscape(prompt_name.substr(0, 100)),
          "' is not one of the prompts of model '", config.name, "' (",
          names.empty() ? "it has none" : absl::StrJoin(names, ", "),
          config.prompts.size() > names.size() ? ", ..." : "", ")"));
    }
    if (!it->second.empty()) prompt = &it->second;
  }
  // Its tokens, for the truncation check below (tokenized once; bounded by
  // the model's config, not by the caller).
  int64_t prompt_tokens = 0;
  bool any_type_ids = false;
  std::vector<std::vector<int32_t>> type_ids(request.inputs_size());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const v1::Input* input = &request.inputs(i);
    const std::string field = absl::StrCat("inputs[", i, "]");
    v1::Input prompted;
    if (prompt != nullptr && input->has_text()) {
      if (input->text().empty()) {
        return Invalid(absl::StrCat(field, ".text is empty; give some text or ", field,
                                    ".tokens"));
      }
      if (!config.pooling_includes_prompt) {
        return Invalid(absl::StrCat(
            "model '", config.name,
            "' pools without its prompt's tokens (include_prompt false), which dikkat does not "
            "do: send the text without a prompt (prompt_name \"\")"));
      }
      // Bytes before the copy: the caller's text and the prompt together.
      const int64_t limit = TextByteLimit(limits);
      const size_t bytes = prompt->size() + input->text().size();
      if (limit > 0 && static_cast<int64_t>(bytes) > limit) {
        return Invalid(absl::StrCat(
            field, ".text has ", input->text().size(), " bytes, ", bytes, " with the ",
            prompt->size(), "-byte prompt '", absl::CHexEscape(prompt_name.substr(0, 100)),
            "' before it; model '", config.name, "' takes at most ", limit,
            " bytes of text per field (--max_text_bytes), checked before tokenizing"));
      }
      if (prompt_tokens == 0 && truncate_to > 0) {
        absl::StatusOr<model::Encoding> encoded = limits.tokenizer->Encode(*prompt, false);
        if (!encoded.ok()) return InField("prompt", encoded.status());
        prompt_tokens = static_cast<int64_t>(encoded->ids.size());
      }
      prompted = *input;
      prompted.set_text(absl::StrCat(*prompt, input->text()));
      input = &prompted;
    } else if (prompt != nullptr && request.has_prompt_name() && input->has_tokens()) {
      return Invalid(absl::StrCat("prompt_name '", absl::CHexEscape(prompt_name.substr(0, 100)),
                                  "' applies to text; ", field,
                                  " is token ids (put the prompt's ids before them)"));
    }
    absl::StatusOr<std::vector<int32_t>> converted =
        InputToIds(*input, field, true, limits, &type_ids[i], truncate_to);
    // A cut that leaves none of the caller's text after the prompt.
    if (converted.ok() && input == &prompted && truncate_to > 0 &&
        static_cast<int64_t>(converted->size()) == truncate_to) {
      const bool add_special = input->has_add_special_tokens() ? input->add_special_tokens()
                                                               : !input->parse_special_tokens();
      int64_t around = 0;
      if (add_special) {
        const model::Tokenizer::AddedTokens added = limits.tokenizer->SpecialTokensAround();
        around = static_cast<int64_t>(added.before.size() + added.after.size());
      }
      if (truncate_to <= around + prompt_tokens) {
        return Invalid(absl::StrCat("truncating ", field, " to ", truncate_to,
                                    " tokens leaves none of its text after the ", prompt_tokens,
                                    "-token prompt '", absl::CHexEscape(prompt_name.substr(0, 100)),
                                    "'"));
      }
    }
    if (!converted.ok()) {
      // Token ids past the model's positions: the option that cuts them.
      const v1::Input& in = request.inputs(i);
      if (truncate_to == 0 && in.has_tokens() && in.tokens().ids_size() > config.max_positions) {
        return Invalid(absl::StrCat(converted.status().message(),
                                    "; or set truncate (-1: cut to the model's limit)"));
      }
      return converted.status();
    }
    std::vector<int32_t> ids = std::move(*converted);
    any_type_ids = any_type_ids || !type_ids[i].empty();
    r.inputs.push_back(std::move(ids));
  }
  // The engine wants segment ids for every input or none: token-id inputs
  // are a single segment (0).
  if (any_type_ids) {
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      if (type_ids[i].size() != r.inputs[i].size()) type_ids[i].assign(r.inputs[i].size(), 0);
    }
    r.type_ids = std::move(type_ids);
  }
  DIKKAT_RETURN_IF_ERROR(CheckResponseBytes(
      EstimateEncodeResponseBytes(r, config, request.output_dtype()), limits.max_response_bytes,
      "the Encode response",
      r.return_hidden_states ? "send fewer or shorter inputs, ask for DTYPE_BFLOAT16, or leave "
                               "return_hidden_states off"
                             : "send fewer inputs per call or ask for DTYPE_BFLOAT16"));
  return r;
}

absl::Status FillEncodeResponse(const EncodeRequest& engine_request, const EncodeResult& result,
                                v1::DType dtype, v1::EncodeResponse* response) {
  DIKKAT_ASSIGN_OR_RETURN(v1::DType resolved, ResolveDType(dtype, "output_dtype"));
  if (result.embeddings.size() != engine_request.inputs.size() ||
      (engine_request.return_hidden_states &&
       result.hidden_states.size() != engine_request.inputs.size())) {
    return absl::InternalError(absl::StrCat(
        "engine returned ", result.embeddings.size(), " embeddings and ",
        result.hidden_states.size(), " hidden states for ", engine_request.inputs.size(),
        " inputs"));
  }
  response->set_prompt_tokens(result.prompt_tokens);
  for (size_t i = 0; i < engine_request.inputs.size(); ++i) {
    v1::EncodeResult* out = response->add_results();
    DIKKAT_RETURN_IF_ERROR(ToProtoTensor(result.embeddings[i], resolved, out->mutable_embedding()));
    if (engine_request.return_hidden_states) {
      DIKKAT_RETURN_IF_ERROR(
          ToProtoTensor(result.hidden_states[i], resolved, out->mutable_hidden_states()));
    }
    out->mutable_token_ids()->Add(engine_request.inputs[i].begin(), engine_request.inputs[i].end());
  }
  return absl::OkStatus();
}

// ---- Attention --------------------------------------------------------------

v1::AttentionKind ToProtoAttentionKind(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSelf:
      return v1::ATTENTION_KIND_SELF;
    case AttentionKind::kEncoderSelf:
      return v1::ATTENTION_KIND_ENCODER_SELF;
    case AttentionKind::kDecoderSelf:
      return v1::ATTENTION_KIND_DECODER_SELF;
    case AttentionKind::kCross:
      return v1::ATTENTION_KIND_CROSS;
  }
  return v1::ATTENTION_KIND_UNSPECIFIED;
}

absl::StatusOr<AttentionRequest> ToAttentionRequest(const v1::AttentionRequest& request,
                                                    const ModelLimits& limits) {
  const model::ModelConfig& config = *limits.config;
  AttentionRequest r;
  DIKKAT_ASSIGN_OR_RETURN(r.kind, ToAttentionKind(request.kind(), config));
  if (request.aggregation() != v1::HEAD_AGGREGATION_NONE &&
      request.aggregation() != v1::HEAD_AGGREGATION_MEAN &&
      request.aggregation() != v1::HEAD_AGGREGATION_MAX) {
    return Invalid(absl::StrCat("aggregation: unknown HeadAggregation value ",
                                static_cast<int>(request.aggregation()), "; allowed 0..2"));
  }
  r.aggregation = request.aggregation() == v1::HEAD_AGGREGATION_MEAN  ? HeadAggregation::kMean
                  : request.aggregation() == v1::HEAD_AGGREGATION_MAX ? HeadAggregation::kMax
                                                                      : HeadAggregation::kNone;
  DIKKAT_RETURN_IF_ERROR(ResolveDType(request.output_dtype(), "output_dtype").status());

  DIKKAT_ASSIGN_OR_RETURN(r.input, InputToIds(request.input(), "input", true, limits));
  if (request.has_target()) {
    DIKKAT_ASSIGN_OR_RETURN(r.target, InputToIds(request.target(), "target", false, limits));
  }
  r.layers.assign(request.layers().begin(), request.layers().end());
  r.heads.assign(request.heads().begin(), request.heads().end());
  DIKKAT_RETURN_IF_ERROR(CheckResponseBytes(
      EstimateAttentionResponseBytes(r, config, request.output_dtype()), limits.max_response_bytes,
      "the Attention response",
      "select fewer layers or heads, aggregate heads, ask for DTYPE_BFLOAT16, or shorten the "
      "input"));
  return r;
}

// ---- response size ----------------------------------------------------------

int64_t DTypeBytes(v1::DType dtype) {
  return dtype == v1::DTYPE_BFLOAT16 || dtype == v1::DTYPE_FLOAT16 ? 2 : 4;
}

int64_t EstimateEncodeResponseBytes(const EncodeRequest& request, const model::ModelConfig& config,
                                    v1::DType dtype) {
  const int64_t value_bytes = DTypeBytes(dtype);
  int64_t bytes = 0;
  for (const std::vector<int32_t>& ids : request.inputs) {
    // pooled embedding (the Dense modules' width for the final layer)
    bytes += (request.hidden_layer < 0 ? config.embedding_dim() : config.d_model) * value_bytes;
    if (request.return_hidden_states) {
      bytes += static_cast<int64_t>(ids.size()) * config.d_model * value_bytes;
    }
    bytes += static_cast<int64_t>(ids.size());  // echoed ids: >= 1 varint byte each
  }
  return bytes;
}

int64_t EstimateAttentionResponseBytes(const AttentionRequest& request,
                                       const model::ModelConfig& config, v1::DType dtype) {
  const int64_t input = static_cast<int64_t>(request.input.size());
  const int64_t target = static_cast<int64_t>(request.target.size());
  int64_t q_len = input, k_len = input;
  if (request.kind == AttentionKind::kDecoderSelf) q_len = k_len = target;
  if (request.kind == AttentionKind::kCross) q_len = target;
  const int64_t layers = request.layers.empty() ? AttentionLayers(config, request.kind)
                                                : static_cast<int64_t>(request.layers.size());
  const int64_t heads = request.aggregation != HeadAggregation::kNone ? 1
                        : request.heads.empty() ? config.n_heads
                                                : static_cast<int64_t>(request.heads.size());
  // The lists' lengths are the caller's (checked for range and repeats only
  // later): saturate rather than wrap, so a huge product is refused too.
  int64_t bytes = DTypeBytes(dtype);
  for (const int64_t factor : {layers, heads, q_len, k_len}) {
    if (__builtin_mul_overflow(bytes, factor, &bytes)) return std::numeric_limits<int64_t>::max();
  }
  return bytes;
}

absl::Status CheckResponseBytes(int64_t bytes, int64_t limit, absl::string_view what,
                                absl::string_view advice) {
  if (limit <= 0 || bytes <= limit) return absl::OkStatus();
  const std::string size = bytes == std::numeric_limits<int64_t>::max()
                               ? std::string("more than 2^63 bytes")
                               : absl::StrCat("at least ", bytes, " bytes");
  return Invalid(absl::StrCat(what, " would be ", size, "; the server sends at most ", limit,
                              " bytes per message (--max_response_bytes): ", advice));
}

absl::Status FillAttentionResponse(const AttentionRequest& engine_request,
                                   const AttentionResult& result, v1::DType dtype,
                                   const model::Tokenizer& tokenizer,
                                   v1::AttentionResponse* response) {
  DIKKAT_ASSIGN_OR_RETURN(v1::DType resolved, ResolveDType(dtype, "output_dtype"));
  // Rows are the sequence that attends, columns the one attended to.
  const bool rows_are_target = engine_request.kind == AttentionKind::kDecoderSelf ||
                               engine_request.kind == AttentionKind::kCross;
  const bool cols_are_target = engine_request.kind == AttentionKind::kDecoderSelf;
  const std::vector<int32_t>& rows = rows_are_target ? engine_request.target : engine_request.input;
  const std::vector<int32_t>& cols = cols_are_target ? engine_request.target : engine_request.input;
  for (int32_t id : rows) {
    response->add_query_token_ids(id);
    response->add_query_tokens(tokenizer.TokenText(id));
  }
  for (int32_t id : cols) {
    response->add_key_token_ids(id);
    response->add_key_tokens(tokenizer.TokenText(id));
  }
  for (const AttentionMap& map : result.maps) {
    v1::AttentionMap* out = response->add_maps();
    out->set_layer(map.layer);
    out->set_head(map.head);
    out->set_kind(ToProtoAttentionKind(map.kind));
    DIKKAT_RETURN_IF_ERROR(ToProtoTensor(map.weights, resolved, out->mutable_weights()));
  }
  return absl::OkStatus();
}

// ---- tensors ----------------------------------------------------------------

absl::StatusOr<v1::DType> ResolveDType(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::DTYPE_UNSPECIFIED:
    case v1::DTYPE_FLOAT32:
      return v1::DTYPE_FLOAT32;
    case v1::DTYPE_BFLOAT16:
    case v1::DTYPE_FLOAT16:
      return dtype;
    default:
      return Invalid(absl::StrCat(field, ": unknown DType value ", static_cast<int>(dtype),
                                  "; allowed DTYPE_FLOAT32, DTYPE_BFLOAT16, DTYPE_FLOAT16"));
  }
}

absl::Status ToProtoTensor(const DenseTensor& tensor, v1::DType dtype, v1::Tensor* out) {
  int64_t count = 1;
  for (int64_t d : tensor.shape) {
    if (d < 0) return absl::InternalError(absl::StrCat("tensor has negative dimension ", d));
    count *= d;
  }
  if (count != static_cast<int64_t>(tensor.values.size())) {
    return absl::InternalError(absl::StrCat("tensor of shape [", absl::StrJoin(tensor.shape, ", "),
                                            "] holds ", tensor.values.size(), " values, not ",
                                            count));
  }
  DIKKAT_ASSIGN_OR_RETURN(v1::DType resolved, ResolveDType(dtype, "dtype"));
  out->Clear();
  out->mutable_shape()->Add(tensor.shape.begin(), tensor.shape.end());
  out->set_dtype(resolved);
  const TensorEncoding encoding = resolved == v1::DTYPE_BFLOAT16  ? TensorEncoding::kBFloat16
                                  : resolved == v1::DTYPE_FLOAT16 ? TensorEncoding::kFloat16
                                                                  : TensorEncoding::kFloat32;
  AppendEncoded(tensor.values, encoding, out->mutable_data());
  return absl::OkStatus();
}

// ---- model info -------------------------------------------------------------

void FillModelInfo(const ModelDescription& description, const EngineStats& stats,
                   const model::Tokenizer& tokenizer, bool is_default, v1::ModelInfo* info) {
  const model::ModelConfig& c = description.config;
  info->set_name(description.name);
  info->set_is_default(is_default);
  info->set_architecture(model::ArchitectureName(c.architecture));
  info->set_weight_layout(c.weight_layout);
  info->set_vocab_size(c.vocab_size);
  info->set_d_model(c.d_model);
  info->set_n_layers(c.n_layers);
  info->set_n_encoder_layers(c.n_encoder_layers);
  info->set_n_decoder_layers(c.n_decoder_layers);
  info->set_n_heads(c.n_heads);
  info->set_n_kv_heads(c.kv_heads());
  info->set_head_dim(c.head_size());
  info->set_ffn_dim(c.ffn_dim);
  info->set_max_context(c.max_positions);
  const model::ModelConfig::SamplingDefaults& sampling = c.sampling_defaults;
  v1::SamplingOptions* defaults = info->mutable_default_sampling();
  if (sampling.temperature) defaults->set_temperature(*sampling.temperature);
  if (sampling.top_p) defaults->set_top_p(*sampling.top_p);
  if (sampling.top_k) defaults->set_top_k(*sampling.top_k == 0 ? -1 : *sampling.top_k);
  if (sampling.repetition_penalty) defaults->set_repetition_penalty(*sampling.repetition_penalty);
  info->set_default_normalize(c.default_normalize);
  info->set_embedding_dim(c.embedding_dim());
  for (const auto& [name, text] : c.prompts) (*info->mutable_prompts())[name] = text;
  info->set_default_prompt_name(c.default_prompt_name);
  info->set_default_pooling(c.default_pooling == model::Pooling::kFirst  ? v1::POOLING_FIRST
                            : c.default_pooling == model::Pooling::kLast ? v1::POOLING_LAST
                                                                         : v1::POOLING_MEAN);
  info->set_positions(model::PositionName(c.positions));
  info->set_activation(model::ActivationName(c.activation));
  info->set_norm(model::NormName(c.norm));
  info->set_pre_norm(c.pre_norm);
  info->set_dtype(description.dtype);
  info->set_device(description.device);
  if (description.device == "cpu") {
    info->set_cpu_isa(std::string(model::IsaName(model::ActiveIsa())));
  }
  info->set_weights_sha256(description.weights_sha256);
  info->set_weights_bytes(description.weights_bytes);
  info->set_tokenizer(description.tokenizer_kind.empty() ? tokenizer.kind()
                                                         : description.tokenizer_kind);
  for (const std::string& sha : description.tokenizer_sha256) info->add_tokenizer_sha256(sha);

  const model::SpecialTokens& special = tokenizer.special_tokens();
  v1::SpecialTokens* s = info->mutable_special_tokens();
  // The model config is authoritative for what generation uses; the
  // tokenizer fills what the config does not say.
  auto pick = [](int64_t from_config, int32_t from_tokenizer) {
    return static_cast<int32_t>(from_config >= 0 ? from_config : from_tokenizer);
  };
  s->set_bos(pick(c.bos_token_id, special.bos));
  s->set_eos(pick(c.eos_token_id, special.eos));
  s->set_pad(pick(c.pad_token_id, special.pad));
  s->set_unk(special.unk);
  s->set_cls(special.cls);
  s->set_sep(special.sep);
  s->set_mask(special.mask);
  s->set_decoder_start(static_cast<int32_t>(c.decoder_start_token_id));
  for (int64_t id : model::EosTokenIds(c)) s->add_eos_ids(static_cast<int32_t>(id));

  info->set_kv_cache_bytes(stats.kv_cache_bytes);
  info->set_kv_cache_dtype(description.kv_cache_dtype);
  info->set_kv_block_size(stats.kv_block_size);
  info->set_kv_blocks(stats.kv_blocks_total);
  if (c.has_decoder()) info->add_capabilities("generate");
  info->add_capabilities("encode");
  info->add_capabilities("attention");
}

}  // namespace dikkat::server
