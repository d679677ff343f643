#ifndef DIKKAT_MODEL_TEXT_TOKENIZER_JSON_H_
#define DIKKAT_MODEL_TEXT_TOKENIZER_JSON_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/text/tokenizer.h"

namespace dikkat::model {

// A Hugging Face tokenizer.json. Supported: model "BPE" with the GPT-2
// ByteLevel pre-tokenizer and no normalizer (kind "gpt2-bpe"); model "BPE"
// with SentencePiece-style "▁" spaces, i.e. Llama's legacy normalizer
// Sequence[Prepend("▁"), Replace(" ", "▁")] or the Metaspace pre-tokenizer,
// with byte_fallback <0xNN> pieces (kind "bpe"; added tokens such as <s> in
// the input text are encoded as plain text, like SentencePiece does); model
// "WordPiece" with the BERT normalizer / pre-tokenizer (kind "wordpiece").
// Post-processors RobertaProcessing, BertProcessing and TemplateProcessing
// decide what add_special_tokens adds. UNIMPLEMENTED names anything else.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_TOKENIZER_JSON_H_
