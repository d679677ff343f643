#include "client/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dikkat::client {
namespace {

namespace v1 = ::dikkat::v1;

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

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

// Rounds `value` right-shifted by `shift` to nearest, ties to even.
uint32_t ShiftRoundNearestEven(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return (rest > half || (rest == half && (kept & 1))) ? kept + 1 : kept;
}

}  // namespace

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits >> 15) << 31;
  const int exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {  // infinity or NaN, payload kept
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  return BitsToFloat(sign | (static_cast<uint32_t>(exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const int exponent8 = (bits >> 23) & 0xff;
  const uint32_t mantissa = bits & 0x7fffff;
  if (exponent8 == 0xff) return sign | (mantissa ? 0x7e00 : 0x7c00);
  const int unbiased = exponent8 - 127;
  if (unbiased >= -14) {
    if (unbiased > 15) return sign | 0x7c00;
    // A carry out of the mantissa bumps the exponent, up to infinity: that is
    // exactly round-to-nearest in the next binade.
    const uint32_t half = (static_cast<uint32_t>(unbiased + 15) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fff;
    const bool round_up = rest > 0x1000 || (rest == 0x1000 && (half & 1));
    const uint32_t rounded = half + (round_up ? 1 : 0);
    return sign | static_cast<uint16_t>(rounded >= 0x7c00 ? 0x7c00 : rounded);
  }
  // Half subnormals count units of 2^-24; the float is (2^23 + m) * 2^(e-23).
  const int shift = -(unbiased + 1);
  if (shift > 24) return sign;  // below half of the smallest subnormal
  return sign | static_cast<uint16_t>(ShiftRoundNearestEven(mantissa | 0x800000u, shift));
}

float BFloat16ToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // stay NaN
  const uint32_t rounding_bias = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

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
  out.values.resize(count);
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  // Assembled byte by byte: the wire is little-endian whatever the host is.
  for (int64_t i = 0; i < count; ++i) {
    const unsigned char* p = bytes + i * size;
    if (size == 4) {
      out.values[i] = BitsToFloat(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                                  static_cast<uint32_t>(p[2]) << 16 |
                                  static_cast<uint32_t>(p[3]) << 24);
    } else {
      const uint16_t bits = static_cast<uint16_t>(p[0] | p[1] << 8);
      out.values[i] =
          tensor.dtype() == v1::DTYPE_BFLOAT16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
    }
  }
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
  std::string data(values.size() * size, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    char* p = &data[i * size];
    const uint32_t bits = size == 4                         ? FloatBits(values[i])
                          : dtype == v1::DTYPE_BFLOAT16 ? FloatToBFloat16(values[i])
                                                        : FloatToHalf(values[i]);
    for (int b = 0; b < size; ++b) p[b] = static_cast<char>((bits >> (8 * b)) & 0xff);
  }
  tensor.set_data(std::move(data));
  return tensor;
}

}  // namespace dikkat::client
