// Multi-head attention: the scaled dot-product core, the projections around
// it (fused or separate QKV, grouped-query heads, biases on or off), rotary
// position embeddings, and attention over a packed batch of sequences with
// the paged KV cache (self-attention) or an encoder output (cross-attention).
//
// Conventions. A query head h reads KV head h / (n_heads / n_kv_heads), as in
// Hugging Face's repeat_kv. Masks are boolean "keep" masks (true = may
// attend). A query row whose keys are all masked yields zeros, never NaN.
// Scale is 1/sqrt(head_dim), also with a single head.
//
// Classes hold weights only and are immutable after construction: safe to
// use from several threads at once.
#ifndef DIKKAT_MODEL_ATTENTION_H_
#define DIKKAT_MODEL_ATTENTION_H_

#include <cstdint>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "model/forward_batch.h"
#include "model/io/config.h"
#include "model/linear_weight.h"

namespace dikkat::model {

class KvCache;
struct Norm;  // model/layers.h

// softmax(q k^T / sqrt(D) masked) v.
//   q:    [..., Hq, Tq, D]
//   k, v: [..., Hkv, Tk, D]       Hq % Hkv == 0
//   keep: undefined (attend everywhere) or bool broadcastable to
//         [..., 1, Tq, Tk] (or [..., Hq, Tq, Tk] when Hq == Hkv)
// Returns [..., Hq, Tq, D]. When `probs` is given it receives the attention
// weights [..., Hq, Tq, Tk] (float32).
at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& keep, at::Tensor* probs = nullptr);

// keep[i, j] = query at position q_start + i may see key at position j
// (k_len keys at positions 0..k_len-1): j <= q_start + i and, with a sliding
// window W > 0, j > q_start + i - W. [q_len, k_len] bool on `device`.
at::Tensor CausalKeepMask(int64_t q_len, int64_t q_start, int64_t k_len, int64_t window,
                          c10::Device device);

// Projection weights of one attention block. Shapes (d = model width,
// D = head_dim): q [Hq*D, d], k and v [Hkv*D, d], out [d, Hq*D]; biases
// optional (undefined). A fused in_proj [(Hq+2*Hkv)*D, d] is split into
// views at construction (no copy). Weights may be int8-quantized
// (LinearWeight); biases are floating point.
class MultiHeadAttention {
 public:
  MultiHeadAttention() = default;
  MultiHeadAttention(LinearWeight q_w, at::Tensor q_b, LinearWeight k_w, at::Tensor k_b,
                     LinearWeight v_w, at::Tensor v_b, LinearWeight out_w, at::Tensor out_b,
                     int64_t n_heads, int64_t n_kv_heads);
  static MultiHeadAttention FromFused(const LinearWeight& in_w, const at::Tensor& in_b,
                                      LinearWeight out_w, at::Tensor out_b, int64_t n_heads,
                                      int64_t n_kv_heads);

  int64_t n_heads() const { return n_heads_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }

  // x [..., d] -> [..., Hq*D] / [..., Hkv*D].
  at::Tensor ProjectQ(const at::Tensor& x) const;
  at::Tensor ProjectK(const at::Tensor& x) const;
  at::Tensor ProjectV(const at::Tensor& x) const;
  // q, k and v of the same input with one matrix product (the weights are
  // stored fused, q/k/v above are views of them): [..., Hq*D], [..., Hkv*D] x2.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> ProjectQkv(const at::Tensor& x) const;
  // [..., Hq*D] -> [..., d].
  at::Tensor ProjectOut(const at::Tensor& x) const;

 private:
  LinearWeight qkv_w_;  // [(Hq+2*Hkv)*D, d]: q/k/v_w_ are row views of it
  at::Tensor qkv_b_;    // [(Hq+2*Hkv)*D]: q/k/v_b_ are views of it
  LinearWeight q_w_;
  at::Tensor q_b_;
  LinearWeight k_w_;
  at::Tensor k_b_;
  LinearWeight v_w_;
  at::Tensor v_b_;
  LinearWeight out_w_;
  at::Tensor out_b_;
  int64_t n_heads_ = 0;
  int64_t n_kv_heads_ = 0;
  int64_t head_dim_ = 0;
};

// Rotary position embeddings (rotate-half convention, as Llama): angle =
// (position / scaling) * theta^(-2i/D) for i < D/2, tables computed once in
// double precision and kept in float32.
class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  // `llama3`: Llama 3.1's frequency scaling, `yarn`: YaRN's frequencies and
  // cos/sin factor (config.h); each off when its factor is 0.
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta, double scaling,
                  c10::Device device, const RopeLlama3Scaling& llama3 = {},
                  const RopeYarnScaling& yarn = {});
  bool defined() const { return cos_.defined(); }
  // x [N, H, D] rotated by each row's position (positions: long [N]).
  at::Tensor Rotate(const at::Tensor& x, const at::Tensor& positions) const;

 private:
  at::Tensor cos_, sin_;  // [P, D/2] float32
};

struct BatchAttentionOptions {
  bool causal = true;
  // Sliding window, 0 = none. Causal: the last `window` keys up to the
  // query's own; not causal: the keys less than `window` positions from it
  // either way (EmbeddingGemma).
  int64_t window = 0;
  const RotaryEmbedding* rope = nullptr;  // null: no rotary embedding
  // Applied to each head of q and of k ([N, H, D] over D) before the
  // rotary embedding (Qwen3's q_norm / k_norm); null: none.
  const Norm* q_norm = nullptr;
  const Norm* k_norm = nullptr;
  // q multiplied by this after the norm and RoPE: scores scaled by
  // q_scale / sqrt(D) (Gemma's query_pre_attn_scalar); 1: none.
  double q_scale = 1.0;
};

// A causal chunk of at least 2 * kCausalQueryBlockRows new tokens attends
// in blocks of that many query rows, each over the keys it can see (up to
// its last row's position): the masked upper triangle of the scores is not
// computed. Not when the attention weights are recorded. GPT-2-small
// prefill on a Zen 3 EPYC, paired: 1.05-1.07x at 512 tokens, 1.10-1.33x at
// 1024 (BM_CausalBlocksPaired; docs/performance.md).
inline constexpr int64_t kCausalQueryBlockRows = 128;
// For benchmarks: the block rows (0 = the whole chunk at once).
void SetCausalQueryBlockRows(int64_t rows);

// Self-attention of every chunk of a packed batch: h [N, d] (chunk i's rows
// at index.offsets[i]) -> [N, d]. With a cache (chunks have block tables),
// the new tokens' K/V are written into layer `layer` of it and each chunk
// attends to its cached positions too; decode tokens (index.paged_decode) go
// through one PagedDecodeAttention call. Without, each chunk attends to
// itself. `probs`, when given (a single chunk only, not paged), receives the
// attention weights [Hq, n, L] float32.
at::Tensor BatchSelfAttention(const MultiHeadAttention& attn, const at::Tensor& h,
                              const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                              KvCache* cache, int64_t layer, const BatchAttentionOptions& options,
                              at::Tensor* probs);

// Cross-attention of every chunk to its own encoder output (chunk.cross, the
// keys/values of decoder layer `layer`): h [N, d] -> [N, d]. `probs` as above,
// [Hq, n, S].
at::Tensor BatchCrossAttention(const MultiHeadAttention& attn, const at::Tensor& h,
                               const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                               int64_t layer, at::Tensor* probs);

// y = x W^T + b, taking the fast matrix-vector path for a single row
// (OpenBLAS's GEMM is several times slower than GEMV at M = 1). int8 weights
// (CPU only) go through Int8Linear and give float32.
at::Tensor Linear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& b);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_ATTENTION_H_
