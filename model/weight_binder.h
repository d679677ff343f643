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
#include "model/huge_pages.h"
#include "model/io/weights.h"
#include "model/linear_weight.h"

namespace dikkat::model {

class WeightBinder {
 public:
  // Matrices (linear weights, embeddings) are kept in `matrix_dtype`;
  // vectors (biases, norm weights) in `compute_dtype`, the dtype of
  // activations. With int8 (kChar), the matrices taken with TakeMatrix are
  // quantized (QuantizeInt8) and every other tensor stays in `compute_dtype`.
  // `weights` must outlive the binder. With `huge_pages` (CPU only), every
  // tensor taken is placed in a HugePageArena (huge_pages.h): the weights
  // in 2 MiB pages, one after another in the order taken (int8 scales in an
  // arena of their own).
  WeightBinder(const TensorMap& weights, c10::ScalarType matrix_dtype,
               c10::ScalarType compute_dtype, c10::Device device, bool huge_pages);

  bool Has(const std::string& name) const { return weights_.count(name) > 0; }

  // The tensor `name` with exactly `shape`, converted. Errors name the tensor
  // and the expected and found shape (or dtype).
  absl::StatusOr<at::Tensor> Take(const std::string& name, const std::vector<int64_t>& shape);
  // A linear layer's weight or a token embedding table [out, in]: int8 with
  // scales under int8, else as Take.
  absl::StatusOr<LinearWeight> TakeMatrix(const std::string& name,
                                          const std::vector<int64_t>& shape);
  // Matrices `names` [rows_i, in] (one `in`) taken together: stacked along
  // their rows in one tensor (under int8 its scales in another) and returned
  // as row views of it, in order. Adjacent pieces of one storage, so a caller
  // may use them as one matrix without a copy (separate q, k and v:
  // MultiHeadAttention). Quantizing per row and group, the stack's int8 is
  // each matrix's own.
  absl::StatusOr<std::vector<LinearWeight>> TakeStackedMatrices(
      const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes);
  // Vectors (q, k and v biases) likewise, as views of one tensor.
  absl::StatusOr<std::vector<at::Tensor>> TakeStacked(
      const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes);
  // Undefined tensor when absent; shape-checked when present.
  absl::StatusOr<at::Tensor> TakeOptional(const std::string& name,
                                          const std::vector<int64_t>& shape);

  std::vector<std::string> Unused() const;
  int64_t bytes() const { return bytes_; }  // of the tensors taken, as stored
  int64_t count() const { return count_; }  // parameters taken
  // Bytes placed in the arena (2 MiB-page advice); 0 without huge_pages.
  int64_t huge_page_bytes() const {
    return arena_.placed_bytes() + scale_arena_.placed_bytes();
  }

 private:
  bool quantize() const { return matrix_dtype_ == c10::ScalarType::Char; }
  // The tensor `name` checked and converted. place: its final copy, owning
  // its memory (in the arena when on); else it may alias the file's memory
  // and the caller copies it (stacks or quantizes it).
  absl::StatusOr<at::Tensor> Convert(const std::string& name, const std::vector<int64_t>& shape,
                                     bool place);
  // A tensor built here (stacked, quantized) in `arena` when on.
  at::Tensor Place(const at::Tensor& t, HugePageArena& arena);
  // Converted tensors of one dtype stacked along dim 0: in the arena when
  // on, else at::cat.
  at::Tensor Stack(const std::vector<at::Tensor>& parts);

  const TensorMap& weights_;
  c10::ScalarType matrix_dtype_;
  c10::ScalarType compute_dtype_;
  c10::Device device_;
  HugePageArena arena_;
  // int8 scales apart from the matrices, so that matrices taken one after
  // another stay adjacent (q, k and v fuse as a view: MultiHeadAttention),
  // and so do their scales.
  HugePageArena scale_arena_;
  std::set<std::string> used_;
  int64_t bytes_ = 0;
  int64_t count_ = 0;
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_WEIGHT_BINDER_H_
