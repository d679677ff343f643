// Hugging Face config.json translation (hf_config.h), tensor renaming
// (hf_weights.h) and how ReadModelConfig picks them up: the values a user's
// folder depends on and the errors for what dikkat does not support.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "model/io/hf_config.h"
#include "model/io/hf_weights.h"
#include "model/io/model_folder.h"

namespace dikkat::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::StatusOr<ModelConfig> Translate(const std::string& json) { return TranslateHfConfig(json); }

void ExpectInvalid(const absl::StatusOr<ModelConfig>& config,
                   std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  for (const char* f : fragments) {
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(f));
  }
}

// ---- config translation ----------------------------------------------------

TEST(HfConfigTest, UnsupportedModelTypeListsTheSupportedOnes) {
  ExpectInvalid(Translate(R"({"model_type": "t5", "d_model": 512})"),
                {"'t5'", "gpt2, bert, llama, mistral, qwen2, qwen3, phi3, gemma3_text, gemma3"});
  ExpectInvalid(Translate(R"({"hidden_size": 64})"), {"model_type", "gpt2, bert, llama"});
  ExpectInvalid(Translate("[1, 2]"), {"not a JSON object"});
}

TEST(HfConfigTest, Gpt2DefaultsAreGpt2Small) {
  absl::StatusOr<ModelConfig> c = Translate(R"({"model_type": "gpt2"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 50257);
  EXPECT_EQ(c->d_model, 768);
  EXPECT_EQ(c->n_heads, 12);
  EXPECT_EQ(c->n_layers, 12);
  EXPECT_EQ(c->ffn_dim, 3072);
  EXPECT_EQ(c->max_positions, 1024);
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_EQ(c->bos_token_id, 50256);
  EXPECT_EQ(c->eos_token_id, 50256);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->weight_layout, "gpt2");
}

TEST(HfConfigTest, Gpt2Options) {
  absl::StatusOr<ModelConfig> c = Translate(
      R"({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 1, "n_inner": 40,
          "n_positions": 16, "vocab_size": 10, "activation_function": "relu",
          "layer_norm_epsilon": 1e-6, "bos_token_id": 0, "eos_token_id": 9,
          "_name_or_path": "my/gpt"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ffn_dim, 40);
  EXPECT_EQ(c->activation, Activation::kRelu);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-6);
  EXPECT_EQ(c->eos_token_id, 9);
  EXPECT_EQ(c->name, "my/gpt");
  ExpectInvalid(Translate(R"({"model_type": "gpt2", "activation_function": "gelu_fast"})"),
                {"activation_function", "gelu_fast", "gelu_new"});
  ExpectInvalid(Translate(R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true})"),
                {"scale_attn_by_inverse_layer_idx"});
  ExpectInvalid(Translate(R"({"model_type": "gpt2", "add_cross_attention": true})"),
                {"add_cross_attention"});
  ExpectInvalid(Translate(R"({"model_type": "gpt2", "n_embd": "768"})"),
                {"'n_embd'", "integer", "\"768\""});
}

TEST(HfConfigTest, BertIsAPostLnEncoderWithTokenTypes) {
  absl::StatusOr<ModelConfig> c = Translate(R"({"model_type": "bert"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kEncoderOnly);
  EXPECT_FALSE(c->pre_norm);
  EXPECT_TRUE(c->embedding_norm);
  EXPECT_FALSE(c->final_norm);
  EXPECT_EQ(c->type_vocab_size, 2);
  EXPECT_EQ(c->max_positions, 512);
  EXPECT_EQ(c->ffn_dim, 3072);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-12);
  EXPECT_EQ(c->activation, Activation::kGelu);
  EXPECT_EQ(c->pad_token_id, 0);
  EXPECT_EQ(c->default_pooling, Pooling::kMean);
  ExpectInvalid(Translate(R"({"model_type": "bert", "position_embedding_type": "relative_key"})"),
                {"position_embedding_type", "relative_key", "absolute"});
  ExpectInvalid(Translate(R"({"model_type": "bert", "is_decoder": true})"), {"is_decoder"});
}

TEST(HfConfigTest, LlamaDefaultsAndOptions) {
  absl::StatusOr<ModelConfig> c = Translate(
      R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
          "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 256,
          "bos_token_id": null, "eos_token_id": [200, 201], "rope_theta": 500000.0,
          "tie_word_embeddings": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_heads(), 8);  // num_key_value_heads absent -> num_attention_heads
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->eos_token_id, 200);  // the first of a list
  EXPECT_EQ(c->more_eos_token_ids, std::vector<int64_t>{201});  // the others end generation too
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling, 1.0);
  EXPECT_EQ(c->max_positions, 2048);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->activation, Activation::kSwiGlu);
  EXPECT_EQ(c->norm, NormKind::kRmsNorm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->sliding_window, 0);
  absl::StatusOr<ModelConfig> biased =
      Translate(R"({"model_type": "llama", "attention_bias": true, "mlp_bias": true})");
  ASSERT_TRUE(biased.ok()) << biased.status();
  EXPECT_TRUE(biased->attention_bias);
  EXPECT_TRUE(biased->mlp_bias);
  ExpectInvalid(Translate(R"({"model_type": "llama", "hidden_act": "relu"})"),
                {"hidden_act", "relu", "silu"});
  // Invalid models after translation name dikkat's field.
  ExpectInvalid(Translate(R"({"model_type": "llama", "num_attention_heads": 32,
                              "num_key_value_heads": 5})"),
                {"n_kv_heads", "5"});
}

TEST(HfConfigTest, RopeScalingLlama3) {
  absl::StatusOr<ModelConfig> c = Translate(
      R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_llama3.factor, 32.0);
  EXPECT_DOUBLE_EQ(c->rope_llama3.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_llama3.high_freq_factor, 4.0);
  EXPECT_DOUBLE_EQ(c->rope_llama3.original_max_positions, 8192.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling, 1.0);
  ExpectInvalid(Translate(R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3",
                              "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}})"),
                {"original_max_position_embeddings"});
  ExpectInvalid(Translate(R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3",
                              "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                              "original_max_position_embeddings": 8192}})"),
                {"rope_llama3"});
}

// YaRN as Qwen's model cards spell it, and DeepSeek-style mscale; the served
// context is the original one times factor, as vLLM serves it.
TEST(HfConfigTest, RopeScalingYarn) {
  absl::StatusOr<ModelConfig> q = Translate(
      R"({"model_type": "qwen3", "max_position_embeddings": 32768, "rope_scaling":
          {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_DOUBLE_EQ(q->rope_yarn.factor, 4.0);
  EXPECT_DOUBLE_EQ(q->rope_yarn.original_max_positions, 32768.0);
  EXPECT_DOUBLE_EQ(q->rope_yarn.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(q->rope_yarn.beta_slow, 1.0);
  EXPECT_TRUE(q->rope_yarn.truncate);
  EXPECT_EQ(q->max_positions, 131072);
  EXPECT_DOUBLE_EQ(q->rope_scaling, 1.0);
  EXPECT_NEAR(YarnAttentionFactor(q->rope_yarn), 1.0 + 0.1 * std::log(4.0), 1e-12);
  // No original context: the config's own; 0 / null betas are the defaults
  // (transformers reads `x or default`).
  absl::StatusOr<ModelConfig> d = Translate(
      R"({"model_type": "llama", "max_position_embeddings": 4096, "rope_scaling":
          {"type": "yarn", "factor": 40, "beta_fast": 0, "beta_slow": null, "mscale": 1.0,
           "mscale_all_dim": 0.5, "truncate": false}})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_DOUBLE_EQ(d->rope_yarn.original_max_positions, 4096.0);
  EXPECT_DOUBLE_EQ(d->rope_yarn.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(d->rope_yarn.beta_slow, 1.0);
  EXPECT_FALSE(d->rope_yarn.truncate);
  EXPECT_EQ(d->max_positions, 163840);
  EXPECT_NEAR(YarnAttentionFactor(d->rope_yarn),
              (0.1 * std::log(40.0) + 1.0) / (0.05 * std::log(40.0) + 1.0), 1e-12);
  // An explicit attention_factor wins.
  absl::StatusOr<ModelConfig> a = Translate(
      R"({"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
          "attention_factor": 1.5}})");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ(YarnAttentionFactor(a->rope_yarn), 1.5);
  ExpectInvalid(Translate(R"({"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn"}})"),
                {"yarn", "factor"});
  ExpectInvalid(
      Translate(R"({"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": 0.5}})"),
      {"rope_yarn", "factor >= 1"});
  ExpectInvalid(Translate(R"({"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn",
                              "factor": 2.0, "truncate": 1}})"),
                {"truncate"});
}

TEST(HfConfigTest, RopeScalingLinearOrLlama3Only) {
  for (const char* json :
       {R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 4.0}})",
        R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 4}})",
        R"({"model_type": "llama", "rope_parameters": {"rope_type": "linear", "factor": 4.0}})"}) {
    absl::StatusOr<ModelConfig> c = Translate(json);
    ASSERT_TRUE(c.ok()) << json << ": " << c.status();
    EXPECT_DOUBLE_EQ(c->rope_scaling, 4.0) << json;
  }
  absl::StatusOr<ModelConfig> v5 = Translate(
      R"({"model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_DOUBLE_EQ(v5->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(v5->rope_scaling, 1.0);
  ExpectInvalid(
      Translate(R"({"model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 2.0}})"),
      {"'rope_scaling'", "'dynamic'", "linear"});
  ExpectInvalid(Translate(R"({"model_type": "mistral", "rope_scaling": {"type": "longrope"}})"),
                {"'longrope'", "yarn"});
  ExpectInvalid(Translate(R"({"model_type": "llama", "rope_scaling": {"type": "linear"}})"),
                {"factor"});
  ExpectInvalid(Translate(R"({"model_type": "llama", "rope_scaling": {"type": "linear",
                              "factor": -2}})"),
                {"factor"});
  ExpectInvalid(Translate(R"({"model_type": "llama", "rope_scaling": "linear"})"),
                {"rope_scaling", "object"});
}

TEST(HfConfigTest, MistralSlidingWindowAndQwen2Biases) {
  absl::StatusOr<ModelConfig> m = Translate(R"({"model_type": "mistral"})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_EQ(m->kv_heads(), 8);
  absl::StatusOr<ModelConfig> off = Translate(R"({"model_type": "mistral", "sliding_window": null})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->sliding_window, 0);
  absl::StatusOr<ModelConfig> q = Translate(
      R"({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": false})");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->qkv_bias_only);
  EXPECT_EQ(q->sliding_window, 0);
  ExpectInvalid(Translate(R"({"model_type": "qwen2", "use_sliding_window": true})"),
                {"use_sliding_window", "max_window_layers"});
}

// Qwen3: Qwen2's layout without biases, with q_norm / k_norm and
// Qwen3Config's own head_dim default (128, not hidden_size / heads).
TEST(HfConfigTest, Qwen3QkNormAndHeadDim) {
  absl::StatusOr<ModelConfig> q = Translate(R"({"model_type": "qwen3"})");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->qk_norm);
  EXPECT_EQ(q->head_size(), 128);
  EXPECT_FALSE(q->attention_bias);
  EXPECT_FALSE(q->qkv_bias_only);
  EXPECT_EQ(q->weight_layout, "llama");
  absl::StatusOr<ModelConfig> small = Translate(
      R"({"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16,
          "num_key_value_heads": 8, "head_dim": 128, "attention_bias": true,
          "tie_word_embeddings": true, "layer_types": ["full_attention", "full_attention"]})");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->head_size(), 128);  // q_proj 2048 rows on a 1024 model
  EXPECT_EQ(small->kv_heads(), 8);
  EXPECT_TRUE(small->attention_bias);  // q/k/v and o_proj alike
  EXPECT_FALSE(small->qkv_bias_only);
  EXPECT_FALSE(Translate(R"({"model_type": "qwen2"})")->qk_norm);
  ExpectInvalid(Translate(R"({"model_type": "qwen3", "use_sliding_window": true})"),
                {"use_sliding_window", "max_window_layers"});
  ExpectInvalid(
      Translate(R"({"model_type": "qwen3", "layer_types": ["full_attention", "sliding_attention"]})"),
      {"layer_types", "full_attention", "sliding_attention"});
  ExpectInvalid(Translate(R"({"model_type": "qwen3", "layer_types": "full_attention"})"),
                {"layer_types", "must be a list"});
}

// Phi-3: Llama's blocks under its own weight layout (fused qkv_proj and
// gate_up_proj), Phi3Config's defaults, no biases, a window on every layer;
// a partial rotary embedding (Phi-4-mini) and longrope are refused.
TEST(HfConfigTest, Phi3DefaultsAndRefusals) {
  absl::StatusOr<ModelConfig> p = Translate(R"({"model_type": "phi3", "sliding_window": 2047})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->weight_layout, "phi3");
  EXPECT_EQ(p->vocab_size, 32064);
  EXPECT_EQ(p->d_model, 3072);
  EXPECT_EQ(p->ffn_dim, 8192);
  EXPECT_EQ(p->kv_heads(), 32);
  EXPECT_DOUBLE_EQ(p->norm_eps, 1e-5);
  EXPECT_EQ(p->eos_token_id, 32000);
  EXPECT_EQ(p->sliding_window, 2047);
  EXPECT_FALSE(p->attention_bias);
  EXPECT_FALSE(p->mlp_bias);
  EXPECT_FALSE(p->qk_norm);
  ExpectInvalid(Translate(R"({"model_type": "phi3", "partial_rotary_factor": 0.75})"),
                {"partial_rotary_factor", "0.75"});
  ExpectInvalid(Translate(R"({"model_type": "phi3", "rope_scaling": {"type": "longrope",
                              "short_factor": [1.0], "long_factor": [2.0]}})"),
                {"'longrope'"});
}

// Gemma 3's text model: Gemma3TextConfig's defaults, its layer pattern in
// both spellings, and Gemma 2's softcapping and EmbeddingGemma's
// bidirectional attention refused.
TEST(HfConfigTest, Gemma3DefaultsPatternAndRefusals) {
  absl::StatusOr<ModelConfig> g = Translate(R"({"model_type": "gemma3_text"})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->weight_layout, "gemma3");
  EXPECT_EQ(g->vocab_size, 262208);
  EXPECT_EQ(g->d_model, 2304);
  EXPECT_EQ(g->n_layers, 26);
  EXPECT_EQ(g->kv_heads(), 4);
  EXPECT_EQ(g->head_size(), 256);
  EXPECT_EQ(g->max_positions, 131072);
  EXPECT_EQ(g->activation, Activation::kGeGluTanh);
  EXPECT_TRUE(g->sandwich_norm);
  EXPECT_TRUE(g->qk_norm);
  EXPECT_DOUBLE_EQ(g->norm_weight_offset, 1.0);
  EXPECT_DOUBLE_EQ(g->query_pre_attn_scalar, 256.0);
  EXPECT_DOUBLE_EQ(g->embedding_scale, std::sqrt(2304.0));
  EXPECT_EQ(g->sliding_window, 4096);
  EXPECT_DOUBLE_EQ(g->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(g->rope_local_theta, 10000.0);
  EXPECT_EQ(g->full_attention_layers, (std::vector<int64_t>{5, 11, 17, 23}));
  EXPECT_TRUE(g->tie_embeddings);
  EXPECT_EQ(g->bos_token_id, 2);
  EXPECT_EQ(g->eos_token_id, 1);
  EXPECT_EQ(g->pad_token_id, 0);
  EXPECT_FALSE(g->attention_bias);
  // Gemma 3 1B's config.json.
  absl::StatusOr<ModelConfig> one_b = Translate(R"({
      "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
      "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
      "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
      "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
      "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
      "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
      "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
      "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
      "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})");
  ASSERT_TRUE(one_b.ok()) << one_b.status();
  EXPECT_EQ(one_b->kv_heads(), 1);
  EXPECT_EQ(one_b->sliding_window, 512);
  EXPECT_EQ(one_b->more_eos_token_ids, (std::vector<int64_t>{106}));  // <end_of_turn>
  EXPECT_EQ(one_b->saved_dtype, "bfloat16");
  // layer_types wins over the pattern; a null window makes every layer global.
  absl::StatusOr<ModelConfig> typed = Translate(R"({"model_type": "gemma3_text",
      "num_hidden_layers": 3, "sliding_window_pattern": 6,
      "layer_types": ["full_attention", "sliding_attention", "full_attention"]})");
  ASSERT_TRUE(typed.ok()) << typed.status();
  EXPECT_EQ(typed->full_attention_layers, (std::vector<int64_t>{0, 2}));
  absl::StatusOr<ModelConfig> global =
      Translate(R"({"model_type": "gemma3_text", "sliding_window": null})");
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_EQ(global->sliding_window, 0);
  EXPECT_TRUE(global->full_attention_layers.empty());
  EXPECT_DOUBLE_EQ(global->rope_local_theta, 0.0);
  ExpectInvalid(Translate(R"({"model_type": "gemma3_text", "num_hidden_layers": 2,
                              "layer_types": ["full_attention"]})"),
                {"layer_types", "num_hidden_layers"});
  ExpectInvalid(Translate(R"({"model_type": "gemma3_text", "num_hidden_layers": 1,
                              "layer_types": ["chunked_attention"]})"),
                {"layer_types", "sliding_attention"});
  ExpectInvalid(Translate(R"({"model_type": "gemma3_text", "sliding_window_pattern": 0})"),
                {"sliding_window_pattern"});
  ExpectInvalid(Translate(R"({"model_type": "gemma3_text", "final_logit_softcapping": 30.0})"),
                {"final_logit_softcapping", "must be null"});
  ExpectInvalid(Translate(R"({"model_type": "gemma3_text", "attn_logit_softcapping": 50.0})"),
                {"attn_logit_softcapping"});
  // EmbeddingGemma: an encoder whose sliding layers see window / 2 + 1
  // positions either way, as Gemma3TextConfig sets it.
  absl::StatusOr<ModelConfig> embedding = Translate(R"({"model_type": "gemma3_text",
      "use_bidirectional_attention": true, "sliding_window": 512, "hidden_size": 768})");
  ASSERT_TRUE(embedding.ok()) << embedding.status();
  EXPECT_EQ(embedding->architecture, Architecture::kEncoderOnly);
  EXPECT_EQ(embedding->sliding_window, 257);
  EXPECT_FALSE(embedding->tie_embeddings);
  EXPECT_EQ(embedding->cached_layers(), 0);
  ExpectInvalid(Translate(R"({"model_type": "gemma3_text", "hidden_activation": "silu"})"),
                {"hidden_activation", "gelu_pytorch_tanh"});
  // The multimodal Gemma 3 (4B and up): its text_config, as Gemma 3 4B's
  // config.json spells it (only what differs from the defaults).
  absl::StatusOr<ModelConfig> four_b = Translate(R"({
      "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
      "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
      "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                      "model_type": "gemma3_text", "num_hidden_layers": 34,
                      "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                      "sliding_window": 1024},
      "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
      "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})");
  ASSERT_TRUE(four_b.ok()) << four_b.status();
  EXPECT_EQ(four_b->weight_layout, "gemma3");
  EXPECT_EQ(four_b->d_model, 2560);
  EXPECT_EQ(four_b->vocab_size, 262208);
  EXPECT_DOUBLE_EQ(four_b->rope_scaling, 8.0);  // the global layers' only
  EXPECT_DOUBLE_EQ(four_b->rope_local_theta, 10000.0);
  EXPECT_EQ(four_b->sliding_window, 1024);
  EXPECT_EQ(four_b->full_attention_layers, (std::vector<int64_t>{5, 11, 17, 23, 29}));
  EXPECT_EQ(four_b->eos_token_id, 1);
  EXPECT_EQ(four_b->more_eos_token_ids, (std::vector<int64_t>{106}));
  EXPECT_EQ(four_b->saved_dtype, "bfloat16");
  EXPECT_FALSE(four_b->attention_bias);
  // transformers 5 spells the two RoPEs per layer type.
  absl::StatusOr<ModelConfig> v5 = Translate(R"({"model_type": "gemma3_text",
      "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}})");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_DOUBLE_EQ(v5->rope_scaling, 8.0);
  EXPECT_DOUBLE_EQ(v5->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(v5->rope_local_theta, 20000.0);
  ExpectInvalid(Translate(R"({"model_type": "gemma3_text", "rope_parameters": {
        "sliding_attention": {"rope_type": "linear", "factor": 2.0}}})"),
                {"rope_parameters", "sliding_attention"});
  ExpectInvalid(Translate(R"({"model_type": "llama", "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0}}})"),
                {"rope_parameters", "per layer type"});
  // The top level's EOS ids replace the text model's.
  absl::StatusOr<ModelConfig> ids = Translate(R"({"model_type": "gemma3", "eos_token_id": 106,
      "text_config": {"eos_token_id": [1, 106], "bos_token_id": 5}})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->eos_token_id, 106);
  EXPECT_TRUE(ids->more_eos_token_ids.empty());
  EXPECT_EQ(ids->bos_token_id, 5);
  // Null top-level ids keep the text model's.
  absl::StatusOr<ModelConfig> nulls = Translate(R"({"model_type": "gemma3", "eos_token_id": null,
      "bos_token_id": null, "text_config": {"eos_token_id": [1, 106], "bos_token_id": 2}})");
  ASSERT_TRUE(nulls.ok()) << nulls.status();
  EXPECT_EQ(nulls->eos_token_id, 1);
  EXPECT_EQ(nulls->more_eos_token_ids, (std::vector<int64_t>{106}));
  EXPECT_EQ(nulls->bos_token_id, 2);
  // hidden_act is not Gemma 3's key (transformers ignores it too).
  absl::StatusOr<ModelConfig> act =
      Translate(R"({"model_type": "gemma3_text", "hidden_act": "gelu"})");
  ASSERT_TRUE(act.ok()) << act.status();
  EXPECT_EQ(act->activation, Activation::kGeGluTanh);
  ExpectInvalid(Translate(R"({"model_type": "gemma3"})"), {"text_config"});
  ExpectInvalid(Translate(R"({"model_type": "gemma3", "text_config": {"sliding_window": "x"}})"),
                {"text_config", "sliding_window"});
}

TEST(HfConfigTest, SentenceTransformersPooling) {
  EXPECT_EQ(*ParseSentenceTransformersPooling(
                R"({"word_embedding_dimension": 384, "pooling_mode_cls_token": true,
                    "pooling_mode_mean_tokens": false})"),
            Pooling::kFirst);
  EXPECT_EQ(*ParseSentenceTransformersPooling(R"({"pooling_mode_mean_tokens": true})"),
            Pooling::kMean);
  EXPECT_EQ(*ParseSentenceTransformersPooling(R"({"pooling_mode_lasttoken": true})"),
            Pooling::kLast);
  absl::StatusOr<Pooling> max = ParseSentenceTransformersPooling(R"({"pooling_mode_max_tokens": true})");
  ASSERT_FALSE(max.ok());
  EXPECT_THAT(std::string(max.status().message()), HasSubstr("pooling_mode_max_tokens"));
  EXPECT_FALSE(ParseSentenceTransformersPooling(
                   R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true})")
                   .ok());
}

// ---- ReadModelConfig on folders --------------------------------------------

class HfFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / "dikkat_hf_config_XXXXXX").string();
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(dir_ + "/" + name).parent_path());
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string dir_;
};

// Llama-3 Instruct: config.json names <|end_of_text|> (and sometimes
// <|eot_id|>), generation_config.json the ids generate() stops at.
TEST_F(HfFolderTest, GenerationConfigAddsEosIds) {
  Write("config.json", R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
                           "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 256,
                           "eos_token_id": [250, 252]})");
  absl::StatusOr<ModelConfig> plain = ReadModelConfig(dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(EosTokenIds(*plain), (std::vector<int64_t>{250, 252}));
  Write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [250, 251, 252],
                                      "do_sample": true, "temperature": 0.6})");
  absl::StatusOr<ModelConfig> merged = ReadModelConfig(dir_);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(EosTokenIds(*merged), (std::vector<int64_t>{250, 252, 251}));
  Write("generation_config.json", R"({"eos_token_id": 253})");
  merged = ReadModelConfig(dir_);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(EosTokenIds(*merged), (std::vector<int64_t>{250, 252, 253}));
  // Errors name the file and what is wrong.
  Write("generation_config.json", R"({"eos_token_id": 256})");
  ExpectInvalid(ReadModelConfig(dir_), {"generation_config.json", "256", "vocab_size 256"});
  Write("generation_config.json", R"({"eos_token_id": ["</s>"]})");
  ExpectInvalid(ReadModelConfig(dir_), {"generation_config.json", "eos_token_id", "</s>"});
  Write("generation_config.json", "{not json");
  ExpectInvalid(ReadModelConfig(dir_), {"generation_config.json", "not a JSON object"});
  // Its sampling keys are the defaults of requests that leave them unset
  // (Qwen2.5-Instruct's file; do_sample is ignored, as vLLM does).
  Write("generation_config.json", R"({"bos_token_id": 151643, "do_sample": true,
      "eos_token_id": [251, 252], "pad_token_id": 151643, "repetition_penalty": 1.05,
      "temperature": 0.7, "top_p": 0.8, "top_k": 20})");
  merged = ReadModelConfig(dir_);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->sampling_defaults.temperature, std::optional<float>(0.7f));
  EXPECT_EQ(merged->sampling_defaults.top_p, std::optional<float>(0.8f));
  EXPECT_EQ(merged->sampling_defaults.top_k, std::optional<int32_t>(20));
  EXPECT_EQ(merged->sampling_defaults.repetition_penalty, std::optional<float>(1.05f));
  EXPECT_FALSE(plain->sampling_defaults.temperature.has_value());
  // transformers' own default top_k (50), as save_pretrained writes it, is
  // not a recommendation.
  Write("generation_config.json", R"({"top_k": 50, "temperature": 0.6})");
  merged = ReadModelConfig(dir_);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_FALSE(merged->sampling_defaults.top_k.has_value());
  EXPECT_EQ(merged->sampling_defaults.temperature, std::optional<float>(0.6f));
  Write("generation_config.json", R"({"top_p": 0})");
  ExpectInvalid(ReadModelConfig(dir_), {"generation_config.json", "top_p", "(0, 1]"});
  Write("generation_config.json", R"({"temperature": "hot"})");
  ExpectInvalid(ReadModelConfig(dir_), {"generation_config.json", "temperature", "hot"});
}

TEST_F(HfFolderTest, SentenceTransformersFolderSetsPooling) {
  Write("config.json", R"({"model_type": "bert", "hidden_size": 32, "num_attention_heads": 2})");
  absl::StatusOr<ModelConfig> plain = ReadModelConfig(dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->default_pooling, Pooling::kMean);
  Write("1_Pooling/config.json", R"({"pooling_mode_cls_token": true})");
  absl::StatusOr<ModelConfig> cls = ReadModelConfig(dir_);
  ASSERT_TRUE(cls.ok()) << cls.status();
  EXPECT_EQ(cls->default_pooling, Pooling::kFirst);
  EXPECT_FALSE(cls->default_normalize);
  EXPECT_EQ(cls->max_seq_length, 0);
  // all-MiniLM-L6-v2's modules.json and sentence_bert_config.json.
  Write("modules.json", R"([
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
  ])");
  Write("sentence_bert_config.json", R"({"max_seq_length": 256, "do_lower_case": false})");
  absl::StatusOr<ModelConfig> st = ReadModelConfig(dir_);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->default_normalize);
  EXPECT_EQ(st->max_seq_length, 256);
  // Dense modules (EmbeddingGemma's 32 -> 48 -> 24 here), each read from its
  // own folder's config.json, after the pooling.
  Write("modules.json", R"([{"type": "sentence_transformers.models.Transformer"},
                            {"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.Dense", "path": "2_Dense"},
                            {"type": "sentence_transformers.models.Dense", "path": "3_Dense"},
                            {"type": "sentence_transformers.models.Normalize"}])");
  Write("2_Dense/config.json", R"({"in_features": 32, "out_features": 48, "bias": false,
      "activation_function": "torch.nn.modules.linear.Identity"})");
  Write("3_Dense/config.json", R"({"in_features": 48, "out_features": 24})");
  absl::StatusOr<ModelConfig> dense = ReadModelConfig(dir_);
  ASSERT_TRUE(dense.ok()) << dense.status();
  ASSERT_EQ(dense->embedding_dense.size(), 2u);
  EXPECT_FALSE(dense->embedding_dense[0].bias);
  EXPECT_FALSE(dense->embedding_dense[0].tanh);
  EXPECT_TRUE(dense->embedding_dense[1].bias);  // Dense's defaults: a bias and tanh
  EXPECT_TRUE(dense->embedding_dense[1].tanh);
  EXPECT_EQ(dense->embedding_dim(), 24);
  EXPECT_TRUE(dense->default_normalize);
  // Widths that do not chain, an activation dikkat does not apply, a module
  // out of order or a path out of the folder are refused.
  Write("3_Dense/config.json", R"({"in_features": 40, "out_features": 24})");
  ExpectInvalid(ReadModelConfig(dir_), {"embedding_dense[1]", "40 -> 24", "take 48"});
  Write("3_Dense/config.json", R"({"in_features": 48, "out_features": 24,
      "activation_function": "torch.nn.modules.activation.ReLU"})");
  ExpectInvalid(ReadModelConfig(dir_), {"3_Dense/config.json", "ReLU"});
  Write("modules.json", R"([{"type": "sentence_transformers.models.Transformer"},
                            {"type": "sentence_transformers.models.Dense", "path": "2_Dense"},
                            {"type": "sentence_transformers.models.Pooling"}])");
  ExpectInvalid(ReadModelConfig(dir_), {"modules.json", "Dense", "out of the order"});
  Write("modules.json", R"([{"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.Dense", "path": "a/../../x"}])");
  ExpectInvalid(ReadModelConfig(dir_), {"modules.json", "inside the folder"});
  Write("modules.json", R"([{"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.Dense", "path": "/etc"}])");
  ExpectInvalid(ReadModelConfig(dir_), {"modules.json", "inside the folder"});
  Write("modules.json", R"([{"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.Dense", "path": "2_Dense"},
                            {"type": "sentence_transformers.models.Dense", "path": "2_Dense"}])");
  ExpectInvalid(ReadModelConfig(dir_), {"modules.json", "of its own"});
  Write("modules.json", R"([{"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.Dense", "path": "2_Dense"},
                            {"type": "sentence_transformers.models.Dense", "path": "./2_Dense/"}])");
  ExpectInvalid(ReadModelConfig(dir_), {"modules.json", "of its own"});
  Write("modules.json", R"([{"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.Dense", "path": "."}])");
  ExpectInvalid(ReadModelConfig(dir_), {"modules.json", "of its own"});
  // Newer sentence-transformers options apply only at their defaults.
  Write("modules.json", R"([{"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.Dense", "path": "2_Dense"}])");
  Write("2_Dense/config.json", R"({"in_features": 32, "out_features": 32, "use_residual": true})");
  ExpectInvalid(ReadModelConfig(dir_), {"2_Dense/config.json", "use_residual"});
  Write("2_Dense/config.json", R"({"in_features": 32, "out_features": 32,
      "module_input_name": "token_embeddings"})");
  ExpectInvalid(ReadModelConfig(dir_), {"module_input_name", "token_embeddings"});
  Write("2_Dense/config.json", R"({"in_features": 32, "out_features": 32,
      "module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding",
      "use_residual": false})");
  EXPECT_TRUE(ReadModelConfig(dir_).ok());
  // A module dikkat does not apply is refused by name: the embeddings would
  // not be the model's.
  Write("modules.json", R"([{"type": "sentence_transformers.models.Transformer"},
                            {"type": "sentence_transformers.models.Pooling"},
                            {"type": "sentence_transformers.models.WeightedLayerPooling"}])");
  ExpectInvalid(ReadModelConfig(dir_),
                {"modules.json", "WeightedLayerPooling", "does not apply"});
  // Named prompts (EmbeddingGemma's config_sentence_transformers.json, in
  // part) and a pooling that leaves them out.
  Write("modules.json", "[]");
  Write("config_sentence_transformers.json", R"({"prompts": {"query": "task: search result | query: ",
      "document": "title: none | text: "}, "default_prompt_name": null, "similarity_fn_name": "cosine"})");
  absl::StatusOr<ModelConfig> prompted = ReadModelConfig(dir_);
  ASSERT_TRUE(prompted.ok()) << prompted.status();
  EXPECT_EQ(prompted->prompts.at("query"), "task: search result | query: ");
  EXPECT_EQ(prompted->prompts.size(), 2u);
  EXPECT_TRUE(prompted->default_prompt_name.empty());
  EXPECT_TRUE(prompted->pooling_includes_prompt);
  Write("1_Pooling/config.json", R"({"pooling_mode_mean_tokens": true, "include_prompt": false})");
  absl::StatusOr<ModelConfig> excluded = ReadModelConfig(dir_);
  ASSERT_TRUE(excluded.ok()) << excluded.status();
  EXPECT_FALSE(excluded->pooling_includes_prompt);
  Write("config_sentence_transformers.json", R"({"prompts": {"query": "q: "},
      "default_prompt_name": "passage"})");
  ExpectInvalid(ReadModelConfig(dir_),
                {"config_sentence_transformers.json", "default_prompt_name", "passage"});
  Write("config_sentence_transformers.json", R"({"prompts": {"query": 3}})");
  ExpectInvalid(ReadModelConfig(dir_), {"config_sentence_transformers.json", "prompts"});
  std::filesystem::remove(dir_ + "/config_sentence_transformers.json");
  Write("1_Pooling/config.json", R"({"pooling_mode_cls_token": true})");
  Write("modules.json", R"({"type": "x"})");
  ExpectInvalid(ReadModelConfig(dir_), {"modules.json", "not a JSON list"});
  Write("modules.json", "[]");
  Write("sentence_bert_config.json", R"({"max_seq_length": "long"})");
  ExpectInvalid(ReadModelConfig(dir_), {"sentence_bert_config.json", "max_seq_length", "long"});
}

// The dtype the checkpoint was saved in, for --dtype auto: torch_dtype, or
// newer transformers' dtype.
TEST_F(HfFolderTest, SavedDtypeIsRead) {
  Write("config.json", R"({"model_type": "gpt2", "torch_dtype": "bfloat16"})");
  absl::StatusOr<ModelConfig> c = ReadModelConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->saved_dtype, "bfloat16");
  Write("config.json", R"({"model_type": "gpt2", "dtype": "float16"})");
  c = ReadModelConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->saved_dtype, "float16");
  Write("config.json", R"({"model_type": "gpt2"})");
  c = ReadModelConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->saved_dtype, "");
}

TEST_F(HfFolderTest, ErrorsNameTheFile) {
  Write("config.json", R"({"model_type": "gpt_neox"})");
  absl::StatusOr<ModelConfig> c = ReadModelConfig(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(dir_ + "/config.json"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("gpt_neox"));
}

// ---- tensor renaming -------------------------------------------------------

at::Tensor Values(int64_t rows, int64_t cols) {
  return at::arange(rows * cols, at::TensorOptions().dtype(at::kFloat)).view({rows, cols});
}

ModelConfig Layout(const std::string& layout, bool tie) {
  ModelConfig c;
  c.weight_layout = layout;
  c.tie_embeddings = tie;
  return c;
}

// Checkpoint tensors the model does not take mean another model than the
// one dikkat runs (Qwen3's q_norm on a Llama layout, an o_proj bias): a load
// error naming them. BERT's pooler and pre-training heads are fine.
TEST(HfWeightsTest, UnusedTensorsAreAnErrorBesidesBertsHeads) {
  HfWeights hf;
  hf.source["layers.0.self_attn.out_proj.bias"] = "model.layers.0.self_attn.o_proj.bias";
  ModelConfig llama;
  llama.weight_layout = "llama";
  EXPECT_TRUE(CheckUnusedHfTensors({}, hf, llama).ok());
  absl::Status s = CheckUnusedHfTensors(
      {"model.layers.0.self_attn.q_norm.weight", "layers.0.self_attn.out_proj.bias"}, hf, llama);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("2 tensor(s)"), HasSubstr("model.layers.0.self_attn.o_proj.bias"),
                    HasSubstr("model.layers.0.self_attn.q_norm.weight"), HasSubstr("'llama'")));
  ModelConfig bert;
  bert.weight_layout = "bert";
  EXPECT_TRUE(CheckUnusedHfTensors({"bert.pooler.dense.weight", "pooler.dense.bias",
                                    "cls.predictions.bias", "classifier.weight",
                                    "qa_outputs.bias"},
                                   hf, bert)
                  .ok());
  EXPECT_FALSE(CheckUnusedHfTensors({"bert.encoder.layer.0.attention.self.q_norm.weight"}, hf,
                                    bert)
                   .ok());
  EXPECT_TRUE(CheckUnusedHfTensors({"score.weight"}, hf, llama).ok());  // a task head
  // Both unused halves of Phi-3's gate_up_proj name it once.
  HfWeights phi3;
  phi3.source["layers.9.linear_gate.weight"] = "model.layers.9.mlp.gate_up_proj.weight";
  phi3.source["layers.9.linear1.weight"] = "model.layers.9.mlp.gate_up_proj.weight";
  absl::Status halves = CheckUnusedHfTensors(
      {"layers.9.linear_gate.weight", "layers.9.linear1.weight"}, phi3, Layout("phi3", false));
  EXPECT_THAT(std::string(halves.message()),
              AllOf(HasSubstr("1 tensor(s)"), HasSubstr("(model.layers.9.mlp.gate_up_proj.weight)")));
}

TEST(HfWeightsTest, Gpt2Conv1DIsTransposedWithoutCopying) {
  const at::Tensor c_attn = Values(4, 12);  // Conv1D [in, out]
  TensorMap hf = {{"transformer.h.3.attn.c_attn.weight", c_attn},
                  {"transformer.h.3.attn.c_attn.bias", Values(1, 12).view({12})},
                  {"transformer.h.3.mlp.c_fc.weight", Values(4, 16)},
                  {"transformer.h.3.ln_2.weight", Values(1, 4).view({4})},
                  {"transformer.h.3.attn.masked_bias", Values(1, 1)},
                  {"transformer.wte.weight", Values(7, 4)},
                  {"lm_head.weight", Values(7, 4)}};
  absl::StatusOr<HfWeights> w = ConvertHfWeights(Layout("gpt2", true), hf);
  ASSERT_TRUE(w.ok()) << w.status();
  const at::Tensor& in_proj = w->tensors.at("layers.3.self_attn.in_proj_weight");
  EXPECT_EQ(in_proj.sizes(), at::IntArrayRef({12, 4}));
  EXPECT_TRUE(in_proj.equal(c_attn.t()));
  EXPECT_EQ(in_proj.data_ptr(), c_attn.data_ptr());  // a view, not a copy
  EXPECT_EQ(w->tensors.count("layers.3.self_attn.in_proj_bias"), 1u);
  EXPECT_EQ(w->tensors.at("layers.3.linear1.weight").sizes(), at::IntArrayRef({16, 4}));
  EXPECT_EQ(w->tensors.count("layers.3.norm2.weight"), 1u);
  EXPECT_EQ(w->tensors.count("embed_tokens.weight"), 1u);
  EXPECT_EQ(w->source.at("layers.3.linear1.weight"), "transformer.h.3.mlp.c_fc.weight");
  // The mask buffer and the tied lm_head copy are dropped, not loaded.
  EXPECT_EQ(w->dropped, (std::vector<std::string>{"lm_head.weight",
                                                  "transformer.h.3.attn.masked_bias"}));
  EXPECT_EQ(w->tensors.size(), 5u);

  absl::StatusOr<HfWeights> untied = ConvertHfWeights(Layout("gpt2", false), hf);
  ASSERT_TRUE(untied.ok()) << untied.status();
  EXPECT_EQ(untied->tensors.count("lm_head.weight"), 1u);
}

// Phi-3's gate_up_proj is two weights stacked: each half becomes one, as a
// view; qkv_proj is the fused in_proj.
TEST(HfWeightsTest, Phi3StackedWeightsAreSplitIntoViews) {
  const at::Tensor gate_up = Values(8, 4);  // [gate (4 rows); up (4 rows)]
  TensorMap hf = {{"model.layers.0.mlp.gate_up_proj.weight", gate_up},
                  {"model.layers.0.self_attn.qkv_proj.weight", Values(12, 4)},
                  {"model.layers.0.self_attn.rotary_emb.inv_freq", Values(1, 2)}};
  absl::StatusOr<HfWeights> w = ConvertHfWeights(Layout("phi3", false), hf);
  ASSERT_TRUE(w.ok()) << w.status();
  const at::Tensor& gate = w->tensors.at("layers.0.linear_gate.weight");
  const at::Tensor& up = w->tensors.at("layers.0.linear1.weight");
  EXPECT_TRUE(gate.equal(gate_up.narrow(0, 0, 4)));
  EXPECT_TRUE(up.equal(gate_up.narrow(0, 4, 4)));
  EXPECT_EQ(gate.data_ptr(), gate_up.data_ptr());  // views, not copies
  EXPECT_EQ(w->source.at("layers.0.linear1.weight"), "model.layers.0.mlp.gate_up_proj.weight");
  EXPECT_EQ(w->tensors.count("layers.0.self_attn.in_proj_weight"), 1u);
  EXPECT_EQ(w->dropped, (std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"}));
  absl::StatusOr<HfWeights> odd = ConvertHfWeights(
      Layout("phi3", false), {{"model.layers.0.mlp.gate_up_proj.weight", Values(7, 4)}});
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(std::string(odd.status().message()),
              AllOf(HasSubstr("gate_up_proj"), HasSubstr("even first dimension"), HasSubstr("[7, 4]")));
}

TEST(HfWeightsTest, Errors) {
  absl::StatusOr<HfWeights> dup = ConvertHfWeights(
      Layout("gpt2", true), {{"wte.weight", Values(2, 2)}, {"transformer.wte.weight", Values(2, 2)}});
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("'embed_tokens.weight'"));
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("transformer.wte.weight"));

  absl::StatusOr<HfWeights> rank = ConvertHfWeights(
      Layout("gpt2", true), {{"h.0.mlp.c_proj.weight", Values(1, 8).view({8})}});
  ASSERT_FALSE(rank.ok());
  EXPECT_THAT(std::string(rank.status().message()), HasSubstr("h.0.mlp.c_proj.weight"));

  absl::StatusOr<HfWeights> layout = ConvertHfWeights(Layout("t5", true), {});
  ASSERT_FALSE(layout.ok());
  EXPECT_THAT(std::string(layout.status().message()), HasSubstr("gpt2, bert, llama"));
}

TEST(HfWeightsTest, BertNamesIncludingOldGammaBeta) {
  TensorMap hf = {{"bert.embeddings.LayerNorm.gamma", Values(1, 4)},
                  {"bert.embeddings.LayerNorm.beta", Values(1, 4)},
                  {"bert.embeddings.token_type_embeddings.weight", Values(2, 4)},
                  {"bert.embeddings.position_ids", Values(1, 8)},
                  {"bert.encoder.layer.11.attention.self.key.bias", Values(1, 4)},
                  {"bert.encoder.layer.11.attention.output.LayerNorm.weight", Values(1, 4)},
                  {"bert.encoder.layer.11.output.LayerNorm.bias", Values(1, 4)},
                  {"bert.encoder.layer.11.output.dense.weight", Values(4, 8)},
                  {"bert.pooler.dense.weight", Values(4, 4)},
                  {"cls.predictions.bias", Values(1, 4)}};
  absl::StatusOr<HfWeights> w = ConvertHfWeights(Layout("bert", false), hf);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const char* name :
       {"embed_norm.weight", "embed_norm.bias", "embed_types.weight",
        "layers.11.self_attn.k_proj.bias", "layers.11.norm1.weight", "layers.11.norm2.bias",
        "layers.11.linear2.weight",
        // unknown to the layout: kept under their own names, reported unused at load
        "bert.pooler.dense.weight", "cls.predictions.bias"}) {
    EXPECT_EQ(w->tensors.count(name), 1u) << name;
  }
  EXPECT_EQ(w->dropped, std::vector<std::string>{"bert.embeddings.position_ids"});
}

TEST(HfWeightsTest, Gemma3SandwichNormNames) {
  TensorMap hf = {{"model.layers.0.input_layernorm.weight", Values(1, 4)},
                  {"model.layers.0.post_attention_layernorm.weight", Values(1, 4)},
                  {"model.layers.0.pre_feedforward_layernorm.weight", Values(1, 4)},
                  {"model.layers.0.post_feedforward_layernorm.weight", Values(1, 4)},
                  {"model.layers.0.self_attn.q_norm.weight", Values(1, 2)},
                  {"model.layers.0.self_attn.o_proj.weight", Values(4, 4)}};
  absl::StatusOr<HfWeights> w = ConvertHfWeights(Layout("gemma3", true), hf);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const char* name : {"layers.0.norm1.weight", "layers.0.post_norm1.weight",
                           "layers.0.norm2.weight", "layers.0.post_norm2.weight",
                           "layers.0.self_attn.q_norm.weight", "layers.0.self_attn.out_proj.weight"}) {
    EXPECT_EQ(w->tensors.count(name), 1u) << name;
  }
  EXPECT_EQ(w->tensors.size(), 6u);
  // Llama's post_attention_layernorm is its pre-feed-forward norm: the
  // same checkpoint read as llama gives norm2 another tensor.
  absl::StatusOr<HfWeights> llama = ConvertHfWeights(Layout("llama", false), hf);
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->source.at("layers.0.norm2.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(w->source.at("layers.0.norm2.weight"),
            "model.layers.0.pre_feedforward_layernorm.weight");
  // The multimodal Gemma 3's prefixes: transformers >= 4.52 saves
  // model.language_model.*, older ones language_model.model.* and the head
  // as language_model.lm_head (a tied copy, dropped).
  TensorMap multimodal = {{"model.language_model.layers.1.input_layernorm.weight", Values(1, 4)},
                          {"language_model.model.norm.weight", Values(1, 4)},
                          {"language_model.lm_head.weight", Values(8, 4)},
                          {"model.vision_tower.vision_model.post_layernorm.weight", Values(1, 4)}};
  absl::StatusOr<HfWeights> mm = ConvertHfWeights(Layout("gemma3", true), multimodal);
  ASSERT_TRUE(mm.ok()) << mm.status();
  EXPECT_EQ(mm->tensors.count("layers.1.norm1.weight"), 1u);
  EXPECT_EQ(mm->tensors.count("final_norm.weight"), 1u);
  EXPECT_EQ(mm->dropped, std::vector<std::string>{"language_model.lm_head.weight"});
  // The image encoder keeps its own name and is an allowed unused tensor.
  EXPECT_EQ(mm->tensors.count("model.vision_tower.vision_model.post_layernorm.weight"), 1u);
  EXPECT_TRUE(CheckUnusedHfTensors({"model.vision_tower.vision_model.post_layernorm.weight"}, *mm,
                                   Layout("gemma3", true))
                  .ok());
  EXPECT_FALSE(CheckUnusedHfTensors({"model.vision_tower.vision_model.post_layernorm.weight"},
                                    *mm, Layout("llama", true))
                   .ok());
}

TEST(HfWeightsTest, LlamaNames) {
  TensorMap hf = {{"model.embed_tokens.weight", Values(8, 4)},
                  {"model.norm.weight", Values(1, 4)},
                  {"lm_head.weight", Values(8, 4)},
                  {"model.layers.0.self_attn.o_proj.weight", Values(4, 4)},
                  {"model.layers.0.self_attn.q_proj.bias", Values(1, 4)},
                  {"model.layers.0.mlp.gate_proj.weight", Values(6, 4)},
                  {"model.layers.0.mlp.up_proj.weight", Values(6, 4)},
                  {"model.layers.0.mlp.down_proj.weight", Values(4, 6)},
                  {"model.layers.0.input_layernorm.weight", Values(1, 4)},
                  {"model.layers.0.post_attention_layernorm.weight", Values(1, 4)},
                  {"model.layers.0.self_attn.rotary_emb.inv_freq", Values(1, 2)}};
  absl::StatusOr<HfWeights> w = ConvertHfWeights(Layout("llama", false), hf);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const char* name :
       {"embed_tokens.weight", "final_norm.weight", "lm_head.weight",
        "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.q_proj.bias",
        "layers.0.linear_gate.weight", "layers.0.linear1.weight", "layers.0.linear2.weight",
        "layers.0.norm1.weight", "layers.0.norm2.weight"}) {
    EXPECT_EQ(w->tensors.count(name), 1u) << name;
  }
  EXPECT_EQ(w->tensors.size(), 10u);
  EXPECT_EQ(w->dropped,
            std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"});
}

}  // namespace
}  // namespace dikkat::model
