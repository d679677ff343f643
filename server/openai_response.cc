#include "server/openai_response.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/reasoning.h"
#include "server/status_util.h"

namespace dikkat::server::openai {
namespace {

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 404:
    case 413:
    case 431:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    default:
      return "server_error";
  }
}

// The bytes `text` takes inside a JSON string: control characters as
// \u00XX, quotes and backslashes escaped, other bytes as they are (a byte
// that is not valid UTF-8 is written as U+FFFD, 3 bytes: counted as 1).
int64_t JsonTextBytes(const std::string& text) {
  int64_t bytes = 0;
  for (unsigned char c : text) bytes += c < 0x20 ? 6 : (c == '"' || c == '\\') ? 2 : 1;
  return bytes;
}

std::string RandomHex(int bytes) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string out;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < bytes; ++i) {
    const uint64_t v = rng();
    out += kHex[(v >> 4) & 15];
    out += kHex[v & 15];
  }
  return out;
}

// OpenAI's tool_calls list; streamed deltas also number each call.
Json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json call = Json::object();
    if (with_index) call["index"] = i;
    call["id"] = absl::StrCat("call_", RandomHex(12));
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

Json Bytes(const std::string& text) {
  Json out = Json::array();
  for (unsigned char c : text) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      // A request this server can never hold is no reason to retry.
      return NeverFits(status) ? 400 : 429;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

// The field a 400's message starts with ("max_tokens: expected an integer",
// "messages[1].content: ...", "n = 0 is out of range ..."), or null: every
// request check names the field first, and OpenAI's clients show it as the
// error's `param`.
Json ParamOf(int http_status, absl::string_view message) {
  if (http_status != 400) return nullptr;
  size_t colon = message.find(": ");
  const size_t equals = message.find(" = ");
  if (equals < colon) colon = equals;
  if (colon == absl::string_view::npos || colon == 0 || colon > 128) return nullptr;
  const absl::string_view field = message.substr(0, colon);
  if (!(absl::ascii_isalpha(field[0]) || field[0] == '_')) return nullptr;
  for (char c : field) {
    if (!(absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']')) return nullptr;
  }
  return std::string(field);
}

std::string ErrorBody(int http_status, absl::string_view message, absl::string_view code) {
  Json error = {{"message", std::string(message)},
                {"type", ErrorType(http_status)},
                {"param", ParamOf(http_status, message)},
                {"code", code.empty() ? Json(nullptr) : Json(std::string(code))}};
  return Json{{"error", std::move(error)}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const char* FinishReasonString(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
    case FinishReason::kDeadline:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

ResponseMeta NewResponseMeta(Api api, std::string model) {
  ResponseMeta meta;
  meta.api = api;
  meta.id = absl::StrCat(api == Api::kChat ? "chatcmpl-" : "cmpl-", RandomHex(12));
  meta.created = absl::ToUnixSeconds(absl::Now());
  meta.model = std::move(model);
  return meta;
}

Json Usage(const GenerateSummary& summary) {
  return Json{{"prompt_tokens", summary.prompt_tokens},
              {"completion_tokens", summary.generated_tokens},
              {"total_tokens", summary.prompt_tokens + summary.generated_tokens}};
}

ChoiceBuilder::ChoiceBuilder(ResponseMeta meta, const GenerateCall& call,
                             const model::Tokenizer& tokenizer)
    : meta_(std::move(meta)), call_(call), tokenizer_(tokenizer) {
  choices_.resize(static_cast<size_t>(std::max(call.choices(), 1)));
  // Each choice's own fields (index, finish_reason, the keys).
  approx_bytes_ = 96 * static_cast<int64_t>(choices_.size());
  prompt_logprobs_.resize(call.prompts.size());
}

ChoiceBuilder::Choice& ChoiceBuilder::ChoiceAt(int32_t index) {
  // Choices are numbered 0..choices()-1 (PromptFanOut); anything else is a
  // bug, kept safe.
  if (index < 0 || static_cast<size_t>(index) >= choices_.size()) index = 0;
  return choices_[index];
}

void ChoiceBuilder::AppendCompletionLogprob(const GeneratedToken& token, bool known, Json& logprobs,
                                            int64_t offset) {
  if (logprobs.is_null()) {
    logprobs = Json{{"tokens", Json::array()},
                    {"token_logprobs", Json::array()},
                    {"top_logprobs", Json::array()},
                    {"text_offset", Json::array()}};
  }
  const std::string text = tokenizer_.TokenText(token.token_id);
  logprobs["tokens"].push_back(text);
  logprobs["token_logprobs"].push_back(known ? Json(token.logprob) : Json(nullptr));
  if (known) {
    Json top = Json::object();
    for (const TokenAlternative& alt : token.top) {
      top[tokenizer_.TokenText(alt.token_id)] = alt.logprob;
    }
    logprobs["top_logprobs"].push_back(std::move(top));
  } else {
    logprobs["top_logprobs"].push_back(nullptr);
  }
  logprobs["text_offset"].push_back(offset);
  // The token's text, its logprob and offset; each alternative's text and
  // logprob: ~20 bytes of JSON a number and its separators.
  approx_bytes_ += JsonTextBytes(text) + 32;
  if (known) {
    for (const TokenAlternative& alt : token.top) {
      approx_bytes_ += JsonTextBytes(tokenizer_.TokenText(alt.token_id)) + 24;
    }
  }
}

// `bytes`: what the token stands for, so that a client can join the bytes of
// a character split across tokens (a byte-level "<0xE2>" is [226]).
Json ChoiceBuilder::ChatLogprob(const GeneratedToken& token) const {
  const std::string text = tokenizer_.TokenText(token.token_id);
  Json top = Json::array();
  for (const TokenAlternative& alt : token.top) {
    top.push_back({{"token", tokenizer_.TokenText(alt.token_id)},
                   {"logprob", alt.logprob},
                   {"bytes", Bytes(tokenizer_.TokenBytes(alt.token_id))}});
  }
  return Json{{"token", text},
              {"logprob", token.logprob},
              {"bytes", Bytes(tokenizer_.TokenBytes(token.token_id))},
              {"top_logprobs", std::move(top)}};
}

void ChoiceBuilder::Consume(const GeneratedChunk& chunk, Choice& choice, std::string* text,
                            Json* logprobs) {
  const size_t prompt_index = static_cast<size_t>(&choice - choices_.data()) / call_.n;
  const PromptCall& prompt = call_.prompts[prompt_index];
  std::vector<GeneratedToken>& prompt_logprobs = prompt_logprobs_[prompt_index];
  if (!chunk.prompt_logprobs.empty() && prompt_logprobs.empty()) {
    prompt_logprobs = chunk.prompt_logprobs;
  }
  const bool chat = meta_.api == Api::kChat;
  if (!choice.started) {
    choice.started = true;
    if (call_.echo) {
      *text += prompt.echo_text;
      if (call_.want_logprobs && !chat && !prompt.prompt_ids.empty()) {
        // The first prompt token has no logprob; the others come from the
        // engine's prompt_logprobs, in order.
        // Offsets: each prompt token's own decoded bytes; none for those
        // the tokenizer added around the text (not in the echo).
        const size_t count = prompt.prompt_ids.size();
        const auto width = [&](size_t i, int32_t id) -> int64_t {
          if (i < static_cast<size_t>(prompt.added_before) ||
              i + prompt.added_after >= count) {
            return 0;
          }
          return static_cast<int64_t>(
              tokenizer_.Decode({id}, /*skip_special_tokens=*/false).size());
        };
        AppendCompletionLogprob(GeneratedToken{prompt.prompt_ids[0], 0.0f, {}}, false, *logprobs,
                                choice.text_offset);
        choice.text_offset += width(0, prompt.prompt_ids[0]);
        for (size_t i = 0; i < prompt_logprobs.size(); ++i) {
          const GeneratedToken& t = prompt_logprobs[i];
          AppendCompletionLogprob(t, true, *logprobs, choice.text_offset);
          choice.text_offset += width(i + 1, t.token_id);
        }
        // The echo is the prompt's text: what follows starts after it.
        choice.text_offset = static_cast<int64_t>(prompt.echo_text.size());
      }
    }
  }
  *text += chunk.text;
  if (call_.want_logprobs) {
    for (const GeneratedToken& t : chunk.tokens) {
      if (chat) {
        if (logprobs->is_null()) *logprobs = Json{{"content", Json::array()}};
        (*logprobs)["content"].push_back(ChatLogprob(t));
        // Text, logprob and bytes (up to 4 characters a byte) of the token
        // and of each alternative.
        approx_bytes_ += 5 * static_cast<int64_t>(tokenizer_.TokenText(t.token_id).size()) + 64;
        for (const TokenAlternative& alt : t.top) {
          approx_bytes_ +=
              5 * static_cast<int64_t>(tokenizer_.TokenText(alt.token_id).size()) + 48;
        }
      } else {
        // A chunk's tokens share the offset where its text starts (a token
        // may end inside a UTF-8 character the next one completes).
        AppendCompletionLogprob(t, true, *logprobs, choice.text_offset);
      }
    }
  }
  choice.text_offset += static_cast<int64_t>(chunk.text.size());
  choice.text += *text;
  approx_bytes_ += JsonTextBytes(*text);
}

void ChoiceBuilder::Add(const GeneratedChunk& chunk) {
  Choice& choice = ChoiceAt(chunk.index);
  std::string text;
  Json logprobs;
  Consume(chunk, choice, &text, &logprobs);
  if (!logprobs.is_null()) {
    if (choice.logprobs.is_null()) {
      choice.logprobs = std::move(logprobs);
    } else {
      for (auto& [key, values] : logprobs.items()) {
        for (auto& v : values) choice.logprobs[key].push_back(std::move(v));
      }
    }
  }
  if (chunk.finish.has_value()) {
    choice.finished = true;
    choice.finish = *chunk.finish;
  }
}

Json ChoiceBuilder::Response(const GenerateSummary& summary) {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    // Moved out, not copied: a response may be tens of MB.
    std::string text = std::move(c.text);
    if (!c.started && call_.echo) text = call_.PromptOf(static_cast<int32_t>(i)).echo_text;
    const FinishReason finish = c.finished ? c.finish : summary.reason;
    std::string finish_reason = FinishReasonString(finish);
    Json choice = {{"index", i}};
    if (meta_.api == Api::kChat) {
      Json message = {{"role", "assistant"}, {"content", text}};
      std::string_view content = text;
      if (call_.parse_reasoning) {
        const ReasoningSplit split = SplitReasoning(text, call_.prompt_opens_reasoning, true);
        content = split.content;
        if (split.has_reasoning) {
          message["content"] = content.empty() ? Json(nullptr) : Json(std::string(content));
        }
        message["reasoning_content"] =
            split.has_reasoning ? Json(std::string(split.reasoning)) : Json(nullptr);
      }
      if (parses_tools()) {
        ParsedToolCalls parsed = ParseToolCalls(content, call_.tool_format);
        if (!parsed.calls.empty()) {
          message["content"] = parsed.content.empty() ? Json(nullptr) : Json(parsed.content);
          message["tool_calls"] = ToolCallsJson(parsed.calls, /*with_index=*/false);
          finish_reason = "tool_calls";
        }
      }
      choice["message"] = std::move(message);
      choice["logprobs"] = call_.want_logprobs && c.logprobs.is_null()
                               ? Json{{"content", Json::array()}}
                               : std::move(c.logprobs);
    } else {
      choice["text"] = std::move(text);
      choice["logprobs"] = std::move(c.logprobs);
    }
    choice["finish_reason"] = finish_reason;
    choices.push_back(std::move(choice));
  }
  return Json{{"id", meta_.id},
              {"object", meta_.api == Api::kChat ? "chat.completion" : "text_completion"},
              {"created", meta_.created},
              {"model", meta_.model},
              {"choices", std::move(choices)},
              {"usage", Usage(summary)}};
}

Json ChoiceBuilder::Event(Json choices) const {
  return Json{{"id", meta_.id},
              {"object", meta_.api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", meta_.created},
              {"model", meta_.model},
              {"choices", std::move(choices)}};
}

Json ChoiceBuilder::ChoiceDelta(int32_t index, std::string_view text, const Json& logprobs,
                                std::string_view reasoning) const {
  if (meta_.api == Api::kChat) {
    Json delta = Json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = std::string(reasoning);
    if (!text.empty() || reasoning.empty()) delta["content"] = std::string(text);
    return Json{{"index", index},
                {"delta", std::move(delta)},
                {"logprobs", logprobs},
                {"finish_reason", nullptr}};
  }
  return Json{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
}

Json ChoiceBuilder::FinishEvent(int32_t index, const std::string& reason) const {
  Json choice = meta_.api == Api::kChat
                    ? Json{{"index", index}, {"delta", Json::object()}, {"logprobs", nullptr}}
                    : Json{{"index", index}, {"text", ""}, {"logprobs", nullptr}};
  choice["finish_reason"] = reason;
  return Event(Json::array({std::move(choice)}));
}

void ChoiceBuilder::AppendFinishEvents(int32_t index, Choice& choice, FinishReason reason,
                                       std::vector<Json>& events) const {
  std::string finish_reason = FinishReasonString(reason);
  if (parses_tools() || parses_reasoning()) {
    std::string_view answer = choice.text;
    if (parses_reasoning()) {
      // What was held back: the reasoning's end (a partial "</think>" that
      // never closed is reasoning), then the content.
      const ReasoningSplit split =
          SplitReasoning(choice.text, call_.prompt_opens_reasoning, /*finished=*/true);
      if (split.reasoning.size() > choice.reasoning_streamed) {
        events.push_back(Event(Json::array(
            {ChoiceDelta(index, "", nullptr, split.reasoning.substr(choice.reasoning_streamed))})));
        choice.reasoning_streamed = split.reasoning.size();
      }
      answer = split.content;
    }
    ParsedToolCalls parsed;
    if (parses_tools()) parsed = ParseToolCalls(answer, call_.tool_format);
    // The content is a continuation of what was sent (StreamableContent).
    const std::string_view content =
        parsed.calls.empty() ? answer : std::string_view(parsed.content);
    if (content.size() > choice.streamed) {
      events.push_back(
          Event(Json::array({ChoiceDelta(index, content.substr(choice.streamed), nullptr)})));
      choice.streamed = content.size();
    }
    if (!parsed.calls.empty()) {
      events.push_back(Event(Json::array(
          {Json{{"index", index},
                {"delta", {{"tool_calls", ToolCallsJson(parsed.calls, /*with_index=*/true)}}},
                {"logprobs", nullptr},
                {"finish_reason", nullptr}}})));
      finish_reason = "tool_calls";
    }
  }
  events.push_back(FinishEvent(index, finish_reason));
}

std::vector<Json> ChoiceBuilder::StartEvents() const {
  std::vector<Json> events;
  if (meta_.api != Api::kChat) return events;
  for (size_t i = 0; i < choices_.size(); ++i) {
    events.push_back(Event(Json::array({Json{{"index", i},
                                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}})));
  }
  return events;
}

std::vector<Json> ChoiceBuilder::ChunkEvents(const GeneratedChunk& chunk) {
  std::vector<Json> events;
  Choice& choice = ChoiceAt(chunk.index);
  std::string text;
  Json logprobs;
  Consume(chunk, choice, &text, &logprobs);
  std::string_view reasoning;
  if (parses_tools() || parses_reasoning()) {
    std::string_view answer = choice.text;
    size_t ready = answer.size();
    if (parses_reasoning()) {
      const ReasoningSplit split =
          SplitReasoning(choice.text, call_.prompt_opens_reasoning, /*finished=*/false);
      if (split.reasoning_ready > choice.reasoning_streamed) {
        reasoning = split.reasoning.substr(choice.reasoning_streamed,
                                           split.reasoning_ready - choice.reasoning_streamed);
        choice.reasoning_streamed = split.reasoning_ready;
      }
      answer = split.content;
      ready = split.content_ready;
    }
    // Content only as far as no tool call may begin; the rest at the finish.
    if (parses_tools()) ready = std::min(ready, StreamableContent(answer, call_.tool_format));
    text = ready > choice.streamed
               ? std::string(answer.substr(choice.streamed, ready - choice.streamed))
               : std::string();
    choice.streamed = std::max(choice.streamed, ready);
  }
  if (!text.empty() || !reasoning.empty() || !logprobs.is_null()) {
    events.push_back(Event(Json::array({ChoiceDelta(chunk.index, text, logprobs, reasoning)})));
  }
  if (chunk.finish.has_value() && !choice.finished) {
    choice.finished = true;
    AppendFinishEvents(chunk.index, choice, *chunk.finish, events);
  }
  return events;
}

std::vector<Json> ChoiceBuilder::FinishEvents(const GenerateSummary& summary) {
  std::vector<Json> events;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    const std::string& echo_text = call_.PromptOf(static_cast<int32_t>(i)).echo_text;
    if (!c.started && call_.echo && !echo_text.empty()) {
      // Nothing was generated (e.g. a cancelled call): still echo.
      c.started = true;
      events.push_back(
          Event(Json::array({ChoiceDelta(static_cast<int32_t>(i), echo_text, nullptr)})));
    }
    if (c.finished) continue;
    c.finished = true;
    AppendFinishEvents(static_cast<int32_t>(i), c, summary.reason, events);
  }
  if (call_.include_usage) {
    Json usage = Event(Json::array());
    usage["usage"] = Usage(summary);
    events.push_back(std::move(usage));
  }
  return events;
}

Json EmbeddingsResponse(const EncodeResult& result, bool base64, const std::string& model) {
  Json data = Json::array();
  for (size_t i = 0; i < result.embeddings.size(); ++i) {
    const std::vector<float>& values = result.embeddings[i].values;
    Json embedding;
    if (base64) {
      std::string bytes(values.size() * 4, '\0');
      for (size_t j = 0; j < values.size(); ++j) {
        uint32_t bits;
        std::memcpy(&bits, &values[j], 4);
        for (int b = 0; b < 4; ++b) bytes[j * 4 + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
      }
      embedding = absl::Base64Escape(bytes);
    } else {
      embedding = values;
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  return Json{
      {"object", "list"},
      {"data", std::move(data)},
      {"model", model},
      {"usage", {{"prompt_tokens", result.prompt_tokens}, {"total_tokens", result.prompt_tokens}}}};
}

Json ModelObject(const std::string& name, int64_t created) {
  return Json{{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "dikkat"}};
}

}  // namespace dikkat::server::openai
