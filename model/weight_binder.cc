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
                           c10::ScalarType compute_dtype, c10::Device device)
    : weights_(weights),
      matrix_dtype_(matrix_dtype),
      compute_dtype_(compute_dtype),
      device_(device) {}

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
  DIKKAT_ASSIGN_OR_RETURN(at::Tensor t, Take(name, shape));  // float32, counted
  bytes_ -= t.numel() * static_cast<int64_t>(t.element_size());
  LinearWeight q = QuantizeInt8(t);
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
                                                 const std::vector<int64_t>& shape) {
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
  if (out.data_ptr() == t.data_ptr()) out = out.clone();  // own the memory; never alias a mapping
  bytes_ += out.numel() * static_cast<int64_t>(out.element_size());
  count_ += out.numel();
  return out;
}

}  // namespace dikkat::model
