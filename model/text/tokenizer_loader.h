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
// UNIMPLEMENTED (a pipeline LoadTokenizerJson does not know) gives way to vocab.json +
// merges.txt or tokenizer.model when the folder has them.
// NOT_FOUND lists what was looked for.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_TOKENIZER_LOADER_H_
