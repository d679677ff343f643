#include "model/weight_binder.h"

#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>

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
  return Convert(name, shape, /*place=*/true);
}

absl::StatusOr<LinearWeight> WeightBinder::TakeMatrix(const std::string& name,
                                                      const std::vector<int64_t>& shape) {
  DIKKAT_ASSIGN_OR_RETURN(std::vector<LinearWeight> one, TakeStackedMatrices({name}, {shape}));
  return one[0];
}

absl::StatusOr<std::vector<LinearWeight>> WeightBinder::TakeStackedMatrices(
    const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes) {
  TORCH_CHECK(!names.empty() && names.size() == shapes.size(), "names and shapes must pair up");
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    TORCH_CHECK(shapes[i].size() == 2 && shapes[i][1] == shapes[0][1],
                "stacked matrices share their number of columns");
    // One matrix is placed (or quantized) as it is; several are copied once
    // into the stack.
    const bool place = names.size() == 1 && !quantize();
    DIKKAT_ASSIGN_OR_RETURN(at::Tensor t, Convert(names[i], shapes[i], place));
    parts.push_back(std::move(t));
  }
  LinearWeight all;
  if (quantize()) {
    // float32 (counted as such by Convert), never placed: only the int8
    // matrix and its scales stay.
    const at::Tensor stacked = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
    bytes_ -= stacked.numel() * static_cast<int64_t>(stacked.element_size());
    all = QuantizeInt8(stacked);
    all.w = Place(all.w, arena_);
    all.scales = Place(all.scales, scale_arena_);
    bytes_ += all.bytes();
  } else {
    all = parts.size() == 1 ? parts[0] : Stack(parts);
  }
  std::vector<LinearWeight> out;
  int64_t row = 0;
  for (const auto& shape : shapes) {
    out.push_back(names.size() == 1 ? all : all.Rows(row, shape[0]));
    row += shape[0];
  }
  return out;
}

absl::StatusOr<std::vector<at::Tensor>> WeightBinder::TakeStacked(
    const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes) {
  TORCH_CHECK(!names.empty() && names.size() == shapes.size(), "names and shapes must pair up");
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    TORCH_CHECK(shapes[i].size() == 1, "stacked tensors are vectors");
    DIKKAT_ASSIGN_OR_RETURN(at::Tensor t, Convert(names[i], shapes[i], /*place=*/false));
    parts.push_back(std::move(t));
  }
  const at::Tensor all = Stack(parts);
  std::vector<at::Tensor> out;
  int64_t start = 0;
  for (const auto& shape : shapes) {
    out.push_back(all.narrow(0, start, shape[0]));
    start += shape[0];
  }
  return out;
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

absl::StatusOr<at::Tensor> WeightBinder::Convert(const std::string& name,
                                                 const std::vector<int64_t>& shape, bool place) {
  auto it = weights_.find(name);
  if (it == weights_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing tensor '", name, "' (expected shape ", ShapeString(shape), ")"));
  }
  const at::Tensor& t = it->second;
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
  at::Tensor out;
  if (place && arena_.enabled()) {
    // One pass: converts the dtype and gathers a strided (transposed) source.
    out = arena_.Empty(t.sizes(), dtype);
    out.copy_(t);
  } else {
    out = t.to(device_, dtype).contiguous();
    if (place && out.data_ptr() == t.data_ptr()) out = out.clone();  // never alias the file
  }
  bytes_ += out.numel() * static_cast<int64_t>(out.element_size());
  count_ += out.numel();
  return out;
}

at::Tensor WeightBinder::Place(const at::Tensor& t, HugePageArena& arena) {
  return arena.enabled() ? arena.Copy(t) : t;
}

at::Tensor WeightBinder::Stack(const std::vector<at::Tensor>& parts) {
  if (!arena_.enabled()) return at::cat(parts, 0);
  std::vector<int64_t> sizes = parts[0].sizes().vec();
  sizes[0] = 0;
  for (const at::Tensor& p : parts) sizes[0] += p.size(0);
  at::Tensor all = arena_.Empty(sizes, parts[0].scalar_type());
  int64_t start = 0;
  for (const at::Tensor& p : parts) {
    all.narrow(0, start, p.size(0)).copy_(p);
    start += p.size(0);
  }
  return all;
}

}  // namespace dikkat::model
