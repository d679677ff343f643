#ifndef DIKKAT_MODEL_TEXT_GPT2_BPE_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_GPT2_BPE_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

// GPT-2 byte-level BPE from vocab.json (token -> id) and merges.txt ("a b"
// per line, rank order). Encode never adds specials; <|endoftext|> (when in
// the vocabulary) is BOS and EOS. Special-token text inside the input is
// encoded as plain text, never as the special id.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2Bpe(const std::string& vocab_json,
                                                       const std::string& merges_txt);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_GPT2_BPE_TOKENIZER_H_
