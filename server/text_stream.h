// TextStream: one Generate request's generated text, token by token.
//
// Owns the request's incremental detokenizer and its stop strings. Each
// sampled token becomes the text that may be sent now (never a partial UTF-8
// character, never the start of what may become a stop string) and, when the
// text decides it, the reason the request finishes:
//   * kStop when the text now contains a stop string: the text ends before
//     the earliest one (or after it, with include_stop_text);
//   * kLength when the caller says this is the last token: everything held
//     back is flushed.
// Reasons decided by the token id alone (EOS, a stop token id) are the
// caller's: End() then hands over what was held back, without that token's
// text.
//
// Thread-safety: none; the engine thread owns it.
#ifndef DIKKAT_SERVER_TEXT_STREAM_H_
#define DIKKAT_SERVER_TEXT_STREAM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "model/text/incremental_decoder.h"
#include "model/text/tokenizer.h"
#include "server/engine.h"

namespace dikkat::server {

struct TextPiece {
  std::string text;                    // may be empty
  std::optional<FinishReason> finish;  // set when the stream ended
};

class TextStream {
 public:
  // `tokenizer` (not owned) must outlive the stream. Special tokens are not
  // part of the text. `prompt`: the ids the generated ones follow; its last
  // few are decoded as left context, never sent, so the first word keeps
  // the space a SentencePiece model gives a word after other text ("Hello"
  // -> " world", as a Decode of prompt and output together has it).
  TextStream(const model::Tokenizer* tokenizer, std::vector<std::string> stop_strings,
             bool include_stop_text, absl::Span<const int32_t> prompt = {});

  // Adds one generated token's text. `last`: no token follows (max_new_tokens
  // or the context is reached), unless a stop string ends the stream first.
  TextPiece Push(int32_t token_id, bool last);

  // Ends the stream for `reason` without decoding another token: what was
  // held back, with a partial character's bytes as U+FFFD (as a Decode of
  // the whole output gives them).
  TextPiece End(FinishReason reason);

 private:
  TextPiece Finish(FinishReason reason);

  model::IncrementalDecoder decoder_;
  const std::vector<std::string> stop_strings_;
  const bool include_stop_text_;
  std::string held_;  // decoded, not yet sent: may be the start of a stop string
};

// Length of the longest suffix of `text` that is a proper prefix of one of
// `stops`: that much must wait for the next token to decide.
size_t StopPrefixHold(const std::string& text, const std::vector<std::string>& stops);

// The last ids of `prompt` that TextStream and DecodeAfter read as context.
std::vector<int32_t> DecodeContext(absl::Span<const int32_t> prompt);

// The text of `ids` as it follows `prompt` (special tokens skipped): what a
// TextStream on `prompt` sends for them, without stop strings.
std::string DecodeAfter(const model::Tokenizer& tokenizer, absl::Span<const int32_t> prompt,
                        absl::Span<const int32_t> ids);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_TEXT_STREAM_H_
