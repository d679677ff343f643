#include "model/transformer.h"

#include <cmath>
#include <set>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/cpu_kernels.h"

namespace dikkat::model {
namespace {

std::string ShapeString(at::IntArrayRef shape) { return "[" + absl::StrJoin(shape, ", ") + "]"; }

// Takes tensors out of a TensorMap by name, checking shapes and converting
// dtype/device, and remembers which names were used.
class WeightBinder {
 public:
  // Matrices (linear weights, embeddings) are kept in options.dtype; vectors
  // (biases, norm weights) in `compute_dtype`, the dtype of activations. With
  // int8 (kChar), the matrices taken with TakeMatrix are quantized
  // (QuantizeInt8) and every other tensor stays in `compute_dtype`.
  WeightBinder(const TensorMap& weights, const LoadOptions& options, c10::ScalarType compute_dtype)
      : weights_(weights), options_(options), compute_dtype_(compute_dtype) {}

  bool Has(const std::string& name) const { return weights_.count(name) > 0; }

  absl::StatusOr<at::Tensor> Take(const std::string& name, std::vector<int64_t> shape) {
    auto it = weights_.find(name);
    if (it == weights_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing tensor '", name, "' (expected shape ", ShapeString(shape), ")"));
    }
    return Convert(name, it->second, shape);
  }

  // A linear layer's weight or a token embedding table [out, in]: int8 with
  // scales under --dtype int8, else as Take.
  absl::StatusOr<LinearWeight> TakeMatrix(const std::string& name, std::vector<int64_t> shape) {
    if (!quantize()) return Take(name, std::move(shape));
    DIKKAT_ASSIGN_OR_RETURN(at::Tensor t, Take(name, std::move(shape)));  // float32, counted
    bytes_ -= t.numel() * static_cast<int64_t>(t.element_size());
    LinearWeight q = QuantizeInt8(t);
    bytes_ += q.bytes();
    return q;
  }

  // Undefined tensor when absent; shape-checked when present.
  absl::StatusOr<at::Tensor> TakeOptional(const std::string& name, std::vector<int64_t> shape) {
    if (!Has(name)) return at::Tensor();
    return Take(name, std::move(shape));
  }

  std::vector<std::string> Unused() const {
    std::vector<std::string> unused;
    for (const auto& [name, tensor] : weights_) {
      if (used_.count(name) == 0) unused.push_back(name);
    }
    return unused;
  }
  int64_t bytes() const { return bytes_; }
  int64_t count() const { return count_; }

 private:
  bool quantize() const { return options_.dtype == c10::ScalarType::Char; }

  absl::StatusOr<at::Tensor> Convert(const std::string& name, const at::Tensor& t,
                                     const std::vector<int64_t>& shape) {
    if (t.sizes() != at::IntArrayRef(shape)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                     ShapeString(t.sizes()), "; expected ",
                                                     ShapeString(shape)));
    }
    if (!at::isFloatingType(t.scalar_type())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has dtype ",
                                                     c10::toString(t.scalar_type()),
                                                     "; expected a floating-point dtype"));
    }
    used_.insert(name);
    const c10::ScalarType dtype = t.dim() >= 2 && !quantize() ? options_.dtype : compute_dtype_;
    at::Tensor out = t.to(options_.device, dtype).contiguous();
    if (out.data_ptr() == t.data_ptr()) out = out.clone();  // own the memory; never alias a mapping
    bytes_ += out.numel() * static_cast<int64_t>(out.element_size());
    count_ += out.numel();
    return out;
  }

  const TensorMap& weights_;
  LoadOptions options_;
  c10::ScalarType compute_dtype_;
  std::set<std::string> used_;
  int64_t bytes_ = 0;
  int64_t count_ = 0;
};

struct Norm {
  NormKind kind = NormKind::kLayerNorm;
  at::Tensor weight, bias;
  double eps = 1e-5;

  bool defined() const { return weight.defined(); }

  at::Tensor operator()(const at::Tensor& x) const {
    if (kind == NormKind::kLayerNorm) {
      return at::layer_norm(x, {weight.size(0)}, weight, bias, eps);
    }
    // RMSNorm in float32 whatever the weights' dtype, as Llama does.
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return normed.to(x.scalar_type()) * weight;
  }
};

struct FeedForward {
  Activation activation = Activation::kGelu;
  LinearWeight up_w, gate_w, down_w;
  at::Tensor up_b, gate_b, down_b;

  at::Tensor operator()(const at::Tensor& x) const {
    at::Tensor h = Linear(x, up_w, up_b);  // [N, ffn]
    switch (activation) {
      case Activation::kRelu:
        h = at::relu(h);
        break;
      case Activation::kGelu:
        h = at::gelu(h);
        break;
      case Activation::kGeluTanh:
        h = at::gelu(h, "tanh");
        break;
      case Activation::kSilu:
        h = at::silu(h);
        break;
      case Activation::kSwiGlu:
        h = at::silu(Linear(x, gate_w, gate_b)) * h;
        break;
      case Activation::kGeGlu:
        h = at::gelu(Linear(x, gate_w, gate_b)) * h;
        break;
    }
    return Linear(h, down_w, down_b);  // [N, d]
  }
};

struct Layer {
  Norm norm1, norm2, norm3;  // self-attn, (cross-attn | ffn), ffn (decoder of enc-dec)
  MultiHeadAttention self_attn;
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
};

struct Stack {
  Embeddings embed;
  std::vector<Layer> layers;
  Norm final_norm;
  bool causal = true;
};

// Per-forward index tensors, shared by every layer of the stack.
struct BatchIndex {
  std::vector<int64_t> offsets;   // chunk i occupies rows [offsets[i], offsets[i] + lens[i])
  std::vector<int64_t> lens;
  at::Tensor positions;           // [N] long
  at::Tensor write_slots;         // [N] long: where each new token's K/V go (cache only)
  std::vector<at::Tensor> context_slots;  // per chunk [start + n] long (cache, start > 0,
                                          // not a paged decode token)
  bool paged_decode = false;  // decode tokens (n == 1, start > 0) use PagedDecodeAttention
  int64_t total = 0;
};

at::Tensor SinusoidalTable(int64_t positions, int64_t d, c10::Device device,
                           c10::ScalarType dtype) {
  // PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), computed in double.
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor pos = at::arange(positions, opts).unsqueeze(1);                    // [P, 1]
  at::Tensor div = at::exp(at::arange(0, d, 2, opts) * (-std::log(10000.0) / d));  // [d/2]
  at::Tensor table = at::zeros({positions, d}, opts);
  table.slice(1, 0, d, 2).copy_(at::sin(pos * div));
  table.slice(1, 1, d, 2).copy_(at::cos(pos * div.slice(0, 0, d / 2)));
  return table.to(device, dtype);
}

}  // namespace

struct Transformer::Impl {
  ModelConfig config;
  LoadOptions options;
  // Activations' dtype. On the CPU always float32: bfloat16/float16 weights
  // are read by the kernels as they are (half the bytes streamed) while norms,
  // residuals, softmax and sampling stay in float32, which is both faster
  // (LibTorch 1.13's CPU bf16 elementwise ops are slow) and more accurate. On
  // CUDA activations follow the weights (tensor cores).
  c10::ScalarType compute_dtype = c10::ScalarType::Float;
  Stack encoder;  // encoder-only, or the encoder of an encoder-decoder
  Stack decoder;  // decoder-only, or the decoder of an encoder-decoder
  LinearWeight lm_head_w;
  at::Tensor lm_head_b;
  at::Tensor rope_cos, rope_sin;  // [P, D/2] float32

  // ---- loading ---------------------------------------------------------------
  absl::Status LoadNorm(WeightBinder& w, const std::string& prefix, Norm* norm) {
    norm->kind = config.norm;
    norm->eps = config.norm_eps;
    DIKKAT_ASSIGN_OR_RETURN(norm->weight, w.Take(prefix + ".weight", {config.d_model}));
    if (config.norm == NormKind::kLayerNorm && config.norm_bias) {
      DIKKAT_ASSIGN_OR_RETURN(norm->bias, w.Take(prefix + ".bias", {config.d_model}));
    }
    return absl::OkStatus();
  }

  absl::Status LoadAttention(WeightBinder& w, const std::string& prefix, MultiHeadAttention* out) {
    const int64_t d = config.d_model, hq = config.n_heads, hkv = config.kv_heads();
    const int64_t hd = config.head_size();
    const bool qkv_bias = config.attention_bias || config.qkv_bias_only;
    const bool out_bias = config.attention_bias && !config.qkv_bias_only;
    LinearWeight out_w;
    at::Tensor out_b;
    DIKKAT_ASSIGN_OR_RETURN(out_w, w.TakeMatrix(prefix + ".out_proj.weight", {d, hq * hd}));
    if (out_bias) {
      DIKKAT_ASSIGN_OR_RETURN(out_b, w.Take(prefix + ".out_proj.bias", {d}));
    }
    if (w.Has(prefix + ".in_proj_weight")) {
      const int64_t rows = (hq + 2 * hkv) * hd;
      LinearWeight in_w;
      at::Tensor in_b;
      DIKKAT_ASSIGN_OR_RETURN(in_w, w.TakeMatrix(prefix + ".in_proj_weight", {rows, d}));
      if (qkv_bias) {
        DIKKAT_ASSIGN_OR_RETURN(in_b, w.Take(prefix + ".in_proj_bias", {rows}));
      }
      *out = MultiHeadAttention::FromFused(in_w, in_b, out_w, out_b, hq, hkv);
      return absl::OkStatus();
    }
    LinearWeight q_w, k_w, v_w;
    at::Tensor q_b, k_b, v_b;
    DIKKAT_ASSIGN_OR_RETURN(q_w, w.TakeMatrix(prefix + ".q_proj.weight", {hq * hd, d}));
    DIKKAT_ASSIGN_OR_RETURN(k_w, w.TakeMatrix(prefix + ".k_proj.weight", {hkv * hd, d}));
    DIKKAT_ASSIGN_OR_RETURN(v_w, w.TakeMatrix(prefix + ".v_proj.weight", {hkv * hd, d}));
    if (qkv_bias) {
      DIKKAT_ASSIGN_OR_RETURN(q_b, w.Take(prefix + ".q_proj.bias", {hq * hd}));
      DIKKAT_ASSIGN_OR_RETURN(k_b, w.Take(prefix + ".k_proj.bias", {hkv * hd}));
      DIKKAT_ASSIGN_OR_RETURN(v_b, w.Take(prefix + ".v_proj.bias", {hkv * hd}));
    }
    *out = MultiHeadAttention(q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b, hq, hkv);
    return absl::OkStatus();
  }

  absl::Status LoadFeedForward(WeightBinder& w, const std::string& prefix, FeedForward* ffn) {
    const int64_t d = config.d_model, f = config.ffn_dim;
    ffn->activation = config.activation;
    DIKKAT_ASSIGN_OR_RETURN(ffn->up_w, w.TakeMatrix(prefix + ".linear1.weight", {f, d}));
    DIKKAT_ASSIGN_OR_RETURN(ffn->down_w, w.TakeMatrix(prefix + ".linear2.weight", {d, f}));
    if (config.mlp_bias) {
      DIKKAT_ASSIGN_OR_RETURN(ffn->up_b, w.Take(prefix + ".linear1.bias", {f}));
      DIKKAT_ASSIGN_OR_RETURN(ffn->down_b, w.Take(prefix + ".linear2.bias", {d}));
    }
    if (config.is_gated()) {
      DIKKAT_ASSIGN_OR_RETURN(ffn->gate_w, w.TakeMatrix(prefix + ".linear_gate.weight", {f, d}));
      if (config.mlp_bias) {
        DIKKAT_ASSIGN_OR_RETURN(ffn->gate_b, w.Take(prefix + ".linear_gate.bias", {f}));
      }
    }
    return absl::OkStatus();
  }

  absl::Status LoadLayers(WeightBinder& w, const std::string& prefix, int64_t n, bool cross,
                          Stack* stack) {
    stack->layers.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const std::string p = absl::StrCat(prefix, i);
      Layer& layer = stack->layers[i];
      layer.has_cross = cross;
      DIKKAT_RETURN_IF_ERROR(LoadAttention(w, p + ".self_attn", &layer.self_attn));
      DIKKAT_RETURN_IF_ERROR(LoadNorm(w, p + ".norm1", &layer.norm1));
      DIKKAT_RETURN_IF_ERROR(LoadNorm(w, p + ".norm2", &layer.norm2));
      if (cross) {
        DIKKAT_RETURN_IF_ERROR(LoadAttention(w, p + ".multihead_attn", &layer.cross_attn));
        DIKKAT_RETURN_IF_ERROR(LoadNorm(w, p + ".norm3", &layer.norm3));
      }
      DIKKAT_RETURN_IF_ERROR(LoadFeedForward(w, p, &layer.ffn));
    }
    return absl::OkStatus();
  }

  absl::Status LoadEmbeddings(WeightBinder& w, const std::string& prefix,
                              const LinearWeight& shared_tokens, Embeddings* e) {
    const int64_t d = config.d_model;
    e->scale = config.embedding_scale;
    if (shared_tokens.defined()) {
      e->tokens = shared_tokens;
    } else {
      DIKKAT_ASSIGN_OR_RETURN(e->tokens,
                              w.TakeMatrix(prefix + "embed_tokens.weight", {config.vocab_size, d}));
    }
    if (config.positions == PositionKind::kLearned) {
      DIKKAT_ASSIGN_OR_RETURN(
          e->positions, w.Take(prefix + "embed_positions.weight", {config.max_positions, d}));
    } else if (config.positions == PositionKind::kSinusoidal) {
      e->positions = SinusoidalTable(config.max_positions, d, options.device, compute_dtype);
    }
    if (config.type_vocab_size > 0) {
      DIKKAT_ASSIGN_OR_RETURN(
          e->types, w.Take(prefix + "embed_types.weight", {config.type_vocab_size, d}));
    }
    if (config.embedding_norm) DIKKAT_RETURN_IF_ERROR(LoadNorm(w, prefix + "embed_norm", &e->norm));
    return absl::OkStatus();
  }

  absl::Status LoadAll(WeightBinder& w) {
    const int64_t d = config.d_model;
    switch (config.architecture) {
      case Architecture::kDecoderOnly:
        decoder.causal = true;
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings(w, "", LinearWeight(), &decoder.embed));
        DIKKAT_RETURN_IF_ERROR(LoadLayers(w, "layers.", config.n_layers, false, &decoder));
        if (config.final_norm) DIKKAT_RETURN_IF_ERROR(LoadNorm(w, "final_norm", &decoder.final_norm));
        break;
      case Architecture::kEncoderOnly:
        encoder.causal = false;
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings(w, "", LinearWeight(), &encoder.embed));
        DIKKAT_RETURN_IF_ERROR(LoadLayers(w, "layers.", config.n_layers, false, &encoder));
        if (config.final_norm) DIKKAT_RETURN_IF_ERROR(LoadNorm(w, "final_norm", &encoder.final_norm));
        break;
      case Architecture::kEncoderDecoder: {
        encoder.causal = false;
        decoder.causal = true;
        LinearWeight shared;
        if (config.share_encoder_decoder_embeddings) {
          DIKKAT_ASSIGN_OR_RETURN(shared,
                                  w.TakeMatrix("embed_tokens.weight", {config.vocab_size, d}));
        }
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings(w, "encoder.", shared, &encoder.embed));
        DIKKAT_RETURN_IF_ERROR(LoadEmbeddings(w, "decoder.", shared, &decoder.embed));
        DIKKAT_RETURN_IF_ERROR(
            LoadLayers(w, "encoder.layers.", config.n_encoder_layers, false, &encoder));
        DIKKAT_RETURN_IF_ERROR(
            LoadLayers(w, "decoder.layers.", config.n_decoder_layers, true, &decoder));
        if (config.encoder_final_norm) {
          DIKKAT_RETURN_IF_ERROR(LoadNorm(w, "encoder.norm", &encoder.final_norm));
        }
        if (config.decoder_final_norm) {
          DIKKAT_RETURN_IF_ERROR(LoadNorm(w, "decoder.norm", &decoder.final_norm));
        }
        break;
      }
    }
    if (config.has_decoder()) {
      if (config.tie_embeddings) {
        lm_head_w = decoder.embed.tokens;
      } else {
        DIKKAT_ASSIGN_OR_RETURN(lm_head_w,
                                w.TakeMatrix("lm_head.weight", {config.vocab_size, d}));
      }
      DIKKAT_ASSIGN_OR_RETURN(lm_head_b, w.TakeOptional("lm_head.bias", {config.vocab_size}));
    }
    if (config.positions == PositionKind::kRotary) {
      // inv_freq[i] = theta^(-2i/D); angle = (pos / scaling) * inv_freq.
      const int64_t hd = config.head_size();
      auto opts = at::TensorOptions().dtype(at::kDouble);
      at::Tensor inv_freq = at::pow(config.rope_theta, at::arange(0, hd, 2, opts) / hd).reciprocal();
      at::Tensor pos = at::arange(config.max_positions, opts) / config.rope_scaling;
      at::Tensor angles = at::outer(pos, inv_freq);  // [P, D/2]
      rope_cos = at::cos(angles).to(options.device, at::kFloat);
      rope_sin = at::sin(angles).to(options.device, at::kFloat);
    }
    return absl::OkStatus();
  }

  // ---- forward ---------------------------------------------------------------
  BatchIndex Index(const std::vector<SequenceChunk>& chunks, bool use_cache,
                   int32_t block_size, bool paged_decode) const {
    BatchIndex index;
    index.paged_decode = use_cache && paged_decode;
    std::vector<int64_t> positions, write_slots;
    for (const SequenceChunk& c : chunks) {
      const int64_t n = static_cast<int64_t>(c.tokens.size());
      index.offsets.push_back(index.total);
      index.lens.push_back(n);
      index.total += n;
      for (int64_t j = 0; j < n; ++j) positions.push_back(c.start_pos + j);
      if (!use_cache) continue;
      const std::vector<int32_t>& table = *c.block_table;
      auto slot = [&](int64_t p) { return int64_t{table[p / block_size]} * block_size + p % block_size; };
      for (int64_t j = 0; j < n; ++j) write_slots.push_back(slot(c.start_pos + j));
      // The paged kernel reads the block table itself: no slot list for it.
      if (c.start_pos > 0 && !(index.paged_decode && n == 1)) {
        std::vector<int64_t> ctx(c.start_pos + n);
        for (int64_t p = 0; p < c.start_pos + n; ++p) ctx[p] = slot(p);
        index.context_slots.push_back(ToDevice(ctx));
      } else {
        index.context_slots.emplace_back();
      }
    }
    index.positions = ToDevice(positions);
    if (use_cache) index.write_slots = ToDevice(write_slots);
    return index;
  }

  at::Tensor ToDevice(const std::vector<int64_t>& v) const {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(options.device);
  }

  at::Tensor Embed(const Stack& stack, const std::vector<SequenceChunk>& chunks,
                   const BatchIndex& index) const {
    std::vector<int64_t> ids;
    ids.reserve(index.total);
    for (const SequenceChunk& c : chunks) ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
    const at::Tensor ids_t = ToDevice(ids);
    at::Tensor x = stack.embed.tokens.quantized()
                       ? stack.embed.tokens.Gather(ids_t)  // float32 [N, d]
                       : stack.embed.tokens.w.index_select(0, ids_t).to(compute_dtype);  // [N, d]
    if (stack.embed.scale != 1.0) x = x * stack.embed.scale;
    if (stack.embed.positions.defined()) {
      x = x + stack.embed.positions.index_select(0, index.positions).to(compute_dtype);
    }
    if (stack.embed.types.defined()) {
      std::vector<int64_t> types;
      types.reserve(index.total);
      for (const SequenceChunk& c : chunks) {
        if (c.type_ids.empty()) {
          types.insert(types.end(), c.tokens.size(), 0);
        } else {
          types.insert(types.end(), c.type_ids.begin(), c.type_ids.end());
        }
      }
      x = x + stack.embed.types.index_select(0, ToDevice(types)).to(compute_dtype);
    }
    if (stack.embed.norm.defined()) x = stack.embed.norm(x);
    return x;
  }

  // x [N, H, D] rotated by each row's position (rotate-half convention).
  at::Tensor Rotate(const at::Tensor& x, const BatchIndex& index) const {
    const int64_t half = x.size(-1) / 2;
    at::Tensor cos = rope_cos.index_select(0, index.positions).unsqueeze(1);  // [N, 1, D/2]
    at::Tensor sin = rope_sin.index_select(0, index.positions).unsqueeze(1);
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
    return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).to(x.scalar_type());
  }

  at::Tensor SelfAttention(const Stack& stack, const MultiHeadAttention& attn, const at::Tensor& h,
                           const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                           KvCache* cache, int64_t layer, AttentionCapture* capture) const {
    const int64_t n = index.total, hq = attn.n_heads(), hkv = attn.n_kv_heads();
    const int64_t hd = attn.head_dim();
    auto [q_flat, k_flat, v_flat] = attn.ProjectQkv(h);
    at::Tensor q = q_flat.view({n, hq, hd});   // [N, Hq, D]
    at::Tensor k = k_flat.view({n, hkv, hd});  // [N, Hkv, D]
    at::Tensor v = v_flat.view({n, hkv, hd});
    if (config.positions == PositionKind::kRotary) {
      q = Rotate(q, index);
      k = Rotate(k, index);
    }
    if (cache != nullptr) {
      const c10::ScalarType kv_dtype = cache->keys(layer).scalar_type();
      cache->keys(layer).index_copy_(0, index.write_slots, k.to(kv_dtype));
      cache->values(layer).index_copy_(0, index.write_slots, v.to(kv_dtype));
    }
    const int64_t window = stack.causal ? config.sliding_window : 0;
    // Decode tokens (one new token over cached keys) of every sequence go
    // through one paged kernel call; prompts and chunks take the general path.
    std::vector<int64_t> decode_rows, decode_lens;
    std::vector<const std::vector<int32_t>*> decode_tables;
    std::vector<int64_t> decode_slot(chunks.size(), -1);
    const bool record = capture != nullptr && capture->self;
    if (index.paged_decode) {
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (index.lens[i] != 1 || chunks[i].start_pos == 0) continue;
        decode_slot[i] = static_cast<int64_t>(decode_rows.size());
        decode_rows.push_back(index.offsets[i]);
        decode_lens.push_back(chunks[i].start_pos + 1);
        decode_tables.push_back(chunks[i].block_table);
      }
    }
    at::Tensor decoded;  // [decode seqs, Hq*D]
    if (!decode_rows.empty()) {
      at::Tensor qd = decode_rows.size() == static_cast<size_t>(n) ? q : q.index_select(0, ToDevice(decode_rows));
      decoded = PagedDecodeAttention(qd, cache->keys(layer), cache->values(layer), decode_tables,
                                     decode_lens, cache->block_size(), window)
                    .view({static_cast<int64_t>(decode_rows.size()), hq * hd});
      if (decode_rows.size() == static_cast<size_t>(n)) return attn.ProjectOut(decoded);
    }
    std::vector<at::Tensor> outs;
    outs.reserve(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      const int64_t off = index.offsets[i], len = index.lens[i];
      const int64_t start = chunks[i].start_pos;
      if (decode_slot[i] >= 0) {
        outs.push_back(decoded.narrow(0, decode_slot[i], 1));
        continue;
      }
      at::Tensor qi = q.narrow(0, off, len).transpose(0, 1);  // [Hq, n, D]
      at::Tensor ki, vi;                                      // [Hkv, L, D]
      if (cache != nullptr && start > 0) {
        ki = cache->keys(layer).index_select(0, index.context_slots[i]).to(q.scalar_type())
                 .transpose(0, 1);
        vi = cache->values(layer).index_select(0, index.context_slots[i]).to(q.scalar_type())
                 .transpose(0, 1);
      } else {
        ki = k.narrow(0, off, len).transpose(0, 1);
        vi = v.narrow(0, off, len).transpose(0, 1);
      }
      const int64_t total = start + len;
      at::Tensor keep;  // [n, L]; undefined when every key is visible
      if (stack.causal && (len > 1 || (window > 0 && total > window))) {
        keep = CausalKeepMask(len, start, total, window, q.device());
      }
      at::Tensor probs;
      at::Tensor out = ScaledDotProductAttention(qi, ki, vi, keep, record ? &probs : nullptr);
      if (record) capture->self_probs.push_back(probs);
      outs.push_back(out.transpose(0, 1).reshape({len, hq * hd}));  // [n, Hq*D]
    }
    at::Tensor merged = outs.size() == 1 ? outs[0] : at::cat(outs, 0);
    return attn.ProjectOut(merged);
  }

  at::Tensor CrossAttention(const MultiHeadAttention& attn, const at::Tensor& h,
                            const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                            int64_t layer, AttentionCapture* capture) const {
    const int64_t n = index.total, hq = attn.n_heads(), hd = attn.head_dim();
    at::Tensor q = attn.ProjectQ(h).view({n, hq, hd});
    std::vector<at::Tensor> outs;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const CrossAttentionCache& cross = *chunks[i].cross;
      at::Tensor qi = q.narrow(0, index.offsets[i], index.lens[i]).transpose(0, 1);  // [Hq, n, D]
      at::Tensor probs;
      const bool record = capture != nullptr && capture->cross;
      at::Tensor out = ScaledDotProductAttention(qi, cross.keys[layer], cross.values[layer],
                                                 at::Tensor(), record ? &probs : nullptr);
      if (record) capture->cross_probs.push_back(probs);
      outs.push_back(out.transpose(0, 1).reshape({index.lens[i], hq * hd}));
    }
    at::Tensor merged = outs.size() == 1 ? outs[0] : at::cat(outs, 0);
    return attn.ProjectOut(merged);
  }

  // Residual block with the configured norm placement.
  template <typename F>
  at::Tensor Residual(const at::Tensor& x, const Norm& norm, F&& sublayer) const {
    if (config.pre_norm) return x + sublayer(norm(x));
    return norm(x + sublayer(x));
  }

  ForwardResult Run(const Stack& stack, const std::vector<SequenceChunk>& chunks, KvCache* cache,
                    const ForwardOptions& opts) const {
    TORCH_CHECK(!chunks.empty(), "forward needs at least one sequence");
    TORCH_CHECK(opts.capture == nullptr || chunks.size() == 1,
                "attention capture needs a single sequence");
    const bool use_cache = cache != nullptr && chunks.front().block_table != nullptr;
    for (const SequenceChunk& c : chunks) {
      TORCH_CHECK(!c.tokens.empty(), "a sequence chunk is empty");
      TORCH_CHECK((c.block_table != nullptr) == use_cache,
                  "either every chunk has a block table or none has");
      TORCH_CHECK(use_cache || c.start_pos == 0, "a chunk without cache must start at position 0");
      TORCH_CHECK(c.start_pos + static_cast<int64_t>(c.tokens.size()) <= config.max_positions,
                  "sequence longer than max_positions");
      // Both would otherwise be out-of-bounds reads (Index() and CrossAttention()).
      TORCH_CHECK(!use_cache || static_cast<int64_t>(c.block_table->size()) * cache->block_size() >=
                                    c.start_pos + static_cast<int64_t>(c.tokens.size()),
                  "a block table of ", use_cache ? c.block_table->size() : 0,
                  " blocks does not cover positions up to ",
                  c.start_pos + static_cast<int64_t>(c.tokens.size()));
      TORCH_CHECK(stack.layers.empty() || !stack.layers.front().has_cross || c.cross != nullptr,
                  "an encoder-decoder decode needs each chunk's cross-attention cache");
    }
    KvCache* kv = use_cache ? cache : nullptr;
    // Same condition as SelfAttention's choice of kernel: CPU, and no
    // self-attention weights to record (the paged kernel does not return them).
    const bool paged_decode =
        options.device.is_cpu() && !(opts.capture != nullptr && opts.capture->self);
    const BatchIndex index = Index(chunks, use_cache, kv ? kv->block_size() : 1, paged_decode);
    ForwardResult result;
    at::Tensor x = Embed(stack, chunks, index);  // [N, d]
    auto keep_hidden = [&](const at::Tensor& h) {
      for (size_t i = 0; i < chunks.size(); ++i) {
        result.hidden.push_back(h.narrow(0, index.offsets[i], index.lens[i]));
      }
    };
    if (opts.hidden_layer == 0) keep_hidden(x);
    for (size_t l = 0; l < stack.layers.size(); ++l) {
      const Layer& layer = stack.layers[l];
      x = Residual(x, layer.norm1, [&](const at::Tensor& h) {
        return SelfAttention(stack, layer.self_attn, h, chunks, index, kv, l, opts.capture);
      });
      if (layer.has_cross) {
        x = Residual(x, layer.norm2, [&](const at::Tensor& h) {
          return CrossAttention(layer.cross_attn, h, chunks, index, l, opts.capture);
        });
      }
      x = Residual(x, layer.ffn_norm(), [&](const at::Tensor& h) { return layer.ffn(h); });
      if (opts.hidden_layer == static_cast<int64_t>(l) + 1) keep_hidden(x);
    }
    const bool want_logits = stack.causal && (opts.last_logits || opts.all_logits);
    at::Tensor rows = x;  // the rows that need the final norm
    if (want_logits && !opts.all_logits && opts.hidden_layer != ForwardOptions::kFinalHidden) {
      std::vector<int64_t> last;
      for (size_t i = 0; i < chunks.size(); ++i) last.push_back(index.offsets[i] + index.lens[i] - 1);
      rows = x.index_select(0, ToDevice(last));  // [chunks, d]
    }
    if (!want_logits && opts.hidden_layer != ForwardOptions::kFinalHidden) return result;
    if (stack.final_norm.defined()) rows = stack.final_norm(rows);
    if (opts.hidden_layer == ForwardOptions::kFinalHidden) {
      keep_hidden(rows);
      if (want_logits && !opts.all_logits) {
        std::vector<int64_t> last;
        for (size_t i = 0; i < chunks.size(); ++i) last.push_back(index.offsets[i] + index.lens[i] - 1);
        rows = rows.index_select(0, ToDevice(last));
      }
    }
    if (want_logits) result.logits = Linear(rows, lm_head_w, lm_head_b).to(at::kFloat);
    return result;
  }
};

Transformer::Transformer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transformer::~Transformer() = default;

const ModelConfig& Transformer::config() const { return impl_->config; }
const LoadOptions& Transformer::options() const { return impl_->options; }

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const ModelConfig& config,
                                                               const TensorMap& weights,
                                                               const LoadOptions& options,
                                                               LoadReport* report) {
  DIKKAT_RETURN_IF_ERROR(Validate(config));
  if (options.dtype == c10::ScalarType::Char && !options.device.is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype int8 (int8 weights) runs on the CPU only, not on ", options.device.str()));
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  impl->compute_dtype = options.device.is_cpu() ? c10::ScalarType::Float : options.dtype;
  WeightBinder binder(weights, options, impl->compute_dtype);
  try {
    DIKKAT_RETURN_IF_ERROR(impl->LoadAll(binder));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading weights failed: ", e.what()));
  }
  if (report != nullptr) {
    report->unused_tensors = binder.Unused();
    report->parameter_bytes = binder.bytes();
    report->parameter_count = binder.count();
  }
  return std::unique_ptr<Transformer>(new Transformer(std::move(impl)));
}

ForwardResult Transformer::Decode(const std::vector<SequenceChunk>& chunks, KvCache* cache,
                                  const ForwardOptions& options) const {
  TORCH_CHECK(impl_->config.has_decoder(), "this model has no decoder");
  return impl_->Run(impl_->decoder, chunks, cache, options);
}

ForwardResult Transformer::Encode(const std::vector<SequenceChunk>& chunks,
                                  const ForwardOptions& options) const {
  TORCH_CHECK(impl_->config.has_encoder(), "this model has no encoder");
  ForwardOptions opts = options;
  opts.last_logits = opts.all_logits = false;
  return impl_->Run(impl_->encoder, chunks, nullptr, opts);
}

CrossAttentionCache Transformer::MakeCrossCache(const at::Tensor& memory) const {
  const ModelConfig& c = impl_->config;
  CrossAttentionCache cache;
  cache.source_len = memory.size(0);
  for (const Layer& layer : impl_->decoder.layers) {
    const MultiHeadAttention& attn = layer.cross_attn;
    // [S, Hkv*D] -> [Hkv, S, D]
    cache.keys.push_back(attn.ProjectK(memory)
                             .view({cache.source_len, c.kv_heads(), c.head_size()})
                             .transpose(0, 1)
                             .contiguous());
    cache.values.push_back(attn.ProjectV(memory)
                               .view({cache.source_len, c.kv_heads(), c.head_size()})
                               .transpose(0, 1)
                               .contiguous());
  }
  return cache;
}

}  // namespace dikkat::model
