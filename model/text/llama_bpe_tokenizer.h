// Llama-style BPE from a Hugging Face tokenizer.json: SentencePiece's "▁"
// word marker, merges by rank over the whole text, and byte fallback
// (<0xNN> tokens) for characters the vocabulary lacks. What the
// tokenizer.json loader builds for such files. Internal to dikkat_text.
#ifndef DIKKAT_MODEL_TEXT_LLAMA_BPE_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_LLAMA_BPE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/byte_level_bpe.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

struct LlamaBpeSpec {
  std::unordered_map<std::string, int32_t> vocab;           // piece -> id ("▁the", "<0x0A>")
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added_tokens;  // decoded as their content, never produced by Encode
  std::string unk_token;                 // "" = none: unknown characters are an error
  bool byte_fallback = true;             // unknown characters -> their <0xNN> byte tokens
  bool fuse_unk = false;                 // consecutive unknowns -> one unk id
  // How "▁" gets in front of the text: kAlways = SentencePiece's dummy
  // prefix (the legacy Prepend("▁") normalizer); kUnlessPresent = the
  // Metaspace pre-tokenizer, which adds none when the text already starts
  // with a space; kNever = no prefix.
  // kFirst: as kUnlessPresent, on the input's first part only (Metaspace
  // prepend_scheme "first": none after a special token).
  enum class Prefix { kAlways, kUnlessPresent, kFirst, kNever };
  Prefix prefix = Prefix::kAlways;
  bool split_words = false;        // Metaspace split=true: BPE never merges across "▁"
  bool strip_leading_space = true;  // decoder drops the prefix space again
  // What Encode(add_special_tokens=true) puts around the text (Llama: <s>).
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  std::vector<std::string> fingerprints;
};

// Piece and added-token ids must be below this: the tables are dense, one
// entry per id up to the largest (real vocabularies have ~256k pieces).
inline constexpr int32_t kMaxLlamaBpeId = 1 << 24;

// INVALID_ARGUMENT if a merge names a piece that is not in the vocabulary or
// an id is negative or not below kMaxLlamaBpeId. A character with neither a piece nor (with
// byte_fallback) all of its <0xNN> pieces encodes as unk_token, as in
// Hugging Face tokenizers.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlamaBpe(LlamaBpeSpec spec);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_LLAMA_BPE_TOKENIZER_H_
