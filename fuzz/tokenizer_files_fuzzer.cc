// Tokenizer file loading on arbitrary bytes: the first byte picks the
// loader, the rest is the file(s), written to temp files (the loaders take
// paths, and fingerprint what they read):
//
//   first byte % 3 == 0: tokenizer.json            model::LoadTokenizerJson
//                              (byte-level BPE, Llama-style BPE, WordPiece)
//   first byte % 3 == 1: vocab.txt                 model::LoadWordPiece, with
//                              lower_case / strip_accents / Chinese splitting
//                              from bits 2-4 of the first byte
//   first byte % 3 == 2: vocab.json NUL merges.txt model::LoadGpt2Bpe
//
// Never crashes, and a tokenizer that loads works: encoding a fixed text
// (with and without special tokens) succeeds with ids in [0, vocab_size),
// decoding any ids gives valid UTF-8, and TokenText / IsSpecial take every
// id in range and some outside.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fuzz/fuzz_util.h"
#include "model/text/gpt2_bpe_tokenizer.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_json.h"
#include "model/text/wordpiece_tokenizer.h"

namespace {

// One temp file per name and process, rewritten for every input.
std::string WriteFile(const char* name, std::string_view bytes) {
  static const std::string dir = [] {
    std::string pattern = "/tmp/dikkat_fuzz_tok_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    static std::string to_remove;
    to_remove = pattern;
    std::atexit([] {
      for (const char* f : {"tokenizer.json", "vocab.txt", "vocab.json", "merges.txt"}) {
        std::remove((to_remove + "/" + f).c_str());
      }
      rmdir(to_remove.c_str());
    });
    return pattern;
  }();
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::abort();
  }
  std::fclose(f);
  return path;
}

void Exercise(const dikkat::model::Tokenizer& tokenizer) {
  const int32_t vocab_size = tokenizer.vocab_size();
  DIKKAT_FUZZ_CHECK(vocab_size > 0, "a tokenizer with vocab_size %d", vocab_size);
  static const char* const kTexts[] = {
      "Hello, world! The cat's 123 tests; don't stop.\n  two  spaces\ttab",
      "caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 <s> [CLS] ##ing",
      "",
  };
  for (const char* text : kTexts) {
    for (bool add_special : {false, true}) {
      absl::StatusOr<dikkat::model::Encoding> enc = tokenizer.Encode(text, add_special);
      DIKKAT_FUZZ_CHECK(enc.ok(), "valid UTF-8 was refused: %s",
                        std::string(enc.status().message()).c_str());
      for (int32_t id : enc->ids) {
        DIKKAT_FUZZ_CHECK(id >= 0 && id < vocab_size, "Encode gave id %d, vocab_size %d", id,
                          vocab_size);
      }
      const std::string decoded = tokenizer.Decode(enc->ids, false);
      DIKKAT_FUZZ_CHECK(dikkat::model::IsValidUtf8(decoded), "Decode gave invalid UTF-8");
    }
  }
  // Every id (up to a bound), and ids outside the vocabulary.
  std::vector<int32_t> ids;
  const int32_t n = vocab_size < 512 ? vocab_size : 512;
  for (int32_t id = 0; id < n; ++id) {
    ids.push_back(id);
    (void)tokenizer.TokenText(id);
    (void)tokenizer.IsSpecial(id);
  }
  for (int32_t id : {-1, vocab_size, vocab_size + 1, INT32_MAX, INT32_MIN}) {
    ids.push_back(id);
    (void)tokenizer.TokenText(id);
    (void)tokenizer.IsSpecial(id);
  }
  for (bool skip : {false, true}) {
    DIKKAT_FUZZ_CHECK(dikkat::model::IsValidUtf8(tokenizer.Decode(ids, skip)),
                      "Decode of arbitrary ids gave invalid UTF-8");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<std::unique_ptr<dikkat::model::Tokenizer>> tokenizer;
  switch (selector % 3) {
    case 0:
      tokenizer = dikkat::model::LoadTokenizerJson(WriteFile("tokenizer.json", rest));
      break;
    case 1: {
      dikkat::model::WordPieceOptions options;
      options.lower_case = (selector >> 2) & 1;
      options.strip_accents = (selector >> 3) & 1;
      options.tokenize_chinese_chars = (selector >> 4) & 1;
      tokenizer = dikkat::model::LoadWordPiece(WriteFile("vocab.txt", rest), options);
      break;
    }
    default: {
      const size_t nul = rest.find('\0');
      const std::string_view vocab = rest.substr(0, nul);
      const std::string_view merges =
          nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
      tokenizer = dikkat::model::LoadGpt2Bpe(WriteFile("vocab.json", vocab),
                                             WriteFile("merges.txt", merges));
      break;
    }
  }
  // DIKKAT_FUZZ_VERBOSE=1: print what each input gives (to check seeds).
  static const bool verbose = std::getenv("DIKKAT_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%s\n",
                 tokenizer.ok() ? ((*tokenizer)->kind() + " tokenizer, vocab_size " +
                                   std::to_string((*tokenizer)->vocab_size()))
                                      .c_str()
                                : tokenizer.status().ToString().c_str());
  }
  if (!tokenizer.ok()) {
    DIKKAT_FUZZ_CHECK(!tokenizer.status().message().empty(), "an error without a message");
    return 0;
  }
  Exercise(**tokenizer);
  return 0;
}
