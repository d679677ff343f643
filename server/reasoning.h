// Reasoning in a "thinking" model's chat answer (DeepSeek-R1 and its
// distills, Qwen3, QwQ): what the model writes between <think> and </think>
// before its answer, split from the answer for OpenAI-style responses
// (message.reasoning_content, delta.reasoning_content), as vLLM's reasoning
// parsers split it.
//
// Where the reasoning starts: at a <think> that opens the answer (leading
// whitespace allowed), or at the answer's first byte when the prompt already
// left a <think> open (DeepSeek-R1's template ends the prompt with
// "<think>\n"; Qwen3's with enable_thinking false closes an empty block,
// so its answer is all content). It ends at the first </think>; what
// follows is the content, as generated. An answer cut before </think> (by
// max_tokens) is all reasoning.
//
// Against vLLM's parsers: its deepseek_r1 parser takes everything before a
// </think> as reasoning even when neither the answer nor the prompt opened
// a block (here that answer is all content, tags included); its qwen3
// parser takes an answer without </think> as all content (here an answer
// that opened a block and was cut is all reasoning).
//
// Pure functions; thread-safe. No LibTorch.
#ifndef DIKKAT_SERVER_REASONING_H_
#define DIKKAT_SERVER_REASONING_H_

#include <cstddef>
#include <string_view>

namespace dikkat::server {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// True when `prompt` (a rendered chat prompt) ends with <think> (whitespace
// after it allowed), as DeepSeek-R1's and QwQ's templates end it. A <think>
// elsewhere (a message that mentions the tag) opens nothing.
bool PromptOpensReasoning(std::string_view prompt);

struct ReasoningSplit {
  // The answer has a reasoning part (possibly empty): `reasoning` is its
  // text, tags excluded. False: everything is content.
  bool has_reasoning = false;
  std::string_view reasoning;
  std::string_view content;  // after </think>, or the whole answer without reasoning
  // Streaming (not finished): how many bytes of `reasoning` can be sent now
  // (the rest might be the start of "</think>"), and how many of `content`
  // (none while the answer so far might still become "<think>").
  size_t reasoning_ready = 0;
  size_t content_ready = 0;
};

// Splits `text`, a choice's answer so far. `opened_by_prompt`:
// PromptOpensReasoning of its prompt. `finished`: the answer is complete
// (nothing is held back).
ReasoningSplit SplitReasoning(std::string_view text, bool opened_by_prompt, bool finished);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_REASONING_H_
