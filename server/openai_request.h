// OpenAI-compatible HTTP API (docs/api.md, "OpenAI-compatible HTTP"): the
// request bodies of /v1/completions, /v1/chat/completions and
// /v1/embeddings turned into the engine's requests.
//
// Each body is mapped to the gRPC wire message (dikkat.v1) and converted by
// server/convert.h, so that both doors tokenize, bound and convert the same
// way; the engine's request check (server/request_checks.h) then runs at
// submit, as for gRPC. What is checked here is only what the JSON form makes
// wrong: a field of the wrong type, a value OpenAI allows that dikkat does
// not serve (several prompts in one request), the chat messages.
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

namespace dikkat::server::openai {

using Json = nlohmann::ordered_json;

// Bounds on a body, checked before or while it is parsed.
struct BodyLimits {
  int max_json_depth = 32;  // nested arrays/objects
  int max_chat_messages = 1024;
};

// Parses a request body: a JSON object nested at most max_json_depth deep
// (checked on the bytes before parsing, so that a deeply nested body costs
// no recursion). INVALID_ARGUMENT says what is wrong.
absl::StatusOr<Json> ParseBody(std::string_view body, const BodyLimits& limits);

// The `model` field ("" when absent). INVALID_ARGUMENT when not a string.
absl::StatusOr<std::string> ModelName(const Json& body);

// A Generate request as the HTTP handlers need it.
struct GenerateCall {
  GenerateRequest request;  // ready to submit
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool want_logprobs = false;  // completions: logprobs given; chat: logprobs true
  // Completions with echo: the prompt text (or the decoded token ids)
  // prepended to each choice's text; with logprobs, the prompt's tokens too.
  bool echo = false;
  std::string echo_text;
  std::vector<int32_t> prompt_ids;
};

// POST /v1/completions: prompt (a string, a list of one string, or a list of
// token ids), max_tokens (default 16, as OpenAI's), temperature, top_p,
// stop (a string or a list), seed, n, best_of, logprobs (0..20 alternatives),
// echo, presence_penalty, frequency_penalty, stream, stream_options, and the
// extensions top_k, min_p, repetition_penalty, ignore_eos.
absl::StatusOr<GenerateCall> ParseCompletionRequest(const Json& body, const ModelLimits& limits);

// POST /v1/chat/completions: messages (1..max_chat_messages objects with a
// string role and string content, or a list of {type: "text", text} parts),
// tools, and the sampling fields above; max_tokens or max_completion_tokens
// (default: the server's --default_max_new_tokens); logprobs (bool) with
// top_logprobs. The prompt is `chat` rendered with add_generation_prompt,
// tokenized without adding special tokens (the template has them).
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
