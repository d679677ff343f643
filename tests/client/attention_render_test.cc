// Attention views: strongest links and the SVG heatmap, whose structure is
// checked by a strict XML parser (Python's xml.etree, tests/client/svg_summary.py).
#include "client/attention_render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dikkat::client {
namespace {

namespace v1 = ::dikkat::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Causal uniform attention over n tokens: row q spreads 1 over keys 0..q.
std::vector<float> CausalUniform(int n) {
  std::vector<float> w(static_cast<size_t>(n) * n, 0.0f);
  for (int q = 0; q < n; ++q) {
    for (int k = 0; k <= q; ++k) w[q * n + k] = 1.0f / (q + 1);
  }
  return w;
}

v1::AttentionResponse MakeResponse(const std::vector<std::string>& tokens) {
  const int n = static_cast<int>(tokens.size());
  v1::AttentionResponse response;
  for (const std::string& t : tokens) {
    response.add_query_tokens(t);
    response.add_key_tokens(t);
  }
  const struct {
    int layer, head;
    v1::DType dtype;
  } maps[] = {{0, 0, v1::DTYPE_FLOAT32}, {0, 1, v1::DTYPE_BFLOAT16}, {2, -1, v1::DTYPE_FLOAT16}};
  for (const auto& m : maps) {
    v1::AttentionMap* map = response.add_maps();
    map->set_layer(m.layer);
    map->set_head(m.head);
    *map->mutable_weights() = *EncodeTensor(CausalUniform(n), {n, n}, m.dtype);
  }
  return response;
}

nlohmann::json SummarizeSvg(const std::string& svg) {
  char path[] = "/tmp/dikkat_svg_test_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path, std::ios::binary) << svg;
  const std::string command = absl::StrCat("/usr/bin/python3 ", DIKKAT_SOURCE_DIR,
                                           "/tests/client/svg_summary.py ", path);
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int rc = pclose(pipe);
  unlink(path);
  EXPECT_EQ(rc, 0) << "the SVG is not well-formed XML";
  if (rc != 0) return nullptr;
  return nlohmann::json::parse(output);
}

TEST(AttentionSvgTest, HeatmapIsWellFormedWithLabelsTitlesAndScale) {
  const std::vector<std::string> tokens = {"<s>", "a&b", "\"q'", "\x01\xff", "\xc3\xbcn", "tab\there",
                                           "an-extremely-long-token", " "};
  absl::StatusOr<std::string> svg = AttentionResponseToSvg(MakeResponse(tokens));
  ASSERT_TRUE(svg.ok()) << svg.status();
  const nlohmann::json summary = SummarizeSvg(*svg);
  ASSERT_FALSE(summary.is_null());
  EXPECT_EQ(summary["root"], "{http://www.w3.org/2000/svg}svg");
  EXPECT_EQ(summary["gradients"], 1);
  ASSERT_EQ(summary["panels"].size(), 3u);
  const std::vector<std::string> titles = {"layer 0 head 0", "layer 0 head 1",
                                           "layer 2 (heads aggregated)"};
  const std::vector<std::string> labels = {"<s>",     "a&b",       "\"q'",
                                           "\\x01\\xFF", "\xc3\xbcn", "tab\\there",
                                           "an-extremely-\xe2\x80\xa6", "\xe2\x90\xa3"};
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json& panel = summary["panels"][i];
    SCOPED_TRACE(titles[i]);
    EXPECT_EQ(panel["title"], nlohmann::json::array({titles[i]}));
    EXPECT_EQ(panel["cells"], 64);
    EXPECT_EQ(panel["row_labels"].get<std::vector<std::string>>(), labels);
    EXPECT_EQ(panel["col_labels"].get<std::vector<std::string>>(), labels);
    EXPECT_TRUE(panel["col_rotated"].get<bool>());
    EXPECT_EQ(panel["colorbars"], 1);
    // Scale from 0 to the map's largest weight (row 0 puts all of it on key 0).
    EXPECT_EQ(panel["scale_labels"], nlohmann::json::array({"0", "0.5", "1"}));
    EXPECT_EQ(panel["cell_tooltips"][0], "<s> \xe2\x86\x92 <s>: 1");
    EXPECT_EQ(panel["cell_tooltips"][1], "<s> \xe2\x86\x92 a&b: 0");
    // Weight 0 and the maximum take the scale's two ends (viridis).
    const auto colors = panel["colors"].get<std::vector<std::string>>();
    EXPECT_THAT(colors, ::testing::Contains("#440154"));
    EXPECT_THAT(colors, ::testing::Contains("#fde725"));
    EXPECT_GE(colors.size(), 5u);  // 1, 1/2, ..., 1/8 and 0 differ
  }
}

TEST(AttentionSvgTest, ShapeMustMatchTheLabels) {
  v1::AttentionResponse response = MakeResponse({"a", "b", "c"});
  response.add_key_tokens("extra");
  absl::StatusOr<std::string> svg = AttentionResponseToSvg(response);
  EXPECT_EQ(svg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(svg.status().message(), HasSubstr("layer 0 head 0"));
  EXPECT_THAT(svg.status().message(), HasSubstr("[3,4]"));
  EXPECT_FALSE(AttentionResponseToSvg(v1::AttentionResponse()).ok());  // nothing to draw
}

TEST(AttentionSvgTest, ColumnsOptionLaysPanelsOutInARow) {
  const v1::AttentionResponse response = MakeResponse({"a", "b"});
  SvgOptions one_row;
  one_row.columns = 3;
  SvgOptions one_column;
  one_column.columns = 1;
  const nlohmann::json wide = SummarizeSvg(*AttentionResponseToSvg(response, one_row));
  const nlohmann::json narrow = SummarizeSvg(*AttentionResponseToSvg(response, one_column));
  EXPECT_GT(std::stoi(wide["width"].get<std::string>()),
            2 * std::stoi(narrow["width"].get<std::string>()));
}

TEST(StrongestLinksTest, LargestWeightsFirstInRowMajorTieOrder) {
  DecodedTensor map;
  map.shape = {3, 3};
  map.values = CausalUniform(3);  // 1 | .5 .5 | 1/3 1/3 1/3
  std::vector<AttentionLink> links = StrongestLinks(map, 4);
  ASSERT_EQ(links.size(), 4u);
  EXPECT_EQ(links[0].query, 0);
  EXPECT_EQ(links[0].key, 0);
  EXPECT_FLOAT_EQ(links[0].weight, 1.0f);
  EXPECT_EQ(links[1].query, 1);
  EXPECT_EQ(links[1].key, 0);
  EXPECT_EQ(links[2].query, 1);
  EXPECT_EQ(links[2].key, 1);
  EXPECT_EQ(links[3].query, 2);
  EXPECT_EQ(links[3].key, 0);
  EXPECT_EQ(StrongestLinks(map, 100).size(), 9u);
  EXPECT_TRUE(StrongestLinks(map, 0).empty());
}

TEST(PrintableTokenTest, ControlAndInvalidBytesAreEscaped) {
  EXPECT_EQ(PrintableToken("plain"), "plain");
  EXPECT_EQ(PrintableToken("a\nb"), "a\\nb");
  EXPECT_EQ(PrintableToken("\xe2\x82\xac"), "\xe2\x82\xac");  // the euro sign stays
  EXPECT_EQ(PrintableToken("\xe2\x82"), "\\xE2\\x82");         // cut sequence
  EXPECT_EQ(PrintableToken("\xed\xa0\x80"), "\\xED\\xA0\\x80"); // a surrogate
  EXPECT_EQ(XmlEscape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&apos;");
}

}  // namespace
}  // namespace dikkat::client
