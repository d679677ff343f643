#ifndef DIKKAT_MODEL_TEXT_TOKENIZER_LOADER_H_
#define DIKKAT_MODEL_TEXT_TOKENIZER_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

// Loads the tokenizer found in a model folder, in this order:
// tokenizer.json, vocab.json + merges.txt, tokenizer.model (SentencePiece),
// vocab.txt (WordPiece; options from tokenizer_config.json's do_lower_case,
// strip_accents, tokenize_chinese_chars when present), or
// `"tokenizer": "byte"` in dikkat.json. A tokenizer.json that is
// UNIMPLEMENTED (a pipeline LoadTokenizerJson does not know) gives way to
// tokenizer.model when the folder has one (never to vocab.json + merges.txt,
// which hold no normalizer, pattern or added tokens).
// NOT_FOUND lists what was looked for.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);

// The id of tokenizer_config.json's `eos_token` ("<|im_end|>" or
// {"content": ...}) in `tokenizer`: a special token of that text, else the
// text when it encodes to one id; -1 when the folder names none or the text
// is not one token. INVALID_ARGUMENT for a file that is not a JSON object.
absl::StatusOr<int32_t> TokenizerConfigEos(const std::string& model_dir,
                                           const Tokenizer& tokenizer);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_TOKENIZER_LOADER_H_
