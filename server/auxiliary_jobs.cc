#include "server/auxiliary_jobs.h"

#include <ATen/ATen.h>

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
at::Tensor EncoderMemory(const model::Transformer& transformer, const std::vector<int32_t>& source,
                         model::AttentionCapture* capture) {
  model::SequenceChunk c;
  c.tokens = absl::MakeConstSpan(source);
  model::ForwardOptions opts;
  opts.hidden_layer = model::ForwardOptions::kFinalHidden;
  opts.capture = capture;
  return transformer.Encode({c}, opts).hidden[0];  // [S, d]
}

EncodeResult Encode(const model::Transformer& transformer, const EncodeRequest& req) {
  const model::ModelConfig& config = transformer.config();
  std::vector<model::SequenceChunk> chunks;
  int32_t total = 0;
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    model::SequenceChunk c;
    c.tokens = absl::MakeConstSpan(req.inputs[i]);
    if (!req.type_ids.empty()) c.type_ids = absl::MakeConstSpan(req.type_ids[i]);
    chunks.push_back(c);
    total += static_cast<int32_t>(req.inputs[i].size());
  }
  model::ForwardOptions opts;
  opts.last_logits = false;
  opts.hidden_layer = req.hidden_layer < 0 ? model::ForwardOptions::kFinalHidden : req.hidden_layer;
  // Decoder-only models encode with their causal stack (no KV cache needed).
  model::ForwardResult fwd = config.architecture == Architecture::kDecoderOnly
                                 ? transformer.Decode(chunks, nullptr, opts)
                                 : transformer.Encode(chunks, opts);
  EncodeResult result;
  result.prompt_tokens = total;
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
    if (req.normalize) pooled = pooled / pooled.norm().clamp_min(1e-12);
    result.embeddings.push_back(ToDense(pooled));
    if (req.return_hidden_states) result.hidden_states.push_back(ToDense(hf));
  }
  return result;
}

AttentionResult Attention(const model::Transformer& transformer, const AttentionRequest& req) {
  const model::ModelConfig& config = transformer.config();
  model::AttentionCapture capture;
  model::SequenceChunk c;
  model::ForwardOptions opts;
  opts.last_logits = false;
  opts.capture = &capture;
  std::vector<at::Tensor>* maps = &capture.self_probs;
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
      EncoderMemory(transformer, req.input, &capture);
      break;
    case AttentionKind::kDecoderSelf:
    case AttentionKind::kCross: {
      model::CrossAttentionCache cross =
          transformer.MakeCrossCache(EncoderMemory(transformer, req.input, nullptr));
      capture.self = req.kind == AttentionKind::kDecoderSelf;
      capture.cross = req.kind == AttentionKind::kCross;
      if (capture.cross) maps = &capture.cross_probs;
      c.tokens = absl::MakeConstSpan(req.target);
      c.cross = &cross;
      transformer.Decode({c}, nullptr, opts);
      break;
    }
  }
  AttentionResult result;
  std::vector<int32_t> layers = req.layers;
  if (layers.empty()) {
    for (size_t l = 0; l < maps->size(); ++l) layers.push_back(static_cast<int32_t>(l));
  }
  std::vector<int64_t> heads(req.heads.begin(), req.heads.end());
  for (int32_t l : layers) {
    at::Tensor probs = (*maps)[l].to(at::kCPU, at::kFloat);  // [H, q, k]
    result.q_len = static_cast<int32_t>(probs.size(1));
    result.k_len = static_cast<int32_t>(probs.size(2));
    if (!heads.empty()) probs = probs.index_select(0, at::tensor(heads, at::kLong));
    if (req.aggregation == HeadAggregation::kNone) {
      for (int64_t i = 0; i < probs.size(0); ++i) {
        AttentionMap map;
        map.layer = l;
        map.head = heads.empty() ? static_cast<int32_t>(i) : static_cast<int32_t>(heads[i]);
        map.kind = req.kind;
        map.weights = ToDense(probs[i]);
        result.maps.push_back(std::move(map));
      }
    } else {
      AttentionMap map;
      map.layer = l;
      map.head = -1;
      map.kind = req.kind;
      map.weights = ToDense(req.aggregation == HeadAggregation::kMean ? probs.mean(0)
                                                                      : std::get<0>(probs.max(0)));
      result.maps.push_back(std::move(map));
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<EncodeResult> RunEncode(const model::Transformer& transformer,
                                       const EncodeRequest& request) {
  try {
    return Encode(transformer, request);
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
      transformer.MakeCrossCache(EncoderMemory(transformer, source, nullptr)));
}

}  // namespace dikkat::server
