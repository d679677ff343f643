// The forward of every architecture: embeddings -> layers (self-attention,
// cross-attention, feed-forward, each in a residual block) -> final norm ->
// LM head, over a packed batch of chunks (model/forward_batch.h). The blocks
// live in model/layers.h and model/attention.h; the weights are bound by
// model/model_weights.cc.
#include "model/transformer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <utility>

#include <ATen/TensorOperators.h>
#include <c10/core/InferenceMode.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/attention.h"
#include "model/cpu_elementwise.h"
#include "model/cpu_kernels.h"
#include "model/layers.h"
#include "model/model_weights.h"
#include "model/weight_binder.h"

namespace dikkat::model {

namespace {
std::atomic<bool> inference_mode{true};  // SetForwardInferenceMode

// Inference mode for the scope of a forward, unless a benchmark turned it off.
class ForwardMode {
 public:
  ForwardMode() {
    if (inference_mode.load(std::memory_order_relaxed)) guard_.emplace();
  }

 private:
  std::optional<c10::InferenceMode> guard_;
};
}  // namespace

void SetForwardInferenceMode(bool on) { inference_mode.store(on, std::memory_order_relaxed); }

struct Transformer::Impl {
  ModelConfig config;
  LoadOptions options;
  // Activations' dtype. On the CPU always float32: bfloat16/float16 weights
  // are read by the kernels as they are (half the bytes streamed) while norms,
  // residuals, softmax and sampling stay in float32, which is both faster
  // (LibTorch 1.13's CPU bf16 elementwise ops are slow) and more accurate. On
  // CUDA activations follow the weights (tensor cores).
  c10::ScalarType compute_dtype = c10::ScalarType::Float;
  ModelWeights weights;

  // Residual block with the configured norm placement.
  // `post` (sandwich_norm; else undefined) normalizes the sublayer's output
  // before the add.
  template <typename F>
  at::Tensor Residual(const at::Tensor& x, const Norm& norm, const Norm& post,
                      F&& sublayer) const {
    // x + s in place into the sublayer's output where nothing else shares it
    // (CpuResidualAdd: the values of x + s). A sublayer must return memory
    // it does not keep.
    if (config.pre_norm) {
      at::Tensor s = sublayer(norm(x));
      return CpuResidualAdd(x, post.defined() ? post(s) : s);
    }
    return norm(CpuResidualAdd(x, sublayer(x)));
  }

  // Rows of each chunk's last token, or of all its tokens for a chunk that
  // asks for all its logits.
  at::Tensor LastRows(const at::Tensor& x, const BatchIndex& index,
                      const std::vector<SequenceChunk>& chunks) const {
    std::vector<int64_t> rows;
    rows.reserve(index.lens.size());
    for (size_t i = 0; i < index.lens.size(); ++i) {
      const int64_t first = chunks[i].all_logits ? index.offsets[i] : index.offsets[i] + index.lens[i] - 1;
      for (int64_t r = first; r < index.offsets[i] + index.lens[i]; ++r) rows.push_back(r);
    }
    return GatherRows(x, LongTensor(rows, options.device));
  }

  void CheckChunks(const Stack& stack, const std::vector<SequenceChunk>& chunks, KvCache* cache,
                   bool use_cache, const ForwardOptions& opts) const {
    TORCH_CHECK(!chunks.empty(), "forward needs at least one sequence");
    TORCH_CHECK(opts.capture == nullptr || chunks.size() == 1,
                "attention capture needs a single sequence");
    for (const SequenceChunk& c : chunks) {
      TORCH_CHECK(!c.tokens.empty(), "a sequence chunk is empty");
      TORCH_CHECK((c.block_table != nullptr) == use_cache,
                  "either every chunk has a block table or none has");
      TORCH_CHECK(use_cache || c.start_pos == 0, "a chunk without cache must start at position 0");
      TORCH_CHECK(c.start_pos + static_cast<int64_t>(c.tokens.size()) <= config.max_positions,
                  "a sequence of ", c.start_pos + static_cast<int64_t>(c.tokens.size()),
                  " positions is longer than the context served, ", config.max_positions);
      // Both would otherwise be out-of-bounds reads (MakeBatchIndex and
      // BatchCrossAttention).
      TORCH_CHECK(!use_cache || static_cast<int64_t>(c.block_table->size()) * cache->block_size() >=
                                    c.start_pos + static_cast<int64_t>(c.tokens.size()),
                  "a block table of ", use_cache ? c.block_table->size() : 0,
                  " blocks does not cover positions up to ",
                  c.start_pos + static_cast<int64_t>(c.tokens.size()));
      TORCH_CHECK(stack.layers.empty() || !stack.layers.front().has_cross || c.cross != nullptr,
                  "an encoder-decoder decode needs each chunk's cross-attention cache");
    }
  }

  ForwardResult Run(const Stack& stack, const std::vector<SequenceChunk>& chunks, KvCache* cache,
                    const ForwardOptions& opts) const {
    // ~250 LibTorch operators a decode step (views, narrows, empties): without
    // autograd's dispatch and view metadata each costs less.
    const ForwardMode mode;
    const bool use_cache = cache != nullptr && chunks.front().block_table != nullptr;
    CheckChunks(stack, chunks, cache, use_cache, opts);
    KvCache* kv = use_cache ? cache : nullptr;
    AttentionCapture* capture = opts.capture;
    const int64_t n_layers = static_cast<int64_t>(stack.layers.size());
    // The layers whose weights go to the capture's sink.
    std::vector<bool> record(n_layers, capture != nullptr && capture->layers.empty());
    if (capture != nullptr) {
      for (int64_t l : capture->layers) {
        TORCH_CHECK(l >= 0 && l < n_layers, "attention capture of layer ", l, " of ", n_layers);
        record[l] = true;
      }
    }
    const bool record_self = capture != nullptr && capture->self;
    const bool record_cross = capture != nullptr && capture->cross;
    // The paged kernel does not return weights: a forward that records
    // self-attention takes the general path. CPU only.
    const bool paged_decode = options.device.is_cpu() && !record_self;
    const BatchIndex index =
        MakeBatchIndex(chunks, kv ? kv->block_size() : 0, paged_decode, options.device);
    const bool want_logits = stack.causal && (opts.last_logits || opts.all_logits);
    const bool want_final = want_logits || opts.hidden_layer == ForwardOptions::kFinalHidden;
    // A capture-only forward stops after the last layer it records.
    int64_t run_layers = n_layers;
    if (capture != nullptr && !want_final && opts.hidden_layer == ForwardOptions::kNoHidden) {
      run_layers = 0;
      for (int64_t l = 0; l < n_layers; ++l) {
        if (record[l]) run_layers = l + 1;
      }
    }
    BatchAttentionOptions attn_opts;
    attn_opts.causal = stack.causal;
    // An encoder-decoder's encoder sees every key (sliding_window is its
    // decoder's); an encoder-only model's slides both ways.
    attn_opts.window =
        stack.causal || config.architecture == Architecture::kEncoderOnly ? config.sliding_window : 0;
    attn_opts.rope = weights.rope.defined() ? &weights.rope : nullptr;
    if (config.query_pre_attn_scalar > 0) {
      attn_opts.q_scale =
          std::sqrt(static_cast<double>(config.head_size()) / config.query_pre_attn_scalar);
    }

    const bool last_only = want_logits && !opts.all_logits;
    // Logits of the last rows only and no hidden states asked for: the last
    // layer's feed-forward runs on those rows alone (row-wise, so nothing
    // else changes). Not where every chunk keeps all its rows anyway (a
    // decode step: one row each).
    bool trim_last_layer = false;
    if (last_only && opts.hidden_layer == ForwardOptions::kNoHidden && run_layers == n_layers) {
      for (size_t i = 0; i < chunks.size() && !trim_last_layer; ++i) {
        trim_last_layer = !chunks[i].all_logits && index.lens[i] > 1;
      }
    }

    ForwardResult result;
    at::Tensor x = stack.embed(chunks, index, compute_dtype);  // [N, d]
    auto keep_hidden = [&](const at::Tensor& h) {
      for (size_t i = 0; i < chunks.size(); ++i) {
        result.hidden.push_back(h.narrow(0, index.offsets[i], index.lens[i]));
      }
    };
    if (opts.hidden_layer == 0) keep_hidden(x);
    for (int64_t l = 0; l < run_layers; ++l) {
      const Layer& layer = stack.layers[l];
      x = Residual(x, layer.norm1, layer.post_norm1, [&](const at::Tensor& h) {
        at::Tensor probs;
        const bool keep = record_self && record[l];
        BatchAttentionOptions layer_opts = attn_opts;
        // Gemma 3: most layers slide (with their own RoPE base), some see
        // every key.
        if (!config.layer_slides(l)) {
          layer_opts.window = 0;
        } else if (weights.rope_local.defined()) {
          layer_opts.rope = &weights.rope_local;
        }
        if (layer.q_norm.defined()) layer_opts.q_norm = &layer.q_norm;
        if (layer.k_norm.defined()) layer_opts.k_norm = &layer.k_norm;
        at::Tensor out = BatchSelfAttention(layer.self_attn, h, chunks, index, kv, l, layer_opts,
                                            keep ? &probs : nullptr);
        if (keep) capture->sink(l, probs);
        return out;
      });
      if (layer.has_cross) {
        x = Residual(x, layer.norm2, Norm(), [&](const at::Tensor& h) {
          at::Tensor probs;
          const bool keep = record_cross && record[l];
          at::Tensor out =
              BatchCrossAttention(layer.cross_attn, h, chunks, index, l, keep ? &probs : nullptr);
          if (keep) capture->sink(l, probs);
          return out;
        });
      }
      // Only the rows that get logits go on past the last layer's attention
      // (its keys and values are in the cache by now): the last layer's
      // feed-forward of a 512-token prompt is ~5% of the prompt's products.
      if (l == n_layers - 1 && trim_last_layer) x = LastRows(x, index, chunks);
      x = Residual(x, layer.ffn_norm(), layer.post_norm2,
                   [&](const at::Tensor& h) { return layer.ffn(h); });
      if (opts.hidden_layer == l + 1) keep_hidden(x);
    }
    if (!want_final) return result;
    at::Tensor rows = x;  // the rows that need the final norm
    if (last_only && !trim_last_layer && opts.hidden_layer != ForwardOptions::kFinalHidden) {
      rows = LastRows(x, index, chunks);
    }
    if (stack.final_norm.defined()) rows = stack.final_norm(rows);
    if (opts.hidden_layer == ForwardOptions::kFinalHidden) {
      keep_hidden(rows);
      if (last_only) rows = LastRows(rows, index, chunks);
    }
    if (want_logits) {
      result.logits = Linear(rows, weights.lm_head_w, weights.lm_head_b).to(at::kFloat);
    }
    return result;
  }
};

Transformer::Transformer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transformer::~Transformer() = default;

const ModelConfig& Transformer::config() const { return impl_->config; }

at::Tensor Transformer::ProjectEmbedding(const at::Tensor& pooled) const {
  if (impl_->weights.embedding_dense.empty()) return pooled;
  const ForwardMode mode;
  at::Tensor x = pooled.dim() == 1 ? pooled.unsqueeze(0) : pooled;
  x = x.to(impl_->options.device, impl_->compute_dtype).contiguous();
  for (const ModelWeights::Dense& dense : impl_->weights.embedding_dense) {
    x = Linear(x, dense.w, dense.b);
    if (dense.tanh) x = x.tanh();
  }
  x = x.to(at::kFloat);
  return pooled.dim() == 1 ? x.squeeze(0) : x;
}
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
  if (options.max_positions < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_positions of the load options is ", options.max_positions, "; it must be >= 0"));
  }
  const int64_t served = options.max_positions > 0
                             ? std::min(options.max_positions, config.max_positions)
                             : config.max_positions;
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  impl->compute_dtype = options.device.is_cpu() ? c10::ScalarType::Float : options.dtype;
  WeightBinder binder(weights, options.dtype, impl->compute_dtype, options.device,
                      options.huge_pages);
  try {
    DIKKAT_RETURN_IF_ERROR(BindModelWeights(config, options.device, impl->compute_dtype, served,
                                            binder, &impl->weights));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading weights failed: ", e.what()));
  }
  // Learned position tables keep their rows; sequences stop at `served`.
  impl->config.max_positions = served;
  if (report != nullptr) {
    report->unused_tensors = binder.Unused();
    report->parameter_bytes = binder.bytes();
    report->parameter_count = binder.count();
    report->huge_page_bytes = binder.huge_page_bytes();
  }
  return std::unique_ptr<Transformer>(new Transformer(std::move(impl)));
}

ForwardResult Transformer::Decode(const std::vector<SequenceChunk>& chunks, KvCache* cache,
                                  const ForwardOptions& options) const {
  TORCH_CHECK(impl_->config.has_decoder(), "this model has no decoder");
  return impl_->Run(impl_->weights.decoder, chunks, cache, options);
}

ForwardResult Transformer::Encode(const std::vector<SequenceChunk>& chunks,
                                  const ForwardOptions& options) const {
  TORCH_CHECK(impl_->config.has_encoder(), "this model has no encoder");
  ForwardOptions opts = options;
  opts.last_logits = opts.all_logits = false;
  return impl_->Run(impl_->weights.encoder, chunks, nullptr, opts);
}

CrossAttentionCache Transformer::MakeCrossCache(const at::Tensor& memory) const {
  const ForwardMode mode;
  const ModelConfig& c = impl_->config;
  CrossAttentionCache cache;
  cache.source_len = memory.size(0);
  for (const Layer& layer : impl_->weights.decoder.layers) {
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
