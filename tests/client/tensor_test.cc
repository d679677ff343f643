// Tensor decoding and encoding against PyTorch's own dtype conversions
// (tests/client/make_tensor_fixtures.py, run with Debian's python3-torch).
#include "client/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dikkat::client {
namespace {

namespace v1 = ::dikkat::v1;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<float> FloatsFromLittleEndian(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + 4 * i;
    const uint32_t bits = p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
    std::memcpy(&out[i], &bits, 4);
  }
  return out;
}

struct Case {
  const char* name;
  v1::DType dtype;
  int size;
};

const Case kCases[] = {{"float32", v1::DTYPE_FLOAT32, 4},
                       {"bfloat16", v1::DTYPE_BFLOAT16, 2},
                       {"float16", v1::DTYPE_FLOAT16, 2}};

class TensorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/dikkat_tensor_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    const std::string command = absl::StrCat("/usr/bin/python3 ", DIKKAT_SOURCE_DIR,
                                             "/tests/client/make_tensor_fixtures.py ", *dir_);
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    std::system(absl::StrCat("rm -rf ", *dir_).c_str());
    delete dir_;
  }
  static std::string Fixture(const Case& c, const char* kind) {
    return ReadFile(absl::StrCat(*dir_, "/", c.name, ".", kind));
  }
  static std::string* dir_;
};

std::string* TensorTest::dir_ = nullptr;

TEST_F(TensorTest, DecodesEachDtypeExactlyAsTorchUpcasts) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::string encoded = Fixture(c, "encoded");
    const std::vector<float> expected = FloatsFromLittleEndian(Fixture(c, "decoded"));
    ASSERT_GT(expected.size(), 1000u);
    ASSERT_EQ(encoded.size(), expected.size() * c.size);

    v1::Tensor tensor;
    tensor.set_dtype(c.dtype);
    tensor.add_shape(2);
    tensor.add_shape(static_cast<int64_t>(expected.size() / 2));
    tensor.set_data(encoded);
    absl::StatusOr<DecodedTensor> decoded = DecodeTensor(tensor);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_EQ(decoded->values.size(), expected.size());
    int mismatches = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const float got = decoded->values[i];
      const bool same = std::isnan(expected[i]) ? std::isnan(got)
                                                : std::memcmp(&got, &expected[i], 4) == 0;
      if (!same && ++mismatches < 5) {
        ADD_FAILURE() << "value " << i << ": got " << got << ", torch " << expected[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
    const int64_t cols = decoded->shape[1];
    EXPECT_EQ(std::memcmp(&decoded->values[cols + 3], &expected[cols + 3], 4), 0);
    const float at = decoded->at(1, 3);
    EXPECT_EQ(std::memcmp(&at, &expected[cols + 3], 4), 0);
  }
}

TEST_F(TensorTest, EncodesWithTorchsRoundingToNearestEven) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> input = FloatsFromLittleEndian(Fixture(c, "input"));
    const std::string expected = Fixture(c, "encoded");
    absl::StatusOr<v1::Tensor> tensor =
        EncodeTensor(input, {static_cast<int64_t>(input.size())}, c.dtype);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    ASSERT_EQ(tensor->data().size(), expected.size());
    int mismatches = 0;
    for (size_t i = 0; i < input.size(); ++i) {
      if (std::isnan(input[i])) continue;  // NaN payloads may differ
      if (std::memcmp(tensor->data().data() + i * c.size, expected.data() + i * c.size, c.size) !=
              0 &&
          ++mismatches < 5) {
        ADD_FAILURE() << "value " << i << " (" << input[i] << ") encodes differently";
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(TensorErrorsTest, BadTensorsAreInvalidArgumentsThatSayWhy) {
  v1::Tensor tensor;
  tensor.add_shape(2);
  tensor.set_data(std::string(8, '\0'));
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(tensor);  // dtype unset
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("dtype"));

  tensor.set_dtype(v1::DTYPE_FLOAT16);  // 8 bytes but [2] of float16 needs 4
  decoded = DecodeTensor(tensor);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("needs 4"));

  tensor.set_shape(0, -4);
  decoded = DecodeTensor(tensor);
  EXPECT_THAT(decoded.status().message(), HasSubstr("negative"));

  EXPECT_FALSE(EncodeTensor(std::vector<float>{1, 2, 3}, {2, 2}, v1::DTYPE_FLOAT32).ok());
  EXPECT_FALSE(EncodeTensor(std::vector<float>{1}, {1}, v1::DTYPE_UNSPECIFIED).ok());

  v1::Tensor empty;
  empty.set_dtype(v1::DTYPE_BFLOAT16);
  empty.add_shape(0);
  empty.add_shape(3);
  decoded = DecodeTensor(empty);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->num_elements(), 0);
}

}  // namespace
}  // namespace dikkat::client
