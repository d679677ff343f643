// Construction of the WordPiece tokenizer from an in-memory vocabulary, for
// the vocab.txt and tokenizer.json loaders. Internal to dikkat_text.
#ifndef DIKKAT_MODEL_TEXT_WORDPIECE_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_WORDPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

// `vocab[id]` is the token of id. INVALID_ARGUMENT if the vocabulary lacks
// options.unk_token.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeWordPiece(std::vector<std::string> vocab,
                                                         const WordPieceOptions& options,
                                                         std::vector<std::string> fingerprints);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_WORDPIECE_TOKENIZER_H_
