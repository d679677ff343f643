// OpenAI-compatible HTTP API (docs/api.md, "OpenAI-compatible HTTP"): the
// request bodies of /v1/completions, /v1/chat/completions and
// /v1/embeddings turned into the engine's requests.
//
// Each body is mapped to the gRPC wire message (dikkat.v1) and converted by
// server/convert.h, so that both doors tokenize, bound and convert the same
// way; the engine's request check (server/request_checks.h) then runs at
// submit, as for gRPC. What is checked here is only what the JSON form makes
// wrong: a field of the wrong type, a field OpenAI defines that dikkat does
// not serve (refused, never ignored), the chat messages, and the cost of a
// call that fans out to several engine requests (several prompts).
// Errors are INVALID_ARGUMENT naming the field (OpenAI's name), except the
// chat template's own (FAILED_PRECONDITION: the model has none).
//
// Pure functions; thread-safe.
#ifndef DIKKAT_SERVER_OPENAI_REQUEST_H_
#define DIKKAT_SERVER_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/chat_prompt.h"
#include "server/convert.h"
#include "server/engine.h"
#include "server/tool_calls.h"

namespace dikkat::server::openai {

using Json = nlohmann::ordered_json;

enum class Api { kCompletions, kChat };

// Bounds on a body, checked before or while it is parsed.
struct BodyLimits {
  int max_json_depth = 32;  // nested arrays/objects
  int max_chat_messages = 1024;
  // Prompts in one /v1/completions call (each its own engine request).
  int max_prompts = 32;
  // Members of any one JSON object. Json keeps an object's members in
  // order (templates see them so) and looks each new key up among the
  // previous ones: parsing an object of k members costs k^2 / 2 key
  // comparisons (measured: 100 000 keys in a 1 MB body, 46 s on one core).
  int max_object_members = 1024;
  // Values in the body: numbers, and every other value (strings, object
  // keys among them, objects, arrays, true, false, null). Each parsed value
  // costs 16 bytes of the tree or more (a string ~60), so without these an
  // 8 MiB body of "0,0,0,..." took 72 MB of memory to parse and one of
  // "\"\",\"\",..." 170 MB (measured). Long lists of numbers are token ids: the server
  // sets max_numbers from its models (MaxBodyNumbers).
  int64_t max_numbers = 1 << 20;
  int64_t max_other_values = 1 << 18;
};

// The numbers a body may need for `options`' and `config`'s largest call:
// token-id lists of max(max_prompts, max_batch_entries) prompts or inputs
// of max_positions ids each, plus kBodyNumbersBesideIds for everything
// else (logit_bias, sampling options). 0 when the model has no
// max_positions (no bound beyond the body's bytes).
inline constexpr int64_t kBodyNumbersBesideIds = 1 << 12;
int64_t MaxBodyNumbers(const BodyLimits& limits, const EngineOptions& options,
                       const model::ModelConfig& config);

// What a parsed body held (ParseBody's optional output).
struct BodyValues {
  int64_t numbers = 0;
  int64_t others = 0;
};

// `limits` less what a parsed body used of its value bounds (at least 1
// left where bounded): the bounds for what is parsed out of the body's
// strings (a chat's tool-call arguments), so that body and arguments
// together stay within them.
BodyLimits LeftAfter(const BodyLimits& limits, const BodyValues& used);

// Parses a request body: a JSON object nested at most max_json_depth deep,
// no object with more than max_object_members members, at most max_numbers
// numbers and max_other_values other values (all checked on the bytes
// before parsing, so that a deeply nested body costs no recursion, a wide
// one no quadratic parse and a long one no tree many times its size; a
// value bound <= 0 is none). INVALID_ARGUMENT says what is wrong. `values`, when
// given, receives the counts.
absl::StatusOr<Json> ParseBody(std::string_view body, const BodyLimits& limits,
                               BodyValues* values = nullptr);

// `status` with the engine's and gRPC's field names in its message put in
// the endpoint's terms, payloads kept: "sampling.temperature" ->
// "temperature" (every "sampling." field), "max_new_tokens" ->
// `max_tokens_field`, and for completions "top_logprobs" and
// "prompt_logprobs" -> "logprobs". Whole names only ("--max_new_tokens_cap"
// stays). For the engine's and the converter's errors, not the parser's own
// (a field the caller sent under a gRPC name must be named as sent).
absl::Status InOpenAiTerms(const absl::Status& status, Api api, std::string_view max_tokens_field);

// The `model` field ("" when absent). INVALID_ARGUMENT when not a string.
absl::StatusOr<std::string> ModelName(const Json& body);

// One prompt of a call: its engine request and what echo needs.
struct PromptCall {
  GenerateRequest request;  // ready to submit
  // Completions with echo: the prompt text (or the decoded token ids)
  // prepended to each of its choices' text; with logprobs, the prompt's
  // tokens too.
  std::string echo_text;
  std::vector<int32_t> prompt_ids;
  // Of prompt_ids, how many the tokenizer added before and after the text
  // (Llama's BOS): not in echo_text, so of no width in text_offset.
  int32_t added_before = 0;
  int32_t added_after = 0;
};

// A Generate call as the HTTP handlers need it: one engine request per
// prompt, all with the same options. Its choices are numbered
// prompt_index * n + sample_index (OpenAI's order); usage sums the prompts.
struct GenerateCall {
  std::vector<PromptCall> prompts;  // 1..BodyLimits::max_prompts; chat: 1
  int32_t n = 1;                    // choices per prompt (GenerateRequest::n)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool want_logprobs = false;  // completions: logprobs given; chat: logprobs true
  bool echo = false;           // completions: each choice starts with its prompt
  // Chat with tools (and tool_choice not "none"): each choice's text is
  // parsed for tool calls in the template's convention (server/tool_calls.h).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  // Chat: each choice's reasoning (<think>...</think>) is answered apart
  // from its content (server/reasoning.h; the server's
  // --openai_reasoning_parser), and the rendered prompt left a <think> open.
  bool parse_reasoning = false;
  bool prompt_opens_reasoning = false;
  // The field the caller set the token count with (chat: max_completion_tokens
  // or max_tokens), for errors in its terms (InOpenAiTerms).
  const char* max_tokens_field = "max_tokens";

  int32_t choices() const { return static_cast<int32_t>(prompts.size()) * n; }
  // The prompt choice `index` belongs to.
  const PromptCall& PromptOf(int32_t index) const { return prompts[index / n]; }
};

// Tokens a call may ask to generate in all, summed over its prompts and
// samples (prompts x max(n, best_of) x max_tokens): what the largest single
// request may ask (max_new_tokens_cap x kMaxSamples).
int64_t MaxCallTokens(const EngineOptions& options);

// POST /v1/completions: prompt (a string, a list of token ids, or a list of
// 1..max_prompts strings or token id lists; the count and the call's cost,
// MaxCallTokens, are checked before any prompt is tokenized), max_tokens
// (default 16, as OpenAI's), temperature, top_p, stop (a string or a list),
// seed, n, best_of, logprobs (0..20 alternatives), echo, presence_penalty,
// frequency_penalty, logit_bias, stream, stream_options, and the extensions
// top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids,
// include_stop_str_in_output.
//
// Every endpoint refuses a field it does not read (naming it and, for
// OpenAI's own such as suffix, why), except OpenAI's fields that cannot
// change the output (user, metadata, store, service_tier, prompt_cache_key,
// safety_identifier, prediction), accepted and unused; null is absent.
absl::StatusOr<GenerateCall> ParseCompletionRequest(const Json& body, const BodyLimits& body_limits,
                                                    const ModelLimits& limits);

// POST /v1/chat/completions: messages (1..max_chat_messages objects with a
// string role and string content, or a list of {type: "text", text} parts),
// tools, tool_choice ("auto" or "none"), parallel_tool_calls (true),
// response_format ({"type": "text"}; JSON modes need constrained decoding
// and are refused), modalities (["text"]), chat_template_kwargs (vLLM's:
// further template variables), and the sampling fields above; max_tokens or
// max_completion_tokens (default: the server's --default_max_new_tokens); logprobs (bool) with
// top_logprobs. The prompt is `chat` rendered with add_generation_prompt,
// tokenized without adding special tokens (the template has them).
// Tool-call arguments are parsed within body_limits' value bounds: pass
// LeftAfter(the body's limits, what ParseBody counted).
absl::StatusOr<GenerateCall> ParseChatRequest(const Json& body, const ChatPrompt& chat,
                                              const BodyLimits& body_limits,
                                              const ModelLimits& limits);

struct EmbeddingsCall {
  EncodeRequest request;  // pooled with the model's default pooling, L2-normalized
  bool base64 = false;    // encoding_format "base64": little-endian float32 bytes
};

// POST /v1/embeddings: input (a string, a list of strings, a list of token
// ids or a list of such lists), encoding_format ("float" or "base64").
absl::StatusOr<EmbeddingsCall> ParseEmbeddingsRequest(const Json& body, const ModelLimits& limits);

}  // namespace dikkat::server::openai

#endif  // DIKKAT_SERVER_OPENAI_REQUEST_H_
