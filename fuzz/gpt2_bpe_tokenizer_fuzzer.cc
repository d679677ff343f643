// GPT-2 byte-level BPE (GPT-2 pre-tokenizer + merges) with a small
// vocabulary built here: the 256 byte tokens, a few dozen merges and
// <|endoftext|>. Byte-level BPE is lossless: valid UTF-8 round-trips exactly
// (also streamed), with and without add_prefix_space.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/tokenizer_properties.h"
#include "model/text/byte_level_bpe.h"

namespace {

// GPT-2's bytes_to_unicode stand-in characters, as UTF-8.
std::string ByteToken(int b) {
  const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int next = 256;
  for (int x = 0; x < b; ++x) {
    if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++next;
  }
  const int cp = printable ? b : next;
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

std::unique_ptr<dikkat::model::Tokenizer> Build(bool add_prefix_space) {
  dikkat::model::ByteLevelBpeSpec spec;
  for (int b = 0; b < 256; ++b) spec.vocab[ByteToken(b)] = b;
  const std::string space = ByteToken(' ');  // "Ġ"
  const std::vector<std::pair<std::string, std::string>> merges = {
      {space, "t"}, {"h", "e"}, {space + "t", "he"}, {"i", "n"}, {space, "a"}, {"e", "r"},
      {"o", "n"}, {space + "a", "n"}, {space + "an", "d"}, {"r", "e"}, {space, "s"}, {"i", "s"},
      {space + "s", "t"}, {"e", "s"}, {"in", "g"}, {space, space}, {space + space, space + space},
      {"\xC3\xA4", "\xC2\xB8"},  // byte-level pieces of a multi-byte character
      {"1", "2"}, {"12", "3"}, {"\xC4\x8A", "\xC4\x8A"}};  // "\n\n"
  int32_t next = 256;
  for (const auto& [a, b] : merges) {
    spec.merges.emplace_back(a, b);
    if (spec.vocab.emplace(a + b, next).second) ++next;
  }
  spec.vocab["<|endoftext|>"] = next;
  spec.add_prefix_space = add_prefix_space;
  absl::StatusOr<std::unique_ptr<dikkat::model::Tokenizer>> tokenizer =
      dikkat::model::MakeByteLevelBpe(std::move(spec));
  if (!tokenizer.ok()) std::abort();
  return *std::move(tokenizer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<dikkat::model::Tokenizer> plain = Build(false);
  static const std::unique_ptr<dikkat::model::Tokenizer> prefixed = Build(true);
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const auto* tokenizer : {plain.get(), prefixed.get()}) {
    const std::vector<int32_t> ids = dikkat::fuzz::CheckEncodeDecode(*tokenizer, text, false);
    if (!dikkat::model::IsValidUtf8(text)) continue;
    const std::string expected =
        tokenizer == prefixed.get() && !text.empty() && text[0] != ' ' ? " " + text : text;
    DIKKAT_FUZZ_CHECK(tokenizer->Decode(ids, false) == expected, "decode(encode(x)) != x");
    dikkat::fuzz::CheckStreamingRoundTrip(*tokenizer, ids, expected);
  }
  dikkat::fuzz::CheckArbitraryIds(*plain, data, size);
  return 0;
}
