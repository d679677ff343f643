#include "model/model_weights.h"

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dikkat::model {
namespace {

class Binding {
 public:
  Binding(const ModelConfig& config, c10::Device device, c10::ScalarType compute_dtype,
          int64_t rope_positions, WeightBinder& w)
      : config_(config),
        device_(device),
        compute_dtype_(compute_dtype),
        rope_positions_(rope_positions),
        w_(w) {}

  absl::Status All(ModelWeights* m) {
    const int64_t d = config_.d_model;
    switch (config_.architecture) {
      case Architecture::kDecoderOnly:
        m->decoder.causal = true;
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings("", LinearWeight(), &m->decoder.embed));
        DIKKAT_RETURN_IF_ERROR(LoadLayers("layers.", config_.n_layers, false, &m->decoder));
        if (config_.final_norm) DIKKAT_RETURN_IF_ERROR(LoadNorm("final_norm", &m->decoder.final_norm));
        break;
      case Architecture::kEncoderOnly:
        m->encoder.causal = false;
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings("", LinearWeight(), &m->encoder.embed));
        DIKKAT_RETURN_IF_ERROR(LoadLayers("layers.", config_.n_layers, false, &m->encoder));
        if (config_.final_norm) DIKKAT_RETURN_IF_ERROR(LoadNorm("final_norm", &m->encoder.final_norm));
        break;
      case Architecture::kEncoderDecoder: {
        m->encoder.causal = false;
        m->decoder.causal = true;
        LinearWeight shared;
        if (config_.share_encoder_decoder_embeddings) {
          DIKKAT_ASSIGN_OR_RETURN(shared,
                                  w_.TakeMatrix("embed_tokens.weight", {config_.vocab_size, d}));
        }
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings("encoder.", shared, &m->encoder.embed));
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings("decoder.", shared, &m->decoder.embed));
        DIKKAT_RETURN_IF_ERROR(
            LoadLayers("encoder.layers.", config_.n_encoder_layers, false, &m->encoder));
        DIKKAT_RETURN_IF_ERROR(
            LoadLayers("decoder.layers.", config_.n_decoder_layers, true, &m->decoder));
        if (config_.encoder_final_norm) {
          DIKKAT_RETURN_IF_ERROR(LoadNorm("encoder.norm", &m->encoder.final_norm));
        }
        if (config_.decoder_final_norm) {
          DIKKAT_RETURN_IF_ERROR(LoadNorm("decoder.norm", &m->decoder.final_norm));
        }
        break;
      }
    }
    if (config_.has_decoder()) {
      if (config_.tie_embeddings) {
        m->lm_head_w = m->decoder.embed.tokens;
      } else {
        DIKKAT_ASSIGN_OR_RETURN(m->lm_head_w,
                                w_.TakeMatrix("lm_head.weight", {config_.vocab_size, d}));
      }
      DIKKAT_ASSIGN_OR_RETURN(m->lm_head_b, w_.TakeOptional("lm_head.bias", {config_.vocab_size}));
    }
    for (size_t k = 0; k < config_.embedding_dense.size(); ++k) {
      const EmbeddingDense& spec = config_.embedding_dense[k];
      ModelWeights::Dense dense;
      dense.tanh = spec.tanh;
      const std::string p = absl::StrCat("embedding_dense.", k);
      DIKKAT_ASSIGN_OR_RETURN(dense.w, w_.TakeMatrix(p + ".weight", {spec.out, spec.in}));
      if (spec.bias) {
        DIKKAT_ASSIGN_OR_RETURN(dense.b, w_.Take(p + ".bias", {spec.out}));
      }
      m->embedding_dense.push_back(std::move(dense));
    }
    if (config_.positions == PositionKind::kRotary) {
      m->rope = RotaryEmbedding(config_.head_size(), rope_positions_, config_.rope_theta,
                                config_.rope_scaling, device_, config_.rope_llama3,
                                config_.rope_yarn);
      if (config_.rope_local_theta > 0) {  // plain: no scaling of any kind
        m->rope_local = RotaryEmbedding(config_.head_size(), rope_positions_,
                                        config_.rope_local_theta, 1.0, device_);
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status LoadNorm(const std::string& prefix, Norm* norm) {
    norm->kind = config_.norm;
    norm->eps = config_.norm_eps;
    DIKKAT_ASSIGN_OR_RETURN(norm->weight, w_.Take(prefix + ".weight", {config_.d_model}));
    OffsetRmsWeight(norm);
    if (config_.norm == NormKind::kLayerNorm && config_.norm_bias) {
      DIKKAT_ASSIGN_OR_RETURN(norm->bias, w_.Take(prefix + ".bias", {config_.d_model}));
    }
    return absl::OkStatus();
  }

  // Gemma's RMSNorm weights are offsets from 1 (norm_weight_offset): added
  // here once, in float32, then kept in the norm's dtype (float32 on the
  // CPU: exact; on other devices the compute dtype rounds 1 + w, where
  // Hugging Face multiplies in float32).
  void OffsetRmsWeight(Norm* norm) const {
    if (norm->kind == NormKind::kRmsNorm && config_.norm_weight_offset != 0.0) {
      norm->weight = norm->weight.to(at::kFloat)
                         .add(config_.norm_weight_offset)
                         .to(norm->weight.scalar_type())
                         .contiguous();
    }
  }

  absl::Status LoadAttention(const std::string& prefix, MultiHeadAttention* out) {
    const int64_t d = config_.d_model, hq = config_.n_heads, hkv = config_.kv_heads();
    const int64_t hd = config_.head_size();
    const bool qkv_bias = config_.attention_bias || config_.qkv_bias_only;
    const bool out_bias = config_.attention_bias && !config_.qkv_bias_only;
    LinearWeight out_w;
    at::Tensor out_b;
    DIKKAT_ASSIGN_OR_RETURN(out_w, w_.TakeMatrix(prefix + ".out_proj.weight", {d, hq * hd}));
    if (out_bias) {
      DIKKAT_ASSIGN_OR_RETURN(out_b, w_.Take(prefix + ".out_proj.bias", {d}));
    }
    if (w_.Has(prefix + ".in_proj_weight")) {
      const int64_t rows = (hq + 2 * hkv) * hd;
      LinearWeight in_w;
      at::Tensor in_b;
      DIKKAT_ASSIGN_OR_RETURN(in_w, w_.TakeMatrix(prefix + ".in_proj_weight", {rows, d}));
      if (qkv_bias) {
        DIKKAT_ASSIGN_OR_RETURN(in_b, w_.Take(prefix + ".in_proj_bias", {rows}));
      }
      *out = MultiHeadAttention::FromFused(in_w, in_b, out_w, out_b, hq, hkv);
      return absl::OkStatus();
    }
    // Stacked as they are taken (one storage, q then k then v), so that
    // MultiHeadAttention fuses them as a view rather than a copy.
    DIKKAT_ASSIGN_OR_RETURN(
        std::vector<LinearWeight> qkv,
        w_.TakeStackedMatrices({prefix + ".q_proj.weight", prefix + ".k_proj.weight",
                                prefix + ".v_proj.weight"},
                               {{hq * hd, d}, {hkv * hd, d}, {hkv * hd, d}}));
    std::vector<at::Tensor> qkv_b(3);
    if (qkv_bias) {
      DIKKAT_ASSIGN_OR_RETURN(
          qkv_b, w_.TakeStacked({prefix + ".q_proj.bias", prefix + ".k_proj.bias",
                                 prefix + ".v_proj.bias"},
                                {{hq * hd}, {hkv * hd}, {hkv * hd}}));
    }
    *out = MultiHeadAttention(qkv[0], qkv_b[0], qkv[1], qkv_b[1], qkv[2], qkv_b[2], out_w, out_b,
                              hq, hkv);
    return absl::OkStatus();
  }

  absl::Status LoadFeedForward(const std::string& prefix, FeedForward* ffn) {
    const int64_t d = config_.d_model, f = config_.ffn_dim;
    ffn->activation = config_.activation;
    DIKKAT_ASSIGN_OR_RETURN(ffn->up_w, w_.TakeMatrix(prefix + ".linear1.weight", {f, d}));
    DIKKAT_ASSIGN_OR_RETURN(ffn->down_w, w_.TakeMatrix(prefix + ".linear2.weight", {d, f}));
    if (config_.mlp_bias) {
      DIKKAT_ASSIGN_OR_RETURN(ffn->up_b, w_.Take(prefix + ".linear1.bias", {f}));
      DIKKAT_ASSIGN_OR_RETURN(ffn->down_b, w_.Take(prefix + ".linear2.bias", {d}));
    }
    if (config_.is_gated()) {
      DIKKAT_ASSIGN_OR_RETURN(ffn->gate_w, w_.TakeMatrix(prefix + ".linear_gate.weight", {f, d}));
      if (config_.mlp_bias) {
        DIKKAT_ASSIGN_OR_RETURN(ffn->gate_b, w_.Take(prefix + ".linear_gate.bias", {f}));
      }
    }
    return absl::OkStatus();
  }

  absl::Status LoadLayers(const std::string& prefix, int64_t n, bool cross, Stack* stack) {
    stack->layers.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const std::string p = absl::StrCat(prefix, i);
      Layer& layer = stack->layers[i];
      layer.has_cross = cross;
      DIKKAT_RETURN_IF_ERROR(LoadAttention(p + ".self_attn", &layer.self_attn));
      if (config_.qk_norm) {
        // An RMSNorm over each head's head_dim values, whatever config.norm is.
        for (auto [name, norm] : {std::pair{".self_attn.q_norm", &layer.q_norm},
                                  std::pair{".self_attn.k_norm", &layer.k_norm}}) {
          norm->kind = NormKind::kRmsNorm;
          norm->eps = config_.norm_eps;
          DIKKAT_ASSIGN_OR_RETURN(norm->weight,
                                  w_.Take(p + name + ".weight", {config_.head_size()}));
          OffsetRmsWeight(norm);
        }
      }
      DIKKAT_RETURN_IF_ERROR(LoadNorm(p + ".norm1", &layer.norm1));
      DIKKAT_RETURN_IF_ERROR(LoadNorm(p + ".norm2", &layer.norm2));
      if (config_.sandwich_norm) {
        DIKKAT_RETURN_IF_ERROR(LoadNorm(p + ".post_norm1", &layer.post_norm1));
        DIKKAT_RETURN_IF_ERROR(LoadNorm(p + ".post_norm2", &layer.post_norm2));
      }
      if (cross) {
        DIKKAT_RETURN_IF_ERROR(LoadAttention(p + ".multihead_attn", &layer.cross_attn));
        DIKKAT_RETURN_IF_ERROR(LoadNorm(p + ".norm3", &layer.norm3));
      }
      DIKKAT_RETURN_IF_ERROR(LoadFeedForward(p, &layer.ffn));
    }
    return absl::OkStatus();
  }

  absl::Status LoadEmbeddings(const std::string& prefix, const LinearWeight& shared_tokens,
                              Embeddings* e) {
    const int64_t d = config_.d_model;
    e->scale = config_.embedding_scale;
    if (shared_tokens.defined()) {
      e->tokens = shared_tokens;
    } else {
      DIKKAT_ASSIGN_OR_RETURN(
          e->tokens, w_.TakeMatrix(prefix + "embed_tokens.weight", {config_.vocab_size, d}));
    }
    const c10::ScalarType table = e->tokens.quantized() ? at::kFloat : e->tokens.w.scalar_type();
    if (config_.embedding_scale_in_weight_dtype &&
        (table == at::kBFloat16 || table == at::kHalf)) {
      e->scale = at::scalar_tensor(e->scale, at::TensorOptions().dtype(table)).item<double>();
    }
    if (config_.positions == PositionKind::kLearned) {
      DIKKAT_ASSIGN_OR_RETURN(
          e->positions, w_.Take(prefix + "embed_positions.weight", {config_.max_positions, d}));
    } else if (config_.positions == PositionKind::kSinusoidal) {
      e->positions = SinusoidalTable(config_.max_positions, d, device_, compute_dtype_);
    }
    if (config_.type_vocab_size > 0) {
      DIKKAT_ASSIGN_OR_RETURN(
          e->types, w_.Take(prefix + "embed_types.weight", {config_.type_vocab_size, d}));
    }
    if (config_.embedding_norm) DIKKAT_RETURN_IF_ERROR(LoadNorm(prefix + "embed_norm", &e->norm));
    return absl::OkStatus();
  }

  const ModelConfig& config_;
  c10::Device device_;
  c10::ScalarType compute_dtype_;
  int64_t rope_positions_;
  WeightBinder& w_;
};

}  // namespace

absl::Status BindModelWeights(const ModelConfig& config, c10::Device device,
                              c10::ScalarType compute_dtype, int64_t rope_positions,
                              WeightBinder& binder, ModelWeights* out) {
  TORCH_CHECK(rope_positions > 0 && rope_positions <= config.max_positions,
              "rotary tables of ", rope_positions, " positions for a model of ",
              config.max_positions);
  return Binding(config, device, compute_dtype, rope_positions, binder).All(out);
}

}  // namespace dikkat::model
