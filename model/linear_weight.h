// LinearWeight: the weight matrix of a linear layer (or a token embedding
// table, which a tied LM head shares), either floating point or quantized to
// int8 at load (--dtype int8, weight-only quantization).
//
// Quantized layout: `w` int8 [out, in] and `scales` float32 [out, groups],
// groups = ceil(in / kInt8GroupSize). Element (o, i) stands for
// w[o, i] * scales[o, i / kInt8GroupSize]: symmetric, one absmax scale per
// output row and group of 32 consecutive input elements (llama.cpp's Q8_0
// blocks, with float32 instead of float16 scales). Activations stay float32
// (Int8Linear's AVX2 kernel rounds them to int16 per group for its products:
// cpu_kernels.h).
//
// A value type (two tensor handles); immutable once built, safe to share
// between threads.
#ifndef DIKKAT_MODEL_LINEAR_WEIGHT_H_
#define DIKKAT_MODEL_LINEAR_WEIGHT_H_

#include <cstdint>
#include <utility>

#include <ATen/core/Tensor.h>

namespace dikkat::model {

// Input elements per int8 scale.
inline constexpr int64_t kInt8GroupSize = 32;

struct LinearWeight {
  LinearWeight() = default;
  // A floating-point matrix as it is. Implicit: every floating-point tensor
  // is a valid weight, and call sites that hold tensors stay unchanged.
  LinearWeight(at::Tensor matrix) : w(std::move(matrix)) {}  // NOLINT(runtime/explicit)
  LinearWeight(at::Tensor int8_matrix, at::Tensor group_scales)
      : w(std::move(int8_matrix)), scales(std::move(group_scales)) {}

  at::Tensor w;       // [out, in]: float32/bfloat16/float16, or int8 when quantized
  at::Tensor scales;  // quantized only: [out, ceil(in / kInt8GroupSize)] float32

  bool defined() const { return w.defined(); }
  bool quantized() const { return scales.defined(); }
  int64_t out_features() const { return w.size(0); }
  int64_t in_features() const { return w.size(1); }
  // Bytes held (matrix and scales).
  int64_t bytes() const;

  // Output rows [start, start + len) as views (no copy).
  LinearWeight Rows(int64_t start, int64_t len) const;
  // The matrix in float32 [out, in] (a copy when quantized).
  at::Tensor Dequantize() const;
  // Rows `ids` (long [N]) in float32 [N, in]: an embedding lookup.
  at::Tensor Gather(const at::Tensor& ids) const;
};

// Symmetric absmax int8 quantization of a floating-point matrix [out, in],
// per output row and group of kInt8GroupSize input elements (the last group
// may be shorter): scale = absmax / 127, q = round(w / scale) (ties to even,
// as torch.quantize_per_channel), an all-zero group gets scale 1. CPU only.
LinearWeight QuantizeInt8(const at::Tensor& w);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_LINEAR_WEIGHT_H_
