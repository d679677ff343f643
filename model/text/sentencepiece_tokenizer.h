#ifndef DIKKAT_MODEL_TEXT_SENTENCEPIECE_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

// A SentencePiece model file (tokenizer.model). add_special_tokens prepends
// the model's BOS when it has one (Llama); control pieces are the specials.
// libsentencepiece is reached through a dlopen()ed module
// (libdikkat_sentencepiece_shim.so, see sentencepiece_shim/sentencepiece_shim.h):
// FAILED_PRECONDITION if that module cannot be found.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_SENTENCEPIECE_TOKENIZER_H_
