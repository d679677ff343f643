// Byte-level BPE (GPT-2, RoBERTa, GPT-J, ...): what the vocab.json +
// merges.txt and tokenizer.json loaders build. Internal to dikkat_text.
#ifndef DIKKAT_MODEL_TEXT_BYTE_LEVEL_BPE_H_
#define DIKKAT_MODEL_TEXT_BYTE_LEVEL_BPE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
};

// How the text is cut into the chunks BPE runs on.
enum class BytePreTokenizer {
  kGpt2,            // GPT-2's pattern (ByteLevel's own regex)
  kGpt2Digits,      // Digits(individual_digits) first, then GPT-2's pattern (SmolLM)
  kLlama3,          // Llama 3's Split pattern (\p{N}{1,3}), ByteLevel without its regex
  kQwen2,           // Qwen2's Split pattern (\p{N})
};

struct ByteLevelBpeSpec {
  std::unordered_map<std::string, int32_t> vocab;        // byte-level token -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  // Decoded as their content. Encode matches those that are not special in
  // the text (Hugging Face's added vocabulary); special ones only
  // EncodeParsingSpecialTokens does.
  std::vector<AddedToken> added_tokens;
  bool add_prefix_space = false;         // ByteLevel pre-tokenizer option (RoBERTa-style)
  BytePreTokenizer pre_tokenizer = BytePreTokenizer::kGpt2;
  bool nfc = false;            // an NFC normalizer (Qwen2) before the pre-tokenizer
  bool ignore_merges = false;  // a chunk that is itself a token is that token (Llama 3)
  // What Encode(add_special_tokens=true) puts around the text (RoBERTa: <s> ... </s>).
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  std::vector<std::string> fingerprints;
};

// Token ids must be below this (the largest real vocabularies have ~256k
// entries; ids index a dense table).
inline constexpr int32_t kMaxByteLevelBpeId = 1 << 24;

// INVALID_ARGUMENT if a merge names a token that is not in the vocabulary, or
// an id is negative or not below kMaxByteLevelBpeId.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeByteLevelBpe(ByteLevelBpeSpec spec);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_BYTE_LEVEL_BPE_H_
