#include "model/layers.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/zeros.h>

#include <cmath>

#include "model/aten_threads.h"
#include "model/cpu_elementwise.h"
#include "model/cpu_kernels.h"

namespace dikkat::model {

namespace {

bool Small(const at::Tensor& x) { return x.numel() <= kSerialAtenMaxElements; }

// The activation of the up projection (gated ones: activation(gate) * up).
at::Tensor Activate(Activation activation, const at::Tensor& up, const at::Tensor& gate) {
  // float32 on the CPU: the vector kernels (cpu_elementwise.h).
  if (CpuElementwiseApplies(up, {gate})) {
    switch (activation) {
      case Activation::kGelu: return CpuGelu(up, /*tanh=*/false);
      case Activation::kGeluTanh: return CpuGelu(up, /*tanh=*/true);
      case Activation::kSwiGlu: return CpuSiluMul(gate, up);
      case Activation::kGeGlu: return CpuGelu(gate, /*tanh=*/false).mul_(up);
      case Activation::kGeGluTanh: return CpuGelu(gate, /*tanh=*/true).mul_(up);
      default: break;
    }
  }
  SerialAtenOps serial(Small(up));
  switch (activation) {
    case Activation::kRelu:
      return at::relu(up);
    case Activation::kGelu:
      return at::gelu(up);
    case Activation::kGeluTanh:
      return GeluTanh(up);
    case Activation::kSilu:
      return at::silu(up);
    case Activation::kSwiGlu:
      return at::silu(gate) * up;
    case Activation::kGeGlu:
      return at::gelu(gate) * up;
    case Activation::kGeGluTanh:
      return GeluTanh(gate).mul_(up);
  }
  return up;
}

}  // namespace

at::Tensor GeluTanh(const at::Tensor& x) {
  const double c = 2.0 * std::sqrt(2.0 / M_PI);  // 2u = c (x + 0.044715 x^3)
  at::Tensor t = x * x;
  t.mul_(0.044715 * c).add_(c).mul_(x).sigmoid_().mul_(x);
  return t;
}

at::Tensor Norm::operator()(const at::Tensor& x) const {
  if (CpuElementwiseApplies(x, {weight, bias})) {
    const bool rms = kind != NormKind::kLayerNorm;  // RMSNorm has no bias (as below)
    return CpuNorm(x, weight, rms ? at::Tensor() : bias, eps, rms);
  }
  SerialAtenOps serial(Small(x));
  if (kind == NormKind::kLayerNorm) {
    return at::layer_norm(x, {weight.size(0)}, weight, bias, eps);
  }
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

at::Tensor FeedForward::operator()(const at::Tensor& x) const {
  const at::Tensor up = Linear(x, up_w, up_b);  // [N, ffn]
  const bool gated = gate_w.defined();
  const at::Tensor gate = gated ? Linear(x, gate_w, gate_b) : at::Tensor();
  return Linear(Activate(activation, up, gate), down_w, down_b);  // [N, d]
}

at::Tensor Embeddings::operator()(const std::vector<SequenceChunk>& chunks, const BatchIndex& index,
                                  c10::ScalarType dtype) const {
  const c10::Device device = tokens.w.device();
  // Decode steps and short prompts: on this thread (aten_threads.h); an int8
  // table's gather is four operators.
  SerialAtenOps serial(index.total * tokens.in_features() <= kSerialAtenMaxElements);
  std::vector<int64_t> ids;
  ids.reserve(index.total);
  for (const SequenceChunk& c : chunks) ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
  const at::Tensor ids_t = LongTensor(ids, device);
  at::Tensor x = tokens.quantized() ? tokens.Gather(ids_t)                  // float32 [N, d]
                                    : GatherRows(tokens.w, ids_t).to(dtype);  // [N, d]
  if (scale != 1.0) x = x * scale;
  if (positions.defined()) x = x + GatherRows(positions, index.positions).to(dtype);
  if (types.defined()) {
    std::vector<int64_t> type_ids;
    type_ids.reserve(index.total);
    for (const SequenceChunk& c : chunks) {
      if (c.type_ids.empty()) {
        type_ids.insert(type_ids.end(), c.tokens.size(), 0);
      } else {
        type_ids.insert(type_ids.end(), c.type_ids.begin(), c.type_ids.end());
      }
    }
    x = x + GatherRows(types, LongTensor(type_ids, device)).to(dtype);
  }
  if (norm.defined()) x = norm(x);
  return x;
}

at::Tensor SinusoidalTable(int64_t positions, int64_t d, c10::Device device,
                           c10::ScalarType dtype) {
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor pos = at::arange(positions, opts).unsqueeze(1);                       // [P, 1]
  at::Tensor div = at::exp(at::arange(0, d, 2, opts) * (-std::log(10000.0) / d));  // [d/2]
  at::Tensor table = at::zeros({positions, d}, opts);
  table.slice(1, 0, d, 2).copy_(at::sin(pos * div));
  table.slice(1, 1, d, 2).copy_(at::cos(pos * div.slice(0, 0, d / 2)));
  return table.to(device, dtype);
}

}  // namespace dikkat::model
