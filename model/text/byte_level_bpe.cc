// Byte-level BPE: text -> GPT-2 chunks -> bytes -> printable stand-in
// characters (GPT-2's bytes_to_unicode table) -> merges by rank.
#include "model/text/byte_level_bpe.h"

#include <array>
#include <cstdio>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

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
    if (add_special_tokens) enc.ids = prefix_ids_;
    for (std::string_view chunk : Gpt2PreTokenize(text)) {
      const std::vector<int32_t> ids = EncodeChunk(chunk);
      enc.ids.insert(enc.ids.end(), ids.begin(), ids.end());
    }
    if (add_special_tokens) enc.ids.insert(enc.ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    return enc;
  }

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

  bool IsSpecial(int32_t id) const override { return special_ids_.count(id) > 0; }

 private:
  ByteLevelBpeTokenizer() = default;

  absl::Status Init(ByteLevelBpeSpec spec) {
    add_prefix_space_ = spec.add_prefix_space;
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
      SetSpecialRole(added.content, added.id);
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
    } else if (content == "<s>") {
      specials_.bos = id;
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
    {
      std::shared_lock lock(cache_mu_);
      auto it = cache_.find(std::string(chunk));
      if (it != cache_.end()) return it->second;
    }
    std::vector<int32_t> ids;
    ids.reserve(chunk.size());
    for (char c : chunk) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    ApplyMerges(&ids);
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(chunk), ids);
    return ids;
  }

  // GPT-2's loop: merge every occurrence (left to right) of the adjacent
  // pair with the lowest rank, until no pair has a merge.
  void ApplyMerges(std::vector<int32_t>* ids) const {
    std::vector<int32_t>& w = *ids;
    while (w.size() > 1) {
      int32_t best_rank = std::numeric_limits<int32_t>::max();
      uint64_t best_key = 0;
      int32_t best_result = -1;
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        auto it = merges_.find(PairKey(w[i], w[i + 1]));
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          best_key = it->first;
          best_result = it->second.result;
        }
      }
      if (best_result < 0) break;
      size_t out = 0;
      for (size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && PairKey(w[i], w[i + 1]) == best_key) {
          w[out++] = best_result;
          i += 2;
        } else {
          w[out++] = w[i++];
        }
      }
      w.resize(out);
    }
  }

  static constexpr size_t kMaxCacheEntries = 1 << 16;

  std::vector<std::string> id_to_bytes_;  // what each id decodes to
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
  std::unordered_set<int32_t> special_ids_;
  SpecialTokens specials_;
  bool add_prefix_space_ = false;
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
