#include "client/tensor.h"

#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tensor_codec.h"

namespace dikkat::client {
namespace {

namespace v1 = ::dikkat::v1;

// Bytes per value; 0 for an unset or unknown dtype.
int DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return 4;
    case v1::DTYPE_BFLOAT16:
    case v1::DTYPE_FLOAT16:
      return 2;
    default:
      return 0;
  }
}

TensorEncoding EncodingOf(v1::DType dtype) {
  return dtype == v1::DTYPE_BFLOAT16  ? TensorEncoding::kBFloat16
         : dtype == v1::DTYPE_FLOAT16 ? TensorEncoding::kFloat16
                                      : TensorEncoding::kFloat32;
}

}  // namespace

std::string DTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return "float32";
    case v1::DTYPE_BFLOAT16:
      return "bfloat16";
    case v1::DTYPE_FLOAT16:
      return "float16";
    default:
      return "unspecified";
  }
}

absl::StatusOr<DecodedTensor> DecodeTensor(const v1::Tensor& tensor) {
  const int size = DTypeSize(tensor.dtype());
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor.dtype is ", tensor.dtype(), " (", DTypeName(tensor.dtype()),
                     "); allowed: DTYPE_FLOAT32, DTYPE_BFLOAT16, DTYPE_FLOAT16"));
  }
  DecodedTensor out;
  out.shape.assign(tensor.shape().begin(), tensor.shape().end());
  int64_t count = 1;
  for (int64_t dim : out.shape) {
    if (dim < 0 || (dim > 0 && count > std::numeric_limits<int64_t>::max() / dim / size)) {
      return absl::InvalidArgumentError(absl::StrCat("Tensor.shape [", absl::StrJoin(out.shape, ","),
                                                     "] has a negative or too large dimension"));
    }
    count *= dim;
  }
  const std::string& data = tensor.data();
  if (static_cast<int64_t>(data.size()) != count * size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Tensor.data has ", data.size(), " bytes; shape [", absl::StrJoin(out.shape, ","), "] of ",
        DTypeName(tensor.dtype()), " needs ", count * size));
  }
  DecodeValues(data, EncodingOf(tensor.dtype()), &out.values);
  return out;
}

absl::StatusOr<v1::Tensor> EncodeTensor(absl::Span<const float> values,
                                        const std::vector<int64_t>& shape, v1::DType dtype) {
  const int size = DTypeSize(dtype);
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("dtype ", DTypeName(dtype),
                                                   " cannot be encoded; allowed: float32, "
                                                   "bfloat16, float16"));
  }
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  if (count != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ","),
                                                   "] holds ", count, " values, got ",
                                                   values.size()));
  }
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t dim : shape) tensor.add_shape(dim);
  std::string data;
  AppendEncoded(values, EncodingOf(dtype), &data);
  tensor.set_data(std::move(data));
  return tensor;
}

}  // namespace dikkat::client
