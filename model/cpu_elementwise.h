// Norms and activations on float32 CPU tensors with the per-ISA vector
// kernels (cpu_kernels_isa.h, cpu_elementwise_body.inc) instead of
// LibTorch's operators. At decode sizes an operator's fixed cost is most of
// its time: LibTorch's erf GELU took ~40 us for one row of 3072 and each
// LayerNorm ~6 us (Zen 4 EPYC), ~0.6 ms of a 7.5 ms int8 decode step;
// RMSNorm is six operators there. Larger inputs are split over the work
// team (work_team.h). Results agree with LibTorch's to float32 rounding
// (tests/model/cpu_elementwise_test.cc states the tolerances); callers keep
// LibTorch's operators for anything else (other devices and dtypes).
#ifndef DIKKAT_MODEL_CPU_ELEMENTWISE_H_
#define DIKKAT_MODEL_CPU_ELEMENTWISE_H_

#include <ATen/core/Tensor.h>

#include <initializer_list>

namespace dikkat::model {

// Whether the functions below take x (and each defined tensor of `also`):
// CPU, float32, contiguous; and not turned off by SetCpuElementwise.
bool CpuElementwiseApplies(const at::Tensor& x, std::initializer_list<at::Tensor> also = {});

// GELU of every element: tanh's approximation, or the exact (erf) one.
at::Tensor CpuGelu(const at::Tensor& x, bool tanh);
// silu(gate) * up, elementwise (same shapes): SwiGLU's activation.
at::Tensor CpuSiluMul(const at::Tensor& gate, const at::Tensor& up);
// Over x's last dimension d: LayerNorm with weight [d] and bias [d] (may be
// undefined), or, with rms, RMSNorm x / sqrt(mean(x^2) + eps) * weight.
at::Tensor CpuNorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                   double eps, bool rms);

// x + s for a residual connection (same shapes). Where both fit (as above)
// and s is uniquely owned (a sublayer's fresh output: no other tensor or
// view shares its storage), s is added to in place and returned, without
// LibTorch's operator (~4 us a call at decode sizes, 24 a GPT-2-small step);
// else LibTorch's x + s. The same values either way (float addition is
// commutative; of two NaNs either payload may come out). s must not be
// memory its producer keeps (every sublayer's Linear output is fresh).
at::Tensor CpuResidualAdd(const at::Tensor& x, at::Tensor s);

// y[i] = e^((x[i] - shift) / divisor) for i < n, on the calling thread
// (the sampler's softmax weights; e^-inf = 0), and their sum (float lanes
// over runs of 256, the runs added in double: within 2e-6 relative). y may
// be null (the sum only). Raw memory, any caller.
double CpuExpShifted(const float* x, float shift, float divisor, float* y, int64_t n);

// The largest x[i], i < n (-inf for none; NaN ignored), on the calling
// thread; *bad is whether some x[i] is NaN or +inf.
float CpuMaxChecked(const float* x, int64_t n, bool* bad);

// For benchmarks and tests: false sends every caller back to LibTorch's
// operators (CpuElementwiseApplies is false).
void SetCpuElementwise(bool enabled);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_CPU_ELEMENTWISE_H_
