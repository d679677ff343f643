#include "model/cpu_elementwise.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <atomic>

#include "model/cpu_kernels_isa.h"
#include "model/work_team.h"

namespace dikkat::model {

namespace {

std::atomic<bool> enabled{true};  // SetCpuElementwise

// Up to this many elements a call runs on the calling thread (a decode
// step's rows: waking the team would cost more than the work); more are
// split over the work team in pieces at least this long.
constexpr int64_t kInlineElements = int64_t{1} << 15;

bool Fits(const at::Tensor& t) {
  return t.is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

// body(i0, i1) over [0, n), on this thread or split over the team in pieces
// of at least `grain` (n * elements_each <= kInlineElements: this thread).
template <typename Body>
void Split(int64_t n, int64_t elements_each, const Body& body) {
  if (n * elements_each <= kInlineElements) return body(0, n);
  const int64_t grain =
      std::max<int64_t>(1, kInlineElements / 4 / std::max<int64_t>(1, elements_each));
  TeamParallelFor(n, grain, body);
}

}  // namespace

bool CpuElementwiseApplies(const at::Tensor& x, std::initializer_list<at::Tensor> also) {
  if (!enabled.load(std::memory_order_relaxed) || !Fits(x)) return false;
  return std::all_of(also.begin(), also.end(),
                     [](const at::Tensor& t) { return !t.defined() || Fits(t); });
}

at::Tensor CpuGelu(const at::Tensor& x, bool tanh) {
  const kernels::KernelTable& k = kernels::Kernels();
  at::Tensor y = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  Split(x.numel(), 1, [&](int64_t i0, int64_t i1) { k.gelu(xp + i0, yp + i0, i1 - i0, tanh); });
  return y;
}

at::Tensor CpuResidualAdd(const at::Tensor& x, at::Tensor s) {
  if (!CpuElementwiseApplies(s, {x}) || s.sizes() != x.sizes() || s.requires_grad() ||
      s.use_count() != 1 ||
      s.storage().use_count() != 1 || s.storage_offset() != 0 || s.is_same(x)) {
    return x + s;
  }
  const float* xp = x.data_ptr<float>();
  float* sp = s.data_ptr<float>();
  Split(s.numel(), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) sp[i] += xp[i];
  });
  return s;
}

at::Tensor CpuSiluMul(const at::Tensor& gate, const at::Tensor& up) {
  TORCH_CHECK(gate.sizes() == up.sizes(), "silu(gate) * up needs equal shapes");
  const kernels::KernelTable& k = kernels::Kernels();
  at::Tensor y = at::empty_like(up);
  const float* gp = gate.data_ptr<float>();
  const float* up_p = up.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  Split(up.numel(), 1,
        [&](int64_t i0, int64_t i1) { k.silu_mul(gp + i0, up_p + i0, yp + i0, i1 - i0); });
  return y;
}

at::Tensor CpuNorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                   double eps, bool rms) {
  const int64_t d = x.size(-1);
  TORCH_CHECK(!weight.defined() || weight.numel() == d, "norm weight of ", weight.numel(),
              " values for rows of ", d);
  TORCH_CHECK(!bias.defined() || bias.numel() == d, "norm bias of ", bias.numel(),
              " values for rows of ", d);
  const kernels::KernelTable& k = kernels::Kernels();
  at::Tensor y = at::empty_like(x);
  const int64_t rows = d > 0 ? x.numel() / d : 0;
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.defined() ? weight.data_ptr<float>() : nullptr;
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  Split(rows, d, [&](int64_t r0, int64_t r1) {
    k.norm(xp + r0 * d, wp, bp, static_cast<float>(eps), rms, yp + r0 * d, r1 - r0, d);
  });
  return y;
}

double CpuExpShifted(const float* x, float shift, float divisor, float* y, int64_t n) {
  return kernels::Kernels().exp_shifted(x, shift, divisor, y, n);
}

float CpuMaxChecked(const float* x, int64_t n, bool* bad) {
  return kernels::Kernels().max_checked(x, n, bad);
}

void SetCpuElementwise(bool on) { enabled.store(on, std::memory_order_relaxed); }

}  // namespace dikkat::model
