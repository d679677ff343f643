// Properties every tokenizer fuzzer checks (fuzz/*_tokenizer_fuzzer.cc).
#ifndef DIKKAT_FUZZ_TOKENIZER_PROPERTIES_H_
#define DIKKAT_FUZZ_TOKENIZER_PROPERTIES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "model/text/incremental_decoder.h"
#include "model/text/tokenizer.h"

namespace dikkat::fuzz {

// Encode: INVALID_ARGUMENT exactly for invalid UTF-8; every id in range.
// Decode, TokenText and IsSpecial accept any id (in range or not) without
// crashing. Returns the encoding (empty when the text was refused).
inline std::vector<int32_t> CheckEncodeDecode(const model::Tokenizer& tokenizer,
                                              std::string_view text, bool add_special) {
  absl::StatusOr<model::Encoding> enc = tokenizer.Encode(text, add_special);
  const bool valid = model::IsValidUtf8(text);
  DIKKAT_FUZZ_CHECK(enc.ok() == valid, "Encode %s text that is%s valid UTF-8",
                    enc.ok() ? "accepted" : "refused", valid ? "" : " not");
  if (!enc.ok()) return {};
  for (int32_t id : enc->ids) {
    DIKKAT_FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size(), "id %d outside the vocabulary (%d)",
                      id, tokenizer.vocab_size());
    (void)tokenizer.TokenText(id);
  }
  DIKKAT_FUZZ_CHECK(enc->type_ids.empty() || enc->type_ids.size() == enc->ids.size(),
                    "%zu type ids for %zu ids", enc->type_ids.size(), enc->ids.size());
  for (bool skip : {false, true}) {
    const std::string decoded = tokenizer.Decode(enc->ids, skip);
    DIKKAT_FUZZ_CHECK(model::IsValidUtf8(decoded), "Decode produced invalid UTF-8");
  }
  return enc->ids;
}

// Arbitrary ids (in range or not) through Decode and the incremental
// decoder: valid UTF-8 out, no crash.
inline void CheckArbitraryIds(const model::Tokenizer& tokenizer, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 <= size && ids.size() < 512; i += 2) {
    ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) - 16);
  }
  DIKKAT_FUZZ_CHECK(model::IsValidUtf8(tokenizer.Decode(ids, false)), "Decode: invalid UTF-8");
  model::IncrementalDecoder stream(&tokenizer, true);
  std::string text;
  for (int32_t id : ids) text += stream.Push(id);
  text += stream.Flush();
  DIKKAT_FUZZ_CHECK(model::IsValidUtf8(text), "IncrementalDecoder: invalid UTF-8");
  for (int32_t id : ids) {
    (void)tokenizer.TokenText(id);
    (void)tokenizer.IsSpecial(id);
  }
}

// For lossless tokenizers: streaming the ids of `text` one at a time gives
// back `text` exactly (never a split character, nothing lost at the end).
inline void CheckStreamingRoundTrip(const model::Tokenizer& tokenizer,
                                    const std::vector<int32_t>& ids, std::string_view expected) {
  model::IncrementalDecoder stream(&tokenizer, false);
  std::string text;
  for (int32_t id : ids) text += stream.Push(id);
  text += stream.Flush();
  DIKKAT_FUZZ_CHECK(text == expected, "streamed decode differs: got %zu bytes, want %zu",
                    text.size(), expected.size());
}

}  // namespace dikkat::fuzz

#endif  // DIKKAT_FUZZ_TOKENIZER_PROPERTIES_H_
