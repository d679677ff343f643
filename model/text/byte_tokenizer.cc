// Byte-level tokenizer: id b in 0..255 is the byte b. The specials follow:
// 256 <pad>, 257 <bos>, 258 <eos> (vocab 259). Encode with
// add_special_tokens prepends <bos>; no <eos> is appended (a decoder-only
// model generates it).
#include "model/text/byte_tokenizer.h"

#include <array>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/text/tokenizer.h"
#include "model/text/utf8.h"

namespace dikkat::model {
namespace {

constexpr int32_t kNumBytes = 256;
constexpr std::array<const char*, 3> kSpecialNames = {"<pad>", "<bos>", "<eos>"};

class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer() {
    specials_.pad = kNumBytes + 0;
    specials_.bos = kNumBytes + 1;
    specials_.eos = kNumBytes + 2;
  }

  std::string kind() const override { return "byte"; }
  int32_t vocab_size() const override { return kNumBytes + static_cast<int32_t>(kSpecialNames.size()); }
  const SpecialTokens& special_tokens() const override { return specials_; }

  absl::StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens) const override {
    if (!utf8::IsValid(text)) {
      return absl::InvalidArgumentError("byte tokenizer: input text is not valid UTF-8");
    }
    Encoding enc;
    enc.ids.reserve(text.size() + 1);
    if (add_special_tokens) enc.ids.push_back(specials_.bos);
    for (char c : text) enc.ids.push_back(static_cast<uint8_t>(c));
    return enc;
  }

  AddedTokens SpecialTokensAround() const override { return {{specials_.bos}, {}}; }

  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string bytes;
    bytes.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) continue;
      if (id < kNumBytes) {
        bytes.push_back(static_cast<char>(id));
      } else if (!skip_special_tokens) {
        bytes.append(kSpecialNames[id - kNumBytes]);
      }
    }
    return utf8::ToValid(bytes);
  }

  std::string TokenText(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    if (id >= kNumBytes) return kSpecialNames[id - kNumBytes];
    if (id >= 0x20 && id < 0x7F) return std::string(1, static_cast<char>(id));
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", id);
    return buf;
  }

  std::string TokenBytes(int32_t id) const override {
    if (id >= 0 && id < kNumBytes) return std::string(1, static_cast<char>(id));
    return TokenText(id);
  }

  bool IsSpecial(int32_t id) const override { return id >= kNumBytes && id < vocab_size(); }

 private:
  SpecialTokens specials_;
};

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace dikkat::model
