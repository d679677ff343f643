// Byte-level BPE: text -> GPT-2 chunks -> bytes -> printable stand-in
// characters (GPT-2's bytes_to_unicode table) -> merges by rank.
#include "model/text/byte_level_bpe.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <limits>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/text/gpt2_pretokenizer.h"
#include "model/text/utf8.h"

namespace dikkat::model {
namespace {

// GPT-2's table: bytes that are printable Latin-1 ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves; the other 68 bytes map, in order, to
// U+0100, U+0101, ... so that every byte is a visible, non-space character.
std::array<char32_t, 256> ByteToUnicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Merge {
  int32_t rank;
  int32_t result;
};

// Bytes as text for labels: valid UTF-8 as is, stray bytes as <0xNN>.
std::string ReadableBytes(std::string_view bytes) {
  std::string out;
  for (size_t pos = 0; pos < bytes.size();) {
    const size_t n = utf8::SequenceLength(bytes, pos);
    if (n > 0) {
      out.append(bytes.substr(pos, n));
      pos += n;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<uint8_t>(bytes[pos]));
      out += buf;
      ++pos;
    }
  }
  return out;
}

// Unicode normalization form C (Hugging Face's NFC normalizer). `text` is
// valid UTF-8.
std::string Nfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (U_FAILURE(status) || nfc->isNormalized(in, status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = nfc->normalize(in, status);
  if (U_FAILURE(status)) return std::string(text);
  std::string result;
  out.toUTF8String(result);
  return result;
}

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(ByteLevelBpeSpec spec) {
    auto tok = std::unique_ptr<ByteLevelBpeTokenizer>(new ByteLevelBpeTokenizer());
    DIKKAT_RETURN_IF_ERROR(tok->Init(std::move(spec)));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }

  std::string kind() const override { return "gpt2-bpe"; }
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_bytes_.size()); }
  const SpecialTokens& special_tokens() const override { return specials_; }
  std::vector<std::string> file_fingerprints() const override { return fingerprints_; }

  absl::StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens) const override {
    if (!utf8::IsValid(text)) {
      return absl::InvalidArgumentError("gpt2-bpe tokenizer: input text is not valid UTF-8");
    }
    std::string prefixed;
    if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
      prefixed = " " + std::string(text);
      text = prefixed;
    }
    Encoding enc;
    // Added tokens that are not special (Qwen2.5's <tool_call>) are matched
    // in the text first, as Hugging Face's added vocabulary does: each is
    // its id, and the sections between them are encoded on their own.
    size_t section = 0;
    for (size_t i = 0; i < text.size() && !plain_added_.empty();) {
      const int32_t match = MatchPlainAdded(text, i);
      if (match < 0) {
        ++i;
        continue;
      }
      EncodeSection(text.substr(section, i - section), &enc.ids);
      enc.ids.push_back(plain_added_[match].second);
      i += plain_added_[match].first.size();
      section = i;
    }
    EncodeSection(text.substr(section), &enc.ids);
    if (add_special_tokens) AddSpecialTokens(&enc);
    return enc;
  }

  AddedTokens SpecialTokensAround() const override { return {prefix_ids_, suffix_ids_}; }

  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string bytes;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) continue;
      if (skip_special_tokens && IsSpecial(id)) continue;
      bytes += id_to_bytes_[id];
    }
    return utf8::ToValid(bytes);
  }

  std::string TokenText(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    return ReadableBytes(id_to_bytes_[id]);
  }

  std::string TokenBytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    return id_to_bytes_[id];
  }

  bool IsSpecial(int32_t id) const override { return special_ids_.count(id) > 0; }

 private:
  ByteLevelBpeTokenizer() = default;

  // One section of text (between added tokens): normalized, pre-tokenized
  // and merged.
  void EncodeSection(std::string_view text, std::vector<int32_t>* ids) const {
    if (text.empty()) return;
    std::string normalized;
    if (nfc_) {
      normalized = Nfc(text);
      text = normalized;
    }
    const auto encode = [&](std::string_view chunk) {
      const std::vector<int32_t> chunk_ids = EncodeChunk(chunk);
      ids->insert(ids->end(), chunk_ids.begin(), chunk_ids.end());
    };
    switch (pre_tokenizer_) {
      case BytePreTokenizer::kGpt2:
        for (std::string_view chunk : Gpt2PreTokenize(text)) encode(chunk);
        break;
      case BytePreTokenizer::kGpt2Digits:
        for (std::string_view piece : SplitDigits(text)) {
          for (std::string_view chunk : Gpt2PreTokenize(piece)) encode(chunk);
        }
        break;
      case BytePreTokenizer::kLlama3:
        for (std::string_view chunk : Llama3PreTokenize(text, 3)) encode(chunk);
        break;
      case BytePreTokenizer::kQwen2:
        for (std::string_view chunk : Llama3PreTokenize(text, 1)) encode(chunk);
        break;
    }
  }

  // The index in plain_added_ of the longest added token (not special)
  // whose text starts at text[i]; -1 if none.
  int32_t MatchPlainAdded(std::string_view text, size_t i) const {
    for (int32_t k : plain_added_by_first_[static_cast<unsigned char>(text[i])]) {
      const std::string& s = plain_added_[k].first;
      if (text.compare(i, s.size(), s) == 0) return k;  // longest first
    }
    return -1;
  }

  absl::Status Init(ByteLevelBpeSpec spec) {
    add_prefix_space_ = spec.add_prefix_space;
    pre_tokenizer_ = spec.pre_tokenizer;
    nfc_ = spec.nfc;
    fingerprints_ = std::move(spec.fingerprints);
    const std::array<char32_t, 256> table = ByteToUnicode();
    std::unordered_map<char32_t, uint8_t> unicode_to_byte;
    for (int b = 0; b < 256; ++b) unicode_to_byte[table[b]] = static_cast<uint8_t>(b);

    int32_t max_id = -1;
    for (const auto& [token, id] : spec.vocab) max_id = std::max(max_id, id);
    for (const auto& added : spec.added_tokens) {
      if (added.id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "byte-level BPE: added token \"", added.content, "\" has negative id ", added.id));
      }
      max_id = std::max(max_id, added.id);
    }
    if (max_id < 0) return absl::InvalidArgumentError("byte-level BPE: empty vocabulary");
    // The id table is dense (one entry per id up to the largest): an id of
    // INT32_MAX would overflow max_id + 1 and ask for 2^31 entries.
    if (max_id >= kMaxByteLevelBpeId) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte-level BPE: token id ", max_id, " is out of range; ids must be below ",
                       kMaxByteLevelBpeId));
    }
    id_to_bytes_.assign(static_cast<size_t>(max_id) + 1, "");

    for (const auto& [token, id] : spec.vocab) {
      if (id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte-level BPE: token \"", token, "\" has negative id ", id));
      }
      // Vocabulary strings are in the stand-in alphabet; map back to bytes.
      std::string bytes;
      for (char32_t cp : utf8::Decode(token)) {
        auto it = unicode_to_byte.find(cp);
        if (it != unicode_to_byte.end()) {
          bytes.push_back(static_cast<char>(it->second));
        } else {
          utf8::Append(cp, &bytes);  // not byte-level (e.g. an added token's text)
        }
      }
      if (spec.ignore_merges) whole_tokens_.emplace(bytes, id);
      id_to_bytes_[id] = std::move(bytes);
    }
    for (int b = 0; b < 256; ++b) {
      auto it = spec.vocab.find(utf8::Encode(table[b]));
      if (it == spec.vocab.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "byte-level BPE: the vocabulary has no token for byte ", b, " (\"",
            utf8::Encode(table[b]), "\"); every byte needs one"));
      }
      byte_ids_[b] = it->second;
    }
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
      const auto& [a, b] = spec.merges[rank];
      const auto ia = spec.vocab.find(a), ib = spec.vocab.find(b), ir = spec.vocab.find(a + b);
      if (ia == spec.vocab.end() || ib == spec.vocab.end() || ir == spec.vocab.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "byte-level BPE: merge #", rank + 1, " \"", a, " ", b,
            "\" uses or makes a token that is not in the vocabulary"));
      }
      // The first (lowest-rank) occurrence of a pair wins, as in GPT-2.
      merges_.emplace(PairKey(ia->second, ib->second),
                      Merge{static_cast<int32_t>(rank), ir->second});
    }
    for (const auto& added : spec.added_tokens) {
      id_to_bytes_[added.id] = added.content;
      if (added.special) special_ids_.insert(added.id);
      if (!added.special && !added.content.empty()) plain_added_.emplace_back(added.content, added.id);
      SetSpecialRole(added.content, added.id);
    }
    // Longest first, so that a match at a place is the longest there.
    std::sort(plain_added_.begin(), plain_added_.end(), [](const auto& a, const auto& b) {
      return a.first.size() != b.first.size() ? a.first.size() > b.first.size()
                                              : a.second < b.second;
    });
    for (size_t k = 0; k < plain_added_.size(); ++k) {
      plain_added_by_first_[static_cast<unsigned char>(plain_added_[k].first[0])].push_back(
          static_cast<int32_t>(k));
    }
    if (auto it = spec.vocab.find("<|endoftext|>"); it != spec.vocab.end()) {
      special_ids_.insert(it->second);
      SetSpecialRole("<|endoftext|>", it->second);
    }
    for (const auto* ids : {&spec.prefix_ids, &spec.suffix_ids}) {
      for (int32_t id : *ids) {
        if (id < 0 || id > max_id) {
          return absl::InvalidArgumentError(
              absl::StrCat("byte-level BPE: special token id ", id, " is outside the vocabulary"));
        }
      }
    }
    prefix_ids_ = std::move(spec.prefix_ids);
    suffix_ids_ = std::move(spec.suffix_ids);
    return absl::OkStatus();
  }

  // Well-known names of the roles; GPT-2's <|endoftext|> is both BOS and EOS.
  void SetSpecialRole(const std::string& content, int32_t id) {
    if (content == "<|endoftext|>") {
      specials_.bos = specials_.eos = id;
    } else if (content == "<s>" || content == "<|begin_of_text|>") {  // Llama 3's
      specials_.bos = id;
    } else if (content == "<|end_of_text|>") {
      specials_.eos = id;
    } else if (content == "</s>") {
      specials_.eos = id;
    } else if (content == "<pad>") {
      specials_.pad = id;
    } else if (content == "<unk>") {
      specials_.unk = id;
    } else if (content == "<mask>") {
      specials_.mask = id;
    }
  }

  std::vector<int32_t> EncodeChunk(std::string_view chunk) const {
    if (chunk.size() < kMaxCachedChunkBytes) {
      std::shared_lock lock(cache_mu_);
      auto it = cache_.find(std::string(chunk));
      if (it != cache_.end()) return it->second;
    }
    // ignore_merges: a chunk that is a token is that token, whatever the
    // merges would make of it (Llama 3's tiktoken ranks differ there).
    if (!whole_tokens_.empty()) {
      auto it = whole_tokens_.find(std::string(chunk));
      if (it != whole_tokens_.end()) return {it->second};
    }
    std::vector<int32_t> ids;
    ids.reserve(chunk.size());
    for (char c : chunk) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    ApplyMerges(&ids);
    if (chunk.size() >= kMaxCachedChunkBytes) return ids;
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(chunk), ids);
    return ids;
  }

  // GPT-2's rule: repeatedly merge the adjacent pair with the lowest rank,
  // the leftmost first. As Hugging Face's tokenizers do it: a heap of
  // candidate pairs keyed by (rank, position) over a linked list of the
  // symbols, O(n log n). (GPT-2's own loop rescans the whole chunk after
  // every merge: a run of 32K letters, one chunk, cost ~6,000 passes.)
  // This is Hugging Face's order. It is GPT-2's too when, as in a trained
  // merge list, no merge uses a token that a later merge creates (the pairs
  // a merge creates then rank after it); GPT-2's own list is such a list.
  void ApplyMerges(std::vector<int32_t>* ids) const {
    std::vector<int32_t>& w = *ids;
    const int32_t n = static_cast<int32_t>(w.size());
    if (n < 2) return;
    struct Candidate {
      int32_t rank;
      int32_t pos;    // the left symbol
      int32_t left;   // the ids it was found with: stale once either changed
      int32_t right;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::vector<int32_t> next(n), prev(n);
    for (int32_t i = 0; i < n; ++i) {
      next[i] = i + 1 < n ? i + 1 : -1;
      prev[i] = i - 1;
    }
    std::vector<Candidate> heap_storage;
    heap_storage.reserve(n);
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(
        std::greater<Candidate>(), std::move(heap_storage));
    auto push = [&](int32_t pos) {
      if (pos < 0 || next[pos] < 0) return;
      auto it = merges_.find(PairKey(w[pos], w[next[pos]]));
      if (it != merges_.end()) heap.push({it->second.rank, pos, w[pos], w[next[pos]]});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    std::vector<bool> dead(n, false);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      if (dead[c.pos] || w[c.pos] != c.left) continue;
      const int32_t r = next[c.pos];
      if (r < 0 || w[r] != c.right) continue;
      w[c.pos] = merges_.at(PairKey(c.left, c.right)).result;
      dead[r] = true;
      next[c.pos] = next[r];
      if (next[r] >= 0) prev[next[r]] = c.pos;
      push(prev[c.pos]);
      push(c.pos);
    }
    int32_t out = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (!dead[i]) w[out++] = w[i];
    }
    w.resize(out);
  }

  // Only short chunks are cached, as Hugging Face's cache (256 bytes): a
  // long one is rarely seen twice, and each would hold its bytes and ids.
  static constexpr size_t kMaxCachedChunkBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 16;

  std::vector<std::string> id_to_bytes_;  // what each id decodes to
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
  std::unordered_set<int32_t> special_ids_;
  // Added tokens that are not special, (text, id), longest first; by first byte.
  std::vector<std::pair<std::string, int32_t>> plain_added_;
  std::array<std::vector<int32_t>, 256> plain_added_by_first_;
  SpecialTokens specials_;
  bool add_prefix_space_ = false;
  BytePreTokenizer pre_tokenizer_ = BytePreTokenizer::kGpt2;
  bool nfc_ = false;
  // ignore_merges: the vocabulary's tokens (as bytes) -> id; empty otherwise.
  std::unordered_map<std::string, int32_t> whole_tokens_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // added around the text by add_special_tokens
  std::vector<std::string> fingerprints_;

  // Chunk -> ids. Guarded by cache_mu_; Encode stays const and thread-safe.
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeByteLevelBpe(ByteLevelBpeSpec spec) {
  return ByteLevelBpeTokenizer::Create(std::move(spec));
}

}  // namespace dikkat::model
