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

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_GPT2_PRETOKENIZER_H_
