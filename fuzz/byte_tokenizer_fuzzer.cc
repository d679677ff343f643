// The byte tokenizer on arbitrary bytes: valid UTF-8 round-trips exactly
// (decode(encode(x)) == x, also when streamed); invalid UTF-8 is refused.
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_util.h"
#include "fuzz/tokenizer_properties.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<dikkat::model::Tokenizer> tokenizer =
      dikkat::model::MakeByteTokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool add_special : {false, true}) {
    const std::vector<int32_t> ids = dikkat::fuzz::CheckEncodeDecode(*tokenizer, text, add_special);
    if (!dikkat::model::IsValidUtf8(text)) continue;
    DIKKAT_FUZZ_CHECK(tokenizer->Decode(ids, true) == text, "decode(encode(x)) != x");
    if (!add_special) dikkat::fuzz::CheckStreamingRoundTrip(*tokenizer, ids, text);
  }
  dikkat::fuzz::CheckArbitraryIds(*tokenizer, data, size);
  return 0;
}
