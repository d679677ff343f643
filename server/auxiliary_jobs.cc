#include "server/auxiliary_jobs.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <exception>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "model/transformer.h"

namespace dikkat::server {
namespace {

using model::Architecture;

DenseTensor ToDense(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
  DenseTensor out;
  out.shape.assign(c.sizes().begin(), c.sizes().end());
  out.values.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  return out;
}

// The encoder's output for `source`: [S, d].
at::Tensor EncoderMemory(const model::Transformer& transformer, const std::vector<int32_t>& source) {
  model::SequenceChunk c;
  c.tokens = absl::MakeConstSpan(source);
  model::ForwardOptions opts;
  opts.hidden_layer = model::ForwardOptions::kFinalHidden;
  return transformer.Encode({c}, opts).hidden[0];  // [S, d]
}

size_t Encode(const model::Transformer& transformer, const EncodeRequest& req, size_t first,
              int64_t token_budget, EncodeResult* result) {
  const model::ModelConfig& config = transformer.config();
  std::vector<model::SequenceChunk> chunks;
  int64_t tokens = 0;
  for (size_t i = first; i < req.inputs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(req.inputs[i].size());
    if (!chunks.empty() && tokens + n > token_budget) break;
    model::SequenceChunk c;
    c.tokens = absl::MakeConstSpan(req.inputs[i]);
    if (!req.type_ids.empty()) c.type_ids = absl::MakeConstSpan(req.type_ids[i]);
    chunks.push_back(c);
    tokens += n;
  }
  model::ForwardOptions opts;
  opts.last_logits = false;
  opts.hidden_layer = req.hidden_layer < 0 ? model::ForwardOptions::kFinalHidden : req.hidden_layer;
  // Decoder-only models encode with their causal stack (no KV cache needed).
  model::ForwardResult fwd = config.architecture == Architecture::kDecoderOnly
                                 ? transformer.Decode(chunks, nullptr, opts)
                                 : transformer.Encode(chunks, opts);
  result->prompt_tokens += static_cast<int32_t>(tokens);
  for (const at::Tensor& h : fwd.hidden) {  // [n, d]
    at::Tensor hf = h.to(at::kFloat);
    at::Tensor pooled;
    switch (req.pooling) {
      case model::Pooling::kMean:
        pooled = hf.mean(0);
        break;
      case model::Pooling::kFirst:
        pooled = hf.select(0, 0);
        break;
      case model::Pooling::kLast:
        pooled = hf.select(0, hf.size(0) - 1);
        break;
    }
    // sentence-transformers Dense modules: trained on the final layer's
    // pooled output, and applied to that only.
    if (req.hidden_layer < 0) pooled = transformer.ProjectEmbedding(pooled);
    if (req.normalize) pooled = pooled / pooled.norm().clamp_min(1e-12);
    result->embeddings.push_back(ToDense(pooled));
    if (req.return_hidden_states) result->hidden_states.push_back(ToDense(hf));
  }
  return chunks.size();
}

// One layer's weights [H, q, k] reduced to the maps the request asked for.
void AddLayerMaps(const AttentionRequest& req, int64_t layer, const at::Tensor& layer_probs,
                  AttentionResult* result) {
  at::Tensor probs = layer_probs.to(at::kCPU, at::kFloat);
  result->q_len = static_cast<int32_t>(probs.size(1));
  result->k_len = static_cast<int32_t>(probs.size(2));
  std::vector<int64_t> heads(req.heads.begin(), req.heads.end());
  if (!heads.empty()) probs = probs.index_select(0, at::tensor(heads, at::kLong));
  if (req.aggregation == HeadAggregation::kNone) {
    for (int64_t i = 0; i < probs.size(0); ++i) {
      AttentionMap map;
      map.layer = static_cast<int32_t>(layer);
      map.head = heads.empty() ? static_cast<int32_t>(i) : static_cast<int32_t>(heads[i]);
      map.kind = req.kind;
      map.weights = ToDense(probs[i]);
      result->maps.push_back(std::move(map));
    }
    return;
  }
  AttentionMap map;
  map.layer = static_cast<int32_t>(layer);
  map.head = -1;
  map.kind = req.kind;
  map.weights = ToDense(req.aggregation == HeadAggregation::kMean ? probs.mean(0)
                                                                  : std::get<0>(probs.max(0)));
  result->maps.push_back(std::move(map));
}

AttentionResult Attention(const model::Transformer& transformer, const AttentionRequest& req) {
  const model::ModelConfig& config = transformer.config();
  AttentionResult result;
  model::AttentionCapture capture;
  capture.layers.assign(req.layers.begin(), req.layers.end());
  std::sort(capture.layers.begin(), capture.layers.end());
  capture.sink = [&](int64_t layer, const at::Tensor& probs) {
    AddLayerMaps(req, layer, probs, &result);
  };
  model::SequenceChunk c;
  model::ForwardOptions opts;
  opts.last_logits = false;  // capture only: the forward stops after the last selected layer
  opts.capture = &capture;
  switch (req.kind) {
    case AttentionKind::kSelf:
      capture.self = true;
      c.tokens = absl::MakeConstSpan(req.input);
      if (config.architecture == Architecture::kDecoderOnly) {
        transformer.Decode({c}, nullptr, opts);
      } else {
        transformer.Encode({c}, opts);
      }
      break;
    case AttentionKind::kEncoderSelf:
      capture.self = true;
      c.tokens = absl::MakeConstSpan(req.input);
      transformer.Encode({c}, opts);
      break;
    case AttentionKind::kDecoderSelf:
    case AttentionKind::kCross: {
      model::CrossAttentionCache cross =
          transformer.MakeCrossCache(EncoderMemory(transformer, req.input));
      capture.self = req.kind == AttentionKind::kDecoderSelf;
      capture.cross = req.kind == AttentionKind::kCross;
      c.tokens = absl::MakeConstSpan(req.target);
      c.cross = &cross;
      transformer.Decode({c}, nullptr, opts);
      break;
    }
  }
  // The sink saw layers in ascending order; answer in the request's order.
  if (!req.layers.empty()) {
    std::vector<AttentionMap> ordered;
    ordered.reserve(result.maps.size());
    for (int32_t l : req.layers) {
      for (AttentionMap& m : result.maps) {
        if (m.layer == l) ordered.push_back(std::move(m));
      }
    }
    result.maps = std::move(ordered);
  }
  return result;
}

}  // namespace

absl::StatusOr<size_t> RunEncodeGroup(const model::Transformer& transformer,
                                      const EncodeRequest& request, size_t first,
                                      int64_t token_budget, EncodeResult* result) {
  try {
    return Encode(transformer, request, first, token_budget, result);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("forward failed: ", e.what()));
  }
}

absl::StatusOr<AttentionResult> RunAttention(const model::Transformer& transformer,
                                             const AttentionRequest& request) {
  try {
    return Attention(transformer, request);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("forward failed: ", e.what()));
  }
}

std::unique_ptr<model::CrossAttentionCache> EncodeSource(const model::Transformer& transformer,
                                                         const std::vector<int32_t>& source) {
  return std::make_unique<model::CrossAttentionCache>(
      transformer.MakeCrossCache(EncoderMemory(transformer, source)));
}

}  // namespace dikkat::server
