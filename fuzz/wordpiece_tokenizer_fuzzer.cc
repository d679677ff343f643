// BERT WordPiece (basic tokenizer: control-character clean-up, CJK split,
// lower-casing / accent stripping, punctuation split; then greedy
// longest-match) with a small vocabulary built here, cased and uncased.
// WordPiece is lossy, so the property is stability instead: when an encoding
// has no [UNK], encoding its decoded text gives the same ids.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/tokenizer_properties.h"
#include "model/text/wordpiece_tokenizer.h"

namespace {

std::unique_ptr<dikkat::model::Tokenizer> Build(bool lower_case) {
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (char c = 'a'; c <= 'z'; ++c) {
    vocab.emplace_back(1, c);
    vocab.push_back(std::string("##") + c);
  }
  for (char c = '0'; c <= '9'; ++c) vocab.emplace_back(1, c);
  for (const char* p : {".", ",", "!", "?", "-", "'", "\"", "(", ")", "#", "$", "%"}) {
    vocab.emplace_back(p);
  }
  for (const char* w : {"the", "hello", "world", "##ing", "##s", "##ed", "un", "##aff", "##able",
                        "\xC3\xA9", "caf\xC3\xA9", "\xE4\xB8\xAD", "\xE6\x96\x87", "Hello"}) {
    vocab.emplace_back(w);
  }
  dikkat::model::WordPieceOptions options;
  options.lower_case = lower_case;
  options.strip_accents = lower_case;
  options.max_input_chars_per_word = 20;
  absl::StatusOr<std::unique_ptr<dikkat::model::Tokenizer>> tokenizer =
      dikkat::model::MakeWordPiece(std::move(vocab), options, {});
  if (!tokenizer.ok()) std::abort();
  return *std::move(tokenizer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<dikkat::model::Tokenizer> uncased = Build(true);
  static const std::unique_ptr<dikkat::model::Tokenizer> cased = Build(false);
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const auto* tokenizer : {uncased.get(), cased.get()}) {
    for (bool add_special : {false, true}) {
      const std::vector<int32_t> ids =
          dikkat::fuzz::CheckEncodeDecode(*tokenizer, text, add_special);
      if (!dikkat::model::IsValidUtf8(text)) continue;
      if (add_special) {
        DIKKAT_FUZZ_CHECK(ids.size() >= 2 && ids.front() == 2 && ids.back() == 3,
                          "add_special_tokens must wrap [CLS] ... [SEP]");
        continue;
      }
      bool has_unk = false;
      for (int32_t id : ids) has_unk = has_unk || id == 1;
      if (has_unk) continue;
      const std::string decoded = tokenizer->Decode(ids, false);
      absl::StatusOr<dikkat::model::Encoding> again = tokenizer->Encode(decoded, false);
      DIKKAT_FUZZ_CHECK(again.ok() && again->ids == ids,
                        "encode(decode(encode(x))) != encode(x); decoded: '%s'", decoded.c_str());
    }
  }
  dikkat::fuzz::CheckArbitraryIds(*uncased, data, size);
  return 0;
}
