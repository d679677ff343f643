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

bool IncrementalDecoder::AddsNoText(int32_t id) const {
  return id < 0 || id >= tokenizer_->vocab_size() || (skip_special_ && tokenizer_->IsSpecial(id));
}

size_t IncrementalDecoder::IncompleteCharacterStart() const {
  // The last bytes of the ids not yet sent (ids that add no text add none),
  // and the id each byte comes from.
  std::string tail;
  std::vector<size_t> owner;  // owner[k]: the index in ids_ of tail[k]
  for (size_t i = ids_.size(); i > read_offset_ && tail.size() < 4; --i) {
    const int32_t id = ids_[i - 1];
    if (AddsNoText(id)) continue;
    const std::string bytes = tokenizer_->TokenBytes(id);
    tail.insert(0, bytes);
    owner.insert(owner.begin(), bytes.size(), i - 1);
  }
  if (tail.size() > 4) {
    tail.erase(0, tail.size() - 4);
    owner.erase(owner.begin(), owner.end() - 4);
  }
  // The last lead byte, and whether the bytes from it are a well-formed
  // start of a character that is not complete yet.
  for (size_t back = 1; back <= tail.size(); ++back) {
    const size_t lead = tail.size() - back;
    const unsigned char b = static_cast<unsigned char>(tail[lead]);
    if ((b & 0xC0) == 0x80) continue;  // continuation
    const size_t need = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                        : b >= 0xF0 && b <= 0xF4 ? 4 : 0;  // 0: ASCII or never a lead
    size_t subpart = 0;
    const bool incomplete =
        back < need && utf8::SequenceLength(tail, lead, &subpart) == 0 && subpart == back;
    return incomplete ? owner[lead] : ids_.size();
  }
  return ids_.size();  // continuation bytes alone: never a character
}

std::string IncrementalDecoder::TakeDelta(bool flush) {
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  // A trailing U+FFFD whose bytes end inside a multi-byte character
  // (byte-level BPE, byte fallback) waits for the rest of it. One that is
  // the text's own, or stands for bytes no more bytes can complete, does
  // not: waiting on it would grow the window decoded on every push.
  const bool ends_in_replacement =
      new_text.size() >= utf8::kReplacementChar.size() &&
      new_text.compare(new_text.size() - utf8::kReplacementChar.size(), std::string::npos,
                       utf8::kReplacementChar) == 0;
  const size_t incomplete_from = ends_in_replacement ? IncompleteCharacterStart() : ids_.size();
  const bool incomplete = incomplete_from < ids_.size();
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
  size_t end = ids_.size();
  std::string text = new_text;
  if (incomplete && !flush) {
    // What comes before the id that starts the incomplete character is
    // final (a lead byte ends whatever came before it): it is sent, and
    // only the character's own ids wait. Without this, bytes that never
    // complete a character (a run of lead bytes) kept every id in the
    // window, decoded on every push: quadratic.
    if (incomplete_from <= read_offset_) return "";
    std::string done = DecodeRange(prefix_offset_, incomplete_from);
    if (done.size() <= prefix_text.size() || done.compare(0, prefix_text.size(), prefix_text) != 0 ||
        new_text.compare(0, done.size(), done) != 0) {
      return "";
    }
    end = incomplete_from;
    text = std::move(done);
  }
  if (text.size() <= prefix_text.size()) return "";
  std::string delta = text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = end;
  // Forget ids that can no longer be part of any window.
  ids_.erase(ids_.begin(), ids_.begin() + prefix_offset_);
  read_offset_ -= prefix_offset_;
  prefix_offset_ = 0;
  return delta;
}

std::string IncrementalDecoder::Push(int32_t id) {
  // An id that adds no text, ever, changes no decoding: not kept (a run of
  // them, even after a character's first byte, would grow the window).
  if (AddsNoText(id)) return "";
  ids_.push_back(id);
  return TakeDelta(/*flush=*/false);
}

std::string IncrementalDecoder::Flush() { return TakeDelta(/*flush=*/true); }

}  // namespace dikkat::model
