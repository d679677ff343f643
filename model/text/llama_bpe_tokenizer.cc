// Llama-style BPE (tokenizer.json with byte_fallback). Written by hand: no
// Debian package runs Hugging Face tokenizer.json pipelines. The merge loop
// follows Hugging Face's BPE word model: a priority queue of adjacent pairs
// by merge rank, leftmost first on ties, over the whole "▁"-joined text.
#include "model/text/llama_bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/text/utf8.h"

namespace dikkat::model {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// 0..255 for a "<0xNN>" piece, -1 otherwise.
int BytePieceValue(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else {
      return -1;  // Llama and SentencePiece write upper-case hex only
    }
  }
  return value;
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t pos = 0;;) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) {
      out.append(text.substr(pos));
      return out;
    }
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
}

class LlamaBpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(LlamaBpeSpec spec) {
    auto tok = std::unique_ptr<LlamaBpeTokenizer>(new LlamaBpeTokenizer());
    DIKKAT_RETURN_IF_ERROR(tok->Init(std::move(spec)));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }

  std::string kind() const override { return "bpe"; }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  const SpecialTokens& special_tokens() const override { return specials_; }
  std::vector<std::string> file_fingerprints() const override { return fingerprints_; }

  absl::StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens) const override {
    return EncodeText(text, add_special_tokens, /*starts_input=*/true);
  }

  absl::StatusOr<Encoding> EncodePart(std::string_view text, bool starts_input) const override {
    return EncodeText(text, false, starts_input);
  }

  absl::StatusOr<Encoding> EncodeText(std::string_view text, bool add_special_tokens,
                                      bool starts_input) const {
    if (!utf8::IsValid(text)) {
      return absl::InvalidArgumentError("bpe tokenizer: input text is not valid UTF-8");
    }
    Encoding enc;
    if (!text.empty()) {
      std::string normalized = ReplaceAll(text, " ", kSpaceMark);
      const bool has_mark = normalized.compare(0, kSpaceMark.size(), kSpaceMark) == 0;
      if (prefix_ == LlamaBpeSpec::Prefix::kAlways ||
          (prefix_ == LlamaBpeSpec::Prefix::kUnlessPresent && !has_mark) ||
          (prefix_ == LlamaBpeSpec::Prefix::kFirst && starts_input && !has_mark)) {
        normalized.insert(0, kSpaceMark);
      }
      if (split_words_) {
        // Metaspace split: each word starts at a "▁" (the mark stays with
        // the text after it).
        size_t begin = 0;
        for (size_t pos = 1; pos <= normalized.size(); ++pos) {
          if (pos == normalized.size() ||
              normalized.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
            EncodeWord(std::string_view(normalized).substr(begin, pos - begin), &enc.ids);
            begin = pos;
          }
        }
      } else {
        EncodeWord(normalized, &enc.ids);
      }
    }
    if (add_special_tokens) AddSpecialTokens(&enc);
    return enc;
  }

  AddedTokens SpecialTokensAround() const override { return {prefix_ids_, suffix_ids_}; }

  // Runs of ordinary ids decode together; the prefix space is dropped at the
  // start of each run, as SentencePiece does at the start of a text (the
  // SentencePiece tokenizer treats kept specials the same way).
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string out;
    bool run_start = true;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) continue;
      if (IsSpecial(id)) {
        if (skip_special_tokens) continue;
        out += pieces_[id];
        // The "▁" after a kept special token is the dummy prefix Encode
        // gave that part, except with prepend_scheme "first" (none after a
        // special: a "▁" there is the text's own space).
        run_start = prefix_ != LlamaBpeSpec::Prefix::kFirst;
        continue;
      }
      std::string_view text = decoded_[id];
      if (run_start && strip_leading_space_ && byte_value_[id] < 0 && !text.empty() &&
          text[0] == ' ') {
        text.remove_prefix(1);
      }
      out.append(text);
      // A run starts over only after visible text: a leading byte piece that
      // is part of a character keeps the flag off as well.
      if (!decoded_[id].empty()) run_start = false;
    }
    return utf8::ToValid(out);
  }

  std::string TokenText(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    if (const int b = byte_value_[id]; b >= 0) {
      if (b >= 0x20 && b < 0x7F) return std::string(1, static_cast<char>(b));
      return pieces_[id];
    }
    if (IsSpecial(id)) return pieces_[id];
    return decoded_[id];
  }

  std::string TokenBytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    if (const int b = byte_value_[id]; b >= 0) return std::string(1, static_cast<char>(b));
    return TokenText(id);
  }

  bool IsSpecial(int32_t id) const override { return special_ids_.count(id) > 0; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  LlamaBpeTokenizer() = default;

  absl::Status Init(LlamaBpeSpec spec) {
    fingerprints_ = std::move(spec.fingerprints);
    prefix_ = spec.prefix;
    split_words_ = spec.split_words;
    strip_leading_space_ = spec.strip_leading_space;
    fuse_unk_ = spec.fuse_unk;
    int32_t max_id = -1;
    for (const auto& [piece, id] : spec.vocab) {
      if (id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("bpe: piece \"", piece, "\" has negative id ", id));
      }
      max_id = std::max(max_id, id);
    }
    for (const auto& added : spec.added_tokens) {
      if (added.id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("bpe: added token \"", added.content, "\" has negative id ", added.id));
      }
      max_id = std::max(max_id, added.id);
    }
    if (max_id < 0) return absl::InvalidArgumentError("bpe: empty vocabulary");
    // The id tables are dense: an id of INT32_MAX overflowed max_id + 1, and
    // a large one asked for gigabytes before anything was checked (a 4 KB
    // tokenizer.json could do either; seen while writing
    // fuzz/tokenizer_files_fuzzer.cc).
    if (max_id >= kMaxLlamaBpeId) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bpe: token id ", max_id, " is out of range; ids must be below ", kMaxLlamaBpeId));
    }
    pieces_.assign(max_id + 1, "");
    decoded_.assign(max_id + 1, "");
    byte_value_.assign(max_id + 1, -1);
    byte_ids_.fill(-1);
    for (const auto& [piece, id] : spec.vocab) {
      pieces_[id] = piece;
      const int b = spec.byte_fallback ? BytePieceValue(piece) : -1;
      if (b >= 0) {
        byte_value_[id] = b;
        byte_ids_[b] = id;
        decoded_[id] = std::string(1, static_cast<char>(b));
      } else {
        decoded_[id] = ReplaceAll(piece, kSpaceMark, " ");
      }
    }
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
      const auto& [a, b] = spec.merges[rank];
      const auto ia = spec.vocab.find(a), ib = spec.vocab.find(b), ir = spec.vocab.find(a + b);
      if (ia == spec.vocab.end() || ib == spec.vocab.end() || ir == spec.vocab.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bpe: merge #", rank + 1, " \"", a, " ", b,
            "\" uses or makes a piece that is not in the vocabulary"));
      }
      merges_.emplace(PairKey(ia->second, ib->second), Merge{static_cast<int32_t>(rank), ir->second});
    }
    vocab_ = std::move(spec.vocab);
    if (!spec.unk_token.empty()) {
      auto it = vocab_.find(spec.unk_token);
      if (it == vocab_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bpe: unk_token \"", spec.unk_token, "\" is not in the vocabulary"));
      }
      unk_id_ = it->second;
      specials_.unk = unk_id_;
    }
    for (const auto& added : spec.added_tokens) {
      pieces_[added.id] = added.content;
      decoded_[added.id] = added.content;
      if (added.special) special_ids_.insert(added.id);
      if (added.content == "<s>") specials_.bos = added.id;
      if (added.content == "</s>") specials_.eos = added.id;
      if (added.content == "<unk>") specials_.unk = added.id;
      if (added.content == "<pad>") specials_.pad = added.id;
    }
    for (const auto* ids : {&spec.prefix_ids, &spec.suffix_ids}) {
      for (int32_t id : *ids) {
        if (id < 0 || id > max_id) {
          return absl::InvalidArgumentError(
              absl::StrCat("bpe: special token id ", id, " is outside the vocabulary"));
        }
      }
    }
    prefix_ids_ = std::move(spec.prefix_ids);
    suffix_ids_ = std::move(spec.suffix_ids);
    return absl::OkStatus();
  }

  // One character (or unknown character) as initial symbols.
  void AppendCharSymbols(std::string_view ch, std::vector<int32_t>* out) const {
    if (auto it = vocab_.find(std::string(ch)); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
    bool all_bytes = true;
    for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : ch) out->push_back(byte_ids_[static_cast<uint8_t>(c)]);
      return;
    }
    if (unk_id_ >= 0 && !(fuse_unk_ && !out->empty() && out->back() == unk_id_)) {
      out->push_back(unk_id_);
    }
  }

  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
    if (word.empty()) return;
    std::vector<int32_t> ids;
    for (size_t pos = 0; pos < word.size();) {
      const size_t n = std::max<size_t>(1, utf8::SequenceLength(word, pos));
      AppendCharSymbols(word.substr(pos, n), &ids);
      pos += n;
    }
    if (ids.empty()) return;
    // Symbols as a doubly linked list; the queue holds candidate merges
    // (rank, left position), lowest rank and then leftmost first. Entries
    // made stale by earlier merges are recognised and skipped when popped.
    const int n = static_cast<int>(ids.size());
    std::vector<int> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (int i = 0; i < n; ++i) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
      int32_t rank;
      int pos;
      int32_t result;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    const auto push = [&](int left) {
      if (left < 0 || next[left] < 0) return;
      auto it = merges_.find(PairKey(ids[left], ids[next[left]]));
      if (it != merges_.end()) queue.push({it->second.rank, left, it->second.result});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      const int right = alive[top.pos] ? next[top.pos] : -1;
      if (right < 0) continue;
      auto it = merges_.find(PairKey(ids[top.pos], ids[right]));
      if (it == merges_.end() || it->second.result != top.result || it->second.rank != top.rank) {
        continue;
      }
      ids[top.pos] = top.result;
      alive[right] = false;
      next[top.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = top.pos;
      push(prev[top.pos]);
      push(top.pos);
    }
    for (int i = 0; i >= 0; i = next[i]) out->push_back(ids[i]);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> pieces_;   // id -> piece as in the file (specials: their content)
  std::vector<std::string> decoded_;  // id -> bytes it decodes to ("▁" as space)
  std::vector<int> byte_value_;       // id -> 0..255 for <0xNN> pieces, else -1
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
  std::unordered_set<int32_t> special_ids_;
  SpecialTokens specials_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  LlamaBpeSpec::Prefix prefix_ = LlamaBpeSpec::Prefix::kAlways;
  bool split_words_ = false;
  bool strip_leading_space_ = true;
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::vector<std::string> fingerprints_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlamaBpe(LlamaBpeSpec spec) {
  return LlamaBpeTokenizer::Create(std::move(spec));
}

}  // namespace dikkat::model
