// dikkat.json parsing: documented defaults, errors that name the field, the
// value and what is allowed, and a lossless round trip through
// ModelConfigToJson.
#include "model/io/config.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dikkat::model {
namespace {

using json = nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

json Minimal() {
  return {{"architecture", "decoder-only"}, {"vocab_size", 100}, {"d_model", 64},
          {"n_heads", 4},                   {"ffn_dim", 256},    {"n_layers", 2},
          {"max_positions", 128}};
}

std::string ErrorOf(const json& j) {
  absl::StatusOr<ModelConfig> c = ParseModelConfigJson(j.dump());
  EXPECT_FALSE(c.ok()) << j.dump();
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

TEST(ModelConfigTest, MinimalConfigGetsTheDocumentedDefaults) {
  absl::StatusOr<ModelConfig> c = ParseModelConfigJson(Minimal().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kDecoderOnly);
  EXPECT_EQ(c->kv_heads(), 4);
  EXPECT_EQ(c->head_size(), 16);
  EXPECT_TRUE(c->pre_norm);
  EXPECT_EQ(c->norm, NormKind::kLayerNorm);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_EQ(c->activation, Activation::kGelu);
  EXPECT_EQ(c->positions, PositionKind::kLearned);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_TRUE(c->final_norm);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_DOUBLE_EQ(c->embedding_scale, 1.0);
  EXPECT_EQ(c->eos_token_id, -1);
  EXPECT_EQ(c->weight_layout, "dikkat");
}

TEST(ModelConfigTest, BadEnumValueNamesFieldValueAndAllowedValues) {
  json j = Minimal();
  j["activation"] = "swish";
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'activation'"), HasSubstr("swish"),
                                HasSubstr("relu"), HasSubstr("swiglu"), HasSubstr("geglu")));
  j = Minimal();
  j["architecture"] = "decoder";
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'architecture'"), HasSubstr("'decoder'"),
                                HasSubstr("encoder-decoder")));
  j = Minimal();
  j["positions"] = 3;
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'positions'"), HasSubstr("rotary")));
  j = Minimal();
  j["norm"] = "batchnorm";
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'norm'"), HasSubstr("rmsnorm")));
}

TEST(ModelConfigTest, HeadsMustDivide) {
  json j = Minimal();
  j["d_model"] = 66;
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("d_model"), HasSubstr("66"), HasSubstr("n_heads")));
  j["head_dim"] = 16;  // an explicit head_dim lifts the constraint
  EXPECT_TRUE(ParseModelConfigJson(j.dump()).ok());

  j = Minimal();
  j["n_kv_heads"] = 3;
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'n_kv_heads'"), HasSubstr("3"), HasSubstr("divisor"),
                                HasSubstr("(4)")));
  j["n_kv_heads"] = 2;
  absl::StatusOr<ModelConfig> gqa = ParseModelConfigJson(j.dump());
  ASSERT_TRUE(gqa.ok()) << gqa.status();
  EXPECT_EQ(gqa->kv_heads(), 2);

  j = Minimal();
  j["positions"] = "rotary";
  j["n_heads"] = 64;  // head_dim 1: RoPE rotates pairs
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("rotary"), HasSubstr("even")));
}

TEST(ModelConfigTest, MissingSizesAreNamed) {
  for (const char* field : {"vocab_size", "d_model", "n_heads", "ffn_dim", "max_positions",
                            "n_layers"}) {
    json j = Minimal();
    j.erase(field);
    EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr(std::string("'") + field + "'"), HasSubstr("> 0")))
        << field;
  }
  json j = Minimal();
  j["architecture"] = "encoder-decoder";
  j["decoder_start_token_id"] = 0;
  j["n_encoder_layers"] = 2;
  EXPECT_THAT(ErrorOf(j), HasSubstr("'n_decoder_layers'"));
  j["n_decoder_layers"] = 2;
  j.erase("decoder_start_token_id");
  EXPECT_THAT(ErrorOf(j), HasSubstr("decoder_start_token_id"));
  j["decoder_start_token_id"] = 0;
  EXPECT_TRUE(ParseModelConfigJson(j.dump()).ok());
}

TEST(ModelConfigTest, WrongTypesAndRangesAreNamed) {
  json j = Minimal();
  j["d_model"] = "64";
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'d_model'"), HasSubstr("number")));
  j = Minimal();
  j["n_heads"] = 4.5;
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'n_heads'"), HasSubstr("integer")));
  j = Minimal();
  j["pre_norm"] = 1;
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'pre_norm'"), HasSubstr("true or false")));
  j = Minimal();
  j["eos_token_id"] = 100;
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("'eos_token_id'"), HasSubstr("100"), HasSubstr("[0, 100)")));
  j = Minimal();
  j["sliding_window"] = -1;
  EXPECT_THAT(ErrorOf(j), HasSubstr("'sliding_window'"));
  j = Minimal();
  j["norm_eps"] = 0;
  EXPECT_THAT(ErrorOf(j), HasSubstr("'norm_eps'"));
  // A rotary model's theta of 0 or below made NaN rotary tables (NaN logits,
  // no error) before the check.
  for (const char* theta : {"0", "-10000"}) {
    std::string text = Minimal().dump();
    text.insert(1, absl::StrCat("\"positions\": \"rotary\", \"rope_theta\": ", theta, ", "));
    EXPECT_THAT(std::string(ParseModelConfigJson(text).status().message()),
                HasSubstr("'rope_theta'"))
        << theta;
  }
  EXPECT_THAT(std::string(ParseModelConfigJson("{not json").status().message()),
              HasSubstr("not a JSON object"));
  EXPECT_FALSE(ParseModelConfigJson("[1, 2]").ok());
}

// config.cc documents "embedding_scale": "sqrt_d_model" as a convenience for
// Vaswani-style models.
TEST(ModelConfigTest, EmbeddingScaleAcceptsSqrtDModel) {
  json j = Minimal();
  j["embedding_scale"] = "sqrt_d_model";
  absl::StatusOr<ModelConfig> c = ParseModelConfigJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->embedding_scale, 8.0);
  j["embedding_scale"] = "sqrt";
  EXPECT_THAT(ErrorOf(j), HasSubstr("'embedding_scale'"));
}

TEST(ModelConfigTest, RoundTripsThroughJson) {
  ModelConfig c;
  c.architecture = Architecture::kEncoderDecoder;
  c.vocab_size = 321;
  c.d_model = 48;
  c.n_heads = 6;
  c.n_kv_heads = 3;
  c.head_dim = 10;
  c.ffn_dim = 100;
  c.n_encoder_layers = 3;
  c.n_decoder_layers = 5;
  c.max_positions = 77;
  c.pre_norm = false;
  c.norm = NormKind::kRmsNorm;
  c.norm_eps = 1e-6;
  c.final_norm = false;
  c.encoder_final_norm = false;
  c.decoder_final_norm = true;
  c.activation = Activation::kGeGlu;
  c.attention_bias = false;
  c.qkv_bias_only = true;
  c.qk_norm = true;
  c.mlp_bias = false;
  c.norm_bias = false;
  c.positions = PositionKind::kSinusoidal;
  c.rope_theta = 5e5;
  c.rope_scaling = 4.0;
  c.sliding_window = 9;
  c.tie_embeddings = false;
  c.share_encoder_decoder_embeddings = true;
  c.embedding_scale = 6.928203230275509;
  c.type_vocab_size = 2;
  c.embedding_norm = true;
  c.default_pooling = Pooling::kLast;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.pad_token_id = 0;
  c.decoder_start_token_id = 3;
  c.more_eos_token_ids = {7, 5};
  c.rope_llama3 = {8.0, 1.0, 4.0, 8192.0};
  c.name = "round-trip";
  c.weight_layout = "llama";
  const std::string text = ModelConfigToJson(c);
  absl::StatusOr<ModelConfig> back = ParseModelConfigJson(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(ModelConfigToJson(*back), text);
  EXPECT_EQ(back->architecture, c.architecture);
  EXPECT_EQ(back->head_dim, 10);
  EXPECT_EQ(back->n_decoder_layers, 5);
  EXPECT_EQ(back->activation, Activation::kGeGlu);
  EXPECT_EQ(back->positions, PositionKind::kSinusoidal);
  EXPECT_EQ(back->default_pooling, Pooling::kLast);
  EXPECT_DOUBLE_EQ(back->embedding_scale, c.embedding_scale);
  EXPECT_DOUBLE_EQ(back->norm_eps, 1e-6);
  EXPECT_TRUE(back->share_encoder_decoder_embeddings);
  EXPECT_TRUE(back->qkv_bias_only);
  EXPECT_TRUE(back->qk_norm);
  EXPECT_EQ(back->name, "round-trip");
  EXPECT_EQ(back->weight_layout, "llama");
  EXPECT_EQ(back->more_eos_token_ids, (std::vector<int64_t>{7, 5}));
  EXPECT_DOUBLE_EQ(back->rope_llama3.factor, 8.0);
  EXPECT_DOUBLE_EQ(back->rope_llama3.original_max_positions, 8192.0);
  // Its ranges are checked.
  json bad = json::parse(text);
  bad["rope_llama3"]["high_freq_factor"] = 0.5;  // below low_freq_factor
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'rope_llama3'"));
  EXPECT_EQ(EosTokenIds(*back), (std::vector<int64_t>{2, 7, 5}));

  // YaRN, in place of the other scalings.
  c.rope_llama3 = {};
  c.rope_scaling = 1.0;
  c.rope_yarn = {4.0, 4096.0, 16.0, 2.0, 1.0, 0.5, 0.0, false};
  const std::string yarn_text = ModelConfigToJson(c);
  absl::StatusOr<ModelConfig> yarn = ParseModelConfigJson(yarn_text);
  ASSERT_TRUE(yarn.ok()) << yarn.status() << "\n" << yarn_text;
  EXPECT_EQ(ModelConfigToJson(*yarn), yarn_text);
  EXPECT_DOUBLE_EQ(yarn->rope_yarn.original_max_positions, 4096.0);
  EXPECT_DOUBLE_EQ(yarn->rope_yarn.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(yarn->rope_yarn.mscale_all_dim, 0.5);
  EXPECT_FALSE(yarn->rope_yarn.truncate);
  bad = json::parse(yarn_text);
  bad["rope_scaling"] = 2.0;
  EXPECT_THAT(ErrorOf(bad), HasSubstr("exclusive"));
  bad = json::parse(yarn_text);
  bad["rope_yarn"]["original_max_positions"] = 0;
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'rope_yarn'"));
  bad = json::parse(yarn_text);
  bad["rope_yarn"]["mscale_all_dim"] = -10.0 / std::log(4.0);  // 0.1 m ln 4 + 1 = 0
  EXPECT_THAT(ErrorOf(bad), HasSubstr("finite and > 0"));
  bad = json::parse(yarn_text);
  bad["rope_yarn"]["truncate"] = "yes";
  EXPECT_THAT(ErrorOf(bad), HasSubstr("rope_yarn.truncate"));
  // Without a factor it would be off without a word.
  bad = json::parse(yarn_text);
  bad["rope_yarn"].erase("factor");
  EXPECT_THAT(ErrorOf(bad), HasSubstr("needs a 'factor'"));
}

TEST(ModelConfigTest, GemmaFieldsRoundTripAndAreChecked) {
  json j = Minimal();
  j["architecture"] = "decoder-only";
  j["n_layers"] = 4;
  j["norm"] = "rmsnorm";
  j["positions"] = "rotary";
  j["activation"] = "geglu_tanh";
  j["sandwich_norm"] = true;
  j["norm_weight_offset"] = 1.0;
  j["query_pre_attn_scalar"] = 24.0;
  j["sliding_window"] = 8;
  j["full_attention_layers"] = {1, 3};
  j["rope_local_theta"] = 10000.0;
  absl::StatusOr<ModelConfig> c = ParseModelConfigJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->activation, Activation::kGeGluTanh);
  EXPECT_TRUE(c->is_gated());
  EXPECT_TRUE(c->sandwich_norm);
  EXPECT_DOUBLE_EQ(c->norm_weight_offset, 1.0);
  EXPECT_DOUBLE_EQ(c->query_pre_attn_scalar, 24.0);
  EXPECT_DOUBLE_EQ(c->rope_local_theta, 10000.0);
  EXPECT_TRUE(c->layer_slides(0));
  EXPECT_FALSE(c->layer_slides(1));
  EXPECT_TRUE(c->layer_slides(2));
  EXPECT_FALSE(c->layer_slides(3));
  const std::string text = ModelConfigToJson(*c);
  absl::StatusOr<ModelConfig> back = ParseModelConfigJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ModelConfigToJson(*back), text);
  EXPECT_EQ(back->full_attention_layers, (std::vector<int64_t>{1, 3}));

  json bad = j;
  bad["full_attention_layers"] = {3, 1};
  EXPECT_THAT(ErrorOf(bad), HasSubstr("ascending"));
  bad["full_attention_layers"] = {4};
  EXPECT_THAT(ErrorOf(bad), HasSubstr("n_layers = 4"));
  bad["full_attention_layers"] = {"1"};
  EXPECT_THAT(ErrorOf(bad), HasSubstr("list of layer indices"));
  bad = j;
  bad["sliding_window"] = 0;
  EXPECT_THAT(ErrorOf(bad), HasSubstr("needs a 'sliding_window'"));
  bad = j;
  bad["rope_local_theta"] = -1.0;
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'rope_local_theta'"));
  bad = j;
  bad["query_pre_attn_scalar"] = -2.0;
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'query_pre_attn_scalar'"));
  bad = j;
  bad["pre_norm"] = false;
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'sandwich_norm' needs pre_norm"));
  bad = j;
  bad["norm"] = "layernorm";  // no RMSNorm to offset
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'norm_weight_offset'"));
  bad["qk_norm"] = true;  // its RMSNorms take it
  bad["embedding_dense"] = {{{"in", 64}, {"out", 8}, {"bias", false}, {"activation", "tanh"}}};
  absl::StatusOr<ModelConfig> dense = ParseModelConfigJson(bad.dump());
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->embedding_dim(), 8);
  EXPECT_TRUE(dense->embedding_dense[0].tanh);
  EXPECT_EQ(ModelConfigToJson(*ParseModelConfigJson(ModelConfigToJson(*dense))),
            ModelConfigToJson(*dense));
  bad["embedding_dense"] = {{{"in", 32}, {"out", 8}}};
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'embedding_dense[0]'"));
  bad["embedding_dense"] = {{{"in", 64}, {"out", 8}, {"activation", "relu"}}};
  EXPECT_THAT(ErrorOf(bad), HasSubstr("'embedding_dense' must be a list"));
}

TEST(ModelConfigTest, MoreEosTokenIdsAreTokenIdsListedOnce) {
  json j = Minimal();
  j["eos_token_id"] = 3;
  j["more_eos_token_ids"] = {4, 9};
  absl::StatusOr<ModelConfig> c = ParseModelConfigJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(IsEosToken(*c, 3));
  EXPECT_TRUE(IsEosToken(*c, 9));
  EXPECT_FALSE(IsEosToken(*c, 5));
  EXPECT_FALSE(IsEosToken(*c, -1));
  j["more_eos_token_ids"] = {4, j["vocab_size"]};
  EXPECT_THAT(ErrorOf(j), HasSubstr("'more_eos_token_ids[1]'"));
  j["more_eos_token_ids"] = {4, 3};
  EXPECT_THAT(ErrorOf(j), HasSubstr("already listed"));
  j["more_eos_token_ids"] = {4, 4};
  EXPECT_THAT(ErrorOf(j), HasSubstr("already listed"));
  j["more_eos_token_ids"] = 4;
  EXPECT_THAT(ErrorOf(j), HasSubstr("list of token ids"));
  // AddEosTokenId fills eos_token_id first and never duplicates.
  ModelConfig m;
  AddEosTokenId(&m, -1);
  EXPECT_EQ(m.eos_token_id, -1);
  AddEosTokenId(&m, 8);
  AddEosTokenId(&m, 8);
  AddEosTokenId(&m, 6);
  EXPECT_EQ(EosTokenIds(m), (std::vector<int64_t>{8, 6}));
}

}  // namespace
}  // namespace dikkat::model
