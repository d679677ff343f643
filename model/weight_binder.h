// WeightBinder: takes tensors out of a TensorMap (a weights file's contents)
// by name for a model being built: checks each shape, converts dtype and
// device (quantizing matrices under int8), and remembers which names were
// used so that the loader can report the file's unused tensors.
//
// Not thread-safe; one binder per load.
#ifndef DIKKAT_MODEL_WEIGHT_BINDER_H_
#define DIKKAT_MODEL_WEIGHT_BINDER_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "model/io/weights.h"
#include "model/linear_weight.h"

namespace dikkat::model {

class WeightBinder {
 public:
  // Matrices (linear weights, embeddings) are kept in `matrix_dtype`;
  // vectors (biases, norm weights) in `compute_dtype`, the dtype of
  // activations. With int8 (kChar), the matrices taken with TakeMatrix are
  // quantized (QuantizeInt8) and every other tensor stays in `compute_dtype`.
  // `weights` must outlive the binder.
  WeightBinder(const TensorMap& weights, c10::ScalarType matrix_dtype,
               c10::ScalarType compute_dtype, c10::Device device);

  bool Has(const std::string& name) const { return weights_.count(name) > 0; }

  // The tensor `name` with exactly `shape`, converted. Errors name the tensor
  // and the expected and found shape (or dtype).
  absl::StatusOr<at::Tensor> Take(const std::string& name, const std::vector<int64_t>& shape);
  // A linear layer's weight or a token embedding table [out, in]: int8 with
  // scales under int8, else as Take.
  absl::StatusOr<LinearWeight> TakeMatrix(const std::string& name,
                                          const std::vector<int64_t>& shape);
  // Undefined tensor when absent; shape-checked when present.
  absl::StatusOr<at::Tensor> TakeOptional(const std::string& name,
                                          const std::vector<int64_t>& shape);

  std::vector<std::string> Unused() const;
  int64_t bytes() const { return bytes_; }  // of the tensors taken, as stored
  int64_t count() const { return count_; }  // parameters taken

 private:
  bool quantize() const { return matrix_dtype_ == c10::ScalarType::Char; }
  absl::StatusOr<at::Tensor> Convert(const std::string& name, const at::Tensor& t,
                                     const std::vector<int64_t>& shape);

  const TensorMap& weights_;
  c10::ScalarType matrix_dtype_;
  c10::ScalarType compute_dtype_;
  c10::Device device_;
  std::set<std::string> used_;
  int64_t bytes_ = 0;
  int64_t count_ = 0;
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_WEIGHT_BINDER_H_
