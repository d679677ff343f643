// UTF-8 handling, the byte-level tokenizer, IncrementalDecoder and the
// model-folder dispatch of LoadTokenizer.
#include "model/text/byte_level_bpe.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/gpt2_bpe_tokenizer.h"
#include "model/text/gpt2_pretokenizer.h"
#include "model/text/incremental_decoder.h"
#include "model/text/llama_bpe_tokenizer.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_json.h"
#include "model/text/tokenizer_loader.h"

#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/text/tokenizer_test_util.h"

namespace dikkat::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::ScratchDir;
using testing_util::WriteFile;

std::string Utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Byte strings that exercise every branch of UTF-8 validation: boundary lead
// and continuation bytes, surrogates, overlongs, truncations, mixed with
// valid characters of every length.
std::vector<std::string> Utf8Cases() {
  static const unsigned char kEdgeBytes[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0,
                                             0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC,
                                             0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5,
                                             0xF8, 0xFE, 0xFF};
  static const char32_t kCodePoints[] = {0x24,   0xE7,    0x11F,   0x131,  0x130,
                                         0x7FF,  0x800,   0xD7FF,  0xE000, 0xFFFD,
                                         0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
  std::vector<std::string> cases = {"", "hello", "\xED\xA0\x80", "\xC0\xAF", "\xE0\x80\xAF",
                                    "\xF4\x90\x80\x80", "\xF0\x9F\x98", "\xE2\x82"};
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int parts = rng() % 8;
    for (int p = 0; p < parts; ++p) {
      switch (rng() % 3) {
        case 0: s += static_cast<char>(kEdgeBytes[rng() % sizeof(kEdgeBytes)]); break;
        case 1: s += Utf8(kCodePoints[rng() % (sizeof(kCodePoints) / sizeof(kCodePoints[0]))]); break;
        default: {
          // A valid character cut short.
          std::string c = Utf8(kCodePoints[rng() % (sizeof(kCodePoints) / sizeof(kCodePoints[0]))]);
          s += c.substr(0, 1 + rng() % c.size());
        }
      }
    }
    cases.push_back(s);
  }
  return cases;
}

TEST(Utf8Test, ValidityAndReplacementMatchPython) {
  ScratchDir dir;
  const std::vector<std::string> cases = Utf8Cases();
  nlohmann::json hex = nlohmann::json::array();
  for (const auto& c : cases) hex.push_back(absl::BytesToHexString(c));
  const nlohmann::json ref = testing_util::RunReference(dir, "utf8", hex);
  ASSERT_EQ(ref.size(), cases.size());
  auto byte_tok = MakeByteTokenizer();
  int valid = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("bytes " + hex[i].get<std::string>());
    EXPECT_EQ(IsValidUtf8(cases[i]), ref[i]["valid"].get<bool>());
    // Decoding raw bytes replaces ill-formed subparts with U+FFFD exactly as
    // Python's errors="replace" does.
    std::vector<int32_t> ids(cases[i].begin(), cases[i].end());
    for (auto& id : ids) id &= 0xFF;
    EXPECT_EQ(byte_tok->Decode(ids, true), ref[i]["replaced"].get<std::string>());
    valid += ref[i]["valid"].get<bool>();
  }
  // The generator must produce both kinds, or the test proves little.
  EXPECT_GT(valid, 200);
  EXPECT_LT(valid, static_cast<int>(cases.size()) - 200);
}

TEST(ByteLevelBpeTest, RefusesIdsTheDenseTableCannotHold) {
  // INT32_MAX used to overflow max_id + 1 (and would ask for 2^31 entries).
  for (int32_t id : {std::numeric_limits<int32_t>::max(), kMaxByteLevelBpeId}) {
    ByteLevelBpeSpec spec;
    spec.vocab = {{"a", 0}, {"b", id}};
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = MakeByteLevelBpe(std::move(spec));
    ASSERT_FALSE(t.ok()) << id;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), ::testing::HasSubstr("out of range")) << id;
  }
}

TEST(ByteLevelBpeTest, RefusesANegativeAddedTokenId) {
  // It indexed the id table with -1 (a write before the table: heap
  // corruption at start-up).
  ByteLevelBpeSpec spec;
  spec.vocab = {{"a", 0}};
  spec.added_tokens.push_back({-1, "<x>", true});
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = MakeByteLevelBpe(std::move(spec));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("added token \"<x>\" has negative id -1"));
}

TEST(LlamaBpeTest, RefusesIdsTheDenseTablesCannotHold) {
  // INT32_MAX overflowed max_id + 1; 2^30 asked for ~70 GB of tables (an
  // uncaught std::bad_alloc or length_error ended the process).
  for (int32_t id : {std::numeric_limits<int32_t>::max(), int32_t{1} << 30, kMaxLlamaBpeId}) {
    for (bool added : {false, true}) {
      LlamaBpeSpec spec;
      spec.vocab = {{"a", 0}, {"\xE2\x96\x81", 1}};
      if (added) {
        spec.added_tokens.push_back({id, "<big>", true});
      } else {
        spec.vocab.emplace("b", id);
      }
      absl::StatusOr<std::unique_ptr<Tokenizer>> t = MakeLlamaBpe(std::move(spec));
      ASSERT_FALSE(t.ok()) << id;
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(t.status().message(), HasSubstr("out of range")) << id;
    }
  }
  // The same through tokenizer.json.
  ScratchDir dir;
  WriteFile(dir.File("tokenizer.json"), R"({"model": {"type": "BPE", "byte_fallback": true,
      "vocab": {"a": 0, "<0x00>": 2147483647}, "merges": []},
      "pre_tokenizer": {"type": "Metaspace"}})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizerJson(dir.File("tokenizer.json"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("out of range"));
}

TEST(TokenizerJsonTest, NumbersThatMustBeIdsAre32BitIntegers) {
  // nlohmann's get<int32_t>() took any number: 1e30 was undefined behaviour
  // (a float cast out of range; UBSan aborts), 4294967296 wrapped to id 0.
  ScratchDir dir;
  const std::string llama = R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE",
      "byte_fallback": true, "merges": [], "vocab": {"a": 0, "\u2581": 1, "b": ID}}})";
  const std::string wordpiece = R"({"normalizer": {"type": "BertNormalizer"},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": ID}}})";
  const std::string gpt2 = R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE",
      "merges": [], "vocab": {"a": 0}}, "added_tokens": [{"id": ID, "content": "<x>"}]})";
  for (const std::string& doc : {llama, wordpiece, gpt2}) {
    for (const char* id : {"1e30", "-1e30", "4294967296", "2.5", "\"7\""}) {
      std::string text = doc;
      text.replace(text.find("ID"), 2, id);
      WriteFile(dir.File("tokenizer.json"), text);
      absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizerJson(dir.File("tokenizer.json"));
      ASSERT_FALSE(t.ok()) << text;
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << text;
      EXPECT_THAT(t.status().message(), HasSubstr("not a 32-bit integer")) << text;
    }
  }
  WriteFile(dir.File("tokenizer.json"),
            R"({"normalizer": {"type": "BertNormalizer"},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "model": {"type": "WordPiece", "max_input_chars_per_word": 1e30, "vocab": {"[UNK]": 0}}})");
  EXPECT_THAT(LoadTokenizerJson(dir.File("tokenizer.json")).status().message(),
              HasSubstr("not a 32-bit integer"));
  // vocab.json + merges.txt: the same for vocab.json's ids.
  WriteFile(dir.File("merges.txt"), "#version: 0.2\n");
  for (const char* id : {"4294967296", "-2147483649", "1e30"}) {
    WriteFile(dir.File("vocab.json"), std::string(R"({"a": 0, "b": )") + id + "}");
    absl::StatusOr<std::unique_ptr<Tokenizer>> t =
        LoadGpt2Bpe(dir.File("vocab.json"), dir.File("merges.txt"));
    ASSERT_FALSE(t.ok()) << id;
    EXPECT_THAT(t.status().message(), HasSubstr("not a 32-bit integer")) << id;
  }
}

TEST(ByteTokenizerTest, EncodesBytesAndPrependsBos) {
  auto tok = MakeByteTokenizer();
  EXPECT_EQ(tok->kind(), "byte");
  EXPECT_EQ(tok->vocab_size(), 259);
  EXPECT_EQ(tok->special_tokens().pad, 256);
  EXPECT_EQ(tok->special_tokens().bos, 257);
  EXPECT_EQ(tok->special_tokens().eos, 258);
  EXPECT_EQ(tok->special_tokens().unk, -1);

  auto plain = tok->Encode("a\xC3\xA7", false);  // "aç"
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(plain->ids, ElementsAre(0x61, 0xC3, 0xA7));
  EXPECT_TRUE(plain->type_ids.empty());
  auto with_bos = tok->Encode("a", true);
  ASSERT_TRUE(with_bos.ok());
  EXPECT_THAT(with_bos->ids, ElementsAre(257, 0x61));
}

TEST(ByteTokenizerTest, RejectsInvalidUtf8) {
  auto tok = MakeByteTokenizer();
  auto enc = tok->Encode("ab\xC3", false);
  EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ByteTokenizerTest, DecodeHandlesSpecialsAndOutOfRange) {
  auto tok = MakeByteTokenizer();
  const std::vector<int32_t> ids = {257, 'h', 'i', -5, 9999, 258};
  EXPECT_EQ(tok->Decode(ids, /*skip_special_tokens=*/true), "hi");
  EXPECT_EQ(tok->Decode(ids, /*skip_special_tokens=*/false), "<bos>hi<eos>");
  EXPECT_TRUE(tok->IsSpecial(256));
  EXPECT_TRUE(tok->IsSpecial(258));
  EXPECT_FALSE(tok->IsSpecial(255));
  EXPECT_FALSE(tok->IsSpecial(259));
}

TEST(ByteTokenizerTest, TokenTextShowsPrintableBytesAndHexOtherwise) {
  auto tok = MakeByteTokenizer();
  EXPECT_EQ(tok->TokenText('A'), "A");
  EXPECT_EQ(tok->TokenText(' '), " ");
  EXPECT_EQ(tok->TokenText('~'), "~");
  EXPECT_EQ(tok->TokenText('\n'), "<0x0A>");
  EXPECT_EQ(tok->TokenText(0x7F), "<0x7F>");
  EXPECT_EQ(tok->TokenText(0xC3), "<0xC3>");
  EXPECT_EQ(tok->TokenText(257), "<bos>");
  EXPECT_EQ(tok->TokenText(259), "");
}

// Llama 3's and Qwen2's split patterns, written by hand, against the same
// patterns' text run by Python's `regex` module (as Hugging Face's Split
// pre-tokenizer runs them with Oniguruma): the reference corpus, cases at
// each alternative's edges, and random strings over letters (Latin, Turkish,
// CJK, long s), numbers (ASCII, Arabic-Indic, fractions, Roman), white space
// (newlines, NBSP, U+2028, ideographic), apostrophes and punctuation, marks.
TEST(Llama3PreTokenizeTest, MatchesThePatternsRunByPythonRegex) {
  std::vector<std::string> texts = testing_util::ReferenceCorpus();
  for (const char* t :
       {"IT'S I'M YOU'RE WE'VE THEY'LL SHE'D 'S 'x", "don't  stop\n\nnow", "x=foo(bar)",
        "in 2024 and 1234567 and ١٢٣٤", "Hello.\n\nWorld", "a \nb", "\thello", "a\u00a0b",
        "  \n  \n  x", " \r\n", "end  ", "!!!\n\n\nx", " ... \n", "'ſ 'ſt", "e\u0301\u0301x",
        "½⅓ Ⅻ", "a\u2028b\u3000c\u0085d", "  ", "\n", "x\n", "?!\r\n\r\ny"}) {
    texts.push_back(t);
  }
  const std::vector<char32_t> pool = {U'a', U'Z', U'q', U's', U'S', U't', U'r', U'e', U'v',  U'l',
                                      U'm', U'd', U'ß', U'é', U'İ', U'ı', U'日', U'ſ', U'1', U'0',
                                      U'٣', U'½', U'Ⅻ', U' ', U' ', U'\t', U'\n', U'\r', 0xA0,
                                      0x2028, 0x3000, U'\'', U'\'', U'!', U'.', U'-', U'_', 0x1F642,
                                      0x0301, U'(', U'='};
  std::mt19937 rng(11);
  for (int i = 0; i < 400; ++i) {
    std::string text;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) text += Utf8(pool[rng() % pool.size()]);
    texts.push_back(text);
  }
  ScratchDir dir;
  const nlohmann::json ref = testing_util::RunReference(
      dir, "split",
      nlohmann::json{{"patterns",
                      {{"llama3", std::string(kLlama3SplitPattern)},
                       {"qwen2", std::string(kQwen2SplitPattern)},
                       {"digits", "\\p{N}|[^\\p{N}]+"}}},
                     {"texts", texts}});
  ASSERT_FALSE(ref.is_null());
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "text " << i << ": \"" << absl::CEscape(texts[i]) << "\"");
    const auto as_strings = [](const std::vector<std::string_view>& chunks) {
      return std::vector<std::string>(chunks.begin(), chunks.end());
    };
    EXPECT_EQ(as_strings(Llama3PreTokenize(texts[i], 3)),
              ref["llama3"][i].get<std::vector<std::string>>());
    EXPECT_EQ(as_strings(Llama3PreTokenize(texts[i], 1)),
              ref["qwen2"][i].get<std::vector<std::string>>());
    EXPECT_EQ(as_strings(SplitDigits(texts[i])), ref["digits"][i].get<std::vector<std::string>>());
  }
}

// Streams `ids` one at a time and returns the deltas (Flush's last).
std::vector<std::string> Stream(IncrementalDecoder& dec, const std::vector<int32_t>& ids) {
  std::vector<std::string> deltas;
  for (int32_t id : ids) deltas.push_back(dec.Push(id));
  deltas.push_back(dec.Flush());
  return deltas;
}

TEST(IncrementalDecoderTest, NeverSplitsACharacterAndReassemblesTheText) {
  auto tok = MakeByteTokenizer();
  const std::string text = "Ağaç 🌳 İstanbul\n\tçok güzel! 日本語";
  auto enc = tok->Encode(text, true);
  ASSERT_TRUE(enc.ok());
  IncrementalDecoder dec(tok.get(), /*skip_special_tokens=*/true);
  const std::vector<std::string> deltas = Stream(dec, enc->ids);
  std::string joined;
  int empty_pushes = 0;
  for (const auto& d : deltas) {
    EXPECT_TRUE(IsValidUtf8(d)) << absl::BytesToHexString(d);
    EXPECT_EQ(d.find("\xEF\xBF\xBD"), std::string::npos);
    joined += d;
    empty_pushes += d.empty();
  }
  EXPECT_EQ(joined, text);
  // Multi-byte characters hold back their leading bytes: ğ ç ç ü (1 each),
  // İ (1), 🌳 (3), 日本語 (2 each), plus the skipped <bos> and the empty Flush.
  EXPECT_EQ(empty_pushes, 4 + 1 + 3 + 6 + 1 + 1);
}

// Special tokens skipped and invalid bytes do not grow the window decoded on
// every push (a run of them made each push cost its length).
TEST(IncrementalDecoderTest, TheWindowStaysBounded) {
  auto tok = MakeByteTokenizer();
  const int32_t bos = tok->special_tokens().bos;
  ASSERT_GE(bos, 0);
  IncrementalDecoder dec(tok.get(), true);
  EXPECT_EQ(dec.Push('a'), "a");
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(dec.Push(bos), "");
    ASSERT_LE(dec.window(), 2u) << i;
  }
  EXPECT_EQ(dec.Push('b'), "b");
  // 0xFF never starts a character: each is sent as U+FFFD at once.
  std::string sent;
  for (int i = 0; i < 100; ++i) {
    const std::string delta = dec.Push(0xFF);
    EXPECT_EQ(delta, "\xEF\xBF\xBD") << i;
    sent += delta;
    ASSERT_LE(dec.window(), 3u) << i;
  }
  sent += dec.Flush();
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += "\xEF\xBF\xBD";
  EXPECT_EQ(sent, expected);
  // Lead bytes that never complete a character (each cut by the next): all
  // but the last are final, so each is sent (as U+FFFD) when the next one
  // comes; the window holds the one that may still complete. It held every
  // one of them, decoded on every push: quadratic in the run's length.
  IncrementalDecoder leads(tok.get(), true);
  EXPECT_EQ(leads.Push(0xE2), "");
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(leads.Push(0xE2), "\xEF\xBF\xBD") << i;
    ASSERT_LE(leads.window(), 3u) << i;
  }
  // The last one completed after all: "€".
  std::string end = leads.Push(0x82);
  end += leads.Push(0xAC);
  EXPECT_EQ(end, "\xE2\x82\xAC");
  // Ids past the tokenizer's vocabulary (a padded model vocabulary) add no
  // text and are forgotten too.
  IncrementalDecoder padded(tok.get(), true);
  EXPECT_EQ(padded.Push('a'), "a");
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(padded.Push(tok->vocab_size() + 3), "");
    ASSERT_LE(padded.window(), 2u) << i;
  }
  EXPECT_EQ(padded.Push('b'), "b");
}

// Whatever the ids, every delta is valid UTF-8: invalid bytes sent as U+FFFD
// and then completed, a context that ends inside a character, random bytes.
TEST(IncrementalDecoderTest, EveryDeltaIsValidUtf8) {
  auto tok = MakeByteTokenizer();
  {
    // Unfinished 4-byte characters cut by other lead bytes: each is sent as
    // U+FFFD once the next lead byte shows it cannot finish.
    IncrementalDecoder dec(tok.get(), true);
    std::string sent;
    for (int32_t id : {0xF0, 0x9F, 0xF0, 0x9F, 0xF0, 0x9F, 0xF0, 0x9F, 0x98, 0x80, int32_t{'a'}}) {
      const std::string delta = dec.Push(id);
      EXPECT_TRUE(IsValidUtf8(delta)) << absl::BytesToHexString(delta);
      sent += delta;
    }
    sent += dec.Flush();
    EXPECT_TRUE(IsValidUtf8(sent));
    EXPECT_NE(sent.find('a'), std::string::npos);
  }
  {
    // A context ending inside "€" (E2 82 AC): the first id completes it.
    IncrementalDecoder dec(tok.get(), true, std::vector<int32_t>{'x', 0xE2, 0x82});
    std::string delta = dec.Push(0xAC);  // one call a statement: in order
    delta += dec.Push('y');
    delta += dec.Flush();
    EXPECT_TRUE(IsValidUtf8(delta)) << absl::BytesToHexString(delta);
    EXPECT_NE(delta.find('y'), std::string::npos);
    // Ending one byte earlier: 82 leaves the text as it was (one U+FFFD
    // either way) and must not be forgotten; the bytes come out as U+FFFD.
    IncrementalDecoder early(tok.get(), true, std::vector<int32_t>{'x', 0xE2});
    std::string out = early.Push(0x82);
    out += early.Push(0xAC);
    out += early.Push('y');
    out += early.Flush();
    EXPECT_TRUE(IsValidUtf8(out)) << absl::BytesToHexString(out);
    EXPECT_EQ(out, "\xEF\xBF\xBD\xEF\xBF\xBDy");
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<int32_t> context;
    for (int i = 0; i < 3; ++i) context.push_back(static_cast<int32_t>(rng() % 256));
    IncrementalDecoder dec(tok.get(), true, context);
    for (int i = 0; i < 64; ++i) {
      const std::string delta = dec.Push(static_cast<int32_t>(rng() % 259));
      ASSERT_TRUE(IsValidUtf8(delta)) << round << " " << absl::BytesToHexString(delta);
    }
    ASSERT_TRUE(IsValidUtf8(dec.Flush()));
  }
}

TEST(IncrementalDecoderTest, FlushReplacesAnIncompleteTail) {
  auto tok = MakeByteTokenizer();
  IncrementalDecoder dec(tok.get(), true);
  EXPECT_EQ(dec.Push('o'), "o");
  EXPECT_EQ(dec.Push('k'), "k");
  EXPECT_EQ(dec.Push(0xF0), "");
  EXPECT_EQ(dec.Push(0x9F), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  // Pushing after a flush starts from a clean state.
  EXPECT_EQ(dec.Push('!'), "!");
}

TEST(IncrementalDecoderTest, KeepsSpecialTokensWhenAsked) {
  auto tok = MakeByteTokenizer();
  IncrementalDecoder dec(tok.get(), /*skip_special_tokens=*/false);
  EXPECT_EQ(dec.Push('x'), "x");
  EXPECT_EQ(dec.Push(258), "<eos>");
}

TEST(LoadTokenizerTest, TokenizerConfigEosIsItsId) {
  ScratchDir dir;
  auto tok = MakeByteTokenizer();
  EXPECT_EQ(*TokenizerConfigEos(dir.path(), *tok), -1);  // no file
  const std::vector<std::pair<std::string, int32_t>> cases = {
      {R"({"eos_token": "<bos>"})", 257},
      {R"({"eos_token": {"content": "<eos>", "special": true}})", 258},
      {R"({"eos_token": "a"})", 'a'},
      {R"({"eos_token": "ab"})", -1},  // not one token
      {R"({"eos_token": null})", -1},
      {R"({"bos_token": "<bos>"})", -1},
  };
  for (const auto& [config, want] : cases) {
    WriteFile(dir.File("tokenizer_config.json"), config);
    absl::StatusOr<int32_t> eos = TokenizerConfigEos(dir.path(), *tok);
    ASSERT_TRUE(eos.ok()) << config << ": " << eos.status();
    EXPECT_EQ(*eos, want) << config;
  }
  WriteFile(dir.File("tokenizer_config.json"), "[1]");
  EXPECT_EQ(TokenizerConfigEos(dir.path(), *tok).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LoadTokenizerTest, ByteFromDikkatJson) {
  ScratchDir dir;
  WriteFile(dir.File("dikkat.json"), R"({"architecture": "decoder-only", "tokenizer": "byte"})");
  auto tok = LoadTokenizer(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "byte");
}

TEST(LoadTokenizerTest, NotFoundListsWhatWasLookedFor) {
  ScratchDir dir;
  auto tok = LoadTokenizer(dir.path());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.json"));
  EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.model"));
  EXPECT_THAT(tok.status().message(), HasSubstr("vocab.txt"));
  EXPECT_THAT(tok.status().message(), HasSubstr(dir.path()));
}

TEST(LoadTokenizerTest, RejectsUnknownTokenizerName) {
  ScratchDir dir;
  WriteFile(dir.File("dikkat.json"), R"({"tokenizer": "morse"})");
  auto tok = LoadTokenizer(dir.path());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("morse"));
}

TEST(LoadTokenizerTest, RejectsMalformedDikkatJson) {
  ScratchDir dir;
  WriteFile(dir.File("dikkat.json"), "{not json");
  auto tok = LoadTokenizer(dir.path());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("dikkat.json"));
}

}  // namespace
}  // namespace dikkat::model
