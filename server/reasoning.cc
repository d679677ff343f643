#include "server/reasoning.h"

#include <algorithm>

namespace dikkat::server {
namespace {

// The length of the longest suffix of `text` that is a proper prefix of
// `tag` (bytes that may yet become the tag).
size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

bool PromptOpensReasoning(std::string_view prompt) {
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  if (end == std::string_view::npos) return false;
  const std::string_view body = prompt.substr(0, end + 1);
  return body.size() >= kThinkOpen.size() &&
         body.substr(body.size() - kThinkOpen.size()) == kThinkOpen;
}

ReasoningSplit SplitReasoning(std::string_view text, bool opened_by_prompt, bool finished) {
  ReasoningSplit split;
  const size_t first = std::min(text.find_first_not_of(" \t\r\n"), text.size());
  const std::string_view rest = text.substr(first);
  const bool opens = rest.substr(0, kThinkOpen.size()) == kThinkOpen;
  // The answer so far might still become "<think>" (after whitespace).
  const bool undecided = !finished && !opens && rest.size() < kThinkOpen.size() &&
                         kThinkOpen.substr(0, rest.size()) == rest;
  if (!opened_by_prompt && !opens) {
    split.content = text;
    split.content_ready = undecided ? 0 : text.size();
    return split;
  }
  // A <think> the model writes although the prompt opened one is a tag,
  // not reasoning (DeepSeek-R1 writes it either way).
  split.has_reasoning = true;
  const std::string_view body = text.substr(opens ? first + kThinkOpen.size() : 0);
  const size_t close = body.find(kThinkClose);
  if (close == std::string_view::npos) {
    split.reasoning = body;
    split.reasoning_ready =
        finished ? body.size()
                 : (undecided ? 0 : body.size() - PartialTagSuffix(body, kThinkClose));
    return split;
  }
  split.reasoning = body.substr(0, close);
  split.reasoning_ready = split.reasoning.size();
  split.content = body.substr(close + kThinkClose.size());
  split.content_ready = split.content.size();
  return split;
}

}  // namespace dikkat::server
