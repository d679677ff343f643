// BERT's WordPiece tokenizer: from a vocab.txt file (LoadWordPiece) or from
// an in-memory vocabulary (MakeWordPiece, for the tokenizer.json loader).
#ifndef DIKKAT_MODEL_TEXT_WORDPIECE_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_WORDPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

// BERT's WordPiece (vocab.txt: one token per line, id = line number).
struct WordPieceOptions {
  bool lower_case = true;             // BERT "uncased": full Unicode lower-casing
  bool strip_accents = true;          // NFD, then drop nonspacing marks (Mn)
  bool tokenize_chinese_chars = true;  // each CJK ideograph is its own word
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  int max_input_chars_per_word = 100;  // longer words become [UNK]
};

// Encode: BERT's BasicTokenizer (clean control characters, split CJK,
// lower-case / strip accents as configured, split punctuation) then greedy
// longest-match-first WordPiece; add_special_tokens wraps [CLS] ... [SEP];
// type_ids are all 0. Decode joins tokens with spaces and glues "##" pieces
// (no further clean-up). Specials: [CLS] [SEP] [PAD] [MASK]; [UNK] is not.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadWordPiece(const std::string& vocab_txt,
                                                         const WordPieceOptions& options);

// `vocab[id]` is the token of id. INVALID_ARGUMENT if the vocabulary lacks
// options.unk_token.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeWordPiece(std::vector<std::string> vocab,
                                                         const WordPieceOptions& options,
                                                         std::vector<std::string> fingerprints);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_WORDPIECE_TOKENIZER_H_
