// OpenAI-compatible HTTP API: the JSON the server answers with. Engine
// output (server/engine.h) becomes OpenAI's choices, logprobs, usage and
// errors; for streams, the chunk objects sent as `data: {...}` events.
//
// A ChoiceBuilder is used by one HTTP thread (not thread-safe); the free
// functions are pure.
#ifndef DIKKAT_SERVER_OPENAI_RESPONSE_H_
#define DIKKAT_SERVER_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/text/tokenizer.h"
#include "server/engine.h"
#include "server/openai_request.h"

namespace dikkat::server::openai {

// ---- errors -----------------------------------------------------------------

// The HTTP status for an engine or conversion error: INVALID_ARGUMENT and
// FAILED_PRECONDITION 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE and CANCELLED 503,
// DEADLINE_EXCEEDED 504, anything else 500.
int HttpStatusOf(const absl::Status& status);

// {"error": {"message", "type", "param", "code"}}; type follows the status
// (invalid_request_error, authentication_error, ...); `param` is the field a
// 400's message starts with ("max_tokens: ..." or "max_tokens = 9 ..." ->
// "max_tokens"), else null;
// `code` null when empty.
std::string ErrorBody(int http_status, absl::string_view message, absl::string_view code = "");

// "stop" (EOS or a stop string/token), "length"; "abort" for a generation
// cut short (cancelled, deadline); "error".
const char* FinishReasonString(FinishReason reason);

// ---- responses ----------------------------------------------------------------

struct ResponseMeta {
  Api api = Api::kCompletions;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh meta with a random id and the current time.
ResponseMeta NewResponseMeta(Api api, std::string model);

// {"prompt_tokens", "completion_tokens", "total_tokens"}.
Json Usage(const GenerateSummary& summary);

// Chat with tool-call parsing (GenerateCall::tool_format): a choice whose
// text holds calls answers message.tool_calls ({id, type: "function",
// function: {name, arguments}}), the text outside them as content (null when
// none) and finish_reason "tool_calls". Streamed, content is sent as far as
// no call may begin (server/tool_calls.h, StreamableContent); the rest waits
// for the choice's finish, then comes as a content delta (if any) and one
// delta with every tool_calls entry (with its index), then the finish.
//
// Chat with reasoning parsing (GenerateCall::parse_reasoning): a choice's
// reasoning (server/reasoning.h) is message.reasoning_content (null when it
// has none) and its content what follows </think> (null when empty), which
// is what tool calls are parsed from. Streamed, reasoning comes as
// delta.reasoning_content as far as it cannot be the start of </think>.
//
// Builds the choices of one Generate call from its chunks (numbered
// prompt_index * n + sample_index, as PromptFanOut numbers them), for a whole
// response (Add..., then Response) or a stream (ChunkEvents per chunk).
class ChoiceBuilder {
 public:
  // `call` and `tokenizer` must outlive the builder.
  ChoiceBuilder(ResponseMeta meta, const GenerateCall& call, const model::Tokenizer& tokenizer);

  const ResponseMeta& meta() const { return meta_; }

  // Non-streaming: keep a chunk.
  void Add(const GeneratedChunk& chunk);
  // The "text_completion" / "chat.completion" object, once the call
  // finished; moves the choices' text and logprobs out (call it once).
  Json Response(const GenerateSummary& summary);
  // About the bytes of the choices kept so far, as Response would write
  // them (for the bound on a response's size; within ~0.7-1.3x for text
  // and logprobs).
  int64_t approx_bytes() const { return approx_bytes_; }

  // Streaming. Chat: the first event of each choice (delta {role: assistant}).
  std::vector<Json> StartEvents() const;
  // The events for one chunk: its text (and logprobs), then the choice's
  // finish when the chunk ends a sample.
  std::vector<Json> ChunkEvents(const GeneratedChunk& chunk);
  // The finish event of every choice not finished yet, then (include_usage)
  // the usage event.
  std::vector<Json> FinishEvents(const GenerateSummary& summary);

 private:
  struct Choice {
    bool started = false;  // echo emitted
    bool finished = false;
    std::string text;
    Json logprobs;            // completions: {tokens, token_logprobs, top_logprobs, text_offset}
    int64_t text_offset = 0;  // bytes of text so far (completions logprobs)
    FinishReason finish = FinishReason::kLength;
    size_t streamed = 0;  // tool-call or reasoning parsing: bytes of the content sent
    size_t reasoning_streamed = 0;  // reasoning parsing: bytes of the reasoning sent
  };

  bool parses_tools() const {
    return meta_.api == Api::kChat && call_.tool_format != ToolCallFormat::kNone;
  }
  bool parses_reasoning() const { return meta_.api == Api::kChat && call_.parse_reasoning; }

  Choice& ChoiceAt(int32_t index);
  // Appends the chunk's text (after the echo, first time) and its logprobs
  // to `choice`; returns the text and logprobs this chunk adds.
  void Consume(const GeneratedChunk& chunk, Choice& choice, std::string* text, Json* logprobs);
  void AppendCompletionLogprob(const GeneratedToken& token, bool known, Json& logprobs,
                               int64_t offset);
  Json ChatLogprob(const GeneratedToken& token) const;
  // delta {content} (and {reasoning_content} when `reasoning` is not empty;
  // content then only when not empty).
  Json ChoiceDelta(int32_t index, std::string_view text, const Json& logprobs,
                   std::string_view reasoning = {}) const;
  Json FinishEvent(int32_t index, const std::string& reason) const;
  // A choice's last events: (tool-call parsing) the content held back and
  // its tool_calls delta, then its finish.
  void AppendFinishEvents(int32_t index, Choice& choice, FinishReason reason,
                          std::vector<Json>& events) const;
  Json Event(Json choices) const;

  const ResponseMeta meta_;
  const GenerateCall& call_;
  const model::Tokenizer& tokenizer_;
  std::vector<Choice> choices_;
  // Per prompt, from its request's first chunk (echo + logprobs).
  std::vector<std::vector<GeneratedToken>> prompt_logprobs_;
  int64_t approx_bytes_ = 0;  // approx_bytes()
};

// ---- embeddings ----------------------------------------------------------------

// The "list" of "embedding" objects (float arrays, or base64 of their
// little-endian float32 bytes) with usage.
Json EmbeddingsResponse(const EncodeResult& result, bool base64, const std::string& model);

// ---- models -------------------------------------------------------------------

// One "model" object of GET /v1/models.
Json ModelObject(const std::string& name, int64_t created);

}  // namespace dikkat::server::openai

#endif  // DIKKAT_SERVER_OPENAI_RESPONSE_H_
