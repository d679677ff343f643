// Tokenizers: text <-> token ids, exactly as the model was trained.
// Implementations: byte-level (ids 0..255 are bytes), SentencePiece
// (libsentencepiece), GPT-2 byte-level BPE (vocab.json + merges.txt or
// tokenizer.json), WordPiece (BERT vocab.txt), Llama-style tokenizer.json
// BPE with byte fallback.
//
// Torch-free. A Tokenizer is immutable after loading and thread-safe for
// concurrent Encode/Decode calls.
#ifndef DIKKAT_MODEL_TEXT_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dikkat::model {

struct SpecialTokens {
  int32_t bos = -1;  // -1 = the vocabulary has none
  int32_t eos = -1;
  int32_t pad = -1;
  int32_t unk = -1;
  int32_t cls = -1;  // BERT [CLS]
  int32_t sep = -1;  // BERT [SEP]
  int32_t mask = -1;
};

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;  // BERT segment ids; empty when the model has none
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "byte", "sentencepiece", "gpt2-bpe", "wordpiece", "bpe" (tokenizer.json).
  virtual std::string kind() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual const SpecialTokens& special_tokens() const = 0;

  // Text -> ids. `add_special_tokens` adds what the model expects around a
  // single input (BERT: [CLS] ... [SEP]; Llama: BOS; GPT-2: nothing).
  // INVALID_ARGUMENT if the text is not valid UTF-8.
  virtual absl::StatusOr<Encoding> Encode(std::string_view text,
                                          bool add_special_tokens) const = 0;

  // Ids -> text. Ids out of range are skipped; special tokens are dropped
  // when `skip_special_tokens`. Bytes that do not form valid UTF-8 become
  // U+FFFD.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;

  // The vocabulary entry of one id as a readable string (for attention axis
  // labels; byte-level pieces are shown as their text, e.g. "Ġthe" -> " the").
  virtual std::string TokenText(int32_t id) const = 0;

  // True if `id` is a special/control token (BOS, EOS, PAD, [CLS], added special tokens).
  virtual bool IsSpecial(int32_t id) const = 0;

  // Hex SHA-256 fingerprints of the files the tokenizer was read from (may be empty).
  virtual std::vector<std::string> file_fingerprints() const { return {}; }
};

// Turns a stream of generated ids into text deltas that never split a UTF-8
// character: Push returns only complete characters; Flush returns whatever is
// left (incomplete bytes as U+FFFD). Works for every Tokenizer by decoding a
// sliding window of ids, so tokenizers with context-dependent decoding
// (SentencePiece's leading-space rule) stream correctly too.
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens);
  // `context` (e.g. the last few prompt ids) is decoded as left context but
  // never emitted, so the first generated piece keeps the leading space a
  // SentencePiece model gives a word that follows other text.
  IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens,
                     std::vector<int32_t> context);
  std::string Push(int32_t id);
  std::string Flush();

 private:
  std::string DecodeRange(size_t begin, size_t end) const;
  // Emits the text of ids_[read_offset_, end) if it is complete (or `flush`).
  std::string TakeDelta(bool flush);

  const Tokenizer* tokenizer_;  // not owned
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_[prefix_offset_, read_offset_) decode to already-emitted text
  size_t read_offset_ = 0;
};

// Byte-level tokenizer: id b (0..255) is byte b; specials follow at 256+.
// Used by models trained on raw bytes and by the build-time tiny model.
std::unique_ptr<Tokenizer> MakeByteTokenizer();

// A SentencePiece model file (tokenizer.model). add_special_tokens prepends
// the model's BOS when it has one (Llama); control pieces are the specials.
// libsentencepiece is reached through a dlopen()ed module
// (libdikkat_sentencepiece_shim.so, see sentencepiece_shim/sentencepiece_shim.h):
// FAILED_PRECONDITION if that module cannot be found.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path);

// GPT-2 byte-level BPE from vocab.json (token -> id) and merges.txt ("a b"
// per line, rank order). Encode never adds specials; <|endoftext|> (when in
// the vocabulary) is BOS and EOS. Special-token text inside the input is
// encoded as plain text, never as the special id.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2Bpe(const std::string& vocab_json,
                                                       const std::string& merges_txt);

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

// Loads the tokenizer found in a model folder, in this order:
// tokenizer.json, vocab.json + merges.txt, tokenizer.model (SentencePiece),
// vocab.txt (WordPiece; options from tokenizer_config.json's do_lower_case,
// strip_accents, tokenize_chinese_chars when present), or
// `"tokenizer": "byte"` in dikkat.json. A tokenizer.json that is
// UNIMPLEMENTED (a pipeline LoadTokenizerJson does not know) gives way to vocab.json +
// merges.txt or tokenizer.model when the folder has them.
// NOT_FOUND lists what was looked for.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);

// Returns true if `text` is valid UTF-8.
bool IsValidUtf8(std::string_view text);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_TOKENIZER_H_
