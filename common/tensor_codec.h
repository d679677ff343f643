// The bytes of a wire tensor (dikkat.v1.Tensor.data): values packed
// little-endian as float32, bfloat16 or float16, whatever the host's byte
// order. The server packs responses with it (server/convert.cc) and the
// client unpacks them (client/tensor.cc), so both sides round the same way.
//
// Proto-free and torch-free on purpose: the caller maps dikkat.v1.DType to a
// TensorEncoding and checks shapes; this file only converts values.
// Thread-safety: pure functions.
#ifndef DIKKAT_COMMON_TENSOR_CODEC_H_
#define DIKKAT_COMMON_TENSOR_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dikkat {

enum class TensorEncoding { kFloat32, kBFloat16, kFloat16 };

// 4 for kFloat32, 2 for kBFloat16 and kFloat16.
size_t BytesPerValue(TensorEncoding encoding);

// float -> bit pattern: round to nearest, ties to even. NaN stays NaN
// (quiet). A value past the format's range becomes infinity of its sign.
// Values too small for float16's subnormals become zero of their sign.
uint16_t FloatToBFloat16(float value);
uint16_t FloatToHalf(float value);
// Bit pattern -> float: exact (both formats are subsets of float32); NaN
// payloads are kept.
float BFloat16ToFloat(uint16_t bits);
float HalfToFloat(uint16_t bits);

// Appends values.size() * BytesPerValue(encoding) bytes to *out.
void AppendEncoded(absl::Span<const float> values, TensorEncoding encoding, std::string* out);

// Replaces *out with the bytes.size() / BytesPerValue(encoding) values that
// `bytes` holds. The caller checks the byte count first. A trailing partial
// value is ignored.
void DecodeValues(absl::string_view bytes, TensorEncoding encoding, std::vector<float>* out);

}  // namespace dikkat

#endif  // DIKKAT_COMMON_TENSOR_CODEC_H_
