#include "server/text_stream.h"

#include <algorithm>
#include <utility>

namespace dikkat::server {

size_t StopPrefixHold(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > hold; --len) {
      if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

std::vector<int32_t> DecodeContext(absl::Span<const int32_t> prompt) {
  // As vLLM's detokenizer: a few ids are enough for a word's leading space.
  constexpr size_t kContextIds = 5;
  const size_t n = std::min(prompt.size(), kContextIds);
  return std::vector<int32_t>(prompt.end() - n, prompt.end());
}

std::string DecodeAfter(const model::Tokenizer& tokenizer, absl::Span<const int32_t> prompt,
                        absl::Span<const int32_t> ids) {
  model::IncrementalDecoder decoder(&tokenizer, /*skip_special_tokens=*/true,
                                    DecodeContext(prompt));
  std::string text;
  for (int32_t id : ids) text += decoder.Push(id);
  return text + decoder.Flush();
}

TextStream::TextStream(const model::Tokenizer* tokenizer, std::vector<std::string> stop_strings,
                       bool include_stop_text, absl::Span<const int32_t> prompt)
    : decoder_(tokenizer, /*skip_special_tokens=*/true, DecodeContext(prompt)),
      stop_strings_(std::move(stop_strings)),
      include_stop_text_(include_stop_text) {}

TextPiece TextStream::Push(int32_t token_id, bool last) {
  held_ += decoder_.Push(token_id);
  // The earliest stop string wins (a later-listed one may start sooner).
  size_t best = std::string::npos, best_len = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t at = held_.find(stop);
    if (at != std::string::npos && at < best) {
      best = at;
      best_len = stop.size();
    }
  }
  if (best != std::string::npos) {
    held_.resize(include_stop_text_ ? best + best_len : best);
    return Finish(FinishReason::kStop);  // what follows the stop string is dropped
  }
  if (last) return End(FinishReason::kLength);
  const size_t hold = StopPrefixHold(held_, stop_strings_);
  TextPiece piece;
  piece.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return piece;
}

TextPiece TextStream::End(FinishReason reason) {
  held_ += decoder_.Flush();
  return Finish(reason);
}

TextPiece TextStream::Finish(FinishReason reason) {
  TextPiece piece;
  piece.text = std::move(held_);
  held_.clear();
  piece.finish = reason;
  return piece;
}

}  // namespace dikkat::server
