// Tool calls in a chat model's output: which convention a model's chat
// template teaches it (decided once from the template's text), and the
// calls parsed out of a generated answer, for OpenAI's message.tool_calls.
//
// Conventions parsed:
//  - kHermes (Hermes 2 Pro, Qwen2.5): any number of
//      <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//    blocks, with text around them (the content).
//  - kLlama3Json (Llama 3.1 / 3.2 / 3.3): the whole answer is
//      {"name": ..., "parameters": {...}}
//    ("arguments" accepted too), or several such objects separated by ';'
//    or whitespace; an optional leading <|python_tag|> (when special tokens
//    are kept) is skipped. An answer that is not all calls is content.
// The parsers never fail: an answer whose calls are not all well-formed
// (invalid JSON, no name, an unclosed block, e.g. cut by max_tokens) is
// content, exactly as generated.
//
// The text parsed is the engine's decoded text, special tokens skipped: a
// model whose call markers are special tokens would need them kept.
//
// Pure functions; thread-safe. No LibTorch.
#ifndef DIKKAT_SERVER_TOOL_CALLS_H_
#define DIKKAT_SERVER_TOOL_CALLS_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dikkat::server {

enum class ToolCallFormat {
  kNone,  // no convention recognized: the output stays content
  kHermes,
  kLlama3Json,
};

const char* ToolCallFormatName(ToolCallFormat format);

// The convention a chat template's source shows its model: "<tool_call>"
// in it -> kHermes; Llama 3's "Environment: ipython" with its
// {"name": ..., "parameters": ...} instruction -> kLlama3Json; else kNone.
ToolCallFormat DetectToolCallFormat(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a serialized JSON value (OpenAI's function.arguments)
};

struct ParsedToolCalls {
  std::vector<ToolCall> calls;  // empty: no call; `content` is then the whole text
  // With calls: the text outside them, concatenated, trailing whitespace
  // removed (Hermes; empty for kLlama3Json).
  std::string content;
};

ParsedToolCalls ParseToolCalls(std::string_view text, ToolCallFormat format);

// Streaming: how many leading bytes of `text` (an answer so far) are content
// whatever follows, so can be sent now. The rest is held: from where a call
// may begin (a "<tool_call>" or a partial one at the end, for kHermes; the
// whole answer once its first non-blank character is '{' or '<', for
// kLlama3Json) and, for kHermes, trailing whitespace (dropped if a call
// follows). Never decreases as `text` grows; the content sent is then a
// prefix of ParseToolCalls(final text).content, or of the final text when it
// holds no call. kNone: all of `text`.
size_t StreamableContent(std::string_view text, ToolCallFormat format);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_TOOL_CALLS_H_
