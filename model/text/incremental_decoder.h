// IncrementalDecoder: generated ids -> text deltas, for streaming responses.
// Not thread-safe: one per sequence.
#ifndef DIKKAT_MODEL_TEXT_INCREMENTAL_DECODER_H_
#define DIKKAT_MODEL_TEXT_INCREMENTAL_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/text/tokenizer.h"

namespace dikkat::model {

// Turns a stream of generated ids into text deltas that never split a UTF-8
// character: Push returns only complete characters; Flush returns whatever is
// left (incomplete bytes as U+FFFD). Works for every Tokenizer by decoding a
// sliding window of ids, so tokenizers with context-dependent decoding
// (SentencePiece's leading-space rule) stream correctly too.
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens);
  // `context` (e.g. the last few prompt ids) is decoded as left context but
  // never emitted, so the first generated piece keeps the leading space a
  // SentencePiece model gives a word that follows other text.
  IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens,
                     std::vector<int32_t> context);
  std::string Push(int32_t id);
  std::string Flush();
  // Ids kept for decoding: a few after what was sent, whatever the stream.
  size_t window() const { return ids_.size(); }

 private:
  std::string DecodeRange(size_t begin, size_t end) const;
  // If the bytes of ids_[read_offset_, end) (TokenBytes) end inside a UTF-8
  // character that more bytes could complete: the index of the id holding
  // that character's first byte. Otherwise ids_.size().
  size_t IncompleteCharacterStart() const;
  // Whether `id` adds no text, ever (a skipped special token, an id outside
  // the tokenizer's vocabulary as a padded model vocabulary has).
  bool AddsNoText(int32_t id) const;
  // Emits the text of ids_[read_offset_, end) if it is complete (or `flush`).
  std::string TakeDelta(bool flush);

  const Tokenizer* tokenizer_;  // not owned
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_[prefix_offset_, read_offset_) decode to already-emitted text
  size_t read_offset_ = 0;
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_INCREMENTAL_DECODER_H_
