// common/tensor_codec: the float <-> bfloat16 / float16 conversions checked
// against LibTorch's own (c10::BFloat16, c10::Half; the library under test
// does not link LibTorch, only this test does), and the wire layout
// (little-endian, packed) that server/convert.cc and client/tensor.cc share.
#include "common/tensor_codec.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dikkat {
namespace {

// c10::BFloat16 and c10::Half (LibTorch's own conversions) are the reference.
std::vector<float> InterestingFloats() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f,
                          1e-8f, 5.96e-8f, 2.98e-8f, 2.9802322e-8f, 6.1e-5f, 6.0975552e-5f,
                          3.0e38f, -3.4e38f, 1.00390625f, 1.0078125f, 1.01171875f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min()};
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  // Dense coverage of the half range, including subnormals and ties.
  for (uint32_t b = 0x33000000u; b < 0x47800000u; b += 0x1fffu) {
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
    v.push_back(-f);
  }
  return v;
}

TEST(TensorCodecTest, Bfloat16MatchesLibTorch) {
  int checked = 0;
  for (float f : InterestingFloats()) {
    const uint16_t ours = FloatToBFloat16(f);
    const c10::BFloat16 ref(f);
    if (std::isnan(f)) {
      EXPECT_EQ(ours & 0x7f80u, 0x7f80u);
      EXPECT_NE(ours & 0x7fu, 0u) << "NaN must stay NaN";
      continue;
    }
    ASSERT_EQ(ours, ref.x) << "value " << f;
    ++checked;
  }
  EXPECT_GT(checked, 100000);
}

TEST(TensorCodecTest, Float16MatchesLibTorch) {
  int checked = 0;
  for (float f : InterestingFloats()) {
    const uint16_t ours = FloatToHalf(f);
    const c10::Half ref(f);
    if (std::isnan(f)) {
      EXPECT_EQ(ours & 0x7c00u, 0x7c00u);
      EXPECT_NE(ours & 0x3ffu, 0u) << "NaN must stay NaN";
      continue;
    }
    ASSERT_EQ(ours, ref.x) << "value " << f;
    ++checked;
  }
  EXPECT_GT(checked, 100000);
}

TEST(TensorCodecTest, EveryFiniteHalfAndBfloat16RoundTrips) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float half = HalfToFloat(bits);
    const float bf16 = BFloat16ToFloat(bits);
    const float ref = static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(half)) << b;
    } else {
      ASSERT_EQ(half, ref) << b;
    }
    if (!std::isnan(half)) {
      ASSERT_EQ(FloatToHalf(half), bits) << b;
    }
    if (!std::isnan(bf16)) {
      ASSERT_EQ(FloatToBFloat16(bf16), bits) << b;
    }
  }
}

TEST(TensorCodecTest, PacksLittleEndian) {
  // 1.0f = 0x3f800000; bfloat16 0x3f80; half 0x3c00. -2.0f = 0xc0000000;
  // bfloat16 0xc000; half 0xc000.
  const std::vector<float> values = {1.0f, -2.0f};
  std::string f32, bf16, f16;
  AppendEncoded(values, TensorEncoding::kFloat32, &f32);
  AppendEncoded(values, TensorEncoding::kBFloat16, &bf16);
  AppendEncoded(values, TensorEncoding::kFloat16, &f16);
  EXPECT_EQ(f32, std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8));
  EXPECT_EQ(bf16, std::string("\x80\x3f\x00\xc0", 4));
  EXPECT_EQ(f16, std::string("\x00\x3c\x00\xc0", 4));
}

TEST(TensorCodecTest, AppendsAfterExistingBytes) {
  std::string out = "ab";
  AppendEncoded(std::vector<float>{1.0f}, TensorEncoding::kFloat16, &out);
  EXPECT_EQ(out, std::string("ab\x00\x3c", 4));
}

TEST(TensorCodecTest, DecodeInvertsEncodeForRepresentableValues) {
  // Values every encoding holds exactly, including signed zero, a half
  // subnormal (2^-24), and infinities.
  const std::vector<float> values = {0.0f,  -0.0f, 1.5f, -3.25f, 1024.0f, std::ldexp(1.0f, -24),
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity()};
  for (TensorEncoding encoding :
       {TensorEncoding::kFloat32, TensorEncoding::kBFloat16, TensorEncoding::kFloat16}) {
    std::string bytes;
    AppendEncoded(values, encoding, &bytes);
    ASSERT_EQ(bytes.size(), values.size() * BytesPerValue(encoding));
    std::vector<float> decoded = {42.0f};  // replaced, not appended to
    DecodeValues(bytes, encoding, &decoded);
    ASSERT_EQ(decoded.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(decoded[i], values[i]) << "value " << i;
      EXPECT_EQ(std::signbit(decoded[i]), std::signbit(values[i])) << "value " << i;
    }
  }
}

TEST(TensorCodecTest, NanSurvivesEveryEncoding) {
  const std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  for (TensorEncoding encoding :
       {TensorEncoding::kFloat32, TensorEncoding::kBFloat16, TensorEncoding::kFloat16}) {
    std::string bytes;
    AppendEncoded(nan, encoding, &bytes);
    std::vector<float> decoded;
    DecodeValues(bytes, encoding, &decoded);
    ASSERT_EQ(decoded.size(), 1u);
    EXPECT_TRUE(std::isnan(decoded[0]));
  }
}

}  // namespace
}  // namespace dikkat
