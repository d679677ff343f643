// The building blocks of a Transformer stack besides attention
// (model/attention.h): norms, the feed-forward block, token/position/type
// embeddings, and the per-layer and per-stack weight holders the forward
// (model/transformer.cc) walks. Weights are bound by model/model_weights.cc.
//
// Value types holding tensor handles; immutable once bound, safe to use from
// several threads at once.
#ifndef DIKKAT_MODEL_LAYERS_H_
#define DIKKAT_MODEL_LAYERS_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "model/attention.h"
#include "model/forward_batch.h"
#include "model/io/config.h"
#include "model/linear_weight.h"

namespace dikkat::model {

// LayerNorm (weight, optional bias) or RMSNorm (weight; computed in float32
// whatever the weights' dtype, as Llama does).
struct Norm {
  NormKind kind = NormKind::kLayerNorm;
  at::Tensor weight, bias;
  double eps = 1e-5;

  bool defined() const { return weight.defined(); }
  at::Tensor operator()(const at::Tensor& x) const;
};

// GELU with the tanh approximation (Hugging Face's gelu_new), computed as
// x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): LibTorch 1.13's
// at::gelu(x, "tanh") is a slow loop on Debian's build (bench/engine_bench.cc,
// BM_GeluTanhPaired). Agrees with it to ~5e-7 absolute.
at::Tensor GeluTanh(const at::Tensor& x);

// up -> activation (gated: activation(gate) * up) -> down. [N, d] -> [N, d].
struct FeedForward {
  Activation activation = Activation::kGelu;
  LinearWeight up_w, gate_w, down_w;
  at::Tensor up_b, gate_b, down_b;

  at::Tensor operator()(const at::Tensor& x) const;
};

struct Layer {
  Norm norm1, norm2, norm3;  // self-attn, (cross-attn | ffn), ffn (decoder of enc-dec)
  MultiHeadAttention self_attn;
  Norm q_norm, k_norm;            // per head of self-attention's q and k (qk_norm); else undefined
  // sandwich_norm: on the self-attention's and the feed-forward's outputs
  // before the residual add; else undefined.
  Norm post_norm1, post_norm2;
  MultiHeadAttention cross_attn;  // encoder-decoder decoder only
  FeedForward ffn;
  bool has_cross = false;

  const Norm& ffn_norm() const { return has_cross ? norm3 : norm2; }
};

struct Embeddings {
  LinearWeight tokens;   // [V, d] (the LM head's weight too when tied)
  at::Tensor positions;  // [P, d] learned or sinusoidal table; undefined otherwise
  at::Tensor types;      // [type_vocab, d]
  Norm norm;             // BERT's embedding LayerNorm
  double scale = 1.0;

  // The input rows of a batch, [N, d] in `dtype`: token (scaled) + position +
  // type embeddings, then the embedding norm when there is one.
  at::Tensor operator()(const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                        c10::ScalarType dtype) const;
};

struct Stack {
  Embeddings embed;
  std::vector<Layer> layers;
  Norm final_norm;
  bool causal = true;
};

// The fixed sinusoidal position table of "Attention Is All You Need":
// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), computed in
// double precision. [positions, d].
at::Tensor SinusoidalTable(int64_t positions, int64_t d, c10::Device device,
                           c10::ScalarType dtype);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_LAYERS_H_
