#include "model/linear_weight.h"

#include <ATen/ATen.h>

#include "model/cpu_kernels.h"

namespace dikkat::model {
namespace {

int64_t Groups(int64_t in) { return (in + kInt8GroupSize - 1) / kInt8GroupSize; }

// scales [R, groups] -> one per element [R, in] (the last group cut to in).
at::Tensor ExpandScales(const at::Tensor& scales, int64_t in) {
  return scales.repeat_interleave(kInt8GroupSize, /*dim=*/1).narrow(1, 0, in);
}

}  // namespace

int64_t LinearWeight::bytes() const {
  int64_t n = w.numel() * static_cast<int64_t>(w.element_size());
  if (quantized()) n += scales.numel() * static_cast<int64_t>(scales.element_size());
  return n;
}

LinearWeight LinearWeight::Rows(int64_t start, int64_t len) const {
  if (!quantized()) return LinearWeight(w.narrow(0, start, len));
  return LinearWeight(w.narrow(0, start, len), scales.narrow(0, start, len));
}

at::Tensor LinearWeight::Dequantize() const {
  if (!quantized()) return w.to(at::kFloat);
  return w.to(at::kFloat) * ExpandScales(scales, in_features());  // [out, in]
}

at::Tensor LinearWeight::Gather(const at::Tensor& ids) const {
  if (!quantized()) return w.index_select(0, ids).to(at::kFloat);
  // CPU: one kernel call per row (the expanded scales were ~0.1 ms a decode step).
  if (w.is_cpu() && w.is_contiguous() && scales.is_contiguous()) return Int8GatherRows(*this, ids);
  return w.index_select(0, ids).to(at::kFloat) *
         ExpandScales(scales.index_select(0, ids), in_features());  // [N, in]
}

LinearWeight QuantizeInt8(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && at::isFloatingType(w.scalar_type()) && w.is_cpu(),
              "QuantizeInt8: a floating-point CPU matrix, got ", w.sizes(), " ", w.scalar_type());
  const int64_t out = w.size(0), in = w.size(1), groups = Groups(in);
  // [out, groups * 32] zero-padded, viewed as [out, groups, 32]: padding never
  // raises an absmax.
  at::Tensor padded = at::zeros({out, groups * kInt8GroupSize}, w.options().dtype(at::kFloat));
  padded.narrow(1, 0, in).copy_(w);
  at::Tensor blocks = padded.view({out, groups, kInt8GroupSize});
  at::Tensor scales = blocks.abs().amax(-1) / 127.0f;  // [out, groups]
  scales.masked_fill_(scales == 0, 1.0f);
  at::Tensor q = (blocks / scales.unsqueeze(-1)).round_().clamp_(-127, 127).to(at::kChar);
  return LinearWeight(q.view({out, groups * kInt8GroupSize}).narrow(1, 0, in).contiguous(),
                      scales.contiguous());
}

}  // namespace dikkat::model
