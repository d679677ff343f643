#include "common/tensor_codec.h"

#include <cmath>
#include <cstring>

namespace dikkat {
namespace {

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

constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

uint16_t Encode16(float value, TensorEncoding encoding) {
  return encoding == TensorEncoding::kBFloat16 ? FloatToBFloat16(value) : FloatToHalf(value);
}

}  // namespace

size_t BytesPerValue(TensorEncoding encoding) {
  return encoding == TensorEncoding::kFloat32 ? 4 : 2;
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep NaN a (quiet) NaN
  }
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit. A
  // carry into the exponent is the correct rounding, up to infinity.
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // infinity or NaN
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u : 0u);
  }
  // 65520 is halfway between the largest half (65504) and 2^16; ties go to
  // the even neighbour, which is infinity.
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  const int32_t exponent = static_cast<int32_t>(abs >> 23);  // biased by 127
  if (exponent < 113) {
    // Below 2^-14: a half subnormal, in units of 2^-24. Values under 2^-25
    // round to zero (2^-25 itself is a tie that goes to the even 0).
    if (exponent < 102) return sign;
    const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;  // value = s * 2^(e-150)
    const int shift = 126 - exponent;                            // 14..24
    uint32_t half = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = (static_cast<uint32_t>(exponent - 112) << 10) | ((abs & 0x7fffffu) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent.
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

float BFloat16ToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

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

void AppendEncoded(absl::Span<const float> values, TensorEncoding encoding, std::string* out) {
  const size_t size = BytesPerValue(encoding);
  const size_t start = out->size();
  out->resize(start + values.size() * size);
  char* p = out->data() + start;
  if (encoding == TensorEncoding::kFloat32 && kLittleEndianHost) {
    if (!values.empty()) std::memcpy(p, values.data(), values.size() * size);
    return;
  }
  // Byte by byte: the wire is little-endian whatever the host is (compilers
  // turn this into plain stores on little-endian hosts).
  for (size_t i = 0; i < values.size(); ++i, p += size) {
    const uint32_t bits =
        encoding == TensorEncoding::kFloat32 ? FloatBits(values[i]) : Encode16(values[i], encoding);
    for (size_t b = 0; b < size; ++b) p[b] = static_cast<char>((bits >> (8 * b)) & 0xffu);
  }
}

void DecodeValues(absl::string_view bytes, TensorEncoding encoding, std::vector<float>* out) {
  const size_t size = BytesPerValue(encoding);
  const size_t count = bytes.size() / size;
  out->resize(count);
  if (encoding == TensorEncoding::kFloat32 && kLittleEndianHost) {
    if (count > 0) std::memcpy(out->data(), bytes.data(), count * size);
    return;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < count; ++i, p += size) {
    if (encoding == TensorEncoding::kFloat32) {
      (*out)[i] = BitsToFloat(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 |
                              static_cast<uint32_t>(p[3]) << 24);
    } else {
      const uint16_t bits = static_cast<uint16_t>(p[0] | p[1] << 8);
      (*out)[i] =
          encoding == TensorEncoding::kBFloat16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
    }
  }
}

}  // namespace dikkat
