// Tokenizers: text <-> token ids, exactly as the model was trained. This is
// the interface; each kind has its own header: byte_tokenizer.h (ids 0..255
// are bytes), sentencepiece_tokenizer.h (libsentencepiece),
// gpt2_bpe_tokenizer.h (GPT-2 byte-level BPE from vocab.json + merges.txt),
// wordpiece_tokenizer.h (BERT vocab.txt), tokenizer_json.h (Hugging Face
// tokenizer.json: byte-level BPE, Llama-style BPE with byte fallback,
// WordPiece). tokenizer_loader.h picks one for a model folder;
// incremental_decoder.h streams generated ids as text.
//
// Torch-free. A Tokenizer is immutable after loading and thread-safe for
// concurrent Encode/Decode calls.
#ifndef DIKKAT_MODEL_TEXT_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

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

  // One part of an input between special tokens, encoded without special
  // tokens around it (EncodeParsingSpecialTokens' parts). `starts_input`:
  // the part is at the input's start (a Metaspace pre-tokenizer with
  // prepend_scheme "first" gives only that part its "▁"). Default:
  // Encode(text, false).
  virtual absl::StatusOr<Encoding> EncodePart(std::string_view text, bool starts_input) const {
    (void)starts_input;
    return Encode(text, false);
  }

  // What Encode(text, true) puts before and after one input (BERT: [CLS]
  // and [SEP]; Llama: BOS; a tokenizer.json post-processor's template).
  // Default: nothing (a tokenizer that wraps another must forward it).
  struct AddedTokens {
    std::vector<int32_t> before, after;
  };
  virtual AddedTokens SpecialTokensAround() const { return {}; }

  // Puts SpecialTokensAround() around `enc`, one input encoded without
  // special tokens, segment ids included when `enc` has them:
  // Encode(text, true) is Encode(text, false) followed by this.
  void AddSpecialTokens(Encoding* enc) const;

  // Ids -> text. Ids out of range are skipped; special tokens are dropped
  // when `skip_special_tokens`. Bytes that do not form valid UTF-8 become
  // U+FFFD.
  virtual std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const = 0;

  // The vocabulary entry of one id as a readable string (for attention axis
  // labels; byte-level pieces are shown as their text, e.g. "Ġthe" -> " the").
  virtual std::string TokenText(int32_t id) const = 0;

  // The bytes `id` stands for on its own, as OpenAI's logprobs report them
  // (`bytes`: a byte-level or byte-fallback token holding part of a
  // character is that byte, where TokenText shows "<0xE2>"). May be invalid
  // UTF-8. Default: TokenText.
  virtual std::string TokenBytes(int32_t id) const { return TokenText(id); }

  // True if `id` is a special/control token (BOS, EOS, PAD, [CLS], added special tokens).
  virtual bool IsSpecial(int32_t id) const = 0;

  // Hex SHA-256 fingerprints of the files the tokenizer was read from (may be empty).
  virtual std::vector<std::string> file_fingerprints() const { return {}; }

  // The special tokens as a chat template writes them ("<s>", "<|im_start|>",
  // "[CLS]"): (TokenText, id) of every id IsSpecial says is special and
  // whose text is not empty, the lowest id for a text held by several,
  // longest text first. Computed once, on first use.
  const std::vector<std::pair<std::string, int32_t>>& SpecialTexts() const;

 private:
  mutable absl::once_flag special_texts_once_;
  mutable std::vector<std::pair<std::string, int32_t>> special_texts_;
};

// Text -> ids as Hugging Face tokenizers encode by default: the text of every
// special token in `text` (SpecialTexts, the longest at each place) becomes
// its id, and each part between them is encoded as Encode(part, false) does;
// with `add_special_tokens` the whole is then wrapped as AddSpecialTokens
// does (what `tokenizer(text)` gives: a Llama prompt written with "<s>" gets
// two BOS, as in Hugging Face). A text without any special token is
// Encode(text, add_special_tokens). For prompts rendered by a chat template,
// which write the special tokens (BOS, role markers) as text (add nothing
// then), and for completion prompts as vLLM tokenizes them. Not modelled: Hugging Face's
// lstrip/rstrip flags of added tokens. Added tokens that are not special are
// matched by Encode itself (byte-level BPE; Qwen2.5's <tool_call>).
// INVALID_ARGUMENT if the text is not valid UTF-8.
absl::StatusOr<Encoding> EncodeParsingSpecialTokens(const Tokenizer& tokenizer,
                                                    std::string_view text,
                                                    bool add_special_tokens = false);

// Returns true if `text` is valid UTF-8.
bool IsValidUtf8(std::string_view text);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_TOKENIZER_H_
