#include "model/text/incremental_decoder.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "model/text/utf8.h"

namespace dikkat::model {

// Invariant: the text of ids_[0, read_offset_) has been emitted, and
// ids_[prefix_offset_, read_offset_) is the window kept as left context: its
// decoded text is subtracted from the decoding of ids_[prefix_offset_, end)
// to get the delta. Decoding with left context is what makes tokenizers
// whose output depends on the neighbours (SentencePiece drops the "▁" of the
// first piece) stream the same text as one Decode of the whole sequence.

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens,
                                       std::vector<int32_t> context)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens), ids_(std::move(context)) {
  read_offset_ = ids_.size();
}

std::string IncrementalDecoder::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_->Decode(absl::MakeConstSpan(ids_.data() + begin, end - begin), skip_special_);
}

std::string IncrementalDecoder::TakeDelta(bool flush) {
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  // A trailing U+FFFD means the last ids end inside a multi-byte character
  // (byte-level BPE, byte fallback): wait for the rest of it.
  const bool incomplete = new_text.size() >= utf8::kReplacementChar.size() &&
                          new_text.compare(new_text.size() - utf8::kReplacementChar.size(),
                                           std::string::npos, utf8::kReplacementChar) == 0;
  if (new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    // The new ids changed the text before them: they complete a character
    // the window's end decoded as U+FFFD (a prompt of ids ending inside
    // one, or invalid bytes sent as U+FFFD below), which was sent as such.
    // Cutting new_text at prefix_text's length could split a character:
    // the new ids are decoded alone instead, from here on.
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_offset_));
    prefix_offset_ = read_offset_ = 0;
    return TakeDelta(flush);
  }
  if (new_text == prefix_text && skip_special_ &&
      std::all_of(ids_.begin() + static_cast<std::ptrdiff_t>(read_offset_), ids_.end(),
                  [&](int32_t id) { return tokenizer_->IsSpecial(id); })) {
    // Skipped special tokens add no text: forget them, so that a long run
    // of them does not grow the window decoded on every push. (Other ids
    // that add no text yet may: a continuation byte, SentencePiece's lone
    // "▁" before a word.)
    ids_.resize(read_offset_);
    return "";
  }
  // A long wait on a trailing U+FFFD is bytes that never form a character
  // (a model emitting invalid UTF-8), not one in progress: real text keeps
  // at most 2-3 ids pending. Past 8 they are sent as U+FFFD, which bounds
  // the window decoded on every push.
  constexpr size_t kMaxPendingIds = 8;
  if (incomplete && ids_.size() - read_offset_ >= kMaxPendingIds) flush = true;
  if (new_text.size() <= prefix_text.size() || (incomplete && !flush)) return "";
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Forget ids that can no longer be part of any window.
  ids_.erase(ids_.begin(), ids_.begin() + prefix_offset_);
  read_offset_ -= prefix_offset_;
  prefix_offset_ = 0;
  return delta;
}

std::string IncrementalDecoder::Push(int32_t id) {
  ids_.push_back(id);
  return TakeDelta(/*flush=*/false);
}

std::string IncrementalDecoder::Flush() { return TakeDelta(/*flush=*/true); }

}  // namespace dikkat::model
