#include "server/openai_request.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "dikkat/v1/dikkat.pb.h"
#include "server/reasoning.h"
#include "server/status_util.h"

namespace dikkat::server::openai {
namespace {

// OpenAI's default for /v1/completions.
constexpr int32_t kDefaultCompletionMaxTokens = 16;

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

const char* TypeName(const Json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}

// The field, or nullptr when absent or null (OpenAI clients send null for
// "unset").
const Json* Field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> OptionalNumber(const Json& body, const char* name) {
  const Json* v = Field(body, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) {
    return Invalid(absl::StrCat(name, ": expected a number, got ", TypeName(*v)));
  }
  return std::optional<double>(v->get<double>());
}

absl::StatusOr<std::optional<int64_t>> OptionalInteger(const Json& body, const char* name,
                                                       int64_t min, int64_t max) {
  const Json* v = Field(body, name);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_number_integer()) {
    return Invalid(absl::StrCat(name, ": expected an integer, got ", TypeName(*v)));
  }
  // Unsigned values beyond int64 read as negative through get<int64_t>.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max)) {
    return Invalid(
        absl::StrCat(name, " = ", v->dump(), " is out of range: allowed ", min, "..", max));
  }
  const int64_t value = v->get<int64_t>();
  if (value < min || value > max) {
    return Invalid(absl::StrCat(name, " = ", value, " is out of range: allowed ", min, "..", max));
  }
  return std::optional<int64_t>(value);
}

// max_tokens (or max_completion_tokens): 1..the server's cap, refused in
// the caller's terms with the endpoint's own default (the engine's check
// would name max_new_tokens and the gRPC default).
absl::StatusOr<std::optional<int64_t>> OptionalMaxTokens(const Json& body, const char* name,
                                                         const EngineOptions& options,
                                                         int64_t endpoint_default) {
  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> n,
                          OptionalInteger(body, name, 1, std::numeric_limits<int32_t>::max()));
  if (n) DIKKAT_RETURN_IF_ERROR(CheckNewTokenCount(*n, options, name, endpoint_default));
  return n;
}

absl::StatusOr<bool> OptionalBool(const Json& body, const char* name, bool if_absent = false) {
  const Json* v = Field(body, name);
  if (v == nullptr) return if_absent;
  if (!v->is_boolean()) {
    return Invalid(absl::StrCat(name, ": expected true or false, got ", TypeName(*v)));
  }
  return v->get<bool>();
}

// A list of token ids (each a non-negative int32).
absl::StatusOr<std::vector<int32_t>> TokenIds(const Json& list, const std::string& field) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& id = list[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max() ||
        (id.is_number_unsigned() &&
         id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))) {
      return Invalid(
          absl::StrCat(field, "[", i, "]: expected a token id (an integer >= 0), got ", id.dump()));
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

bool IsTokenList(const Json& v) { return v.is_array() && !v.empty() && v.front().is_number(); }

// ---- which fields a body may carry ---------------------------------------------

enum class Endpoint { kCompletions, kChat, kEmbeddings };

const char* EndpointPath(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kCompletions:
      return "/v1/completions";
    case Endpoint::kChat:
      return "/v1/chat/completions";
    case Endpoint::kEmbeddings:
      return "/v1/embeddings";
  }
  return "";
}

// The fields each endpoint reads (each parsed below), by name.
constexpr std::string_view kGenerateFields[] = {"model",
                                                "temperature",
                                                "top_p",
                                                "min_p",
                                                "repetition_penalty",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "top_k",
                                                "seed",
                                                "logit_bias",
                                                "n",
                                                "best_of",
                                                "ignore_eos",
                                                "stop",
                                                "stop_token_ids",
                                                "include_stop_str_in_output",
                                                "stream",
                                                "stream_options",
                                                "max_tokens",
                                                "add_special_tokens"};
constexpr std::string_view kCompletionFields[] = {"prompt", "logprobs", "echo"};
constexpr std::string_view kChatFields[] = {"messages",        "tools",
                                            "tool_choice",     "parallel_tool_calls",
                                            "response_format", "max_completion_tokens",
                                            "logprobs",        "top_logprobs",
                                            "modalities",      "chat_template_kwargs"};
constexpr std::string_view kEmbeddingFields[] = {"model", "input", "encoding_format", "dimensions",
                                                 "truncate_prompt_tokens"};
// OpenAI fields that cannot change what is generated (caller ids, metadata,
// storage, billing tier, cache routing, latency hints): accepted, not used.
constexpr std::string_view kNoEffectFields[] = {
    "user",      "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
    "prediction"};

// OpenAI fields that would change the output and are not served, with why.
struct RefusedField {
  std::string_view name;
  std::string_view why;
};
constexpr RefusedField kRefusedFields[] = {
    {"suffix", "fill-in-the-middle is not served (no model here is trained for it)"},
    {"functions", "deprecated by OpenAI and not served; use tools"},
    {"function_call", "deprecated by OpenAI and not served; use tool_choice"},
    {"audio", "audio output is not served (text only)"},
    {"reasoning_effort", "not served: these models have no reasoning-effort control"},
    {"verbosity", "not served: these models have no verbosity control"},
    {"web_search_options", "web search is not served"},
};

bool Contains(absl::Span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every field of `body` is one `endpoint` reads or one that cannot change
// the output; any other is refused by name (ignoring a field the caller
// relies on would change the output silently). null counts as absent.
absl::Status CheckFieldNames(const Json& body, Endpoint endpoint) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& name = it.key();
    if (it.value().is_null() || Contains(kNoEffectFields, name)) continue;
    const bool read =
        endpoint == Endpoint::kEmbeddings
            ? Contains(kEmbeddingFields, name)
            : Contains(kGenerateFields, name) ||
                  Contains(endpoint == Endpoint::kChat ? absl::MakeConstSpan(kChatFields)
                                                       : absl::MakeConstSpan(kCompletionFields),
                           name);
    if (read) continue;
    for (const RefusedField& refused : kRefusedFields) {
      if (refused.name == name) return Invalid(absl::StrCat(name, ": ", std::string(refused.why)));
    }
    return Invalid(absl::StrCat(name, ": not a field ", EndpointPath(endpoint),
                                " serves; fields that are not served are refused rather than "
                                "ignored (docs/api.md lists those served)"));
  }
  return absl::OkStatus();
}

// response_format, tool_choice, parallel_tool_calls and modalities: the
// model's free output is all this server generates (no constrained
// decoding), so values that need more are refused.
absl::Status CheckFreeGeneration(const Json& body, bool has_tools) {
  if (const Json* format = Field(body, "response_format")) {
    auto type = format->is_object() ? format->find("type") : format->end();
    if (!format->is_object() || type == format->end() || !type->is_string()) {
      return Invalid("response_format: expected an object {\"type\": \"text\"}");
    }
    if (*type == "json_object" || *type == "json_schema") {
      return Invalid(absl::StrCat(
          "response_format: {\"type\": \"", type->get<std::string>(),
          "\"} needs constrained decoding, which this server does not do; leave "
          "response_format unset or {\"type\": \"text\"} (and ask for JSON in the messages)"));
    }
    if (*type != "text") {
      return Invalid(
          absl::StrCat("response_format.type: ", type->dump(), " is not served; allowed \"text\""));
    }
  }
  if (const Json* choice = Field(body, "tool_choice")) {
    if (!choice->is_string() || (*choice != "none" && *choice != "auto")) {
      return Invalid(absl::StrCat(
          "tool_choice: ", choice->is_string() ? choice->dump() : "a named function",
          " would force a tool call, which needs constrained decoding (not done here); "
          "allowed \"auto\" (the model decides) or \"none\""));
    }
  }
  if (const Json* parallel = Field(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) {
      return Invalid(
          absl::StrCat("parallel_tool_calls: expected true or false, got ", TypeName(*parallel)));
    }
    if (!parallel->get<bool>() && has_tools) {
      return Invalid(
          "parallel_tool_calls: false is not served: the model may call several tools in one "
          "answer and nothing here constrains it to one; leave it unset or true");
    }
  }
  if (const Json* modalities = Field(body, "modalities")) {
    if (!modalities->is_array() || std::any_of(modalities->begin(), modalities->end(),
                                               [](const Json& m) { return m != "text"; })) {
      return Invalid("modalities: only [\"text\"] is served");
    }
  }
  return absl::OkStatus();
}

// logit_bias: {"token id": bias}. The count is bounded before the keys are
// read; ids and biases are checked by the engine (sampling.logit_bias).
absl::Status SetLogitBias(const Json& body, v1::SamplingOptions* s) {
  const Json* bias = Field(body, "logit_bias");
  if (bias == nullptr) return absl::OkStatus();
  if (!bias->is_object()) {
    return Invalid(
        absl::StrCat("logit_bias: expected an object of token id -> bias, got ", TypeName(*bias)));
  }
  if (bias->size() > static_cast<size_t>(model::kMaxLogitBiasEntries)) {
    return Invalid(absl::StrCat("logit_bias: ", bias->size(), " entries; at most ",
                                model::kMaxLogitBiasEntries, " are allowed"));
  }
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(it.key(), &id)) {
      return Invalid(absl::StrCat("logit_bias: key \"", it.key(),
                                  "\" is not a token id (an integer, as a string)"));
    }
    if (!it.value().is_number()) {
      return Invalid(absl::StrCat("logit_bias[\"", it.key(), "\"]: expected a number, got ",
                                  TypeName(it.value())));
    }
    (*s->mutable_logit_bias())[id] = it.value().get<float>();
  }
  return absl::OkStatus();
}

// The sampling and stopping fields shared by completions and chat.
absl::Status SetSampling(const Json& body, v1::GenerateRequest* out) {
  v1::SamplingOptions* s = out->mutable_sampling();
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> temperature, OptionalNumber(body, "temperature"));
  if (temperature) s->set_temperature(static_cast<float>(*temperature));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> top_p, OptionalNumber(body, "top_p"));
  if (top_p) s->set_top_p(static_cast<float>(*top_p));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> min_p, OptionalNumber(body, "min_p"));
  if (min_p) s->set_min_p(static_cast<float>(*min_p));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> repetition,
                          OptionalNumber(body, "repetition_penalty"));
  if (repetition) s->set_repetition_penalty(static_cast<float>(*repetition));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> presence, OptionalNumber(body, "presence_penalty"));
  if (presence) s->set_presence_penalty(static_cast<float>(*presence));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> frequency,
                          OptionalNumber(body, "frequency_penalty"));
  if (frequency) s->set_frequency_penalty(static_cast<float>(*frequency));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> top_k,
                          OptionalInteger(body, "top_k", -1, std::numeric_limits<int32_t>::max()));
  // vLLM's -1 (and 0) mean off: the wire's -1 (its 0 is unset, the
  // model's default).
  if (top_k) s->set_top_k(*top_k > 0 ? static_cast<int32_t>(*top_k) : -1);
  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> seed,
                          OptionalInteger(body, "seed", 0, std::numeric_limits<int64_t>::max()));
  if (seed) s->set_seed(static_cast<uint64_t>(*seed));

  DIKKAT_RETURN_IF_ERROR(SetLogitBias(body, s));

  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> n, OptionalInteger(body, "n", 1, kMaxSamples));
  if (n) out->set_n(static_cast<int32_t>(*n));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> best_of,
                          OptionalInteger(body, "best_of", 1, kMaxSamples));
  if (best_of) out->set_best_of(static_cast<int32_t>(*best_of));
  DIKKAT_ASSIGN_OR_RETURN(bool ignore_eos, OptionalBool(body, "ignore_eos"));
  out->set_ignore_eos(ignore_eos);
  DIKKAT_ASSIGN_OR_RETURN(bool include_stop, OptionalBool(body, "include_stop_str_in_output"));
  out->set_include_stop_text(include_stop);
  if (const Json* ids = Field(body, "stop_token_ids")) {
    if (!ids->is_array()) {
      return Invalid(
          absl::StrCat("stop_token_ids: expected a list of token ids, got ", TypeName(*ids)));
    }
    // Bounded (count and ids) by the engine's check, like gRPC's.
    DIKKAT_ASSIGN_OR_RETURN(std::vector<int32_t> stop_ids, TokenIds(*ids, "stop_token_ids"));
    out->mutable_stop_token_ids()->Assign(stop_ids.begin(), stop_ids.end());
  }

  if (const Json* stop = Field(body, "stop")) {
    if (stop->is_string()) {
      out->add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      // The count is bounded by the engine's check; a huge list is bounded by
      // the body size already.
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) {
          return Invalid(
              absl::StrCat("stop[", i, "]: expected a string, got ", TypeName((*stop)[i])));
        }
        out->add_stop((*stop)[i].get<std::string>());
      }
    } else {
      return Invalid(
          absl::StrCat("stop: expected a string or a list of strings, got ", TypeName(*stop)));
    }
  }
  return absl::OkStatus();
}

absl::Status SetStream(const Json& body, GenerateCall* call) {
  DIKKAT_ASSIGN_OR_RETURN(call->stream, OptionalBool(body, "stream"));
  if (const Json* options = Field(body, "stream_options")) {
    if (!options->is_object()) {
      return Invalid(absl::StrCat("stream_options: expected an object, got ", TypeName(*options)));
    }
    DIKKAT_ASSIGN_OR_RETURN(call->include_usage, OptionalBool(*options, "include_usage"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PromptCall> ToPrompt(const v1::GenerateRequest& wire, const ModelLimits& limits) {
  DIKKAT_ASSIGN_OR_RETURN(GenerateConversion conversion, ToGenerateRequest(wire, limits));
  PromptCall prompt;
  prompt.request = std::move(conversion.request);
  prompt.prompt_ids = std::move(conversion.input_ids);
  return prompt;
}

// The prompts of a completion call, each a string or a list of token ids:
// `prompt` itself, or the items of a list of them (counted first).
absl::StatusOr<std::vector<const Json*>> CompletionPrompts(const Json& body,
                                                           const BodyLimits& body_limits) {
  const Json* prompt = Field(body, "prompt");
  if (prompt == nullptr) {
    return Invalid("prompt: required (a string, a list of token ids, or a list of those)");
  }
  if (prompt->is_string() || IsTokenList(*prompt)) return std::vector<const Json*>{prompt};
  if (!prompt->is_array() || prompt->empty()) {
    return Invalid(
        absl::StrCat("prompt: expected a string, a list of token ids or a list of prompts, got ",
                     prompt->is_array() ? "an empty list" : TypeName(*prompt)));
  }
  if (prompt->size() > static_cast<size_t>(body_limits.max_prompts)) {
    return Invalid(absl::StrCat("prompt: a list of ", prompt->size(), " prompts; at most ",
                                body_limits.max_prompts, " are allowed per request"));
  }
  std::vector<const Json*> prompts;
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& item = (*prompt)[i];
    if (!item.is_string() && !IsTokenList(item)) {
      return Invalid(absl::StrCat("prompt[", i,
                                  "]: expected a string or a non-empty list of token ids, got ",
                                  !item.is_array() ? TypeName(item)
                                  : item.empty()   ? "an empty list"
                                                   : "a list of other values"));
    }
    prompts.push_back(&item);
  }
  return prompts;
}

// What `prompts` prompts with `wire`'s samples and max_new_tokens would cost,
// refused past MaxCallTokens before any prompt is tokenized.
absl::Status CheckCallCost(size_t prompts, const v1::GenerateRequest& wire,
                           const EngineOptions& options) {
  const int64_t samples = std::max({wire.n(), wire.best_of(), 1});
  const int64_t tokens = static_cast<int64_t>(prompts) * samples * wire.max_new_tokens();
  if (tokens > MaxCallTokens(options)) {
    return Invalid(absl::StrCat("prompt: ", prompts, " prompts x ", samples,
                                " samples x max_tokens ", wire.max_new_tokens(), " = ", tokens,
                                " tokens to generate; at most ", MaxCallTokens(options),
                                " are allowed per request (--max_new_tokens_cap ",
                                options.max_new_tokens_cap, " x ", kMaxSamples,
                                " samples): send fewer prompts or ask for fewer tokens"));
  }
  return absl::OkStatus();
}

// What one logprob entry (a token or an alternative) takes in the response at
// least, in either JSON form: completions' `"t",` in tokens, a number in
// token_logprobs and text_offset, `"t":x,` in top_logprobs; chat's objects
// are longer.
constexpr int64_t kLeastLogprobEntryBytes = 7;

// The least bytes `call`'s response must take, refused past
// limits.max_response_bytes before anything is submitted: each choice's echo
// (the prompt's text and, with logprobs, its tokens' entries) and the
// logprob entries of the tokens every sample must make (ignore_eos, no stop
// tokens or strings: max_tokens, or what the context leaves). Not streamed,
// the whole response; streamed, the largest event that must be whole (a
// choice's echo).
absl::Status CheckLeastResponseBytes(const GenerateCall& call, const ModelLimits& limits) {
  if (limits.max_response_bytes <= 0) return absl::OkStatus();
  int64_t total = 0, largest_event = 0;
  for (const PromptCall& p : call.prompts) {
    const GenerateRequest& r = p.request;
    const int64_t entry =
        call.want_logprobs ? kLeastLogprobEntryBytes * (1 + std::max(r.sampling.top_logprobs, 0))
                           : 0;
    int64_t echo = 0;
    if (call.echo) {
      echo = static_cast<int64_t>(p.echo_text.size());
      // The engine scores the decoder's positions after the first (an
      // encoder-decoder's prompt is its source, not scored).
      if (r.prompt_logprobs >= 0) {
        echo += std::max<int64_t>(DecoderLength(r, *limits.config) - 1, 0) * entry;
      }
    }
    const int64_t tokens = TokensEverySampleMakes(r, *limits.config, *limits.options);
    total += static_cast<int64_t>(call.n) * (echo + tokens * entry);
    largest_event = std::max(largest_event, echo);
  }
  const int64_t least = call.stream ? largest_event : total;
  if (least <= limits.max_response_bytes) return absl::OkStatus();
  return Invalid(absl::StrCat(
      "the response would take at least ", least, " bytes (",
      call.stream ? "the echo of one choice" : absl::StrCat(call.choices(), " choices"),
      call.echo ? ", echo" : "", call.want_logprobs ? ", logprobs" : "",
      "), past the server's bound of ", limits.max_response_bytes,
      " bytes per response (--max_response_bytes); ask for fewer choices, prompts, tokens or "
      "logprobs", call.stream ? "" : ", or stream the response"));
}

// Prefixes "prompt[i]: " to a prompt's error when the call has several.
absl::Status InPrompt(const absl::Status& status, size_t index, size_t count) {
  if (status.ok() || count == 1) return status;
  return WithMessagePrefix(status, absl::StrCat("prompt[", index, "]: "));
}

// One chat message's content as the template sees it: a string (a list of
// text parts is joined with "\n", as vLLM joins them; other parts are not
// served).
absl::StatusOr<Json> MessageContent(const Json& content, size_t index) {
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array()) {
    return Invalid(absl::StrCat("messages[", index,
                                "].content: expected a string or a list of text parts, got ",
                                TypeName(content)));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    // Looked up field by field: json::value() throws when a field has
    // another type than its default.
    auto type = part.is_object() ? part.find("type") : part.end();
    auto part_text = part.is_object() ? part.find("text") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text" || part_text == part.end() ||
        !part_text->is_string()) {
      return Invalid(absl::StrCat("messages[", index, "].content[", i,
                                  "]: only {\"type\": \"text\", \"text\": ...} parts are served"));
    }
    if (i > 0) text += '\n';  // as vLLM joins a message's text parts
    text += part_text->get<std::string>();
  }
  return Json(text);
}

// An assistant message's tool_calls carry function.arguments as OpenAI
// sends them, a JSON string; chat templates render them as objects (as Hugging
// Face's do, e.g. `tool_call.arguments | tojson`), so a string holding a JSON
// object (nested within the body's bound) is replaced by that object.
// Anything else is left as sent. `budget` is what the body's value bounds
// leave (LeftAfter) for all messages' arguments together, so that strings of
// "0,0,..." cost no more as trees than the body could.
void ToolCallArgumentsAsObjects(Json& message, BodyLimits& budget) {
  auto calls = message.find("tool_calls");
  if (calls == message.end() || !calls->is_array()) return;
  for (Json& call : *calls) {
    auto function = call.is_object() ? call.find("function") : call.end();
    if (function == call.end() || !function->is_object()) continue;
    auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string()) continue;
    BodyValues used;
    absl::StatusOr<Json> parsed = ParseBody(arguments->get<std::string>(), budget, &used);
    if (!parsed.ok()) continue;
    *arguments = std::move(*parsed);
    budget = LeftAfter(budget, used);
  }
}

absl::StatusOr<Json> ChatMessages(const Json& body, const BodyLimits& body_limits) {
  const Json* messages = Field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return Invalid("messages: expected a non-empty list of {role, content} objects");
  }
  if (messages->size() > static_cast<size_t>(body_limits.max_chat_messages)) {
    return Invalid(absl::StrCat("messages: ", messages->size(), " messages; at most ",
                                body_limits.max_chat_messages, " are allowed"));
  }
  Json out = Json::array();
  BodyLimits arguments_budget = body_limits;
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    if (!m.is_object()) {
      return Invalid(absl::StrCat("messages[", i, "]: expected an object, got ", TypeName(m)));
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Invalid(absl::StrCat("messages[", i, "].role: expected a string"));
    }
    Json copy = m;
    auto content = m.find("content");
    if (content != m.end()) {
      DIKKAT_ASSIGN_OR_RETURN(copy["content"], MessageContent(*content, i));
    }
    ToolCallArgumentsAsObjects(copy, arguments_budget);
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace

namespace {

bool NamePart(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// `text` with every whole `from` replaced by `to`: not inside a longer name
// (a letter, digit or '_' after it; one of those, '.', '-' before it).
std::string ReplaceName(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t start = 0;
  for (size_t at = text.find(from); at != std::string_view::npos;
       at = text.find(from, at + from.size())) {
    const size_t end = at + from.size();
    const bool whole = (at == 0 || !(NamePart(text[at - 1]) || text[at - 1] == '.' ||
                                     text[at - 1] == '-')) &&
                       (end == text.size() || !NamePart(text[end]) ||
                        from.back() == '.');  // a prefix ("sampling.") goes on into its field
    if (!whole) continue;
    out.append(text.substr(start, at - start)).append(to);
    start = end;
  }
  out.append(text.substr(start));
  return out;
}

// Encode's field names as /v1/embeddings calls them: inputs[i] (and its
// .text / .tokens.ids) is input[i], or input when the body gave one;
// truncate is truncate_prompt_tokens.
absl::Status InEmbeddingsTerms(const absl::Status& status, bool one_input) {
  if (status.ok()) return status;
  std::string message = absl::StrReplaceAll(
      status.message(), {{".tokens.ids has", " has"},
                         {".text has", " has"},
                         {"inputs[", "input["},
                         {"set truncate (", "set truncate_prompt_tokens ("},
                         {"truncate = ", "truncate_prompt_tokens = "}});
  if (one_input) message = absl::StrReplaceAll(message, {{"input[0]", "input"}});
  return message == status.message() ? status : WithMessage(status, message);
}

}  // namespace

absl::Status InOpenAiTerms(const absl::Status& status, Api api, std::string_view max_tokens_field) {
  if (status.ok()) return status;
  std::string message(status.message());
  message = ReplaceName(message, "sampling.", "");
  message = ReplaceName(message, "max_new_tokens", max_tokens_field);
  if (api == Api::kCompletions) {
    message = ReplaceName(message, "top_logprobs", "logprobs");
    message = ReplaceName(message, "prompt_logprobs", "logprobs");
  }
  return message == status.message() ? status : WithMessage(status, message);
}

int64_t MaxBodyNumbers(const BodyLimits& limits, const EngineOptions& options,
                       const model::ModelConfig& config) {
  if (config.max_positions <= 0) return 0;
  const int64_t lists = std::max<int64_t>({limits.max_prompts, options.max_batch_entries, 1});
  return lists * config.max_positions + kBodyNumbersBesideIds;
}

BodyLimits LeftAfter(const BodyLimits& limits, const BodyValues& used) {
  // 0 is no bound: what is left stays at least 1.
  auto left = [](int64_t bound, int64_t n) {
    return bound > 0 ? std::max<int64_t>(bound - n, 1) : bound;
  };
  BodyLimits out = limits;
  out.max_numbers = left(limits.max_numbers, used.numbers);
  out.max_other_values = left(limits.max_other_values, used.others);
  return out;
}

absl::StatusOr<Json> ParseBody(std::string_view body, const BodyLimits& limits,
                               BodyValues* values) {
  // Depth, members and values on the bytes, outside strings: brackets,
  // colons, and where each value starts. A colon belongs to the innermost
  // open object (in valid JSON; any other body fails to parse anyway).
  // `open` holds, per open container, -1 for an array or its members so far
  // for an object. A number starts at a digit or '-' that does not continue
  // one ("1e-5" is one); true, false and null at their first letter (no
  // other letter outside strings starts a value in valid JSON).
  std::vector<int> open;
  open.reserve(static_cast<size_t>(std::max(limits.max_json_depth, 0)) + 1);
  BodyValues counted;
  bool in_string = false;
  bool in_number = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    const bool number_char = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' ||
                             c == 'e' || c == 'E';
    if (number_char) {
      if (!in_number && (c == '-' || (c >= '0' && c <= '9'))) ++counted.numbers;
      in_number = true;
      continue;
    }
    in_number = false;
    if (c == '"') {
      in_string = true;
      ++counted.others;
    } else if (c == '[' || c == '{') {
      if (static_cast<int>(open.size()) >= limits.max_json_depth) {
        return Invalid(absl::StrCat("the request body nests JSON deeper than ",
                                    limits.max_json_depth, " levels"));
      }
      open.push_back(c == '{' ? 0 : -1);
      ++counted.others;
    } else if (c == ']' || c == '}') {
      if (!open.empty()) open.pop_back();
    } else if (c == 't' || c == 'f' || c == 'n') {
      ++counted.others;
    } else if (c == ':' && !open.empty() && open.back() >= 0 &&
               ++open.back() > limits.max_object_members) {
      return Invalid(absl::StrCat("an object in the request body has more than ",
                                  limits.max_object_members, " members"));
    }
  }
  if (limits.max_numbers > 0 && counted.numbers > limits.max_numbers) {
    return Invalid(absl::StrCat("the request body holds ", counted.numbers,
                                " numbers; the server's models need at most ",
                                limits.max_numbers,
                                " (their prompts' or inputs' token ids and the options)"));
  }
  if (limits.max_other_values > 0 && counted.others > limits.max_other_values) {
    return Invalid(absl::StrCat("the request body holds ", counted.others,
                                " JSON values that are not numbers (strings and keys, objects, "
                                "lists, true, false, null); at most ",
                                limits.max_other_values, " are allowed"));
  }
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Invalid("the request body is not valid JSON");
  if (!parsed.is_object()) return Invalid("the request body must be a JSON object");
  if (values != nullptr) *values = counted;
  return parsed;
}

absl::StatusOr<std::string> ModelName(const Json& body) {
  const Json* model = Field(body, "model");
  if (model == nullptr) return std::string();
  if (!model->is_string()) {
    return Invalid(absl::StrCat("model: expected a string, got ", TypeName(*model)));
  }
  return model->get<std::string>();
}

int64_t MaxCallTokens(const EngineOptions& options) {
  return static_cast<int64_t>(options.max_new_tokens_cap) * kMaxSamples;
}

absl::StatusOr<GenerateCall> ParseCompletionRequest(const Json& body, const BodyLimits& body_limits,
                                                    const ModelLimits& limits) {
  GenerateCall call;
  DIKKAT_RETURN_IF_ERROR(CheckFieldNames(body, Endpoint::kCompletions));
  DIKKAT_ASSIGN_OR_RETURN(std::vector<const Json*> prompts, CompletionPrompts(body, body_limits));
  // The options every prompt shares, then the bound on the whole call,
  // before any prompt is tokenized.
  v1::GenerateRequest wire;
  DIKKAT_RETURN_IF_ERROR(SetSampling(body, &wire));
  DIKKAT_RETURN_IF_ERROR(SetStream(body, &call));
  DIKKAT_ASSIGN_OR_RETURN(call.echo, OptionalBool(body, "echo"));
  // max_tokens 0 with echo returns the prompt alone (with its logprobs when
  // asked): the legacy way to score a text, which vLLM serves too.
  const Json* max_tokens_value = Field(body, "max_tokens");
  const bool prompt_only = call.echo && max_tokens_value != nullptr &&
                           max_tokens_value->is_number_integer() &&
                           max_tokens_value->get<int64_t>() == 0;
  std::optional<int64_t> max_tokens;
  if (prompt_only) {
    max_tokens = 0;
  } else {
    DIKKAT_ASSIGN_OR_RETURN(
        max_tokens,
        OptionalMaxTokens(body, "max_tokens", *limits.options, kDefaultCompletionMaxTokens));
  }
  wire.set_max_new_tokens(max_tokens ? static_cast<int32_t>(*max_tokens)
                                     : kDefaultCompletionMaxTokens);
  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> logprobs,
                          OptionalInteger(body, "logprobs", 0, kMaxPromptLogprobs));
  if (logprobs) {
    call.want_logprobs = true;
    wire.set_top_logprobs(static_cast<int32_t>(*logprobs));
    if (call.echo) wire.set_prompt_logprobs(static_cast<int32_t>(*logprobs));
  } else if (prompt_only) {
    wire.set_prompt_logprobs(0);  // the engine's prompt-only mode; not in the response
  }
  if (prompts.size() > 1)
    DIKKAT_RETURN_IF_ERROR(CheckCallCost(prompts.size(), wire, *limits.options));

  // A text prompt is tokenized as vLLM and `tokenizer(prompt)` do: the
  // special tokens written in it become their ids, and those the model
  // expects around an input (Llama's BOS) are added unless the vLLM field
  // add_special_tokens is false.
  DIKKAT_ASSIGN_OR_RETURN(const bool add_special,
                          OptionalBool(body, "add_special_tokens", /*if_absent=*/true));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Json& prompt = *prompts[i];
    if (prompt.is_string()) {
      wire.mutable_input()->set_text(prompt.get<std::string>());
      wire.mutable_input()->set_parse_special_tokens(true);
      wire.mutable_input()->set_add_special_tokens(add_special);
    } else {
      wire.mutable_input()->clear_parse_special_tokens();
      wire.mutable_input()->clear_add_special_tokens();
      const std::string field = prompts.size() == 1 ? "prompt" : absl::StrCat("prompt[", i, "]");
      absl::StatusOr<std::vector<int32_t>> ids = TokenIds(prompt, field);
      if (!ids.ok()) return ids.status();
      // In the vocabulary, named as sent (the converter would say input[j]).
      DIKKAT_RETURN_IF_ERROR(ValidateTokenIds(*ids, field, limits.config->vocab_size));
      wire.mutable_input()->mutable_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());
    }
    absl::StatusOr<PromptCall> converted = ToPrompt(wire, limits);
    if (!converted.ok()) {
      return InPrompt(InOpenAiTerms(converted.status(), Api::kCompletions, call.max_tokens_field),
                      i, prompts.size());
    }
    // An explicit max_tokens past the context is refused, as OpenAI does.
    converted->request.strict_max_new_tokens = max_tokens.has_value() && !prompt_only;
    if (prompts.size() > 1) {
      // Every prompt is checked before the first is submitted: a bad one
      // costs none of the others' work.
      DIKKAT_RETURN_IF_ERROR(InPrompt(
          InOpenAiTerms(CheckGenerateRequest(converted->request, *limits.config, *limits.options),
                        Api::kCompletions, call.max_tokens_field),
          i, prompts.size()));
    }
    if (call.echo) {
      converted->echo_text =
          prompt.is_string()
              ? prompt.get<std::string>()
              : limits.tokenizer->Decode(converted->prompt_ids, /*skip_special_tokens=*/false);
      if (prompt.is_string() && add_special) {
        const model::Tokenizer::AddedTokens added = limits.tokenizer->SpecialTokensAround();
        converted->added_before = static_cast<int32_t>(added.before.size());
        converted->added_after = static_cast<int32_t>(added.after.size());
      }
    }
    call.prompts.push_back(std::move(*converted));
  }
  call.n = call.prompts.front().request.n;
  DIKKAT_RETURN_IF_ERROR(CheckLeastResponseBytes(call, limits));
  return call;
}

absl::StatusOr<GenerateCall> ParseChatRequest(const Json& body, const ChatPrompt& chat,
                                              const BodyLimits& body_limits,
                                              const ModelLimits& limits) {
  GenerateCall call;
  v1::GenerateRequest wire;
  DIKKAT_RETURN_IF_ERROR(CheckFieldNames(body, Endpoint::kChat));
  DIKKAT_ASSIGN_OR_RETURN(Json messages, ChatMessages(body, body_limits));
  const Json* tools = Field(body, "tools");
  if (tools != nullptr && !tools->is_array()) {
    return Invalid(absl::StrCat("tools: expected a list, got ", TypeName(*tools)));
  }
  const bool has_tools = tools != nullptr && !tools->empty();
  DIKKAT_RETURN_IF_ERROR(CheckFreeGeneration(body, has_tools));
  const Json* tool_choice = Field(body, "tool_choice");
  if (has_tools && (tool_choice == nullptr || *tool_choice != "none")) {
    call.tool_format = chat.tool_call_format();
  }
  // vLLM's chat_template_kwargs: further variables the template reads
  // (Qwen3's {"enable_thinking": false}).
  const Json* template_kwargs = Field(body, "chat_template_kwargs");
  if (template_kwargs != nullptr) {
    if (!template_kwargs->is_object()) {
      return Invalid(absl::StrCat("chat_template_kwargs: expected an object, got ",
                                  TypeName(*template_kwargs)));
    }
    for (const char* own : {"messages", "tools"}) {
      if (template_kwargs->contains(own)) {
        return Invalid(absl::StrCat("chat_template_kwargs: '", own,
                                    "' is not a template argument here; send it as the "
                                    "request's own field"));
      }
    }
  }
  DIKKAT_ASSIGN_OR_RETURN(
      std::string prompt,
      chat.Render(messages, tools == nullptr ? Json(nullptr) : *tools,
                  template_kwargs == nullptr ? Json(nullptr) : *template_kwargs));
  // The rendered prompt is bounded like any text field, before tokenizing.
  DIKKAT_RETURN_IF_ERROR(CheckTextBytes(prompt.size(), "messages (rendered)", limits));
  call.prompt_opens_reasoning = PromptOpensReasoning(prompt);
  wire.mutable_input()->set_text(std::move(prompt));
  // The template writes the special tokens (BOS, role markers) as text:
  // they become their ids, as apply_chat_template(tokenize=True) gives them;
  // nothing is added around them unless the vLLM field add_special_tokens
  // asks (a template that writes no BOS).
  DIKKAT_ASSIGN_OR_RETURN(const bool add_special,
                          OptionalBool(body, "add_special_tokens", /*if_absent=*/false));
  wire.mutable_input()->set_add_special_tokens(add_special);
  wire.mutable_input()->set_parse_special_tokens(true);
  DIKKAT_RETURN_IF_ERROR(SetSampling(body, &wire));
  DIKKAT_RETURN_IF_ERROR(SetStream(body, &call));
  const int64_t chat_default = limits.options->default_max_new_tokens;
  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                          OptionalMaxTokens(body, "max_completion_tokens", *limits.options,
                                            chat_default));
  call.max_tokens_field = "max_completion_tokens";
  if (!max_tokens) {
    DIKKAT_ASSIGN_OR_RETURN(
        max_tokens, OptionalMaxTokens(body, "max_tokens", *limits.options, chat_default));
    if (max_tokens) call.max_tokens_field = "max_tokens";
  }
  if (max_tokens) wire.set_max_new_tokens(static_cast<int32_t>(*max_tokens));
  DIKKAT_ASSIGN_OR_RETURN(call.want_logprobs, OptionalBool(body, "logprobs"));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<int64_t> top_logprobs,
                          OptionalInteger(body, "top_logprobs", 0, kMaxPromptLogprobs));
  if (top_logprobs && !call.want_logprobs) {
    return Invalid("top_logprobs: needs logprobs set to true");
  }
  if (call.want_logprobs) wire.set_top_logprobs(static_cast<int32_t>(top_logprobs.value_or(0)));
  absl::StatusOr<PromptCall> converted = ToPrompt(wire, limits);
  if (!converted.ok()) {
    return InOpenAiTerms(converted.status(), Api::kChat, call.max_tokens_field);
  }
  converted->request.strict_max_new_tokens = max_tokens.has_value();
  call.n = converted->request.n;
  call.prompts.push_back(std::move(*converted));
  DIKKAT_RETURN_IF_ERROR(CheckLeastResponseBytes(call, limits));
  return call;
}

absl::StatusOr<EmbeddingsCall> ParseEmbeddingsRequest(const Json& body, const ModelLimits& limits) {
  EmbeddingsCall call;
  v1::EncodeRequest wire;
  // As vLLM: no sentence-transformers prompt unless the caller writes it.
  wire.set_prompt_name("");
  DIKKAT_RETURN_IF_ERROR(CheckFieldNames(body, Endpoint::kEmbeddings));
  const Json* input = Field(body, "input");
  if (input == nullptr) {
    return Invalid("input: required (a string, a list of strings or of token id lists)");
  }
  if (input->is_string()) {
    wire.add_inputs()->set_text(input->get<std::string>());
  } else if (IsTokenList(*input)) {
    DIKKAT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds(*input, "input"));
    wire.add_inputs()->mutable_tokens()->mutable_ids()->Assign(ids.begin(), ids.end());
  } else if (input->is_array() && !input->empty()) {
    // Bound the work before it: the count before anything is converted.
    DIKKAT_RETURN_IF_ERROR(
        CheckEncodeInputCount(static_cast<int64_t>(input->size()), *limits.options));
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& item = (*input)[i];
      if (item.is_string()) {
        wire.add_inputs()->set_text(item.get<std::string>());
      } else if (IsTokenList(item)) {
        DIKKAT_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                                TokenIds(item, absl::StrCat("input[", i, "]")));
        wire.add_inputs()->mutable_tokens()->mutable_ids()->Assign(ids.begin(), ids.end());
      } else {
        return Invalid(absl::StrCat("input[", i, "]: expected a string or a list of token ids"));
      }
    }
  } else {
    return Invalid(
        absl::StrCat("input: expected a string, a list of strings or of token id lists, got ",
                     input->is_array() ? "an empty list" : TypeName(*input)));
  }
  if (const Json* format = Field(body, "encoding_format")) {
    if (!format->is_string() || (*format != "float" && *format != "base64")) {
      return Invalid(absl::StrCat("encoding_format: ", format->dump(),
                                  " is not served; allowed \"float\" or \"base64\""));
    }
    call.base64 = *format == "base64";
  }
  if (Field(body, "dimensions") != nullptr) {
    return Invalid("dimensions: not served (embeddings have the model's width)");
  }
  // vLLM's: inputs cut to at most this many tokens (-1: the model's limit).
  DIKKAT_ASSIGN_OR_RETURN(
      std::optional<int64_t> truncate,
      OptionalInteger(body, "truncate_prompt_tokens", -1, std::numeric_limits<int32_t>::max()));
  if (truncate.has_value()) {
    if (*truncate == 0 || *truncate > limits.config->max_positions) {
      return Invalid(absl::StrCat("truncate_prompt_tokens = ", *truncate,
                                  " is out of range: allowed -1 (the model's limit) or 1..",
                                  limits.config->max_positions));
    }
    wire.set_truncate(static_cast<int32_t>(*truncate));
  }
  wire.set_normalize(true);
  // Conversion and the engine's check, their errors in this endpoint's terms.
  const bool one_input = !input->is_array() || IsTokenList(*input);
  absl::StatusOr<EncodeRequest> converted = ToEncodeRequest(wire, limits);
  if (!converted.ok()) return InEmbeddingsTerms(converted.status(), one_input);
  DIKKAT_RETURN_IF_ERROR(InEmbeddingsTerms(
      CheckEncodeRequest(*converted, *limits.config, *limits.options), one_input));
  call.request = std::move(*converted);
  DIKKAT_RETURN_IF_ERROR(CheckResponseBytes(
      EstimateEncodeResponseBytes(call.request, *limits.config, v1::DTYPE_FLOAT32),
      limits.max_response_bytes, "the embeddings", "send fewer inputs per request"));
  return call;
}

}  // namespace dikkat::server::openai
