// Llama-style tokenizer.json BPE with byte fallback against Debian's
// python3-sentencepiece: tokenizer_reference.py trains a byte-fallback BPE
// model with the real trainer, converts it to tokenizer.json the way Hugging
// Face's converter does, and encodes the corpus with sentencepiece itself.
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/incremental_decoder.h"
#include "model/text/sentencepiece_tokenizer.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_json.h"
#include "model/text/tokenizer_loader.h"
#include "nlohmann/json.hpp"
#include "tests/text/tokenizer_test_util.h"

namespace dikkat::model {
namespace {

using ::testing::HasSubstr;
using testing_util::ReferenceCorpus;
using testing_util::ScratchDir;

// The corpus plus text the trainer never saw: characters with no piece must
// go through <0xNN> byte fallback (rare CJK, Fraktur letters, new emoji).
std::vector<std::string> Texts() {
  std::vector<std::string> texts = ReferenceCorpus();
  for (const char* extra : {"龘 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦀🧬", "x\u2581y \u2581\u2581 <s> </s> <0x41>",
                            "tabs\t\t\tand\r\nCRLF     five spaces", "9876543210 0.5e-10"}) {
    texts.push_back(extra);
  }
  return texts;
}

class LlamaBpeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    ref_ = new nlohmann::json(testing_util::RunReference(
        *dir_, "llama",
        {{"corpus", ReferenceCorpus()}, {"texts", Texts()}, {"dir", dir_->path()}}));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }
  static std::string Path(const std::string& variant) {
    return (*ref_)[variant]["path"].get<std::string>();
  }
  static inline ScratchDir* dir_ = nullptr;
  static inline nlohmann::json* ref_ = nullptr;
};

TEST_F(LlamaBpeTest, LegacyTokenizerJsonMatchesSentencePiece) {
  ASSERT_TRUE(ref_->contains("legacy"));
  auto tok = LoadTokenizerJson(Path("legacy"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "bpe");
  EXPECT_EQ((*tok)->vocab_size(), (*ref_)["size"].get<int>());
  EXPECT_EQ((*tok)->special_tokens().bos, (*ref_)["bos"].get<int>());
  EXPECT_EQ((*tok)->special_tokens().eos, (*ref_)["eos"].get<int>());
  EXPECT_EQ((*tok)->special_tokens().unk, (*ref_)["unk"].get<int>());
  EXPECT_EQ((*tok)->special_tokens().pad, (*ref_)["pad"].get<int>());
  const std::vector<std::string> texts = Texts();
  const nlohmann::json& ref = (*ref_)["legacy"];
  ASSERT_EQ(ref["ids"].size(), texts.size());
  int byte_fallback_ids = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text #" + std::to_string(i) + ": " + texts[i]);
    const auto want = ref["ids"][i].get<std::vector<int32_t>>();
    auto enc = (*tok)->Encode(texts[i], /*add_special_tokens=*/false);
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_EQ(enc->ids, want);
    auto with_bos = (*tok)->Encode(texts[i], /*add_special_tokens=*/true);
    ASSERT_TRUE(with_bos.ok());
    ASSERT_FALSE(with_bos->ids.empty());
    EXPECT_EQ(with_bos->ids.front(), (*ref_)["bos"].get<int>());
    EXPECT_EQ(std::vector<int32_t>(with_bos->ids.begin() + 1, with_bos->ids.end()), want);
    EXPECT_EQ((*tok)->Decode(want, true), ref["decoded"][i].get<std::string>());
    EXPECT_EQ((*tok)->Decode(with_bos->ids, true), ref["decoded"][i].get<std::string>());
    EXPECT_EQ((*tok)->Decode(with_bos->ids, false), "<s>" + ref["decoded"][i].get<std::string>());
    // Round trip is exact except that a "▁" typed in the text comes back as
    // a space (it is the space mark; SentencePiece does the same).
    std::string round_trip = texts[i];
    for (size_t p; (p = round_trip.find("\xE2\x96\x81")) != std::string::npos;) {
      round_trip.replace(p, 3, " ");
    }
    EXPECT_EQ((*tok)->Decode(want, true), round_trip) << "round trip";
    // SentencePiece puts the 256 byte pieces right after <unk> <s> </s> <pad>.
    for (int32_t id : want) byte_fallback_ids += id >= 4 && id < 4 + 256;
  }
  // The extra texts really exercise byte fallback.
  EXPECT_GT(byte_fallback_ids, 20);
}

TEST_F(LlamaBpeTest, MetaspaceTokenizerJsonMatchesSentencePiece) {
  auto tok = LoadTokenizerJson(Path("metaspace"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "bpe");
  const std::vector<std::string> texts = Texts();
  const nlohmann::json& ref = (*ref_)["metaspace"];
  int differs_from_legacy = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text #" + std::to_string(i) + ": " + texts[i]);
    const auto want = ref["ids"][i].get<std::vector<int32_t>>();
    auto enc = (*tok)->Encode(texts[i], false);
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_EQ(enc->ids, want);
    differs_from_legacy += want != (*ref_)["legacy"]["ids"][i].get<std::vector<int32_t>>();
  }
  // Texts with a leading space tell the two pipelines apart.
  EXPECT_GE(differs_from_legacy, 2);
}

// Metaspace prepend_scheme "first": the "▁" goes before the input's first
// part only, none after a special token (Hugging Face prepends it only to
// the part at offset 0: Mistral v0.3's "<s>[INST] ..." starts with "[", not
// "▁["). The legacy normalizer gives every part one (below: Llama-2's
// "<s>[INST]" is 1, 518).
TEST_F(LlamaBpeTest, MetaspaceFirstPrefixesOnlyTheInputsStart) {
  auto tok = LoadTokenizerJson(Path("metaspace"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t bos = (*ref_)["bos"].get<int>();
  auto parsed = EncodeParsingSpecialTokens(**tok, "<s>the cat");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_GE(parsed->ids.size(), 2u);
  EXPECT_EQ(parsed->ids[0], bos);
  const std::vector<int32_t> unprefixed = (*tok)->EncodePart("the cat", false)->ids;
  EXPECT_EQ(std::vector<int32_t>(parsed->ids.begin() + 1, parsed->ids.end()), unprefixed);
  EXPECT_NE(unprefixed, (*tok)->Encode("the cat", false)->ids);  // that one has the "▁"
  EXPECT_EQ((*tok)->Decode(unprefixed, false), "the cat");
  // Kept in the decoding, the space after a special token is the text's own.
  auto spaced = EncodeParsingSpecialTokens(**tok, "<s> the cat");
  ASSERT_TRUE(spaced.ok()) << spaced.status();
  EXPECT_EQ((*tok)->Decode(spaced->ids, false), "<s> the cat");
  EXPECT_EQ((*tok)->Decode(parsed->ids, false), "<s>the cat");
  // The first part is the input's start: prefixed as Encode prefixes it.
  auto first = EncodeParsingSpecialTokens(**tok, "the cat</s>");
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<int32_t> want = (*tok)->Encode("the cat", false)->ids;
  want.push_back((*ref_)["eos"].get<int>());
  EXPECT_EQ(first->ids, want);
  // Legacy: every part gets its "▁".
  auto legacy = LoadTokenizerJson(Path("legacy"));
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  auto legacy_parsed = EncodeParsingSpecialTokens(**legacy, "<s>the cat");
  ASSERT_TRUE(legacy_parsed.ok());
  EXPECT_EQ(std::vector<int32_t>(legacy_parsed->ids.begin() + 1, legacy_parsed->ids.end()),
            (*legacy)->Encode("the cat", false)->ids);
}

TEST_F(LlamaBpeTest, FolderWithOnlyTokenizerJsonLoads) {
  // No tokenizer.model next to it: before, this was UNIMPLEMENTED.
  const std::string dir = std::filesystem::path(Path("legacy")).parent_path().string();
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "bpe");
  EXPECT_EQ((*tok)->file_fingerprints(),
            std::vector<std::string>{(*ref_)["legacy"]["sha256"].get<std::string>()});
}

TEST_F(LlamaBpeTest, StreamingEqualsOneDecode) {
  auto tok = LoadTokenizerJson(Path("legacy"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<int32_t> all;
  for (const auto& ids : (*ref_)["legacy"]["ids"]) {
    for (int id : ids) all.push_back(id);
  }
  IncrementalDecoder dec(tok->get(), true);
  std::string streamed;
  for (int32_t id : all) {
    const std::string delta = dec.Push(id);
    EXPECT_TRUE(IsValidUtf8(delta));
    streamed += delta;
  }
  streamed += dec.Flush();
  EXPECT_EQ(streamed, (*tok)->Decode(all, true));

  auto prompt = (*tok)->Encode("Hello", false);
  auto next = (*tok)->Encode("Hello world", false);
  ASSERT_TRUE(prompt.ok() && next.ok());
  ASSERT_GT(next->ids.size(), prompt->ids.size());
  IncrementalDecoder with_context(tok->get(), true, prompt->ids);
  std::string continuation;
  for (size_t k = prompt->ids.size(); k < next->ids.size(); ++k) {
    continuation += with_context.Push(next->ids[k]);
  }
  continuation += with_context.Flush();
  EXPECT_EQ(continuation, " world");
}

// A Llama chat prompt as a template renders it: "<s>" is BOS, and each part
// between special tokens gets its own dummy-prefix space, as Hugging Face's
// legacy normalizer gives it to each part (Llama-2 chat: "<s>[INST]" is
// 1, 518, ...).
TEST_F(LlamaBpeTest, ParsingSpecialTokensGivesBosItsId) {
  auto tok = LoadTokenizerJson(Path("legacy"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t bos = (*ref_)["bos"].get<int>(), eos = (*ref_)["eos"].get<int>();
  auto parsed = EncodeParsingSpecialTokens(**tok, "<s>[INST] the cat [/INST] a dog </s>");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<Encoding> between = (*tok)->Encode("[INST] the cat [/INST] a dog ", false);
  ASSERT_TRUE(between.ok()) << between.status();
  std::vector<int32_t> want = {bos};
  want.insert(want.end(), between->ids.begin(), between->ids.end());
  want.push_back(eos);
  EXPECT_EQ(parsed->ids, want);
  // Tokenized as text, "<s>" is not BOS.
  EXPECT_NE((*tok)->Encode("<s>[INST]", false)->ids.front(), bos);
  // Parsed and added, as tokenizer(text) gives it: the BOS written and the
  // one added (Hugging Face warns of the double BOS, and gives it).
  auto both = EncodeParsingSpecialTokens(**tok, "<s>[INST] the cat [/INST] a dog </s>", true);
  ASSERT_TRUE(both.ok()) << both.status();
  want.insert(want.begin(), bos);
  EXPECT_EQ(both->ids, want);
  const Tokenizer::AddedTokens around = (*tok)->SpecialTokensAround();
  EXPECT_EQ(around.before, std::vector<int32_t>{bos});
  EXPECT_TRUE(around.after.empty());
}

TEST_F(LlamaBpeTest, TokenTextShowsSpacesAndBytes) {
  auto tok = LoadTokenizerJson(Path("legacy"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto sp = LoadSentencePiece((*ref_)["model"].get<std::string>());
  ASSERT_TRUE(sp.ok()) << sp.status();
  // Same pieces, same readable form as the SentencePiece tokenizer.
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
    EXPECT_EQ((*tok)->TokenText(id), (*sp)->TokenText(id)) << "id " << id;
    EXPECT_EQ((*tok)->IsSpecial(id), (*sp)->IsSpecial(id) || id == (*ref_)["unk"].get<int>())
        << "id " << id;
  }
}

// Whole licence texts (part of the trainer's input, ~70 KB of prose) as one
// text: the same ids as libsentencepiece on the original model. It is one
// BPE "word" of ~70k symbols, so a quadratic merge loop would show here.
TEST_F(LlamaBpeTest, LongProseMatchesLibSentencePiece) {
  auto tok = LoadTokenizerJson(Path("legacy"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto sp = LoadSentencePiece((*ref_)["model"].get<std::string>());
  ASSERT_TRUE(sp.ok()) << sp.status();
  std::string all;
  for (const char* licence : {"/usr/share/common-licenses/GPL-3",
                              "/usr/share/common-licenses/Apache-2.0",
                              "/usr/share/common-licenses/GFDL-1.3"}) {
    all += testing_util::ReadFile(licence);
  }
  ASSERT_GT(all.size(), 50'000u);
  auto want = (*sp)->Encode(all, false);
  auto got = (*tok)->Encode(all, false);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(got->ids, want->ids);
  EXPECT_EQ((*tok)->Decode(got->ids, true), all);
}

TEST_F(LlamaBpeTest, RejectsWhatItDoesNotSupport) {
  nlohmann::json j = nlohmann::json::parse(testing_util::ReadFile(Path("legacy")));
  const auto load = [&](const nlohmann::json& doc, const std::string& name) {
    const std::string path = dir_->File(name);
    testing_util::WriteFile(path, doc.dump());
    return LoadTokenizerJson(path);
  };
  nlohmann::json bad_merge = j;
  bad_merge["model"]["merges"].push_back("\xE2\x96\x81the zzzz");
  auto r1 = load(bad_merge, "bad_merge.json");
  EXPECT_EQ(r1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r1.status().message(), HasSubstr("zzzz"));

  nlohmann::json lowercase = j;
  lowercase["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}});
  auto r2 = load(lowercase, "lowercase.json");
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r2.status().message(), HasSubstr("Lowercase"));

  nlohmann::json dropout = j;
  dropout["model"]["dropout"] = 0.1;
  auto r3 = load(dropout, "dropout.json");
  EXPECT_EQ(r3.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(r3.status().message(), HasSubstr("dropout"));

  auto tok = LoadTokenizerJson(Path("legacy"));
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("bad \xFF", false).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dikkat::model
