#include "model/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include <ATen/ops/addmv.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mv.h>
#include <ATen/ops/outer.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/softmax.h>
#include <ATen/TensorOperators.h>
#include <limits>

#include "model/aten_threads.h"
#include "model/cpu_kernels.h"
#include "model/kv_cache.h"
#include "model/layers.h"

namespace dikkat::model {

at::Tensor Linear(const at::Tensor& x, const LinearWeight& weight, const at::Tensor& b) {
  if (weight.quantized()) {
    TORCH_CHECK(x.is_cpu(), "int8 weights are CPU-only");
    return Int8Linear(x, weight, b);
  }
  const at::Tensor& w = weight.w;
  // Decode steps of a few sequences: stream the weights once; also faster than
  // OpenBLAS's GEMV for one row (bench/engine_bench.cc, BM_SmallBatchLinear).
  if (SmallBatchLinearApplies(x, w)) return SmallBatchLinear(x, w, b);
  if (x.scalar_type() != w.scalar_type()) {
    // Half-precision weights with float32 activations (CPU): the product in
    // the weights' dtype (oneDNN for bfloat16), the result back in float32.
    // LibTorch 1.13 has no float16 matrix product on the CPU, and without
    // AVX-512 its bfloat16 product is a scalar loop (39x slower than widening
    // at 512 rows): widen those.
    const bool widen = w.is_cpu() && (w.scalar_type() == at::kHalf ||
                                      (w.scalar_type() == at::kBFloat16 && !FastBFloat16Gemm()));
    at::Tensor y = widen ? at::linear(x, w.to(x.scalar_type()))
                         : at::linear(x.to(w.scalar_type()), w).to(x.scalar_type());
    return b.defined() ? y + b.to(x.scalar_type()) : y;
  }
  if (x.dim() == 2 && x.size(0) == 1) {
    // [1, in] -> [1, out] through GEMV.
    at::Tensor row = x.select(0, 0);
    at::Tensor y = b.defined() ? at::addmv(b, w, row) : at::mv(w, row);
    return y.unsqueeze(0);
  }
  return at::linear(x, w, b);
}

at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& keep, at::Tensor* probs) {
  const int64_t hq = q.size(-3), tq = q.size(-2), d = q.size(-1);
  const int64_t hkv = k.size(-3), tk = k.size(-2);
  TORCH_CHECK(hq % hkv == 0, "query heads ", hq, " not a multiple of kv heads ", hkv);
  const int64_t group = hq / hkv;
  auto lead = q.sizes().slice(0, q.dim() - 3).vec();

  // Fold the query heads that share a KV head into the row dimension so that
  // K and V are never repeated: [..., Hkv, G*Tq, D].
  at::Tensor qg = q;
  at::Tensor keep_g = keep;
  if (group > 1) {
    auto shape = lead;
    shape.insert(shape.end(), {hkv, group * tq, d});
    qg = q.reshape(shape);
    if (keep.defined()) {
      TORCH_CHECK(keep.dim() < 3 || keep.size(-3) == 1,
                  "grouped-query attention needs a mask shared by all heads");
      // [..., 1, Tq, Tk] -> [..., 1, G*Tq, Tk]
      std::vector<int64_t> reps(keep.dim(), 1);
      reps[keep.dim() - 2] = group;
      keep_g = keep.repeat(reps);
    }
  }
  // Short prompts: the scores' operators on this thread (aten_threads.h).
  int64_t score_elements = hq * tq * tk;
  for (int64_t n : lead) score_elements *= n;
  SerialAtenOps serial(score_elements <= kSerialAtenMaxElements);
  // PyTorch scales q before the product; doing the same keeps parity tight.
  at::Tensor scores = at::matmul(qg * (1.0 / std::sqrt(static_cast<double>(d))), k.transpose(-2, -1));
  at::Tensor p;
  if (keep_g.defined()) {
    scores.masked_fill_(keep_g.logical_not(), -std::numeric_limits<double>::infinity());
    p = at::softmax(scores, -1, at::kFloat);
    // Rows with no visible key are NaN after softmax; they attend to nothing.
    p.masked_fill_(keep_g.any(-1, /*keepdim=*/true).logical_not(), 0.0);
  } else {
    p = at::softmax(scores, -1, at::kFloat);
  }
  at::Tensor out = at::matmul(p.to(v.scalar_type()), v);  // [..., Hkv, G*Tq, D]
  auto out_shape = lead;
  out_shape.insert(out_shape.end(), {hq, tq, d});
  if (probs != nullptr) {
    auto p_shape = lead;
    p_shape.insert(p_shape.end(), {hq, tq, tk});
    *probs = p.reshape(p_shape);
  }
  return out.reshape(out_shape);
}

at::Tensor CausalKeepMask(int64_t q_len, int64_t q_start, int64_t k_len, int64_t window,
                          c10::Device device) {
  auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor qpos = at::arange(q_start, q_start + q_len, opts).unsqueeze(1);  // [Tq, 1]
  at::Tensor kpos = at::arange(0, k_len, opts).unsqueeze(0);                  // [1, Tk]
  at::Tensor keep = kpos <= qpos;
  if (window > 0) keep = keep.logical_and(kpos > qpos - window);
  return keep;
}

MultiHeadAttention::MultiHeadAttention(LinearWeight q_w, at::Tensor q_b, LinearWeight k_w,
                                       at::Tensor k_b, LinearWeight v_w, at::Tensor v_b,
                                       LinearWeight out_w, at::Tensor out_b, int64_t n_heads,
                                       int64_t n_kv_heads)
    : q_w_(std::move(q_w)),
      q_b_(std::move(q_b)),
      k_w_(std::move(k_w)),
      k_b_(std::move(k_b)),
      v_w_(std::move(v_w)),
      v_b_(std::move(v_b)),
      out_w_(std::move(out_w)),
      out_b_(std::move(out_b)),
      n_heads_(n_heads),
      n_kv_heads_(n_kv_heads),
      head_dim_(q_w_.out_features() / n_heads) {
  // Keep q/k/v as row views of one fused matrix so that self-attention
  // projects with one product. Weights given fused (FromFused) are views of
  // one tensor already, and so are separate ones as the loader takes them
  // (WeightBinder::TakeStackedMatrices); others are concatenated once, here.
  const int64_t q_rows = q_w_.out_features(), kv_rows = k_w_.out_features();
  auto fuse = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    // Adjacent contiguous pieces of one storage (a fused in_proj split by
    // FromFused) are re-viewed as one tensor; anything else is copied once.
    const int64_t item = static_cast<int64_t>(q.element_size());
    auto* qp = static_cast<char*>(q.data_ptr());
    const bool adjacent = q.is_contiguous() && k.is_contiguous() && v.is_contiguous() &&
                          q.storage().is_alias_of(k.storage()) &&
                          q.storage().is_alias_of(v.storage()) &&
                          static_cast<char*>(k.data_ptr()) == qp + q.numel() * item &&
                          static_cast<char*>(v.data_ptr()) == qp + (q.numel() + k.numel()) * item;
    if (!adjacent) return at::cat({q, k, v}, 0);
    std::vector<int64_t> sizes = q.sizes().vec();
    sizes[0] = q.size(0) + k.size(0) + v.size(0);
    at::Tensor fused = at::empty({0}, q.options());
    fused.set_(q.storage(), q.storage_offset(), sizes, q.strides());
    return fused;
  };
  // int8 weights: their scales are row-aligned with them and fuse the same way.
  qkv_w_.w = fuse(q_w_.w, k_w_.w, v_w_.w);
  if (q_w_.quantized()) qkv_w_.scales = fuse(q_w_.scales, k_w_.scales, v_w_.scales);
  q_w_ = qkv_w_.Rows(0, q_rows);
  k_w_ = qkv_w_.Rows(q_rows, kv_rows);
  v_w_ = qkv_w_.Rows(q_rows + kv_rows, kv_rows);
  if (q_b_.defined()) {
    qkv_b_ = fuse(q_b_, k_b_, v_b_);
    q_b_ = qkv_b_.narrow(0, 0, q_rows);
    k_b_ = qkv_b_.narrow(0, q_rows, kv_rows);
    v_b_ = qkv_b_.narrow(0, q_rows + kv_rows, kv_rows);
  }
}

MultiHeadAttention MultiHeadAttention::FromFused(const LinearWeight& in_w, const at::Tensor& in_b,
                                                 LinearWeight out_w, at::Tensor out_b,
                                                 int64_t n_heads, int64_t n_kv_heads) {
  const int64_t head_dim = in_w.out_features() / (n_heads + 2 * n_kv_heads);
  const int64_t q_rows = n_heads * head_dim, kv_rows = n_kv_heads * head_dim;
  auto rows = [](const at::Tensor& t, int64_t start, int64_t len) {
    return t.defined() ? t.narrow(0, start, len) : at::Tensor();
  };
  return MultiHeadAttention(in_w.Rows(0, q_rows), rows(in_b, 0, q_rows),
                            in_w.Rows(q_rows, kv_rows), rows(in_b, q_rows, kv_rows),
                            in_w.Rows(q_rows + kv_rows, kv_rows),
                            rows(in_b, q_rows + kv_rows, kv_rows), std::move(out_w),
                            std::move(out_b), n_heads, n_kv_heads);
}

at::Tensor MultiHeadAttention::ProjectQ(const at::Tensor& x) const { return Linear(x, q_w_, q_b_); }
at::Tensor MultiHeadAttention::ProjectK(const at::Tensor& x) const { return Linear(x, k_w_, k_b_); }
at::Tensor MultiHeadAttention::ProjectV(const at::Tensor& x) const { return Linear(x, v_w_, v_b_); }
std::tuple<at::Tensor, at::Tensor, at::Tensor> MultiHeadAttention::ProjectQkv(
    const at::Tensor& x) const {
  at::Tensor qkv = Linear(x, qkv_w_, qkv_b_);  // [..., (Hq+2*Hkv)*D]
  const int64_t q_cols = n_heads_ * head_dim_, kv_cols = n_kv_heads_ * head_dim_;
  return {qkv.narrow(-1, 0, q_cols), qkv.narrow(-1, q_cols, kv_cols),
          qkv.narrow(-1, q_cols + kv_cols, kv_cols)};
}

at::Tensor MultiHeadAttention::ProjectOut(const at::Tensor& x) const {
  return Linear(x, out_w_, out_b_);
}

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta,
                                 double scaling, c10::Device device,
                                 const RopeLlama3Scaling& llama3, const RopeYarnScaling& yarn) {
  // inv_freq[i] = theta^(-2i/D); angle = (pos / scaling) * inv_freq.
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor inv_freq = at::pow(theta, at::arange(0, head_dim, 2, opts) / head_dim).reciprocal();
  if (llama3.factor != 0.0) {
    // Llama 3.1: wavelengths 2 pi / f under old / high_freq_factor kept, over
    // old / low_freq_factor divided by factor, between them a blend whose
    // weight grows linearly in old / wavelength from low to high_freq_factor.
    const double old = llama3.original_max_positions;
    const double low = llama3.low_freq_factor, high = llama3.high_freq_factor;
    double* f = inv_freq.data_ptr<double>();
    for (int64_t i = 0; i < inv_freq.numel(); ++i) {
      constexpr double kPi = 3.14159265358979323846;
      const double wavelength = 2.0 * kPi / f[i];
      if (wavelength < old / high) continue;
      if (wavelength > old / low) {
        f[i] /= llama3.factor;
        continue;
      }
      const double smooth = (old / wavelength - low) / (high - low);
      f[i] = (1.0 - smooth) * f[i] / llama3.factor + smooth * f[i];
    }
  }
  double table_scale = 1.0;
  if (yarn.factor != 0.0) {
    // YaRN: dimension i keeps its frequency (extrapolation) below the
    // correction dim of beta_fast rotations in the original context, takes
    // frequency / factor (interpolation) above that of beta_slow, and a
    // linear blend between them.
    constexpr double kPi = 3.14159265358979323846;
    const double dim = static_cast<double>(head_dim);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(yarn.original_max_positions / (rotations * 2.0 * kPi)) /
             (2.0 * std::log(theta));
    };
    double low = correction_dim(yarn.beta_fast), high = correction_dim(yarn.beta_slow);
    if (yarn.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    double* f = inv_freq.data_ptr<double>();
    for (int64_t i = 0; i < inv_freq.numel(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double keep = 1.0 - ramp;  // the extrapolated share
      f[i] = f[i] / yarn.factor * (1.0 - keep) + f[i] * keep;
    }
    table_scale = YarnAttentionFactor(yarn);
  }
  at::Tensor pos = at::arange(max_positions, opts) / scaling;
  at::Tensor angles = at::outer(pos, inv_freq);  // [P, D/2]
  at::Tensor cos = at::cos(angles), sin = at::sin(angles);
  if (table_scale != 1.0) {
    cos.mul_(table_scale);
    sin.mul_(table_scale);
  }
  cos_ = cos.to(device, at::kFloat);
  sin_ = sin.to(device, at::kFloat);
}

at::Tensor RotaryEmbedding::Rotate(const at::Tensor& x, const at::Tensor& positions) const {
  const int64_t half = x.size(-1) / 2;
  at::Tensor cos = cos_.index_select(0, positions).unsqueeze(1);  // [N, 1, D/2]
  at::Tensor sin = sin_.index_select(0, positions).unsqueeze(1);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).to(x.scalar_type());
}

namespace {

std::atomic<int64_t> causal_query_block_rows{kCausalQueryBlockRows};

// cache[write_slots[i]] = rows[i] ([N, Hkv, D] into [slots, Hkv, D], in the
// cache's dtype). On the CPU from float32 rows into a float32, bfloat16 or
// float16 cache, a copy per row (converted as Tensor::to converts: round to
// nearest even); index_copy_ costs ~5 us a call at decode sizes, 24 calls a
// step of a 12-layer model. Elsewhere index_copy_.
void WriteCacheRows(at::Tensor& cache, const BatchIndex& index, const at::Tensor& rows) {
  const int64_t n = rows.size(0), row = cache.size(1) * cache.size(2);
  const bool direct = cache.is_cpu() && cache.is_contiguous() && rows.is_cpu() &&
                      rows.scalar_type() == at::kFloat && rows.stride(2) == 1 &&
                      rows.stride(1) == rows.size(2) && rows.size(1) * rows.size(2) == row &&
                      static_cast<int64_t>(index.write_slot_list.size()) == n &&
                      (cache.scalar_type() == at::kFloat || cache.scalar_type() == at::kBFloat16 ||
                       cache.scalar_type() == at::kHalf);
  if (!direct) {
    cache.index_copy_(0, index.write_slots, rows.to(cache.scalar_type()));
    return;
  }
  const float* src = rows.data_ptr<float>();
  const int64_t slots = cache.size(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = index.write_slot_list[i];
    TORCH_CHECK(slot >= 0 && slot < slots, "cache slot ", slot, " of ", slots);
    const float* r = src + i * rows.stride(0);
    switch (cache.scalar_type()) {
      case at::kFloat:
        std::memcpy(cache.data_ptr<float>() + slot * row, r, sizeof(float) * row);
        break;
      case at::kBFloat16: {
        c10::BFloat16* d = cache.data_ptr<c10::BFloat16>() + slot * row;
        for (int64_t j = 0; j < row; ++j) d[j] = c10::BFloat16(r[j]);
        break;
      }
      default: {  // at::kHalf
        c10::Half* d = cache.data_ptr<c10::Half>() + slot * row;
        for (int64_t j = 0; j < row; ++j) d[j] = c10::Half(r[j]);
        break;
      }
    }
  }
}

// Query rows per block of a causal prompt's attention: all of them for a
// short prompt, or when the caller records the attention weights (one
// [Tq, Tk] map).
int64_t CausalQueryBlockRows(bool causal, int64_t len, bool recording) {
  const int64_t rows = causal_query_block_rows.load(std::memory_order_relaxed);
  if (!causal || recording || rows <= 0 || len < 2 * rows) return len;
  return rows;
}

}  // namespace

void SetCausalQueryBlockRows(int64_t rows) {
  causal_query_block_rows.store(rows, std::memory_order_relaxed);
}

at::Tensor BatchSelfAttention(const MultiHeadAttention& attn, const at::Tensor& h,
                              const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                              KvCache* cache, int64_t layer, const BatchAttentionOptions& options,
                              at::Tensor* probs) {
  TORCH_CHECK(probs == nullptr || (chunks.size() == 1 && !index.paged_decode),
              "attention weights are recorded for a single chunk outside the paged kernel only");
  const int64_t n = index.total, hq = attn.n_heads(), hkv = attn.n_kv_heads();
  const int64_t hd = attn.head_dim();
  auto [q_flat, k_flat, v_flat] = attn.ProjectQkv(h);
  at::Tensor q = q_flat.view({n, hq, hd});   // [N, Hq, D]
  at::Tensor k = k_flat.view({n, hkv, hd});  // [N, Hkv, D]
  at::Tensor v = v_flat.view({n, hkv, hd});
  // q and k are views into the fused projection's rows: the norms' fast
  // path wants them contiguous (and RoPE copies them anyway).
  if (options.q_norm != nullptr) q = (*options.q_norm)(q.contiguous());
  if (options.k_norm != nullptr) k = (*options.k_norm)(k.contiguous());
  if (options.rope != nullptr) {
    q = options.rope->Rotate(q, index.positions);
    k = options.rope->Rotate(k, index.positions);
  }
  // The kernels scale scores by 1/sqrt(D); q carries the rest.
  if (options.q_scale != 1.0) q = q * options.q_scale;
  if (cache != nullptr) {
    WriteCacheRows(cache->keys(layer), index, k);
    WriteCacheRows(cache->values(layer), index, v);
  }
  const int64_t window = options.causal ? options.window : 0;
  // Not causal (an encoder: EmbeddingGemma's bidirectional Gemma 3): the
  // keys within `both_ways` positions either side of the query.
  const int64_t both_ways = options.causal ? 0 : options.window;
  // Decode tokens (one new token over cached keys) of every sequence go
  // through one paged kernel call; prompts and chunks take the general path.
  std::vector<int64_t> decode_rows, decode_lens;
  std::vector<const std::vector<int32_t>*> decode_tables;
  std::vector<int64_t> decode_slot(chunks.size(), -1);
  if (index.paged_decode) {
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (index.lens[i] > kPagedChunkRows || chunks[i].start_pos == 0) continue;
      // One paged row per query token, each over its own causal prefix.
      decode_slot[i] = static_cast<int64_t>(decode_rows.size());
      for (int64_t j = 0; j < index.lens[i]; ++j) {
        decode_rows.push_back(index.offsets[i] + j);
        decode_lens.push_back(chunks[i].start_pos + j + 1);
        decode_tables.push_back(chunks[i].block_table);
      }
    }
  }
  at::Tensor decoded;  // [decode seqs, Hq*D]
  if (!decode_rows.empty()) {
    const bool all_decode = decode_rows.size() == static_cast<size_t>(n);
    at::Tensor qd = all_decode ? q : q.index_select(0, LongTensor(decode_rows, q.device()));
    decoded = PagedDecodeAttention(qd, cache->keys(layer), cache->values(layer), decode_tables,
                                   decode_lens, cache->block_size(), window)
                  .view({static_cast<int64_t>(decode_rows.size()), hq * hd});
    if (all_decode) return attn.ProjectOut(decoded);
  }
  std::vector<at::Tensor> outs;
  outs.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t off = index.offsets[i], len = index.lens[i];
    const int64_t start = chunks[i].start_pos;
    if (decode_slot[i] >= 0) {
      outs.push_back(decoded.narrow(0, decode_slot[i], len));
      continue;
    }
    at::Tensor qc = q.narrow(0, off, len);  // [n, Hq, D]
    // The kernel where it applies to this batch's rows (the cache's rows
    // below are gathered as contiguous float32, which it takes too).
    const bool both_ways_masks = both_ways > 0 && start + len > both_ways;
    if (probs == nullptr && !both_ways_masks && PromptAttentionApplies(qc, k, v)) {
      // Keys [total, Hkv, D]: the cache's rows up to this chunk, or the
      // chunk's own.
      at::Tensor kc, vc;
      if (cache != nullptr && start > 0) {
        kc = cache->keys(layer).index_select(0, index.context_slots[i]).to(at::kFloat);
        vc = cache->values(layer).index_select(0, index.context_slots[i]).to(at::kFloat);
      } else {
        kc = k.narrow(0, off, len);
        vc = v.narrow(0, off, len);
      }
      outs.push_back(PromptAttention(qc, kc, vc, start, options.causal, window));
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
    const int64_t rows = CausalQueryBlockRows(options.causal, len, probs != nullptr);
    for (int64_t r0 = 0; r0 < len; r0 += rows) {
      // Causal: the queries [r0, r1) see the keys before start + r1 only, so
      // a long prompt goes block by block over the keys each block can see.
      const int64_t r1 = std::min(len, r0 + rows), keys = options.causal ? start + r1 : total;
      at::Tensor qb = rows < len ? qi.narrow(1, r0, r1 - r0) : qi;
      at::Tensor kb = keys < total ? ki.narrow(1, 0, keys) : ki;
      at::Tensor vb = keys < total ? vi.narrow(1, 0, keys) : vi;
      at::Tensor keep;  // [r1 - r0, keys]; undefined when every key is visible
      if (options.causal && (r1 - r0 > 1 || (window > 0 && keys > window))) {
        keep = CausalKeepMask(r1 - r0, start + r0, keys, window, q.device());
      } else if (both_ways_masks) {
        auto opts = at::TensorOptions().dtype(at::kLong).device(q.device());
        at::Tensor qpos = at::arange(start + r0, start + r1, opts).unsqueeze(1);  // [rows, 1]
        at::Tensor kpos = at::arange(0, keys, opts).unsqueeze(0);                 // [1, keys]
        keep = (qpos - kpos).abs() < both_ways;
      }
      at::Tensor out = ScaledDotProductAttention(qb, kb, vb, keep, probs);
      outs.push_back(out.transpose(0, 1).reshape({r1 - r0, hq * hd}));  // [rows, Hq*D]
    }
  }
  at::Tensor merged = outs.size() == 1 ? outs[0] : at::cat(outs, 0);
  return attn.ProjectOut(merged);
}

at::Tensor BatchCrossAttention(const MultiHeadAttention& attn, const at::Tensor& h,
                               const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                               int64_t layer, at::Tensor* probs) {
  TORCH_CHECK(probs == nullptr || chunks.size() == 1,
              "attention weights are recorded for a single chunk only");
  const int64_t n = index.total, hq = attn.n_heads(), hd = attn.head_dim();
  at::Tensor q = attn.ProjectQ(h).view({n, hq, hd});
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const CrossAttentionCache& cross = *chunks[i].cross;
    at::Tensor qi = q.narrow(0, index.offsets[i], index.lens[i]).transpose(0, 1);  // [Hq, n, D]
    at::Tensor out = ScaledDotProductAttention(qi, cross.keys[layer], cross.values[layer],
                                               at::Tensor(), probs);
    outs.push_back(out.transpose(0, 1).reshape({index.lens[i], hq * hd}));
  }
  at::Tensor merged = outs.size() == 1 ? outs[0] : at::cat(outs, 0);
  return attn.ProjectOut(merged);
}

}  // namespace dikkat::model
