// Conversion between the wire `Tensor` (packed little-endian float32,
// bfloat16 or float16 bytes) and float vectors.
#ifndef DIKKAT_CLIENT_TENSOR_H_
#define DIKKAT_CLIENT_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor_codec.h"
#include "dikkat/v1/dikkat.pb.h"

namespace dikkat::client {

// A dense row-major float array. Owns its values.
struct DecodedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;  // prod(shape) values

  int64_t num_elements() const { return static_cast<int64_t>(values.size()); }
  // Row-major element access for 2-D tensors.
  float at(int64_t row, int64_t col) const { return values[row * shape[1] + col]; }
};

// Decodes `tensor` whatever its dtype. INVALID_ARGUMENT when the dtype is
// unset or unknown, a dimension is negative, or the byte count is not
// prod(shape) * the dtype's size.
absl::StatusOr<DecodedTensor> DecodeTensor(const dikkat::v1::Tensor& tensor);

// Encodes `values` with `shape` in `dtype` (bfloat16 and float16 round to
// nearest even). INVALID_ARGUMENT when prod(shape) != values.size() or the
// dtype is unset.
absl::StatusOr<dikkat::v1::Tensor> EncodeTensor(absl::Span<const float> values,
                                                const std::vector<int64_t>& shape,
                                                dikkat::v1::DType dtype);

// IEEE 754 binary16 / bfloat16 bit patterns <-> float: the codec the server
// packs with (common/tensor_codec.h).
using ::dikkat::BFloat16ToFloat;
using ::dikkat::FloatToBFloat16;
using ::dikkat::FloatToHalf;
using ::dikkat::HalfToFloat;

// "float32", "bfloat16", "float16", or "unspecified".
std::string DTypeName(dikkat::v1::DType dtype);

}  // namespace dikkat::client

#endif  // DIKKAT_CLIENT_TENSOR_H_
