#include "model/io/hf_config.h"

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dikkat::model {
namespace {

using Json = nlohmann::json;

// Typed access to a config.json object. An absent or null key leaves the
// caller's default in place: that is how transformers fills a config class.
class HfKeys {
 public:
  // `file`: what errors call the JSON the keys are read from.
  HfKeys(const Json& j, std::string model_type, std::string file = "config.json")
      : j_(j), model_type_(std::move(model_type)), file_(std::move(file)) {}

  bool Has(const char* key) const { return j_.contains(key); }

  const Json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  absl::Status Int(const char* key, int64_t* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number_integer()) return Error(key, *v, "must be an integer");
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }

  absl::Status Double(const char* key, double* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) return Error(key, *v, "must be a number");
    *out = v->get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, bool* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return Error(key, *v, "must be true or false");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const char* key, std::string* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) return Error(key, *v, "must be a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

  // A token id, a list of ids or null (-1). Of a list, the first id goes to
  // `out` and the others to `rest` (eos_token_id lists: Llama-3 Instruct's
  // [128001, 128009]); without `rest` they are ignored.
  absl::Status TokenId(const char* key, int64_t* out, std::vector<int64_t>* rest = nullptr) const {
    auto it = j_.find(key);
    if (it == j_.end()) return absl::OkStatus();
    return ReadTokenIds(key, *it, out, rest);
  }

  absl::Status ReadTokenIds(const char* key, const Json& v, int64_t* out,
                            std::vector<int64_t>* rest) const {
    if (v.is_null()) {
      *out = -1;
      return absl::OkStatus();
    }
    if (!v.is_array()) {
      if (!v.is_number_integer()) return Error(key, v, "must be a token id, a list of ids or null");
      *out = v.get<int64_t>();
      return absl::OkStatus();
    }
    for (const Json& id : v) {
      if (!id.is_number_integer()) return Error(key, v, "must be a token id, a list of ids or null");
    }
    *out = v.empty() ? -1 : v.front().get<int64_t>();
    if (rest != nullptr) {
      rest->clear();
      for (size_t i = 1; i < v.size(); ++i) rest->push_back(v[i].get<int64_t>());
    }
    return absl::OkStatus();
  }

  // A boolean option that dikkat implements only at one value.
  absl::Status RequireBool(const char* key, bool supported, const char* why) const {
    bool value = supported;
    DIKKAT_RETURN_IF_ERROR(Bool(key, &value));
    if (value == supported) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json key '", key, "' is ", value ? "true" : "false", " (model_type ", model_type_,
        "); dikkat supports only ", supported ? "true" : "false", ": ", why));
  }

  absl::Status Error(const char* key, const Json& value, const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, " key '", key, "'",
                     model_type_.empty() ? "" : absl::StrCat(" (model_type ", model_type_, ")"),
                     " ", what, ", got ", value.dump()));
  }

  const std::string& model_type() const { return model_type_; }

 private:
  const Json& j_;
  std::string model_type_;
  std::string file_;
};

// hidden_act / activation_function names of transformers' ACT2FN that match
// one of dikkat's activations exactly.
absl::StatusOr<Activation> PlainActivation(const HfKeys& keys, const char* key,
                                           const std::string& name) {
  // "gelu_new" and "gelu_pytorch_tanh" are both 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::kGeluTanh;
  if (name == "gelu") return Activation::kGelu;
  if (name == "relu") return Activation::kRelu;
  if (name == "silu" || name == "swish") return Activation::kSilu;
  return absl::InvalidArgumentError(
      absl::StrCat("config.json key '", key, "' is '", name, "' (model_type ", keys.model_type(),
                   "); dikkat supports: gelu_new, gelu_pytorch_tanh, gelu, relu, silu, swish"));
}

// The gated MLP of the Llama family: act(gate(x)) * up(x).
absl::StatusOr<Activation> GatedActivation(const HfKeys& keys, const std::string& name) {
  if (name == "silu" || name == "swish") return Activation::kSwiGlu;
  if (name == "gelu") return Activation::kGeGlu;
  return absl::InvalidArgumentError(
      absl::StrCat("config.json key 'hidden_act' is '", name, "' (model_type ", keys.model_type(),
                   "); dikkat supports: silu, swish (SwiGLU), gelu (GeGLU with exact GELU)"));
}

// rope_theta and rope_scaling (transformers 4.x), or rope_parameters (5.x).
absl::Status ReadRope(const HfKeys& keys, ModelConfig* c) {
  DIKKAT_RETURN_IF_ERROR(keys.Double("rope_theta", &c->rope_theta));
  const char* key = "rope_scaling";
  const Json* scaling = keys.Find(key);
  if (scaling == nullptr) {
    key = "rope_parameters";
    scaling = keys.Find(key);
  }
  if (scaling == nullptr) return absl::OkStatus();
  if (!scaling->is_object()) return keys.Error(key, *scaling, "must be an object or null");
  for (const auto& [name, value] : scaling->items()) {
    if (value.is_object()) {  // transformers 5's per layer type (Gemma 3): not this family's
      return keys.Error(key, *scaling, "holds an object per layer type, which dikkat reads for "
                                       "gemma3 only");
    }
  }
  HfKeys inner(*scaling, keys.model_type());
  DIKKAT_RETURN_IF_ERROR(inner.Double("rope_theta", &c->rope_theta));
  std::string type = "default";
  DIKKAT_RETURN_IF_ERROR(inner.String("type", &type));
  DIKKAT_RETURN_IF_ERROR(inner.String("rope_type", &type));
  if (type == "default") return absl::OkStatus();
  if (type == "llama3") {  // Llama 3.1 / 3.2
    RopeLlama3Scaling& r = c->rope_llama3;
    for (auto [name, field] : {std::pair<const char*, double*>{"factor", &r.factor},
                               {"low_freq_factor", &r.low_freq_factor},
                               {"high_freq_factor", &r.high_freq_factor},
                               {"original_max_position_embeddings", &r.original_max_positions}}) {
      const Json* v = inner.Find(name);
      if (v == nullptr || !v->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json key '", key, "' of type llama3 needs a number '", name, "', got ",
            scaling->dump()));
      }
      *field = v->get<double>();
    }
    return absl::OkStatus();  // Validate checks the ranges
  }
  if (type == "yarn") {  // Qwen2.5 / Qwen3 long context
    RopeYarnScaling& y = c->rope_yarn;
    const Json* factor = inner.Find("factor");
    if (factor == nullptr || !factor->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json key '", key, "' of type yarn needs a number 'factor', got ", scaling->dump()));
    }
    y.factor = factor->get<double>();
    // Absent: the config's own context is the pre-YaRN one, as transformers
    // assumes.
    y.original_max_positions = static_cast<double>(c->max_positions);
    DIKKAT_RETURN_IF_ERROR(inner.Double("original_max_position_embeddings", &y.original_max_positions));
    // transformers reads `x or default`: 0 / null take the default too.
    for (auto [name, field] : {std::pair<const char*, double*>{"beta_fast", &y.beta_fast},
                               {"beta_slow", &y.beta_slow},
                               {"mscale", &y.mscale},
                               {"mscale_all_dim", &y.mscale_all_dim},
                               {"attention_factor", &y.attention_factor}}) {
      const double fallback = *field;
      DIKKAT_RETURN_IF_ERROR(inner.Double(name, field));
      if (*field == 0.0) *field = fallback;
    }
    DIKKAT_RETURN_IF_ERROR(inner.Bool("truncate", &y.truncate));
    // The context YaRN extends to, as vLLM serves it (max_model_len): the
    // original one times factor, when that is longer than the config says.
    const double extended = y.original_max_positions * y.factor;
    if (std::isfinite(extended) && extended > static_cast<double>(c->max_positions) &&
        extended < 1e9) {
      c->max_positions = static_cast<int64_t>(extended);
    }
    return absl::OkStatus();  // Validate checks the ranges
  }
  if (type != "linear") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json key '", key, "' has type '", type, "' (model_type ", keys.model_type(),
        "); dikkat supports rope scaling types: linear (positions divided by 'factor'), "
        "llama3, yarn, default, or no ", key));
  }
  const Json* factor = inner.Find("factor");
  if (factor == nullptr || !factor->is_number() || !(factor->get<double>() > 0) ||
      !std::isfinite(factor->get<double>())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json key '", key, "' of type linear needs a number 'factor' > 0, got ",
        scaling->dump()));
  }
  c->rope_scaling = factor->get<double>();
  return absl::OkStatus();
}

absl::Status TranslateGpt2(const HfKeys& keys, ModelConfig* c) {
  c->architecture = Architecture::kDecoderOnly;
  c->weight_layout = "gpt2";
  // GPT2Config defaults.
  c->vocab_size = 50257;
  c->max_positions = 1024;
  c->d_model = 768;
  c->n_layers = 12;
  c->n_heads = 12;
  c->norm_eps = 1e-5;
  c->bos_token_id = c->eos_token_id = 50256;
  c->tie_embeddings = true;
  std::string activation = "gelu_new";
  DIKKAT_RETURN_IF_ERROR(keys.Int("vocab_size", &c->vocab_size));
  DIKKAT_RETURN_IF_ERROR(keys.Int("n_ctx", &c->max_positions));  // very old configs
  DIKKAT_RETURN_IF_ERROR(keys.Int("n_positions", &c->max_positions));
  DIKKAT_RETURN_IF_ERROR(keys.Int("n_embd", &c->d_model));
  DIKKAT_RETURN_IF_ERROR(keys.Int("n_layer", &c->n_layers));
  DIKKAT_RETURN_IF_ERROR(keys.Int("n_head", &c->n_heads));
  c->ffn_dim = 4 * c->d_model;  // n_inner: null -> 4 * n_embd
  DIKKAT_RETURN_IF_ERROR(keys.Int("n_inner", &c->ffn_dim));
  DIKKAT_RETURN_IF_ERROR(keys.Double("layer_norm_epsilon", &c->norm_eps));
  DIKKAT_RETURN_IF_ERROR(keys.String("activation_function", &activation));
  DIKKAT_ASSIGN_OR_RETURN(c->activation, PlainActivation(keys, "activation_function", activation));
  DIKKAT_RETURN_IF_ERROR(keys.Bool("tie_word_embeddings", &c->tie_embeddings));
  DIKKAT_RETURN_IF_ERROR(keys.RequireBool("scale_attn_weights", true,
                                          "attention scores are always scaled by 1/sqrt(head_dim)"));
  DIKKAT_RETURN_IF_ERROR(keys.RequireBool("scale_attn_by_inverse_layer_idx", false,
                                          "per-layer attention scaling is not implemented"));
  DIKKAT_RETURN_IF_ERROR(keys.RequireBool("add_cross_attention", false,
                                          "GPT-2 with cross-attention is not supported"));
  c->pre_norm = true;
  c->norm = NormKind::kLayerNorm;
  c->final_norm = true;
  c->positions = PositionKind::kLearned;
  c->attention_bias = c->mlp_bias = c->norm_bias = true;
  return absl::OkStatus();
}

absl::Status TranslateBert(const HfKeys& keys, ModelConfig* c) {
  c->architecture = Architecture::kEncoderOnly;
  c->weight_layout = "bert";
  // BertConfig defaults.
  c->vocab_size = 30522;
  c->d_model = 768;
  c->n_layers = 12;
  c->n_heads = 12;
  c->ffn_dim = 3072;
  c->max_positions = 512;
  c->type_vocab_size = 2;
  c->norm_eps = 1e-12;
  c->pad_token_id = 0;
  std::string activation = "gelu";
  std::string position_type = "absolute";
  DIKKAT_RETURN_IF_ERROR(keys.Int("vocab_size", &c->vocab_size));
  DIKKAT_RETURN_IF_ERROR(keys.Int("hidden_size", &c->d_model));
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_hidden_layers", &c->n_layers));
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_attention_heads", &c->n_heads));
  DIKKAT_RETURN_IF_ERROR(keys.Int("intermediate_size", &c->ffn_dim));
  DIKKAT_RETURN_IF_ERROR(keys.Int("max_position_embeddings", &c->max_positions));
  DIKKAT_RETURN_IF_ERROR(keys.Int("type_vocab_size", &c->type_vocab_size));
  DIKKAT_RETURN_IF_ERROR(keys.Double("layer_norm_eps", &c->norm_eps));
  DIKKAT_RETURN_IF_ERROR(keys.String("hidden_act", &activation));
  DIKKAT_ASSIGN_OR_RETURN(c->activation, PlainActivation(keys, "hidden_act", activation));
  DIKKAT_RETURN_IF_ERROR(keys.String("position_embedding_type", &position_type));
  if (position_type != "absolute") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json key 'position_embedding_type' is '", position_type,
        "' (model_type bert); dikkat supports only 'absolute' (learned position embeddings)"));
  }
  DIKKAT_RETURN_IF_ERROR(keys.RequireBool("is_decoder", false,
                                          "BERT is served as an encoder (Encode), not as a causal LM"));
  DIKKAT_RETURN_IF_ERROR(keys.RequireBool("add_cross_attention", false,
                                          "BERT with cross-attention is not supported"));
  c->pre_norm = false;  // post-LN: x = LayerNorm(x + f(x))
  c->norm = NormKind::kLayerNorm;
  c->final_norm = false;
  c->embedding_norm = true;
  c->positions = PositionKind::kLearned;
  c->attention_bias = c->mlp_bias = c->norm_bias = true;
  c->tie_embeddings = false;  // no LM head is loaded for an encoder
  // Mean over tokens, not [CLS]: dikkat does not run BERT's pooler (dense +
  // tanh), so "first" would not be HF's pooler_output either, and mean pooling
  // is what most sentence-embedding BERTs use. A sentence-transformers
  // 1_Pooling/config.json overrides it (model_loader.cc).
  c->default_pooling = Pooling::kMean;
  DIKKAT_RETURN_IF_ERROR(keys.TokenId("pad_token_id", &c->pad_token_id));
  return absl::OkStatus();
}

// llama, mistral, qwen2, qwen3 and phi3 share the block structure (qwen3
// adds q_norm / k_norm; phi3 fuses qkv_proj and gate_up_proj, its own
// weight layout).
absl::Status TranslateLlamaFamily(const HfKeys& keys, ModelConfig* c) {
  const std::string& type = keys.model_type();
  c->architecture = Architecture::kDecoderOnly;
  c->weight_layout = type == "phi3" ? "phi3" : "llama";
  c->tie_embeddings = false;
  c->norm_eps = 1e-6;
  c->rope_theta = 10000.0;
  if (type == "llama") {  // LlamaConfig defaults
    c->vocab_size = 32000;
    c->d_model = 4096;
    c->ffn_dim = 11008;
    c->n_layers = 32;
    c->n_heads = 32;
    c->max_positions = 2048;
    c->bos_token_id = 1;
    c->eos_token_id = 2;
  } else if (type == "mistral") {  // MistralConfig defaults
    c->vocab_size = 32000;
    c->d_model = 4096;
    c->ffn_dim = 14336;
    c->n_layers = 32;
    c->n_heads = 32;
    c->n_kv_heads = 8;
    c->max_positions = 4096 * 32;
    c->bos_token_id = 1;
    c->eos_token_id = 2;
    c->sliding_window = 4096;
  } else if (type == "phi3") {  // Phi3Config defaults (Phi-3-mini)
    c->vocab_size = 32064;
    c->d_model = 3072;
    c->ffn_dim = 8192;
    c->n_layers = 32;
    c->n_heads = 32;
    c->max_positions = 4096;
    c->norm_eps = 1e-5;
    c->bos_token_id = 1;
    c->eos_token_id = 32000;
    c->pad_token_id = 32000;
  } else {  // qwen2 / qwen3: Qwen2Config / Qwen3Config defaults
    c->vocab_size = 151936;
    c->d_model = 4096;
    c->ffn_dim = 22016;
    c->n_layers = 32;
    c->n_heads = 32;
    c->max_positions = 32768;
    if (type == "qwen3") c->head_dim = 128;  // Qwen3Config's own default, not hidden / heads
  }
  std::string activation = "silu";
  DIKKAT_RETURN_IF_ERROR(keys.Int("vocab_size", &c->vocab_size));
  DIKKAT_RETURN_IF_ERROR(keys.Int("hidden_size", &c->d_model));
  DIKKAT_RETURN_IF_ERROR(keys.Int("intermediate_size", &c->ffn_dim));
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_hidden_layers", &c->n_layers));
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_attention_heads", &c->n_heads));
  if (type != "mistral") c->n_kv_heads = c->n_heads;  // null -> num_attention_heads
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_key_value_heads", &c->n_kv_heads));
  DIKKAT_RETURN_IF_ERROR(keys.Int("head_dim", &c->head_dim));
  DIKKAT_RETURN_IF_ERROR(keys.Int("max_position_embeddings", &c->max_positions));
  DIKKAT_RETURN_IF_ERROR(keys.Double("rms_norm_eps", &c->norm_eps));
  DIKKAT_RETURN_IF_ERROR(keys.Bool("tie_word_embeddings", &c->tie_embeddings));
  DIKKAT_RETURN_IF_ERROR(keys.String("hidden_act", &activation));
  DIKKAT_ASSIGN_OR_RETURN(c->activation, GatedActivation(keys, activation));
  DIKKAT_RETURN_IF_ERROR(ReadRope(keys, c));
  c->attention_bias = false;
  c->mlp_bias = false;
  if (type == "qwen2" || type == "qwen3") {
    DIKKAT_RETURN_IF_ERROR(keys.RequireBool(
        "use_sliding_window", false,
        "Qwen windows only layers from max_window_layers on; dikkat windows all layers or none"));
    // Newer transformers spell the same per layer.
    if (const Json* types = keys.Find("layer_types"); types != nullptr) {
      if (!types->is_array()) return keys.Error("layer_types", *types, "must be a list");
      for (const Json& t : *types) {
        if (t != "full_attention") {
          return keys.Error("layer_types", *types,
                            "must list only \"full_attention\": dikkat windows all layers or none");
        }
      }
    }
  }
  if (type == "qwen2") {
    c->qkv_bias_only = true;  // Qwen2: q/k/v projections biased, o_proj not
  } else if (type == "qwen3") {
    c->qk_norm = true;  // q_norm / k_norm over each head before RoPE
    DIKKAT_RETURN_IF_ERROR(keys.Bool("attention_bias", &c->attention_bias));  // all four
  } else if (type != "phi3") {  // Phi-3 has no biases
    DIKKAT_RETURN_IF_ERROR(keys.Bool("attention_bias", &c->attention_bias));
    DIKKAT_RETURN_IF_ERROR(keys.Bool("mlp_bias", &c->mlp_bias));
  }
  if (type == "phi3") {
    double partial = 1.0;
    DIKKAT_RETURN_IF_ERROR(keys.Double("partial_rotary_factor", &partial));
    if (partial != 1.0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json key 'partial_rotary_factor' is ", partial,
          " (model_type phi3); dikkat rotates whole heads only (1.0)"));
    }
  }
  if (type == "mistral" || type == "phi3") {
    // null turns the window off; HF keeps the last `sliding_window` keys,
    // the query's own position included, which is what dikkat's mask does.
    if (keys.Find("sliding_window") == nullptr && keys.Has("sliding_window")) {
      c->sliding_window = 0;
    }
    DIKKAT_RETURN_IF_ERROR(keys.Int("sliding_window", &c->sliding_window));
  }
  c->pre_norm = true;
  c->norm = NormKind::kRmsNorm;
  c->norm_bias = false;
  c->final_norm = true;
  c->positions = PositionKind::kRotary;
  return absl::OkStatus();
}

// Gemma 3's RoPE: rope_theta / rope_scaling for the global layers and
// rope_local_base_freq for the local ones (transformers 4.x), or
// transformers 5's rope_parameters with one entry per layer type.
absl::Status ReadGemma3Rope(const HfKeys& keys, ModelConfig* c) {
  const Json* params = keys.Find("rope_parameters");
  if (params == nullptr || !params->is_object() ||
      (!params->contains("full_attention") && !params->contains("sliding_attention"))) {
    DIKKAT_RETURN_IF_ERROR(ReadRope(keys, c));  // the full-attention layers' table
    return keys.Double("rope_local_base_freq", &c->rope_local_theta);
  }
  for (const auto& [type, entry] : params->items()) {
    if (type != "full_attention" && type != "sliding_attention") {
      return keys.Error("rope_parameters", *params,
                        "must hold full_attention and sliding_attention entries only");
    }
    if (!entry.is_object()) return keys.Error("rope_parameters", *params, "holds a non-object");
  }
  if (const auto full = params->find("full_attention"); full != params->end()) {
    // Read as transformers 4's top-level keys.
    Json global = {{"rope_scaling", *full}};
    if (full->contains("rope_theta")) global["rope_theta"] = (*full)["rope_theta"];
    DIKKAT_RETURN_IF_ERROR(ReadRope(HfKeys(global, keys.model_type()), c));
  }
  if (const auto local = params->find("sliding_attention"); local != params->end()) {
    const HfKeys inner(*local, keys.model_type());
    std::string type = "default";
    DIKKAT_RETURN_IF_ERROR(inner.String("rope_type", &type));
    if (type != "default") {
      return keys.Error("rope_parameters", *params,
                        "has a sliding_attention rope_type other than default, which dikkat "
                        "does not apply to the local layers");
    }
    DIKKAT_RETURN_IF_ERROR(inner.Double("rope_theta", &c->rope_local_theta));
  }
  return absl::OkStatus();
}

// Gemma 3's text model (gemma3_text: Gemma 3 1B and 270M; the text half of
// the larger ones is the same). Llama's blocks with: RMSNorm weights stored
// as offsets from 1, a norm after each sublayer as well as before it,
// q_norm / k_norm, GeGLU with the tanh GELU, tokens scaled by
// sqrt(hidden_size), scores by query_pre_attn_scalar^-1/2, and sliding
// window layers with their own RoPE base between full-attention ones.
absl::Status TranslateGemma3(const HfKeys& keys, ModelConfig* c) {
  c->architecture = Architecture::kDecoderOnly;
  c->weight_layout = "gemma3";
  // Gemma3TextConfig defaults.
  c->vocab_size = 262208;
  c->d_model = 2304;
  c->ffn_dim = 9216;
  c->n_layers = 26;
  c->n_heads = 8;
  c->n_kv_heads = 4;
  c->head_dim = 256;
  c->max_positions = 131072;
  c->norm_eps = 1e-6;
  c->rope_theta = 1e6;
  c->rope_local_theta = 10000.0;
  c->sliding_window = 4096;
  c->query_pre_attn_scalar = 256;
  c->attention_bias = false;
  c->tie_embeddings = true;
  c->pad_token_id = 0;
  c->eos_token_id = 1;
  c->bos_token_id = 2;
  std::string activation = "gelu_pytorch_tanh";
  int64_t pattern = 6;
  DIKKAT_RETURN_IF_ERROR(keys.Int("vocab_size", &c->vocab_size));
  DIKKAT_RETURN_IF_ERROR(keys.Int("hidden_size", &c->d_model));
  DIKKAT_RETURN_IF_ERROR(keys.Int("intermediate_size", &c->ffn_dim));
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_hidden_layers", &c->n_layers));
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_attention_heads", &c->n_heads));
  DIKKAT_RETURN_IF_ERROR(keys.Int("num_key_value_heads", &c->n_kv_heads));
  DIKKAT_RETURN_IF_ERROR(keys.Int("head_dim", &c->head_dim));
  DIKKAT_RETURN_IF_ERROR(keys.Int("max_position_embeddings", &c->max_positions));
  DIKKAT_RETURN_IF_ERROR(keys.Double("rms_norm_eps", &c->norm_eps));
  DIKKAT_RETURN_IF_ERROR(keys.Bool("tie_word_embeddings", &c->tie_embeddings));
  DIKKAT_RETURN_IF_ERROR(keys.Bool("attention_bias", &c->attention_bias));  // all four
  DIKKAT_RETURN_IF_ERROR(keys.Double("query_pre_attn_scalar", &c->query_pre_attn_scalar));
  DIKKAT_RETURN_IF_ERROR(keys.Int("sliding_window_pattern", &pattern));
  DIKKAT_RETURN_IF_ERROR(ReadGemma3Rope(keys, c));
  // Gemma3TextConfig reads hidden_activation only (a hidden_act beside it,
  // as Gemma 1 configs carry, is ignored by transformers too).
  DIKKAT_RETURN_IF_ERROR(keys.String("hidden_activation", &activation));
  if (activation == "gelu_pytorch_tanh" || activation == "gelu_new") {
    c->activation = Activation::kGeGluTanh;
  } else if (activation == "gelu") {
    c->activation = Activation::kGeGlu;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json key 'hidden_activation' is '", activation, "' (model_type ",
        keys.model_type(), "); dikkat supports: gelu_pytorch_tanh, gelu_new, gelu"));
  }
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (const Json* v = keys.Find(key); v != nullptr) {
      return keys.Error(key, *v,
                        "must be null: dikkat does not cap logits with tanh (Gemma 2 does; "
                        "Gemma 3 does not)");
    }
  }
  // EmbeddingGemma: every query sees keys both ways, an encoder served
  // through Encode (no LM head).
  bool bidirectional = false;
  DIKKAT_RETURN_IF_ERROR(keys.Bool("use_bidirectional_attention", &bidirectional));
  // null: no window, every layer attends to every key.
  if (keys.Find("sliding_window") == nullptr && keys.Has("sliding_window")) c->sliding_window = 0;
  DIKKAT_RETURN_IF_ERROR(keys.Int("sliding_window", &c->sliding_window));
  if (bidirectional) {
    c->architecture = Architecture::kEncoderOnly;
    c->tie_embeddings = false;  // no LM head is loaded for an encoder
    // Gemma3TextConfig halves the window for a bidirectional model: a
    // sliding layer's query sees the keys less than window / 2 + 1
    // positions away, either way (EmbeddingGemma's 512: 256 each side).
    if (c->sliding_window > 0) c->sliding_window = c->sliding_window / 2 + 1;
  }
  // Which layers slide: layer_types (transformers >= 4.53), else every
  // layer but each sliding_window_pattern-th.
  c->full_attention_layers.clear();
  if (const Json* types = keys.Find("layer_types"); types != nullptr) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c->n_layers) {
      return keys.Error("layer_types", *types, "must list num_hidden_layers layer types");
    }
    for (size_t l = 0; l < types->size(); ++l) {
      const Json& t = (*types)[l];
      if (t == "full_attention") {
        c->full_attention_layers.push_back(static_cast<int64_t>(l));
      } else if (t != "sliding_attention") {
        return keys.Error("layer_types", *types,
                          "must list \"sliding_attention\" or \"full_attention\" per layer");
      }
    }
  } else {
    if (pattern < 1) return keys.Error("sliding_window_pattern", Json(pattern), "must be >= 1");
    for (int64_t l = pattern - 1; l < c->n_layers; l += pattern) c->full_attention_layers.push_back(l);
  }
  if (c->sliding_window == 0) {
    c->full_attention_layers.clear();
    c->rope_local_theta = 0.0;  // every layer is a global one
  }
  c->norm = NormKind::kRmsNorm;
  c->norm_bias = false;
  c->norm_weight_offset = 1.0;  // x * (1 + w)
  c->sandwich_norm = true;
  c->qk_norm = true;
  c->mlp_bias = false;
  c->pre_norm = true;
  c->final_norm = true;
  c->positions = PositionKind::kRotary;
  // Gemma3TextScaledWordEmbedding: tokens times sqrt(hidden_size), in the
  // weights' dtype.
  c->embedding_scale = std::sqrt(static_cast<double>(c->d_model));
  c->embedding_scale_in_weight_dtype = true;
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& SupportedHfModelTypes() {
  static const auto* types = new std::vector<std::string>{
      "gpt2", "bert", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3_text", "gemma3"};
  return *types;
}

absl::StatusOr<ModelConfig> TranslateHfConfig(const std::string& config_json_text) {
  const Json j = Json::parse(config_json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  auto type_it = j.find("model_type");
  if (type_it == j.end() || !type_it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json has no string 'model_type'; supported model types: ",
                     absl::StrJoin(SupportedHfModelTypes(), ", ")));
  }
  const std::string type = type_it->get<std::string>();
  const HfKeys keys(j, type);
  ModelConfig c;
  if (type == "gpt2") {
    DIKKAT_RETURN_IF_ERROR(TranslateGpt2(keys, &c));
  } else if (type == "bert") {
    DIKKAT_RETURN_IF_ERROR(TranslateBert(keys, &c));
  } else if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" ||
             type == "phi3") {
    DIKKAT_RETURN_IF_ERROR(TranslateLlamaFamily(keys, &c));
  } else if (type == "gemma3_text") {
    DIKKAT_RETURN_IF_ERROR(TranslateGemma3(keys, &c));
  } else if (type == "gemma3") {
    // Gemma3ForConditionalGeneration (4B and up): its text model, served
    // alone (text in, text out; the image encoder's weights are not used).
    const Json* text = keys.Find("text_config");
    if (text == nullptr || !text->is_object()) {
      return absl::InvalidArgumentError(
          "config.json (model_type gemma3) has no 'text_config' object: dikkat serves Gemma 3's "
          "text model from it");
    }
    const HfKeys text_keys(*text, "gemma3", "config.json text_config");
    DIKKAT_RETURN_IF_ERROR(TranslateGemma3(text_keys, &c));
    // The text model's ids where the top level (read below) has none.
    if (keys.Find("bos_token_id") == nullptr) {
      DIKKAT_RETURN_IF_ERROR(text_keys.TokenId("bos_token_id", &c.bos_token_id));
    }
    if (keys.Find("eos_token_id") == nullptr) {
      std::vector<int64_t> more_eos;
      DIKKAT_RETURN_IF_ERROR(text_keys.TokenId("eos_token_id", &c.eos_token_id, &more_eos));
      for (int64_t id : more_eos) AddEosTokenId(&c, id);
    }
    if (keys.Find("pad_token_id") == nullptr) {
      DIKKAT_RETURN_IF_ERROR(text_keys.TokenId("pad_token_id", &c.pad_token_id));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json model_type '", type, "' is not supported; supported model types: ",
                     absl::StrJoin(SupportedHfModelTypes(), ", ")));
  }
  if (type != "bert") {
    // The multimodal gemma3's null ids keep its text_config's (read above).
    const auto read = [&](const char* key) { return type != "gemma3" || keys.Find(key) != nullptr; };
    if (read("bos_token_id")) {
      DIKKAT_RETURN_IF_ERROR(keys.TokenId("bos_token_id", &c.bos_token_id));
    }
    if (read("eos_token_id")) {
      std::vector<int64_t> more_eos;
      DIKKAT_RETURN_IF_ERROR(keys.TokenId("eos_token_id", &c.eos_token_id, &more_eos));
      for (int64_t id : more_eos) AddEosTokenId(&c, id);
    }
    if (read("pad_token_id")) {
      DIKKAT_RETURN_IF_ERROR(keys.TokenId("pad_token_id", &c.pad_token_id));
    }
  }
  // Newer transformers write "dtype", older "torch_dtype".
  for (const char* key : {"dtype", "torch_dtype"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string() && c.saved_dtype.empty()) {
      c.saved_dtype = it->get<std::string>();
    }
  }
  c.name = type;
  DIKKAT_RETURN_IF_ERROR(keys.String("_name_or_path", &c.name));
  if (c.name.empty()) c.name = type;
  if (absl::Status s = Validate(c); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("config.json (model_type ", type,
                                               ") translates to an invalid model: ", s.message()));
  }
  return c;
}

// generation_config.json's sampling keys (vLLM reads the same ones; it
// ignores do_sample, and so does dikkat), each in the range a request may
// set.
static absl::Status ReadSamplingDefaults(const Json& j, ModelConfig::SamplingDefaults* out) {
  const auto number = [&](const char* key, double low, double high, bool low_open,
                          const char* allowed) -> absl::StatusOr<std::optional<double>> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::optional<double>();
    const double v = it->is_number() ? it->get<double>() : std::nan("");
    if (!it->is_number() || !(low_open ? v > low : v >= low) || !(v <= high)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "generation_config.json key '", key, "' holds ",
          it->dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 100),
          "; a request may set ", allowed));
    }
    return std::optional<double>(v);
  };
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> temperature,
                          number("temperature", 0, 1e9, false, "temperature >= 0"));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> top_p,
                          number("top_p", 0, 1, true, "top_p in (0, 1]"));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> top_k,
                          number("top_k", 0, std::numeric_limits<int32_t>::max(), false,
                                 "top_k >= 0 (0 = off)"));
  DIKKAT_ASSIGN_OR_RETURN(std::optional<double> repetition,
                          number("repetition_penalty", 0.01, 100, false,
                                 "repetition_penalty in [0.01, 100]"));
  if (temperature) out->temperature = static_cast<float>(*temperature);
  if (top_p) out->top_p = static_cast<float>(*top_p);
  // 50 is transformers' own default, which save_pretrained may write: not
  // a recommendation (vLLM reads the file's differences from the defaults).
  if (top_k && *top_k != 50) out->top_k = static_cast<int32_t>(*top_k);
  if (repetition) out->repetition_penalty = static_cast<float>(*repetition);
  return absl::OkStatus();
}

absl::Status MergeHfGenerationConfig(const std::string& generation_config_json_text,
                                     ModelConfig* config) {
  const Json j =
      Json::parse(generation_config_json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("generation_config.json is not a JSON object");
  }
  DIKKAT_RETURN_IF_ERROR(ReadSamplingDefaults(j, &config->sampling_defaults));
  // The same id, list of ids or null as config.json's eos_token_id.
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null() || (it->is_array() && it->empty())) return absl::OkStatus();
  int64_t first = -1;
  std::vector<int64_t> ids;
  DIKKAT_RETURN_IF_ERROR(
      HfKeys(j, "", "generation_config.json").TokenId("eos_token_id", &first, &ids));
  ids.insert(ids.begin(), first);
  for (int64_t id : ids) {
    if (id < 0 || id >= config->vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("generation_config.json key 'eos_token_id' holds ", id,
                       ", not a token id of this model (vocab_size ", config->vocab_size, ")"));
    }
    AddEosTokenId(config, id);
  }
  return absl::OkStatus();
}

absl::StatusOr<Pooling> ParseSentenceTransformersPooling(const std::string& pooling_json_text,
                                                         bool* include_prompt) {
  const Json j = Json::parse(pooling_json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("1_Pooling/config.json is not a JSON object");
  }
  if (include_prompt != nullptr) {
    *include_prompt = true;
    DIKKAT_RETURN_IF_ERROR(
        HfKeys(j, "", "1_Pooling/config.json").Bool("include_prompt", include_prompt));
  }
  const std::pair<const char*, Pooling> supported[] = {
      {"pooling_mode_cls_token", Pooling::kFirst},
      {"pooling_mode_mean_tokens", Pooling::kMean},
      {"pooling_mode_lasttoken", Pooling::kLast},
  };
  // Every mode switched on, supported or not, so the error can list them.
  std::vector<std::string> on;
  for (const auto& [key, value] : j.items()) {
    if (key.rfind("pooling_mode_", 0) == 0 && value.is_boolean() && value.get<bool>()) {
      on.push_back(key);
    }
  }
  if (on.size() == 1) {
    for (const auto& [key, pooling] : supported) {
      if (on.front() == key) return pooling;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "1_Pooling/config.json enables [", absl::StrJoin(on, ", "),
      "]; dikkat supports exactly one of pooling_mode_cls_token, pooling_mode_mean_tokens, "
      "pooling_mode_lasttoken"));
}

absl::Status MergeSentenceTransformersModules(const std::string& modules_json_text,
                                              ModelConfig* config,
                                              std::vector<std::string>* dense_paths) {
  const Json j = Json::parse(modules_json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("modules.json is not a JSON list of modules");
  }
  // The pipeline dikkat runs: Transformer, Pooling, Dense..., Normalize.
  enum Stage { kStart, kPooled, kNormalized } stage = kStart;
  std::vector<std::string> paths;
  for (const Json& module : j) {
    auto type = module.is_object() ? module.find("type") : module.end();
    if (!module.is_object() || type == module.end() || !type->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("modules.json: a module without a \"type\" string: ",
                       module.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 200)));
    }
    const std::string name = type->get<std::string>();
    // The last part of "sentence_transformers.models.Normalize".
    const std::string kind = name.substr(name.rfind('.') == std::string::npos ? 0
                                                                              : name.rfind('.') + 1);
    const auto out_of_order = [&] {
      return absl::InvalidArgumentError(absl::StrCat(
          "modules.json lists ", name,
          " out of the order dikkat runs (Transformer, Pooling, Dense..., Normalize): the "
          "embeddings served would not be the model's"));
    };
    if (kind == "Transformer") {
      if (stage != kStart) return out_of_order();
      continue;
    }
    if (kind == "Pooling") {
      if (stage != kStart) return out_of_order();
      stage = kPooled;
      continue;
    }
    if (kind == "Dense") {
      if (stage != kPooled) return out_of_order();
      auto path = module.find("path");
      // A relative path of plain names, each module once. (Not a canonical
      // "stays inside" check: Hugging Face cache snapshots are symlinks.)
      bool inside = path != module.end() && path->is_string() &&
                    !path->get<std::string>().empty();
      std::string path_text;
      if (inside) {
        const std::filesystem::path p =
            std::filesystem::path(path->get<std::string>()).lexically_normal();
        inside = p.is_relative() && !p.has_root_name() && !p.has_root_directory() &&
                 p != "." && !p.empty();
        for (const std::filesystem::path& part : p) inside = inside && part != "..";
        // "2_Dense", "./2_Dense" and "2_Dense/" are one module.
        std::string normal = p.string();
        while (!normal.empty() && normal.back() == '/') normal.pop_back();
        inside = inside && std::find(paths.begin(), paths.end(), normal) == paths.end();
        if (inside) path_text = normal;
      }
      if (!inside) {
        return absl::InvalidArgumentError(absl::StrCat(
            "modules.json: a Dense module needs a \"path\" of its own inside the folder, got ",
            module.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 200)));
      }
      paths.push_back(path_text);
      continue;
    }
    if (kind == "Normalize") {
      if (stage == kNormalized) return out_of_order();
      stage = kNormalized;
      config->default_normalize = true;
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "modules.json lists ", name,
        ", which dikkat does not apply (it runs Transformer, Pooling, Dense and Normalize): the "
        "embeddings served would not be the model's"));
  }
  if (!paths.empty() && dense_paths == nullptr) {
    return absl::InvalidArgumentError(
        "modules.json lists Dense modules, which are read from a model folder only");
  }
  if (dense_paths != nullptr) *dense_paths = std::move(paths);
  return absl::OkStatus();
}

absl::Status MergeSentenceTransformersPrompts(const std::string& json_text, ModelConfig* config) {
  const Json j = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("config_sentence_transformers.json is not a JSON object");
  }
  const HfKeys keys(j, "", "config_sentence_transformers.json");
  if (const Json* prompts = keys.Find("prompts"); prompts != nullptr) {
    if (!prompts->is_object()) {
      return absl::InvalidArgumentError(
          "config_sentence_transformers.json key 'prompts' must be an object of strings");
    }
    for (const auto& [name, text] : prompts->items()) {
      if (!text.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config_sentence_transformers.json key 'prompts': the prompt '",
            name.substr(0, 100), "' must be a string"));
      }
      config->prompts[name] = text.get<std::string>();
    }
  }
  DIKKAT_RETURN_IF_ERROR(keys.String("default_prompt_name", &config->default_prompt_name));
  if (!config->default_prompt_name.empty() &&
      config->prompts.count(config->default_prompt_name) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config_sentence_transformers.json key 'default_prompt_name' is '",
        config->default_prompt_name.substr(0, 100), "', which 'prompts' does not define"));
  }
  return absl::OkStatus();
}

absl::StatusOr<EmbeddingDense> ParseSentenceTransformersDense(const std::string& json_text) {
  const Json j = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("a Dense module's config.json is not a JSON object");
  }
  const HfKeys keys(j, "", "Dense config.json");
  EmbeddingDense d;
  DIKKAT_RETURN_IF_ERROR(keys.Int("in_features", &d.in));
  DIKKAT_RETURN_IF_ERROR(keys.Int("out_features", &d.out));
  DIKKAT_RETURN_IF_ERROR(keys.Bool("bias", &d.bias));
  if (d.in < 1 || d.out < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a Dense module's config.json needs in_features and out_features >= 1, got ", d.in,
        " and ", d.out));
  }
  std::string activation = "torch.nn.modules.activation.Tanh";  // Dense's default
  DIKKAT_RETURN_IF_ERROR(keys.String("activation_function", &activation));
  // Newer sentence-transformers options, applied only at their defaults: a
  // Dense on another feature than the pooled embedding, or one adding its
  // input back, would be served as something else.
  for (const char* key : {"module_input_name", "module_output_name"}) {
    std::string name = "sentence_embedding";
    DIKKAT_RETURN_IF_ERROR(keys.String(key, &name));
    if (name != "sentence_embedding") {
      return absl::InvalidArgumentError(absl::StrCat(
          "a Dense module's ", key, " is '", name,
          "'; dikkat applies Dense modules to the pooled sentence_embedding only"));
    }
  }
  bool residual = false;
  DIKKAT_RETURN_IF_ERROR(keys.Bool("use_residual", &residual));
  if (residual) {
    return absl::InvalidArgumentError(
        "a Dense module's use_residual is true; dikkat applies Dense modules without a residual");
  }
  if (activation == "torch.nn.modules.activation.Tanh") {
    d.tanh = true;
  } else if (activation != "torch.nn.modules.linear.Identity") {
    return absl::InvalidArgumentError(absl::StrCat(
        "a Dense module's activation_function is '", activation,
        "'; dikkat applies torch.nn.modules.linear.Identity and torch.nn.modules.activation.Tanh"));
  }
  return d;
}

absl::Status MergeSentenceBertConfig(const std::string& json_text, ModelConfig* config) {
  const Json j = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("sentence_bert_config.json is not a JSON object");
  }
  auto it = j.find("max_seq_length");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer() || it->get<int64_t>() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sentence_bert_config.json key 'max_seq_length' holds ",
        it->dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 100),
        "; expected an integer >= 1"));
  }
  config->max_seq_length = it->get<int64_t>();
  return absl::OkStatus();
}

}  // namespace dikkat::model
