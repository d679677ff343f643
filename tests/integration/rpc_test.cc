// Every RPC of a real in-process server (DikkatService over real Engines on
// the build-time tiny models) driven through the C++ client library: Encode
// (pooling, hidden states, normalization, dtypes), Generate (streaming and
// blocking, log-probabilities), Attention (selection, aggregation, the size
// limit), GetModelInfo, Tokenize/Detokenize; several models by name and the
// default; and every invalid-argument case through the wire, after which
// the server still serves and no KV block is held.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration_harness.h"

namespace dikkat::integration {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kVocab = 259;      // tools/make_tiny_model.py: 256 bytes + pad, bos, eos
constexpr int kDModel = 64;
constexpr int kLayers = 2;
constexpr int kHeads = 4;
constexpr int kMaxContext = 512;
constexpr int kNewTokensCap = 100;          // this server's max_new_tokens_cap
constexpr int64_t kAttentionLimit = 4096;   // tiny-lm's max_attention_values

class RpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::EngineOptions lm = SmallEngineOptions();
    lm.max_new_tokens_cap = kNewTokensCap;
    lm.max_attention_values = kAttentionLimit;
    absl::StatusOr<std::unique_ptr<InProcessServer>> s = InProcessServer::Start({
        {"tiny-lm", ModelDir("tiny-lm"), lm},
        {"s2s", ModelDir("tiny-seq2seq"), SmallEngineOptions()},
        {"enc", ModelDir("tiny-encoder"), SmallEngineOptions()},
    });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = server_->NewClient();
    ASSERT_NE(client_, nullptr);
  }

  static client::DecodedTensor Decode(const v1::Tensor& t) {
    absl::StatusOr<client::DecodedTensor> d = client::DecodeTensor(t);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : client::DecodedTensor{};
  }

  static InProcessServer* server_;
  std::unique_ptr<client::Client> client_;
};
InProcessServer* RpcTest::server_ = nullptr;

// ---- Encode --------------------------------------------------------------------

TEST_F(RpcTest, EncodePoolsHiddenStatesOfEachInput) {
  v1::EncodeRequest request;
  request.set_model("enc");
  *request.add_inputs() = client::TextInput("attention is all");
  *request.add_inputs() = client::TokenInput({10, 20, 30});
  request.set_pooling(v1::POOLING_MEAN);
  request.set_return_hidden_states(true);
  absl::StatusOr<v1::EncodeResponse> r = client_->Encode(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model(), "enc");
  ASSERT_EQ(r->results_size(), 2);
  // Text gets <bos> (257) in front by default for Encode; token ids are used as given.
  std::vector<int32_t> expected_text_ids = {257};
  for (char c : std::string("attention is all")) expected_text_ids.push_back(c);
  EXPECT_THAT(r->results(0).token_ids(), ElementsAreArray(expected_text_ids));
  EXPECT_THAT(r->results(1).token_ids(), ElementsAre(10, 20, 30));
  EXPECT_EQ(r->prompt_tokens(), static_cast<int>(expected_text_ids.size()) + 3);
  for (int i = 0; i < 2; ++i) {
    const client::DecodedTensor emb = Decode(r->results(i).embedding());
    const client::DecodedTensor hidden = Decode(r->results(i).hidden_states());
    const int64_t n = r->results(i).token_ids_size();
    ASSERT_THAT(emb.shape, ElementsAre(kDModel));
    ASSERT_THAT(hidden.shape, ElementsAre(n, kDModel));
    // Mean pooling is the mean of the final hidden states that came back.
    for (int d = 0; d < kDModel; ++d) {
      double mean = 0;
      for (int64_t t = 0; t < n; ++t) mean += hidden.at(t, d);
      EXPECT_NEAR(mean / n, emb.values[d], 1e-5) << "input " << i << " dim " << d;
    }
  }
}

TEST_F(RpcTest, EncodeFirstAndLastPoolingPickTheirRows) {
  for (v1::Pooling pooling : {v1::POOLING_FIRST, v1::POOLING_LAST}) {
    v1::EncodeRequest request;  // default model: tiny-lm
    *request.add_inputs() = client::TokenInput({5, 6, 7, 8, 9});
    request.set_pooling(pooling);
    request.set_return_hidden_states(true);
    absl::StatusOr<v1::EncodeResponse> r = client_->Encode(request);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->model(), "tiny-lm");
    const client::DecodedTensor emb = Decode(r->results(0).embedding());
    const client::DecodedTensor hidden = Decode(r->results(0).hidden_states());
    ASSERT_THAT(hidden.shape, ElementsAre(5, kDModel));
    const int64_t row = pooling == v1::POOLING_FIRST ? 0 : 4;
    for (int d = 0; d < kDModel; ++d) EXPECT_FLOAT_EQ(emb.values[d], hidden.at(row, d));
  }
}

TEST_F(RpcTest, EncodeHiddenLayerSelectsTheLayer) {
  auto hidden_of = [&](std::optional<int> layer) {
    v1::EncodeRequest request;
    request.set_model("enc");
    *request.add_inputs() = client::TokenInput({40, 41, 42, 43});
    request.set_return_hidden_states(true);
    if (layer.has_value()) request.set_hidden_layer(*layer);
    absl::StatusOr<v1::EncodeResponse> r = client_->Encode(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? Decode(r->results(0).hidden_states()).values : std::vector<float>{};
  };
  const std::vector<float> embeddings = hidden_of(0), layer1 = hidden_of(1),
                           last = hidden_of(kLayers), final_output = hidden_of(std::nullopt);
  ASSERT_EQ(embeddings.size(), 4u * kDModel);
  EXPECT_NE(embeddings, layer1);
  EXPECT_NE(layer1, last);
  // The encoder has no final norm (tiny-encoder: final_norm false), so the
  // last layer's output is the final output.
  EXPECT_EQ(last, final_output);
}

TEST_F(RpcTest, EncodeNormalizesToUnitLength) {
  auto embedding = [&](bool normalize) {
    v1::EncodeRequest request;
    *request.add_inputs() = client::TextInput("hello");
    request.set_normalize(normalize);
    absl::StatusOr<v1::EncodeResponse> r = client_->Encode(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? Decode(r->results(0).embedding()).values : std::vector<float>{};
  };
  const std::vector<float> raw = embedding(false), unit = embedding(true);
  ASSERT_EQ(raw.size(), static_cast<size_t>(kDModel));
  ASSERT_EQ(unit.size(), raw.size());
  double norm = 0, unit_norm = 0;
  for (float v : raw) norm += double(v) * v;
  for (float v : unit) unit_norm += double(v) * v;
  norm = std::sqrt(norm);
  EXPECT_GT(std::abs(norm - 1.0), 1e-2) << "the raw embedding is already unit length: the check "
                                           "below would prove nothing";
  EXPECT_NEAR(std::sqrt(unit_norm), 1.0, 1e-5);
  for (size_t i = 0; i < raw.size(); ++i) EXPECT_NEAR(unit[i], raw[i] / norm, 1e-5);
}

TEST_F(RpcTest, EncodeOutputDtypesCarryTheSameValues) {
  auto encode = [&](v1::DType dtype) {
    v1::EncodeRequest request;
    request.set_model("s2s");  // encoder-decoder models encode with their encoder
    *request.add_inputs() = client::TextInput("dtype check");
    request.set_return_hidden_states(true);
    request.set_output_dtype(dtype);
    absl::StatusOr<v1::EncodeResponse> r = client_->Encode(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->results(0) : v1::EncodeResult{};
  };
  const v1::EncodeResult f32 = encode(v1::DTYPE_FLOAT32);
  const v1::EncodeResult unspecified = encode(v1::DTYPE_UNSPECIFIED);
  EXPECT_EQ(f32.embedding().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(unspecified.embedding().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(f32.embedding().data(), unspecified.embedding().data());
  const client::DecodedTensor ref = Decode(f32.hidden_states());
  // bfloat16 keeps 8 significant bits, float16 11 (plus float16's range).
  for (auto [dtype, rel] : {std::pair{v1::DTYPE_BFLOAT16, 1.0 / 128}, {v1::DTYPE_FLOAT16, 1.0 / 1024}}) {
    const v1::EncodeResult r = encode(dtype);
    EXPECT_EQ(r.hidden_states().dtype(), dtype);
    EXPECT_EQ(r.hidden_states().data().size(), ref.values.size() * 2) << "2 bytes per value";
    const client::DecodedTensor got = Decode(r.hidden_states());
    ASSERT_EQ(got.shape, ref.shape);
    for (size_t i = 0; i < ref.values.size(); ++i) {
      EXPECT_NEAR(got.values[i], ref.values[i], std::abs(ref.values[i]) * rel + 1e-6)
          << client::DTypeName(dtype) << " value " << i;
    }
  }
}

// ---- Generate -------------------------------------------------------------------

TEST_F(RpcTest, GenerateStreamingAndBlockingAgree) {
  v1::GenerateRequest request = GreedyRequest("The quick brown fox", 12);
  request.set_top_logprobs(3);
  request.set_echo_prompt_tokens(true);

  std::vector<v1::GenerateResponse> chunks;
  absl::Status streamed = client_->GenerateStream(request, [&](const v1::GenerateResponse& c) {
    chunks.push_back(c);
    return true;
  });
  ASSERT_TRUE(streamed.ok()) << streamed;
  absl::StatusOr<client::GenerateResult> blocking = client_->Generate(request);
  ASSERT_TRUE(blocking.ok()) << blocking.status();

  ASSERT_FALSE(chunks.empty());
  std::vector<int32_t> ids;
  std::string text;
  for (size_t i = 0; i < chunks.size(); ++i) {
    for (const auto& t : chunks[i].tokens()) {
      ids.push_back(t.id());
      // Greedy picks the most likely token: it heads its own alternatives.
      ASSERT_EQ(t.top_logprobs_size(), 3);
      EXPECT_EQ(t.top_logprobs(0).token_id(), t.id());
      EXPECT_FLOAT_EQ(t.top_logprobs(0).logprob(), t.logprob());
      EXPECT_LE(t.logprob(), 0.0f);
      EXPECT_GE(t.top_logprobs(0).logprob(), t.top_logprobs(1).logprob());
    }
    text += chunks[i].text();
    if (i + 1 < chunks.size()) {
      EXPECT_EQ(chunks[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    }
  }
  std::vector<int32_t> prompt_ids;
  for (char c : std::string("The quick brown fox")) prompt_ids.push_back(c);
  EXPECT_THAT(chunks.front().prompt_token_ids(), ElementsAreArray(prompt_ids));
  const v1::GenerateResponse& last = chunks.back();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.stats().prompt_tokens(), 19);
  EXPECT_EQ(last.stats().generated_tokens(), 12);
  EXPECT_GT(last.stats().total_seconds(), 0.0);
  EXPECT_EQ(ids.size(), 12u);

  EXPECT_EQ(blocking->token_ids, ids);
  EXPECT_EQ(blocking->text, text);
  EXPECT_EQ(blocking->finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_THAT(blocking->prompt_token_ids, ElementsAreArray(prompt_ids));
  EXPECT_EQ(blocking->stats.generated_tokens(), 12);

  // The text is what the tokens spell (Detokenize agrees with the stream).
  v1::DetokenizeRequest detok;
  detok.mutable_ids()->Add(ids.begin(), ids.end());
  absl::StatusOr<v1::DetokenizeResponse> d = client_->Detokenize(detok);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->text(), text);
}

TEST_F(RpcTest, GenerateOnTheEncoderDecoderModelByName) {
  v1::GenerateRequest request = GreedyRequest("source text", 6, "s2s");
  absl::StatusOr<client::GenerateResult> a = client_->Generate(request);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->token_ids.size(), 6u);
  EXPECT_EQ(a->finish_reason, v1::FINISH_REASON_LENGTH);
  // A decoder prefix continues from those tokens: the first generated token
  // given the greedy first token as prefix is the greedy second token.
  request.mutable_decoder_prefix()->mutable_tokens()->add_ids(a->token_ids[0]);
  request.set_max_new_tokens(5);
  absl::StatusOr<client::GenerateResult> b = client_->Generate(request);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->token_ids, std::vector<int32_t>(a->token_ids.begin() + 1, a->token_ids.end()));
}

TEST_F(RpcTest, SeededSamplingIsReproducible) {
  v1::GenerateRequest request;
  request.mutable_input()->set_text("Once upon");
  request.set_max_new_tokens(10);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_seed(42);
  absl::StatusOr<client::GenerateResult> a = client_->Generate(request);
  absl::StatusOr<client::GenerateResult> b = client_->Generate(request);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->token_ids, b->token_ids);
  EXPECT_EQ(a->stats.seed(), 42u);
}

// n samples over the wire: each message holds one sample's tokens (index),
// each sample ends with its own finish_reason and cumulative logprob, the
// call's stats come last, and sample i is the n = 1 call with seed + i.
TEST_F(RpcTest, SeveralSamplesStreamTaggedByIndex) {
  v1::GenerateRequest request;
  request.mutable_input()->set_text("Once upon a time");
  request.set_max_new_tokens(8);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(1.2f);
  request.mutable_sampling()->set_seed(7);
  request.set_n(3);
  std::vector<v1::GenerateResponse> chunks;
  absl::Status streamed = client_->GenerateStream(request, [&](const v1::GenerateResponse& c) {
    chunks.push_back(c);
    return true;
  });
  ASSERT_TRUE(streamed.ok()) << streamed;
  std::vector<std::vector<int32_t>> ids(3);
  std::vector<int> finishes(3, 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const v1::GenerateResponse& c = chunks[i];
    ASSERT_GE(c.index(), 0);
    ASSERT_LT(c.index(), 3);
    // The last message may carry the stats alone (the summary came after the
    // last tokens were written): no tokens, no finish, index 0 by default.
    const bool stats_alone = c.has_stats() && c.tokens_size() == 0 &&
                             c.finish_reason() == v1::FINISH_REASON_UNSPECIFIED;
    if (!stats_alone) {
      EXPECT_EQ(finishes[c.index()], 0) << "tokens after sample " << c.index() << " ended";
    }
    for (const auto& t : c.tokens()) ids[c.index()].push_back(t.id());
    if (c.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      EXPECT_EQ(c.finish_reason(), v1::FINISH_REASON_LENGTH);
      EXPECT_TRUE(c.has_cumulative_logprob());
      EXPECT_LT(c.cumulative_logprob(), 0.0);
      ++finishes[c.index()];
    }
    EXPECT_EQ(c.has_stats(), i + 1 == chunks.size());
  }
  EXPECT_EQ(finishes, std::vector<int>({1, 1, 1}));
  EXPECT_EQ(chunks.back().stats().generated_tokens(), 24);
  EXPECT_EQ(chunks.back().stats().seed(), 7u);
  absl::StatusOr<client::GenerateResult> collected = client_->Generate(request);
  ASSERT_TRUE(collected.ok()) << collected.status();
  ASSERT_EQ(collected->samples.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(collected->samples[i].token_ids, ids[i]);
    v1::GenerateRequest alone = request;
    alone.set_n(1);
    alone.mutable_sampling()->set_seed(7 + i);
    absl::StatusOr<client::GenerateResult> single = client_->Generate(alone);
    ASSERT_TRUE(single.ok()) << single.status();
    EXPECT_EQ(single->token_ids, ids[i]) << "sample " << i;
  }
}

// max_new_tokens = 0 with prompt_logprobs scores a text: one message with a
// log-probability per prompt token after the first, its alternatives (with
// their text), and no generated token.
TEST_F(RpcTest, PromptLogprobsScoreATextWithoutGenerating) {
  v1::GenerateRequest request;
  request.mutable_input()->set_text("The quick brown fox");
  request.set_max_new_tokens(0);
  request.set_prompt_logprobs(2);
  absl::StatusOr<client::GenerateResult> scored = client_->Generate(request);
  ASSERT_TRUE(scored.ok()) << scored.status();
  EXPECT_TRUE(scored->token_ids.empty());
  EXPECT_EQ(scored->finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(scored->stats.generated_tokens(), 0);
  const std::string text = "The quick brown fox";
  ASSERT_EQ(scored->prompt_logprobs.size(), text.size() - 1);  // byte tokenizer
  for (size_t i = 0; i < scored->prompt_logprobs.size(); ++i) {
    const v1::GeneratedToken& t = scored->prompt_logprobs[i];
    EXPECT_EQ(t.id(), static_cast<unsigned char>(text[i + 1]));
    EXPECT_LE(t.logprob(), 0.0f);
    ASSERT_EQ(t.top_logprobs_size(), 2);
    EXPECT_FALSE(t.top_logprobs(0).text().empty());
  }
  // Without prompt_logprobs, max_new_tokens = 0 is refused.
  request.clear_prompt_logprobs();
  absl::StatusOr<client::GenerateResult> refused = client_->Generate(request);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("prompt_logprobs"), std::string::npos);
}

// ---- Attention ------------------------------------------------------------------

TEST_F(RpcTest, AttentionReturnsCausalRowStochasticMaps) {
  v1::AttentionRequest request;
  request.mutable_input()->set_text("abcdef");
  absl::StatusOr<v1::AttentionResponse> r = client_->Attention(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model(), "tiny-lm");
  // Attention adds special tokens to text by default: <bos> a b c d e f.
  EXPECT_THAT(r->query_token_ids(), ElementsAre(257, 'a', 'b', 'c', 'd', 'e', 'f'));
  EXPECT_THAT(r->query_tokens(), ElementsAre("<bos>", "a", "b", "c", "d", "e", "f"));
  EXPECT_THAT(r->key_token_ids(), ElementsAreArray(r->query_token_ids()));
  ASSERT_EQ(r->maps_size(), kLayers * kHeads);
  for (int i = 0; i < r->maps_size(); ++i) {
    const v1::AttentionMap& m = r->maps(i);
    EXPECT_EQ(m.layer(), i / kHeads);
    EXPECT_EQ(m.head(), i % kHeads);
    EXPECT_EQ(m.kind(), v1::ATTENTION_KIND_SELF);
    const client::DecodedTensor w = Decode(m.weights());
    ASSERT_THAT(w.shape, ElementsAre(7, 7));
    for (int q = 0; q < 7; ++q) {
      double sum = 0;
      for (int k = 0; k < 7; ++k) {
        if (k > q) {
          EXPECT_EQ(w.at(q, k), 0.0f) << "a causal model attends to the future";
        }
        sum += w.at(q, k);
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

TEST_F(RpcTest, AttentionSelectionAndAggregationOverHeads) {
  v1::AttentionRequest request;
  *request.mutable_input() = client::TokenInput({1, 2, 3, 4, 5});
  request.add_layers(1);
  request.add_heads(0);
  request.add_heads(2);
  request.add_heads(3);
  absl::StatusOr<v1::AttentionResponse> heads = client_->Attention(request);
  ASSERT_TRUE(heads.ok()) << heads.status();
  ASSERT_EQ(heads->maps_size(), 3);
  EXPECT_EQ(heads->maps(0).layer(), 1);
  EXPECT_EQ(heads->maps(1).head(), 2);
  EXPECT_EQ(heads->maps(2).head(), 3);
  std::vector<client::DecodedTensor> per_head;
  for (const auto& m : heads->maps()) per_head.push_back(Decode(m.weights()));

  for (v1::HeadAggregation agg : {v1::HEAD_AGGREGATION_MEAN, v1::HEAD_AGGREGATION_MAX}) {
    request.set_aggregation(agg);
    absl::StatusOr<v1::AttentionResponse> r = client_->Attention(request);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->maps_size(), 1);
    EXPECT_EQ(r->maps(0).layer(), 1);
    EXPECT_EQ(r->maps(0).head(), -1);
    const client::DecodedTensor w = Decode(r->maps(0).weights());
    ASSERT_EQ(w.values.size(), 25u);
    for (size_t i = 0; i < w.values.size(); ++i) {
      float expected = agg == v1::HEAD_AGGREGATION_MAX ? -1.0f : 0.0f;
      for (const auto& h : per_head) {
        expected = agg == v1::HEAD_AGGREGATION_MAX ? std::max(expected, h.values[i])
                                                   : expected + h.values[i] / 3;
      }
      EXPECT_NEAR(w.values[i], expected, 1e-6) << v1::HeadAggregation_Name(agg) << " value " << i;
    }
  }
}

TEST_F(RpcTest, AttentionCrossMapsTargetRowsToSourceColumns) {
  v1::AttentionRequest request;
  request.set_model("s2s");
  *request.mutable_input() = client::TokenInput({10, 11, 12, 13});
  *request.mutable_target() = client::TokenInput({257, 20, 21});
  request.set_kind(v1::ATTENTION_KIND_CROSS);
  request.add_layers(0);
  request.set_output_dtype(v1::DTYPE_BFLOAT16);
  absl::StatusOr<v1::AttentionResponse> r = client_->Attention(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->query_token_ids(), ElementsAre(257, 20, 21));
  EXPECT_THAT(r->key_token_ids(), ElementsAre(10, 11, 12, 13));
  ASSERT_EQ(r->maps_size(), kHeads);
  for (const auto& m : r->maps()) {
    EXPECT_EQ(m.kind(), v1::ATTENTION_KIND_CROSS);
    EXPECT_EQ(m.weights().dtype(), v1::DTYPE_BFLOAT16);
    const client::DecodedTensor w = Decode(m.weights());
    ASSERT_THAT(w.shape, ElementsAre(3, 4));
    for (int q = 0; q < 3; ++q) {
      double sum = 0;
      for (int k = 0; k < 4; ++k) sum += w.at(q, k);
      EXPECT_NEAR(sum, 1.0, 4 * (1.0 / 128)) << "bfloat16 rounding of 4 values";
    }
  }
}

TEST_F(RpcTest, AttentionOverTheSizeLimitSaysHowToShrinkIt) {
  // 2 layers x 4 heads x 30 x 30 = 7200 weights > 4096.
  v1::AttentionRequest request;
  *request.mutable_input() = client::TokenInput(std::vector<int32_t>(30, 65));
  absl::StatusOr<v1::AttentionResponse> r = client_->Attention(request);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("7200"));
  EXPECT_THAT(r.status().message(), HasSubstr("4096"));
  EXPECT_THAT(r.status().message(), HasSubstr("aggregate"));
  // Aggregating the heads (2 x 900 = 1800; a layer computes 4 x 900) fits.
  request.set_aggregation(v1::HEAD_AGGREGATION_MEAN);
  r = client_->Attention(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->maps_size(), kLayers);
  // At 40 tokens the mean (2 x 1600) would fit the response, but a layer
  // computes all 4 heads first (6400).
  *request.mutable_input() = client::TokenInput(std::vector<int32_t>(40, 65));
  r = client_->Attention(request);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("holds 6400 values (all 4 heads x 40 x 40"));
}

// ---- model info, tokenization ---------------------------------------------------

TEST_F(RpcTest, GetModelInfoListsEveryModelWithTheDefaultFlagged) {
  absl::StatusOr<v1::GetModelInfoResponse> r = client_->GetModelInfo();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->server_version(), "integration");
  ASSERT_EQ(r->models_size(), 3);
  EXPECT_EQ(r->models(0).name(), "tiny-lm");
  EXPECT_EQ(r->models(1).name(), "s2s");
  EXPECT_EQ(r->models(2).name(), "enc");
  EXPECT_TRUE(r->models(0).is_default());
  EXPECT_FALSE(r->models(1).is_default());
  EXPECT_FALSE(r->models(2).is_default());
  EXPECT_EQ(r->models(0).architecture(), "decoder-only");
  EXPECT_EQ(r->models(1).architecture(), "encoder-decoder");
  EXPECT_EQ(r->models(2).architecture(), "encoder-only");
  for (const v1::ModelInfo& m : r->models()) {
    SCOPED_TRACE(m.name());
    EXPECT_EQ(m.vocab_size(), kVocab);
    EXPECT_EQ(m.d_model(), kDModel);
    EXPECT_EQ(m.n_heads(), kHeads);
    EXPECT_EQ(m.max_context(), kMaxContext);
    EXPECT_EQ(m.tokenizer(), "byte");
    EXPECT_EQ(m.dtype(), "float32");
    EXPECT_EQ(m.device(), "cpu");
    EXPECT_EQ(m.weights_sha256().size(), 64u);
    EXPECT_EQ(m.special_tokens().bos(), 257);
    EXPECT_EQ(m.special_tokens().eos(), 258);
    EXPECT_GT(m.weights_bytes(), 0);
  }
  EXPECT_EQ(r->models(0).n_layers(), kLayers);
  EXPECT_EQ(r->models(1).n_encoder_layers(), kLayers);
  EXPECT_EQ(r->models(1).n_decoder_layers(), kLayers);
  EXPECT_THAT(r->models(0).capabilities(), ::testing::Contains("generate"));
  EXPECT_THAT(r->models(2).capabilities(), ::testing::Not(::testing::Contains("generate")));
  EXPECT_THAT(r->models(2).capabilities(), ::testing::Contains("encode"));

  v1::GetModelInfoRequest one;
  one.set_model("s2s");
  absl::StatusOr<v1::GetModelInfoResponse> single = client_->GetModelInfo(one);
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ(single->models_size(), 1);
  EXPECT_EQ(single->models(0).name(), "s2s");
  EXPECT_FALSE(single->models(0).is_default());
}

TEST_F(RpcTest, TokenizeDetokenizeRoundTrip) {
  const std::string text = "Dikkat: h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93";  // é ö ✓
  v1::TokenizeRequest request;
  request.set_text(text);
  absl::StatusOr<v1::TokenizeResponse> t = client_->Tokenize(request);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->ids_size(), static_cast<int>(text.size())) << "byte tokenizer: one id per byte";
  EXPECT_EQ(t->tokens_size(), t->ids_size());
  EXPECT_EQ(t->tokens(0), "D");
  EXPECT_EQ(t->tokens(9), "<0xC3>");
  v1::DetokenizeRequest back;
  back.mutable_ids()->CopyFrom(t->ids());
  absl::StatusOr<v1::DetokenizeResponse> d = client_->Detokenize(back);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->text(), text);

  request.set_add_special_tokens(true);
  t = client_->Tokenize(request);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ids(0), 257);
  back.mutable_ids()->CopyFrom(t->ids());
  back.set_skip_special_tokens(true);
  d = client_->Detokenize(back);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->text(), text);
}

TEST_F(RpcTest, ClientDefaultModelRoutesRequestsWithoutAModel) {
  std::unique_ptr<client::Client> enc_client =
      server_->NewClient([](client::ClientOptions* o) { o->default_model = "enc"; });
  ASSERT_NE(enc_client, nullptr);
  v1::EncodeRequest request;
  *request.add_inputs() = client::TextInput("x");
  absl::StatusOr<v1::EncodeResponse> r = enc_client->Encode(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model(), "enc");
  r = client_->Encode(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model(), "tiny-lm");
}

TEST_F(RpcTest, UnknownModelIsNotFoundOnEveryRpc) {
  const std::string model = "no-such-model";
  std::vector<std::pair<std::string, absl::Status>> results;
  {
    v1::EncodeRequest r;
    r.set_model(model);
    *r.add_inputs() = client::TextInput("x");
    results.emplace_back("Encode", client_->Encode(r).status());
  }
  results.emplace_back("Generate", client_->Generate(GreedyRequest("x", 2, model)).status());
  {
    v1::AttentionRequest r;
    r.set_model(model);
    r.mutable_input()->set_text("x");
    results.emplace_back("Attention", client_->Attention(r).status());
  }
  {
    v1::GetModelInfoRequest r;
    r.set_model(model);
    results.emplace_back("GetModelInfo", client_->GetModelInfo(r).status());
  }
  {
    v1::TokenizeRequest r;
    r.set_model(model);
    r.set_text("x");
    results.emplace_back("Tokenize", client_->Tokenize(r).status());
  }
  {
    v1::DetokenizeRequest r;
    r.set_model(model);
    r.add_ids(1);
    results.emplace_back("Detokenize", client_->Detokenize(r).status());
  }
  for (const auto& [rpc, status] : results) {
    SCOPED_TRACE(rpc);
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
    EXPECT_THAT(status.message(), HasSubstr(model));
    EXPECT_THAT(status.message(), HasSubstr("tiny-lm")) << "the error lists the hosted models";
  }
}

// ---- invalid arguments ----------------------------------------------------------

struct InvalidCase {
  std::string name;
  std::function<absl::Status(client::Client&)> call;
  absl::StatusCode code;
  std::vector<std::string> message_has;  // the field, and the value or the limit
};

v1::GenerateRequest Gen(const std::string& model = "") { return GreedyRequest("hello", 4, model); }

absl::Status GenerateStatus(client::Client& c, const v1::GenerateRequest& r) {
  return c.Generate(r).status();
}

std::vector<InvalidCase> InvalidCases() {
  std::vector<InvalidCase> cases;
  auto gen_case = [&](std::string name, std::function<void(v1::GenerateRequest*)> edit,
                      std::vector<std::string> has, absl::StatusCode code =
                                                        absl::StatusCode::kInvalidArgument) {
    cases.push_back({name,
                     [edit](client::Client& c) {
                       v1::GenerateRequest r = Gen();
                       edit(&r);
                       return GenerateStatus(c, r);
                     },
                     code, std::move(has)});
  };
  gen_case("unknown model", [](auto* r) { r->set_model("gpt-17"); }, {"gpt-17"},
           absl::StatusCode::kNotFound);
  gen_case("input unset", [](auto* r) { r->clear_input(); }, {"input"});
  gen_case("empty text", [](auto* r) { r->mutable_input()->set_text(""); }, {"input.text"});
  gen_case("empty token list", [](auto* r) { r->mutable_input()->mutable_tokens(); },
           {"input.tokens.ids", "empty"});
  gen_case("token id out of range",
           [](auto* r) { *r->mutable_input() = client::TokenInput({1, kVocab}); },
           {"input[1]", "259", "258"});
  gen_case("negative token id",
           [](auto* r) { *r->mutable_input() = client::TokenInput({-1}); },
           {"input[0]", "-1"});
  gen_case("input longer than the context",
           [](auto* r) {
             *r->mutable_input() = client::TokenInput(std::vector<int32_t>(kMaxContext + 1, 65));
           },
           {"input", "513", "512"});
  gen_case("input filling the context",
           [](auto* r) {
             *r->mutable_input() = client::TokenInput(std::vector<int32_t>(kMaxContext, 65));
           },
           {"input", "512", "no room"});
  gen_case("max_new_tokens over the cap", [](auto* r) { r->set_max_new_tokens(kNewTokensCap + 1); },
           {"max_new_tokens", "101", "100"});
  gen_case("max_new_tokens zero", [](auto* r) { r->set_max_new_tokens(0); }, {"max_new_tokens", "0"});
  gen_case("temperature < 0", [](auto* r) { r->mutable_sampling()->set_temperature(-0.5f); },
           {"temperature", "-0.5"});
  gen_case("top_p 0", [](auto* r) { r->mutable_sampling()->set_top_p(0.0f); }, {"top_p", "0"});
  gen_case("top_p > 1", [](auto* r) { r->mutable_sampling()->set_top_p(1.5f); }, {"top_p", "1.5"});
  gen_case("top_k < 0", [](auto* r) { r->mutable_sampling()->set_top_k(-3); }, {"top_k", "-3"});
  gen_case("top_logprobs > 20", [](auto* r) { r->set_top_logprobs(21); }, {"top_logprobs", "21"});
  gen_case("stop token id out of range", [](auto* r) { r->add_stop_token_ids(1000); },
           {"stop_token_ids[0]", "1000"});
  gen_case("empty stop string", [](auto* r) { r->add_stop(""); }, {"stop[0]"});
  gen_case("decoder prefix on a decoder-only model",
           [](auto* r) { r->mutable_decoder_prefix()->set_text("x"); }, {"decoder_prefix"});
  gen_case("generate on an encoder-only model", [](auto* r) { r->set_model("enc"); },
           {"encoder-only"});
  gen_case("encoder-decoder: decoder prefix filling the context",
           [](auto* r) {
             r->set_model("s2s");
             *r->mutable_decoder_prefix() = client::TokenInput(std::vector<int32_t>(kMaxContext, 65));
           },
           {"decoder_prefix", "512"});

  auto enc_case = [&](std::string name, std::function<void(v1::EncodeRequest*)> edit,
                      std::vector<std::string> has) {
    cases.push_back({name,
                     [edit](client::Client& c) {
                       v1::EncodeRequest r;
                       *r.add_inputs() = client::TextInput("hello");
                       edit(&r);
                       return c.Encode(r).status();
                     },
                     absl::StatusCode::kInvalidArgument, std::move(has)});
  };
  enc_case("encode: no inputs", [](auto* r) { r->clear_inputs(); }, {"inputs", "empty"});
  enc_case("encode: second input empty", [](auto* r) { r->add_inputs(); }, {"inputs[1]"});
  enc_case("encode: input longer than the context",
           [](auto* r) {
             *r->add_inputs() = client::TokenInput(std::vector<int32_t>(kMaxContext + 1, 65));
           },
           {"inputs[1]", "513", "512"});
  enc_case("encode: hidden layer out of range", [](auto* r) { r->set_hidden_layer(kLayers + 1); },
           {"hidden_layer", "3"});
  enc_case("encode: unknown dtype", [](auto* r) { r->set_output_dtype(static_cast<v1::DType>(9)); },
           {"output_dtype", "9"});

  auto att_case = [&](std::string name, std::function<void(v1::AttentionRequest*)> edit,
                      std::vector<std::string> has) {
    cases.push_back({name,
                     [edit](client::Client& c) {
                       v1::AttentionRequest r;
                       r.mutable_input()->set_text("hello");
                       edit(&r);
                       return c.Attention(r).status();
                     },
                     absl::StatusCode::kInvalidArgument, std::move(has)});
  };
  att_case("attention: unknown layer", [](auto* r) { r->add_layers(kLayers); }, {"layers", "2"});
  att_case("attention: unknown head", [](auto* r) { r->add_heads(kHeads); }, {"heads", "4"});
  att_case("attention: negative head", [](auto* r) { r->add_heads(-1); }, {"heads", "-1"});
  att_case("attention: CROSS on a decoder-only model",
           [](auto* r) { r->set_kind(v1::ATTENTION_KIND_CROSS); },
           {"kind", "ATTENTION_KIND_CROSS", "encoder-decoder"});
  att_case("attention: SELF on an encoder-decoder model",
           [](auto* r) {
             r->set_model("s2s");
             r->set_kind(v1::ATTENTION_KIND_SELF);
           },
           {"kind", "ATTENTION_KIND_SELF"});
  att_case("attention: CROSS without a target",
           [](auto* r) {
             r->set_model("s2s");
             r->set_kind(v1::ATTENTION_KIND_CROSS);
           },
           {"target"});
  att_case("attention: unknown aggregation",
           [](auto* r) { r->set_aggregation(static_cast<v1::HeadAggregation>(7)); },
           {"aggregation", "7"});

  cases.push_back({"detokenize: id out of range",
                   [](client::Client& c) {
                     v1::DetokenizeRequest r;
                     r.add_ids(5);
                     r.add_ids(99999);
                     return c.Detokenize(r).status();
                   },
                   absl::StatusCode::kInvalidArgument,
                   {"ids[1]", "99999"}});
  return cases;
}

TEST_F(RpcTest, EveryInvalidRequestIsRefusedWithAMessageNamingTheField) {
  for (const InvalidCase& c : InvalidCases()) {
    SCOPED_TRACE(c.name);
    const absl::Status status = c.call(*client_);
    EXPECT_EQ(status.code(), c.code) << status;
    for (const std::string& part : c.message_has) {
      EXPECT_THAT(status.message(), HasSubstr(part)) << "message: " << status.message();
    }
  }
  // The server still serves, and nothing is left running or holding KV blocks.
  absl::StatusOr<client::GenerateResult> ok = client_->Generate(GreedyRequest("still here", 5));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->token_ids.size(), 5u);
  const std::string left = server_->WaitUntilIdle();
  EXPECT_EQ(left, "") << "engines not idle after the invalid requests";
}

}  // namespace
}  // namespace dikkat::integration
