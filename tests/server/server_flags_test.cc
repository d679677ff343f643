// --kv_cache_bytes style sizes and --model specs.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/byte_size.h"
#include "server/model_registry.h"

namespace dikkat::server {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, ParsesUnits) {
  EXPECT_EQ(*ParseByteSize("1000"), 1000);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ll << 20);
  EXPECT_EQ(*ParseByteSize("512mib"), 512ll << 20);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3ll << 29);
  EXPECT_EQ(*ParseByteSize("2GB"), 2000000000ll);
  EXPECT_EQ(*ParseByteSize("64k"), 64000);
  EXPECT_EQ(*ParseByteSize("64Ki"), 65536);
  EXPECT_EQ(*ParseByteSize(" 8 MiB "), 8ll << 20);
  EXPECT_EQ(*ParseByteSize("0"), 0);
  for (const char* bad : {"", "MiB", "12XB", "-1", "1.2.3", "1e3"}) {
    absl::StatusOr<int64_t> r = ParseByteSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_THAT(std::string(r.status().message()), HasSubstr("512MiB"));
    }
  }
  EXPECT_FALSE(ParseByteSize("9000000TiB").ok());
  EXPECT_EQ(FormatByteSize(256ll << 20), "256MiB");
  EXPECT_EQ(FormatByteSize(1000), "1000B");
  EXPECT_EQ(*ParseByteSize(FormatByteSize(3ll << 30)), 3ll << 30);
}

TEST(ModelSpecTest, NamesDefaultToTheFolder) {
  auto specs = ParseModelSpecs({"/models/tiny-lm/", "enc=/m/bert,seq=/x/t5"});
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].name, "tiny-lm");
  EXPECT_EQ((*specs)[0].path, "/models/tiny-lm/");
  EXPECT_EQ((*specs)[1].name, "enc");
  EXPECT_EQ((*specs)[1].path, "/m/bert");
  EXPECT_EQ((*specs)[2].name, "seq");

  EXPECT_THAT(std::string(ParseModelSpecs({"/a/m", "/b/m"}).status().message()), HasSubstr("'m' twice"));
  EXPECT_FALSE(ParseModelSpecs({"a,,b"}).ok());
  EXPECT_FALSE(ParseModelSpecs({"=/path"}).ok());
  EXPECT_FALSE(ParseModelSpecs({"name="}).ok());
}

}  // namespace
}  // namespace dikkat::server
