// GPT-2's pre-tokenization: splits text into the chunks that BPE runs on,
// exactly as the regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does (first alternative that matches wins, quantifiers greedy), written by
// hand over code points. Letter / number categories come from ICU; \s is
// Unicode's White_Space property. Internal to dikkat_text; thread-safe.
#ifndef DIKKAT_MODEL_TEXT_GPT2_PRETOKENIZER_H_
#define DIKKAT_MODEL_TEXT_GPT2_PRETOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

namespace dikkat::model {

// `text` must be valid UTF-8. The chunks concatenate back to `text`.
std::vector<std::string_view> Gpt2PreTokenize(std::string_view text);

// Llama 3's and Qwen2's pattern (Hugging Face's Split pre-tokenizer, then
// ByteLevel without its own regex):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with D = `max_digits` (Llama 3: 3; Qwen2: 1, the pattern's plain \p{N}).
std::vector<std::string_view> Llama3PreTokenize(std::string_view text, int max_digits);

// Hugging Face's Digits pre-tokenizer with individual_digits (SmolLM, before
// ByteLevel): every number character (\p{N}) its own piece, the text
// between them one piece each.
std::vector<std::string_view> SplitDigits(std::string_view text);

// The two patterns' texts as Hugging Face tokenizer.json files write them.
extern const char kLlama3SplitPattern[];
extern const char kQwen2SplitPattern[];

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_GPT2_PRETOKENIZER_H_
