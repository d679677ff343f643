// SentencePieceTokenizer against Debian's python3-sentencepiece on models the
// real trainer builds at test time.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/incremental_decoder.h"
#include "model/text/sentencepiece_tokenizer.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_loader.h"
#include "nlohmann/json.hpp"
#include "tests/text/tokenizer_test_util.h"

namespace dikkat::model {
namespace {

using ::testing::HasSubstr;
using testing_util::ReferenceCorpus;
using testing_util::ScratchDir;

class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    ref_ = new nlohmann::json(testing_util::RunReference(
        *dir_, "spm", {{"corpus", ReferenceCorpus()}, {"dir", dir_->path()}}));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }
  static inline ScratchDir* dir_ = nullptr;
  static inline nlohmann::json* ref_ = nullptr;
};

TEST_F(SentencePieceTest, EncodeAndDecodeMatchTheLibrary) {
  ASSERT_EQ(ref_->size(), 2u);
  const std::vector<std::string> corpus = ReferenceCorpus();
  for (const auto& [name, ref] : ref_->items()) {
    SCOPED_TRACE(name);
    auto tok = LoadSentencePiece(ref["path"].get<std::string>());
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->kind(), "sentencepiece");
    EXPECT_EQ((*tok)->vocab_size(), ref["size"].get<int>());
    EXPECT_EQ((*tok)->special_tokens().bos, ref["bos"].get<int>());
    EXPECT_EQ((*tok)->special_tokens().eos, ref["eos"].get<int>());
    EXPECT_EQ((*tok)->special_tokens().pad, ref["pad"].get<int>());
    EXPECT_EQ((*tok)->special_tokens().unk, ref["unk"].get<int>());
    for (size_t i = 0; i < corpus.size(); ++i) {
      SCOPED_TRACE("text #" + std::to_string(i) + ": " + corpus[i]);
      const auto want_ids = ref["ids"][i].get<std::vector<int32_t>>();
      auto enc = (*tok)->Encode(corpus[i], /*add_special_tokens=*/false);
      ASSERT_TRUE(enc.ok()) << enc.status();
      EXPECT_EQ(enc->ids, want_ids);
      auto with_bos = (*tok)->Encode(corpus[i], /*add_special_tokens=*/true);
      ASSERT_TRUE(with_bos.ok());
      ASSERT_FALSE(with_bos->ids.empty());
      EXPECT_EQ(with_bos->ids.front(), ref["bos"].get<int>());
      EXPECT_EQ(std::vector<int32_t>(with_bos->ids.begin() + 1, with_bos->ids.end()), want_ids);
      EXPECT_EQ((*tok)->Decode(want_ids, true), ref["decoded"][i].get<std::string>());
      // BOS is dropped when skipping specials and shown as its piece otherwise.
      EXPECT_EQ((*tok)->Decode(with_bos->ids, true), ref["decoded"][i].get<std::string>());
      EXPECT_EQ((*tok)->Decode(with_bos->ids, false), "<s>" + ref["decoded"][i].get<std::string>());
    }
  }
}

TEST_F(SentencePieceTest, TokenTextShowsPiecesWithSpaces) {
  for (const auto& [name, ref] : ref_->items()) {
    SCOPED_TRACE(name);
    auto tok = LoadSentencePiece(ref["path"].get<std::string>());
    ASSERT_TRUE(tok.ok()) << tok.status();
    int checked = 0;
    for (size_t i = 0; i < ref["ids"].size(); ++i) {
      for (size_t k = 0; k < ref["ids"][i].size(); ++k) {
        const int id = ref["ids"][i][k].get<int>();
        std::string piece = ref["pieces"][i][k].get<std::string>();
        if (ref["is_byte"][i][k].get<bool>()) {
          // "<0x41>" is shown as "A"; unprintable bytes keep the piece.
          const int b = std::stoi(piece.substr(3, 2), nullptr, 16);
          if (b >= 0x20 && b < 0x7F) piece = std::string(1, static_cast<char>(b));
        } else {
          for (size_t p; (p = piece.find("\xE2\x96\x81")) != std::string::npos;) {
            piece.replace(p, 3, " ");
          }
        }
        EXPECT_EQ((*tok)->TokenText(id), piece) << "id " << id;
        ++checked;
      }
    }
    EXPECT_GT(checked, 100);
  }
}

TEST_F(SentencePieceTest, StreamingEqualsOneDecode) {
  const std::vector<std::string> corpus = ReferenceCorpus();
  for (const auto& [name, ref] : ref_->items()) {
    SCOPED_TRACE(name);
    auto tok = LoadSentencePiece(ref["path"].get<std::string>());
    ASSERT_TRUE(tok.ok()) << tok.status();
    std::vector<int32_t> all;
    for (const auto& ids : ref["ids"]) {
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

    // With prompt ids as context, the first generated word keeps its space.
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
}

TEST_F(SentencePieceTest, LoadTokenizerFindsModelAndFingerprintsIt) {
  ScratchDir model_dir;
  const std::string src = (*ref_)["unigram"]["path"].get<std::string>();
  ASSERT_EQ(testing_util::Run("cp " + src + " " + model_dir.File("tokenizer.model")), 0);
  auto tok = LoadTokenizer(model_dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "sentencepiece");
  // Reference digest from coreutils' sha256sum.
  const std::string out = model_dir.File("sum.txt");
  ASSERT_EQ(testing_util::Run("sha256sum " + model_dir.File("tokenizer.model") + " > " + out), 0);
  const std::string want = testing_util::ReadFile(out).substr(0, 64);
  ASSERT_EQ((*tok)->file_fingerprints().size(), 1u);
  EXPECT_EQ((*tok)->file_fingerprints()[0], want);
}

// Folders (T5, ALBERT, ...) may ship a tokenizer.json dikkat does not read
// (here a Unigram model) next to tokenizer.model: the SentencePiece model is
// used; alone, the tokenizer.json is refused by name. (Llama's BPE
// tokenizer.json is read: llama_bpe_tokenizer_test.cc.)
TEST_F(SentencePieceTest, UnsupportedTokenizerJsonGivesWayToTokenizerModel) {
  ScratchDir model_dir;
  testing_util::WriteFile(
      model_dir.File("tokenizer.json"),
      R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0.0]], "unk_id": 0},
          "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"}})");
  auto alone = LoadTokenizer(model_dir.path());
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(alone.status().message(), HasSubstr("Unigram"));

  const std::string src = (*ref_)["bpe_byte_fallback"]["path"].get<std::string>();
  ASSERT_EQ(testing_util::Run("cp " + src + " " + model_dir.File("tokenizer.model")), 0);
  auto tok = LoadTokenizer(model_dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "sentencepiece");
}

TEST_F(SentencePieceTest, RejectsBadModelAndInvalidText) {
  ScratchDir dir;
  testing_util::WriteFile(dir.File("tokenizer.model"), "this is not a protobuf");
  auto bad = LoadSentencePiece(dir.File("tokenizer.model"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("tokenizer.model"));
  EXPECT_EQ(LoadSentencePiece(dir.File("missing.model")).status().code(),
            absl::StatusCode::kNotFound);

  auto tok = LoadSentencePiece((*ref_)["unigram"]["path"].get<std::string>());
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("bad \xFF byte", false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dikkat::model
