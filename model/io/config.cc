#include "model/io/config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dikkat::model {
namespace {

using Json = nlohmann::json;

template <typename E>
struct EnumNames {
  std::vector<std::pair<const char*, E>> entries;

  const char* Name(E value) const {
    for (const auto& [name, e] : entries) {
      if (e == value) return name;
    }
    return "unknown";
  }
  std::string Allowed() const {
    std::vector<std::string> names;
    for (const auto& entry : entries) names.push_back(entry.first);
    return absl::StrJoin(names, ", ");
  }
};

const EnumNames<Architecture>& ArchitectureNames() {
  static const auto* names = new EnumNames<Architecture>{{
      {"decoder-only", Architecture::kDecoderOnly},
      {"encoder-only", Architecture::kEncoderOnly},
      {"encoder-decoder", Architecture::kEncoderDecoder},
  }};
  return *names;
}
const EnumNames<NormKind>& NormNames() {
  static const auto* names =
      new EnumNames<NormKind>{{{"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRmsNorm}}};
  return *names;
}
const EnumNames<PositionKind>& PositionNames() {
  static const auto* names = new EnumNames<PositionKind>{{
      {"learned", PositionKind::kLearned},
      {"sinusoidal", PositionKind::kSinusoidal},
      {"rotary", PositionKind::kRotary},
      {"none", PositionKind::kNone},
  }};
  return *names;
}
const EnumNames<Activation>& ActivationNames() {
  static const auto* names = new EnumNames<Activation>{{
      {"relu", Activation::kRelu},
      {"gelu", Activation::kGelu},
      {"gelu_tanh", Activation::kGeluTanh},
      {"silu", Activation::kSilu},
      {"swiglu", Activation::kSwiGlu},
      {"geglu", Activation::kGeGlu},
      {"geglu_tanh", Activation::kGeGluTanh},
  }};
  return *names;
}
const EnumNames<Pooling>& PoolingNames() {
  static const auto* names = new EnumNames<Pooling>{
      {{"mean", Pooling::kMean}, {"first", Pooling::kFirst}, {"last", Pooling::kLast}}};
  return *names;
}

template <typename E>
absl::Status ReadEnum(const Json& j, const char* key, const EnumNames<E>& names, E* out) {
  auto it = j.find(key);
  if (it == j.end()) return absl::OkStatus();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", key, "' must be a string, one of: ", names.Allowed()));
  }
  const std::string value = it->get<std::string>();
  for (const auto& [name, e] : names.entries) {
    if (value == name) {
      *out = e;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("config field '", key, "' is '", value,
                                                 "'; allowed: ", names.Allowed()));
}

template <typename T>
absl::Status ReadNumber(const Json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", key, "' must be a number, got ", it->dump()));
  }
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field '", key, "' must be an integer, got ", it->dump()));
    }
    *out = it->get<T>();
  } else {
    *out = it->get<T>();
  }
  return absl::OkStatus();
}

absl::Status ReadIdList(const Json& j, const char* key, std::vector<int64_t>* out,
                        const char* what = "token ids") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", key, "' must be a list of ", what, ", got ", it->dump()));
  }
  out->clear();
  for (const Json& v : *it) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field '", key, "' must be a list of ", what, ", got ", it->dump()));
    }
    out->push_back(v.get<int64_t>());
  }
  return absl::OkStatus();
}

// The number members of the object config field `field` (absent ones keep
// their values).
absl::Status ReadNumberMembers(const Json& object, const char* field,
                               std::initializer_list<std::pair<const char*, double*>> members) {
  for (auto [key, out] : members) {
    auto v = object.find(key);
    if (v == object.end()) continue;
    if (!v->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("config field '", field, ".", key,
                                                     "' must be a number, got ", v->dump()));
    }
    *out = v->get<double>();
  }
  return absl::OkStatus();
}

// "rope_llama3": {"factor", "low_freq_factor", "high_freq_factor",
// "original_max_positions"} (numbers; absent ones keep their defaults).
absl::Status ReadRopeLlama3(const Json& j, RopeLlama3Scaling* out) {
  auto it = j.find("rope_llama3");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'rope_llama3' must be an object, got ", it->dump()));
  }
  return ReadNumberMembers(*it, "rope_llama3",
                           {{"factor", &out->factor},
                            {"low_freq_factor", &out->low_freq_factor},
                            {"high_freq_factor", &out->high_freq_factor},
                            {"original_max_positions", &out->original_max_positions}});
}

// "prompts": {"name": "text", ...}.
absl::Status ReadPrompts(const Json& j, std::map<std::string, std::string>* out) {
  auto it = j.find("prompts");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const bool ok = it->is_object() && std::all_of(it->begin(), it->end(), [](const Json& v) {
                    return v.is_string();
                  });
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'prompts' must map prompt names to strings, got ", it->dump().substr(0, 300)));
  }
  out->clear();
  for (const auto& [name, text] : it->items()) (*out)[name] = text.get<std::string>();
  return absl::OkStatus();
}

// "embedding_dense": [{"in", "out", "bias" (true), "activation" ("identity"
// | "tanh")}, ...].
absl::Status ReadEmbeddingDense(const Json& j, std::vector<EmbeddingDense>* out) {
  auto it = j.find("embedding_dense");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'embedding_dense' must be a list of {\"in\": int, \"out\": int, "
        "\"bias\": bool, \"activation\": \"identity\" | \"tanh\"}, got ",
        it->dump().substr(0, 300)));
  };
  if (!it->is_array()) return bad();
  out->clear();
  for (const Json& layer : *it) {
    if (!layer.is_object()) return bad();
    EmbeddingDense d;
    const auto in = layer.find("in"), o = layer.find("out"), bias = layer.find("bias"),
               act = layer.find("activation");
    if (in == layer.end() || !in->is_number_integer() || o == layer.end() ||
        !o->is_number_integer()) {
      return bad();
    }
    d.in = in->get<int64_t>();
    d.out = o->get<int64_t>();
    if (bias != layer.end()) {
      if (!bias->is_boolean()) return bad();
      d.bias = bias->get<bool>();
    }
    if (act != layer.end()) {
      if (*act != "identity" && *act != "tanh") return bad();
      d.tanh = *act == "tanh";
    }
    out->push_back(d);
  }
  return absl::OkStatus();
}

// "rope_yarn": {"factor", "original_max_positions", "beta_fast", "beta_slow",
// "mscale", "mscale_all_dim", "attention_factor" (numbers), "truncate"
// (bool)}; absent ones keep their defaults.
absl::Status ReadRopeYarn(const Json& j, RopeYarnScaling* out) {
  auto it = j.find("rope_yarn");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'rope_yarn' must be an object, got ", it->dump()));
  }
  if (absl::Status s = ReadNumberMembers(
          *it, "rope_yarn",
          {{"factor", &out->factor},
           {"original_max_positions", &out->original_max_positions},
           {"beta_fast", &out->beta_fast},
           {"beta_slow", &out->beta_slow},
           {"mscale", &out->mscale},
           {"mscale_all_dim", &out->mscale_all_dim},
           {"attention_factor", &out->attention_factor}});
      !s.ok()) {
    return s;
  }
  // A rope_yarn without a factor would be off without a word.
  if (!it->contains("factor") || !(out->factor > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'rope_yarn' needs a 'factor' >= 1 (leave rope_yarn out for no YaRN), got ",
        it->dump()));
  }
  if (auto v = it->find("truncate"); v != it->end()) {
    if (!v->is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field 'rope_yarn.truncate' must be true or false, got ", v->dump()));
    }
    out->truncate = v->get<bool>();
  }
  return absl::OkStatus();
}

absl::Status ReadBool(const Json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", key, "' must be true or false, got ", it->dump()));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadString(const Json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", key, "' must be a string, got ", it->dump()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status Positive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("config field '", field, "' is ", value, "; it must be > 0"));
}

absl::Status TokenId(const char* field, int64_t value, int64_t vocab) {
  if (value >= -1 && value < vocab) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' is ", value,
                                                 "; it must be -1 (none) or in [0, ", vocab, ")"));
}

}  // namespace

std::vector<int64_t> EosTokenIds(const ModelConfig& config) {
  std::vector<int64_t> ids;
  if (config.eos_token_id >= 0) ids.push_back(config.eos_token_id);
  ids.insert(ids.end(), config.more_eos_token_ids.begin(), config.more_eos_token_ids.end());
  return ids;
}

bool IsEosToken(const ModelConfig& config, int64_t id) {
  if (id < 0) return false;
  if (id == config.eos_token_id) return true;
  const std::vector<int64_t>& more = config.more_eos_token_ids;
  return std::find(more.begin(), more.end(), id) != more.end();
}

void AddEosTokenId(ModelConfig* config, int64_t id) {
  if (id < 0 || IsEosToken(*config, id)) return;
  if (config->eos_token_id < 0) {
    config->eos_token_id = id;
  } else {
    config->more_eos_token_ids.push_back(id);
  }
}

const char* ArchitectureName(Architecture a) { return ArchitectureNames().Name(a); }
const char* ActivationName(Activation a) { return ActivationNames().Name(a); }
const char* PoolingName(Pooling p) { return PoolingNames().Name(p); }
const char* NormName(NormKind n) { return NormNames().Name(n); }
const char* PositionName(PositionKind p) { return PositionNames().Name(p); }

bool ModelConfig::layer_slides(int64_t l) const {
  return sliding_window > 0 && !std::binary_search(full_attention_layers.begin(),
                                                   full_attention_layers.end(), l);
}

double YarnAttentionFactor(const RopeYarnScaling& yarn) {
  if (yarn.attention_factor > 0) return yarn.attention_factor;
  // Hugging Face's get_mscale: 0.1 m ln(scale) + 1, or 1 for scale <= 1.
  auto mscale = [&](double m) { return yarn.factor <= 1 ? 1.0 : 0.1 * m * std::log(yarn.factor) + 1.0; };
  if (yarn.mscale != 0 && yarn.mscale_all_dim != 0) {
    return mscale(yarn.mscale) / mscale(yarn.mscale_all_dim);
  }
  return mscale(1.0);
}

absl::Status Validate(const ModelConfig& c) {
  if (absl::Status s = Positive("vocab_size", c.vocab_size); !s.ok()) return s;
  if (absl::Status s = Positive("d_model", c.d_model); !s.ok()) return s;
  if (absl::Status s = Positive("n_heads", c.n_heads); !s.ok()) return s;
  if (absl::Status s = Positive("ffn_dim", c.ffn_dim); !s.ok()) return s;
  if (absl::Status s = Positive("max_positions", c.max_positions); !s.ok()) return s;
  if (c.head_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'head_dim' is ", c.head_dim, "; it must be >= 0 (0 = d_model / n_heads)"));
  }
  if (c.head_dim == 0 && c.d_model % c.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("d_model (", c.d_model,
                                                   ") must be divisible by n_heads (", c.n_heads,
                                                   ") unless head_dim is given"));
  }
  if (c.n_kv_heads < 0 || (c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'n_kv_heads' is ", c.n_kv_heads,
        "; it must be 0 (= n_heads) or a divisor of n_heads (", c.n_heads, ")"));
  }
  if (c.positions == PositionKind::kRotary && c.head_size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotary positions need an even head dimension; head_dim is ", c.head_size()));
  }
  if (c.rope_scaling <= 0 || !std::isfinite(c.rope_scaling)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'rope_scaling' is ", c.rope_scaling, "; it must be > 0"));
  }
  if (const RopeLlama3Scaling& r = c.rope_llama3; r.factor != 0.0) {
    const bool ok = std::isfinite(r.factor) && r.factor >= 1.0 && std::isfinite(r.low_freq_factor) &&
                    r.low_freq_factor > 0 && std::isfinite(r.high_freq_factor) &&
                    r.high_freq_factor > r.low_freq_factor &&
                    std::isfinite(r.original_max_positions) && r.original_max_positions > 0;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'rope_llama3' is {factor ", r.factor, ", low_freq_factor ",
          r.low_freq_factor, ", high_freq_factor ", r.high_freq_factor,
          ", original_max_positions ", r.original_max_positions,
          "}; it needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
          "original_max_positions > 0, all finite"));
    }
  }
  if (const RopeYarnScaling& y = c.rope_yarn; y.factor != 0.0) {
    const bool ok = std::isfinite(y.factor) && y.factor >= 1.0 &&
                    std::isfinite(y.original_max_positions) && y.original_max_positions >= 1 &&
                    std::isfinite(y.beta_fast) && std::isfinite(y.beta_slow) &&
                    y.beta_fast > 0 && y.beta_slow > 0 && std::isfinite(y.mscale) &&
                    std::isfinite(y.mscale_all_dim) && std::isfinite(y.attention_factor) &&
                    y.attention_factor >= 0 && std::isfinite(YarnAttentionFactor(y)) &&
                    YarnAttentionFactor(y) > 0;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'rope_yarn' is {factor ", y.factor, ", original_max_positions ",
          y.original_max_positions, ", beta_fast ", y.beta_fast, ", beta_slow ", y.beta_slow,
          ", mscale ", y.mscale, ", mscale_all_dim ", y.mscale_all_dim, ", attention_factor ",
          y.attention_factor,
          "}; it needs factor >= 1, original_max_positions >= 1, beta_fast and beta_slow > 0, "
          "attention_factor >= 0 (0 = derived), all finite, and an attention factor (given or "
          "derived from mscale) that is finite and > 0"));
    }
    if (c.rope_llama3.factor != 0.0 || c.rope_scaling != 1.0) {
      return absl::InvalidArgumentError(
          "config fields 'rope_yarn', 'rope_llama3' and 'rope_scaling' (other than 1) are "
          "exclusive: a model has one RoPE scaling");
    }
  }
  // Otherwise the norms or the rotary tables give NaN logits, not an error
  // (a rope_theta of 0 did; JSON itself cannot spell a non-finite number).
  if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'norm_eps' is ", c.norm_eps, "; it must be finite and > 0"));
  }
  if (c.positions == PositionKind::kRotary && (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'rope_theta' is ", c.rope_theta, "; rotary positions need it finite and > 0"));
  }
  if (c.sliding_window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'sliding_window' is ", c.sliding_window, "; it must be >= 0 (0 = off)"));
  }
  if (!c.full_attention_layers.empty()) {
    const int64_t layers =
        c.architecture == Architecture::kEncoderDecoder ? 0 : c.n_layers;
    for (size_t i = 0; i < c.full_attention_layers.size(); ++i) {
      const int64_t l = c.full_attention_layers[i];
      if (l < 0 || l >= layers || (i > 0 && l <= c.full_attention_layers[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config field 'full_attention_layers' is [", absl::StrJoin(c.full_attention_layers, ", "),
            "]; it must list layers in [0, n_layers = ", layers,
            ") in ascending order, each once (not for encoder-decoder models)"));
      }
    }
    if (c.sliding_window == 0) {
      return absl::InvalidArgumentError(
          "config field 'full_attention_layers' needs a 'sliding_window' (> 0) for the other "
          "layers");
    }
  }
  if (c.rope_local_theta != 0.0) {
    if (!(c.rope_local_theta > 0) || !std::isfinite(c.rope_local_theta) ||
        c.positions != PositionKind::kRotary || c.sliding_window == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'rope_local_theta' is ", c.rope_local_theta,
          "; it must be finite and > 0 (0 = off), with rotary positions and a sliding_window"));
    }
  }
  if (!std::isfinite(c.norm_weight_offset) ||
      (c.norm_weight_offset != 0.0 && c.norm != NormKind::kRmsNorm && !c.qk_norm)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'norm_weight_offset' is ", c.norm_weight_offset,
        "; it must be finite, and 0 unless there are RMSNorms it applies to (norm rmsnorm or "
        "qk_norm)"));
  }
  if (c.architecture == Architecture::kEncoderDecoder &&
      (c.query_pre_attn_scalar != 0.0 || c.rope_local_theta != 0.0)) {
    return absl::InvalidArgumentError(
        "config fields 'query_pre_attn_scalar' and 'rope_local_theta' are for decoder-only and "
        "encoder-only models (an encoder-decoder's cross-attention would not take them)");
  }
  if (c.query_pre_attn_scalar < 0 || !std::isfinite(c.query_pre_attn_scalar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'query_pre_attn_scalar' is ", c.query_pre_attn_scalar,
                     "; it must be finite and >= 0 (0 = head_dim)"));
  }
  if (c.sandwich_norm && (!c.pre_norm || c.architecture == Architecture::kEncoderDecoder)) {
    return absl::InvalidArgumentError(
        "config field 'sandwich_norm' needs pre_norm and a decoder-only or encoder-only model");
  }
  if (c.type_vocab_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'type_vocab_size' is ", c.type_vocab_size, "; it must be >= 0"));
  }
  if (c.architecture == Architecture::kEncoderDecoder) {
    if (absl::Status s = Positive("n_encoder_layers", c.n_encoder_layers); !s.ok()) return s;
    if (absl::Status s = Positive("n_decoder_layers", c.n_decoder_layers); !s.ok()) return s;
    if (c.decoder_start_token_id < 0 && c.bos_token_id < 0) {
      return absl::InvalidArgumentError(
          "an encoder-decoder model needs 'decoder_start_token_id' (or 'bos_token_id')");
    }
  } else {
    if (absl::Status s = Positive("n_layers", c.n_layers); !s.ok()) return s;
  }
  if (!c.default_prompt_name.empty() && c.prompts.count(c.default_prompt_name) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'default_prompt_name' is '", c.default_prompt_name,
        "', which is not one of 'prompts'"));
  }
  for (size_t k = 0; k < c.embedding_dense.size(); ++k) {
    const EmbeddingDense& dense = c.embedding_dense[k];
    const int64_t in = k == 0 ? c.d_model : c.embedding_dense[k - 1].out;
    if (dense.in != in || dense.out < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'embedding_dense[", k, "]' maps ", dense.in, " -> ", dense.out,
          " features; it must take ", in, " (", k == 0 ? "d_model" : "the previous layer's out",
          ") to at least 1"));
    }
  }
  for (auto [field, id] : {std::pair<const char*, int64_t>{"bos_token_id", c.bos_token_id},
                           {"eos_token_id", c.eos_token_id},
                           {"pad_token_id", c.pad_token_id},
                           {"decoder_start_token_id", c.decoder_start_token_id}}) {
    if (absl::Status s = TokenId(field, id, c.vocab_size); !s.ok()) return s;
  }
  for (size_t i = 0; i < c.more_eos_token_ids.size(); ++i) {
    const int64_t id = c.more_eos_token_ids[i];
    const std::string field = absl::StrCat("more_eos_token_ids[", i, "]");
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' is ", id,
                                                     "; it must be in [0, ", c.vocab_size, ")"));
    }
    if (id == c.eos_token_id ||
        std::find(c.more_eos_token_ids.begin(), c.more_eos_token_ids.begin() + i, id) !=
            c.more_eos_token_ids.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field '", field, "' is ", id, ", an EOS id already listed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfigJson(const std::string& json_text) {
  Json j = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("model config is not a JSON object");
  }
  ModelConfig c;
  std::vector<absl::Status> results = {
      ReadEnum(j, "architecture", ArchitectureNames(), &c.architecture),
      ReadNumber(j, "vocab_size", &c.vocab_size),
      ReadNumber(j, "d_model", &c.d_model),
      ReadNumber(j, "n_heads", &c.n_heads),
      ReadNumber(j, "n_kv_heads", &c.n_kv_heads),
      ReadNumber(j, "head_dim", &c.head_dim),
      ReadNumber(j, "ffn_dim", &c.ffn_dim),
      ReadNumber(j, "n_layers", &c.n_layers),
      ReadNumber(j, "n_encoder_layers", &c.n_encoder_layers),
      ReadNumber(j, "n_decoder_layers", &c.n_decoder_layers),
      ReadNumber(j, "max_positions", &c.max_positions),
      ReadBool(j, "pre_norm", &c.pre_norm),
      ReadEnum(j, "norm", NormNames(), &c.norm),
      ReadNumber(j, "norm_eps", &c.norm_eps),
      ReadBool(j, "final_norm", &c.final_norm),
      ReadBool(j, "encoder_final_norm", &c.encoder_final_norm),
      ReadBool(j, "decoder_final_norm", &c.decoder_final_norm),
      ReadEnum(j, "activation", ActivationNames(), &c.activation),
      ReadBool(j, "attention_bias", &c.attention_bias),
      ReadBool(j, "qkv_bias_only", &c.qkv_bias_only),
      ReadBool(j, "qk_norm", &c.qk_norm),
      ReadBool(j, "sandwich_norm", &c.sandwich_norm),
      ReadNumber(j, "norm_weight_offset", &c.norm_weight_offset),
      ReadNumber(j, "query_pre_attn_scalar", &c.query_pre_attn_scalar),
      ReadBool(j, "mlp_bias", &c.mlp_bias),
      ReadBool(j, "norm_bias", &c.norm_bias),
      ReadEnum(j, "positions", PositionNames(), &c.positions),
      ReadNumber(j, "rope_theta", &c.rope_theta),
      ReadNumber(j, "rope_scaling", &c.rope_scaling),
      ReadRopeLlama3(j, &c.rope_llama3),
      ReadRopeYarn(j, &c.rope_yarn),
      ReadNumber(j, "sliding_window", &c.sliding_window),
      ReadIdList(j, "full_attention_layers", &c.full_attention_layers, "layer indices"),
      ReadNumber(j, "rope_local_theta", &c.rope_local_theta),
      ReadBool(j, "tie_embeddings", &c.tie_embeddings),
      ReadBool(j, "share_encoder_decoder_embeddings", &c.share_encoder_decoder_embeddings),
      j.contains("embedding_scale") && j["embedding_scale"].is_string()
          ? absl::OkStatus()
          : ReadNumber(j, "embedding_scale", &c.embedding_scale),
      ReadBool(j, "embedding_scale_in_weight_dtype", &c.embedding_scale_in_weight_dtype),
      ReadNumber(j, "type_vocab_size", &c.type_vocab_size),
      ReadBool(j, "embedding_norm", &c.embedding_norm),
      ReadEnum(j, "default_pooling", PoolingNames(), &c.default_pooling),
      ReadEmbeddingDense(j, &c.embedding_dense),
      ReadPrompts(j, &c.prompts),
      ReadString(j, "default_prompt_name", &c.default_prompt_name),
      ReadBool(j, "pooling_includes_prompt", &c.pooling_includes_prompt),
      ReadNumber(j, "bos_token_id", &c.bos_token_id),
      ReadNumber(j, "eos_token_id", &c.eos_token_id),
      ReadNumber(j, "pad_token_id", &c.pad_token_id),
      ReadNumber(j, "decoder_start_token_id", &c.decoder_start_token_id),
      ReadIdList(j, "more_eos_token_ids", &c.more_eos_token_ids),
      ReadString(j, "name", &c.name),
      ReadString(j, "weight_layout", &c.weight_layout),
  };
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  // "embedding_scale": "sqrt_d_model" is accepted as a convenience.
  if (auto it = j.find("embedding_scale"); it != j.end() && it->is_string()) {
    if (it->get<std::string>() != "sqrt_d_model") {
      return absl::InvalidArgumentError(
          "config field 'embedding_scale' must be a number or \"sqrt_d_model\"");
    }
    c.embedding_scale = std::sqrt(static_cast<double>(c.d_model));
  }
  if (absl::Status s = Validate(c); !s.ok()) return s;
  return c;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  Json j;
  j["architecture"] = ArchitectureName(c.architecture);
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["ffn_dim"] = c.ffn_dim;
  j["n_layers"] = c.n_layers;
  j["n_encoder_layers"] = c.n_encoder_layers;
  j["n_decoder_layers"] = c.n_decoder_layers;
  j["max_positions"] = c.max_positions;
  j["pre_norm"] = c.pre_norm;
  j["norm"] = NormName(c.norm);
  j["norm_eps"] = c.norm_eps;
  j["final_norm"] = c.final_norm;
  j["encoder_final_norm"] = c.encoder_final_norm;
  j["decoder_final_norm"] = c.decoder_final_norm;
  j["activation"] = ActivationName(c.activation);
  j["attention_bias"] = c.attention_bias;
  j["qkv_bias_only"] = c.qkv_bias_only;
  j["qk_norm"] = c.qk_norm;
  j["sandwich_norm"] = c.sandwich_norm;
  j["norm_weight_offset"] = c.norm_weight_offset;
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
  j["mlp_bias"] = c.mlp_bias;
  j["norm_bias"] = c.norm_bias;
  j["positions"] = PositionName(c.positions);
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = c.rope_scaling;
  if (c.rope_llama3.factor != 0.0) {
    j["rope_llama3"] = {{"factor", c.rope_llama3.factor},
                        {"low_freq_factor", c.rope_llama3.low_freq_factor},
                        {"high_freq_factor", c.rope_llama3.high_freq_factor},
                        {"original_max_positions", c.rope_llama3.original_max_positions}};
  }
  if (c.rope_yarn.factor != 0.0) {
    j["rope_yarn"] = {{"factor", c.rope_yarn.factor},
                      {"original_max_positions", c.rope_yarn.original_max_positions},
                      {"beta_fast", c.rope_yarn.beta_fast},
                      {"beta_slow", c.rope_yarn.beta_slow},
                      {"mscale", c.rope_yarn.mscale},
                      {"mscale_all_dim", c.rope_yarn.mscale_all_dim},
                      {"attention_factor", c.rope_yarn.attention_factor},
                      {"truncate", c.rope_yarn.truncate}};
  }
  j["sliding_window"] = c.sliding_window;
  if (!c.full_attention_layers.empty()) j["full_attention_layers"] = c.full_attention_layers;
  j["rope_local_theta"] = c.rope_local_theta;
  j["tie_embeddings"] = c.tie_embeddings;
  j["share_encoder_decoder_embeddings"] = c.share_encoder_decoder_embeddings;
  j["embedding_scale"] = c.embedding_scale;
  j["embedding_scale_in_weight_dtype"] = c.embedding_scale_in_weight_dtype;
  j["type_vocab_size"] = c.type_vocab_size;
  j["embedding_norm"] = c.embedding_norm;
  j["default_pooling"] = PoolingName(c.default_pooling);
  if (!c.prompts.empty()) j["prompts"] = c.prompts;
  if (!c.default_prompt_name.empty()) j["default_prompt_name"] = c.default_prompt_name;
  j["pooling_includes_prompt"] = c.pooling_includes_prompt;
  if (!c.embedding_dense.empty()) {
    Json dense = Json::array();
    for (const EmbeddingDense& d : c.embedding_dense) {
      dense.push_back({{"in", d.in}, {"out", d.out}, {"bias", d.bias},
                       {"activation", d.tanh ? "tanh" : "identity"}});
    }
    j["embedding_dense"] = dense;
  }
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["pad_token_id"] = c.pad_token_id;
  j["decoder_start_token_id"] = c.decoder_start_token_id;
  if (!c.more_eos_token_ids.empty()) j["more_eos_token_ids"] = c.more_eos_token_ids;
  j["name"] = c.name;
  j["weight_layout"] = c.weight_layout;
  return j.dump(2);
}

}  // namespace dikkat::model
