#include "model/weight_binder.h"

#include <utility>

#include <ATen/core/Tensor.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dikkat::model {
namespace {

std::string ShapeString(at::IntArrayRef shape) { return "[" + absl::StrJoin(shape, ", ") + "]"; }

}  // namespace

WeightBinder::WeightBinder(const TensorMap& weights, c10::ScalarType matrix_dtype,
                           c10::ScalarType compute_dtype, c10::Device device, bool huge_pages)
    : weights_(weights),
      matrix_dtype_(matrix_dtype),
      compute_dtype_(compute_dtype),
      device_(device),
      arena_(huge_pages && device.is_cpu()),
      scale_arena_(huge_pages && device.is_cpu(), int64_t{8} << 20) {}

absl::StatusOr<at::Tensor> WeightBinder::Take(const std::string& name,
                                              const std::vector<int64_t>& shape) {
  auto it = weights_.find(name);
  if (it == weights_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing tensor '", name, "' (expected shape ", ShapeString(shape), ")"));
  }
  return Convert(name, it->second, shape);
}

absl::StatusOr<LinearWeight> WeightBinder::TakeMatrix(const std::string& name,
                                                      const std::vector<int64_t>& shape) {
  if (!quantize()) return Take(name, shape);
  auto it = weights_.find(name);
  if (it == weights_.end()) return Take(name, shape);  // its error
  // float32, counted, not placed: only the int8 matrix and scales stay.
  DIKKAT_ASSIGN_OR_RETURN(at::Tensor t, Convert(name, it->second, shape, /*place=*/false));
  bytes_ -= t.numel() * static_cast<int64_t>(t.element_size());
  LinearWeight q = QuantizeInt8(t);
  if (arena_.enabled()) {
    q.w = arena_.Copy(q.w);
    q.scales = scale_arena_.Copy(q.scales);
  }
  bytes_ += q.bytes();
  return q;
}

absl::StatusOr<at::Tensor> WeightBinder::TakeOptional(const std::string& name,
                                                      const std::vector<int64_t>& shape) {
  if (!Has(name)) return at::Tensor();
  return Take(name, shape);
}

std::vector<std::string> WeightBinder::Unused() const {
  std::vector<std::string> unused;
  for (const auto& [name, tensor] : weights_) {
    if (used_.count(name) == 0) unused.push_back(name);
  }
  return unused;
}

absl::StatusOr<at::Tensor> WeightBinder::Convert(const std::string& name, const at::Tensor& t,
                                                 const std::vector<int64_t>& shape, bool place) {
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
  const c10::ScalarType dtype = t.dim() >= 2 && !quantize() ? matrix_dtype_ : compute_dtype_;
  at::Tensor out = t.to(device_, dtype).contiguous();
  if (place && arena_.enabled()) {
    out = arena_.Copy(out);  // its own memory, never the file's mapping
  } else if (out.data_ptr() == t.data_ptr()) {
    out = out.clone();  // own the memory; never alias a mapping
  }
  bytes_ += out.numel() * static_cast<int64_t>(out.element_size());
  count_ += out.numel();
  return out;
}

}  // namespace dikkat::model
