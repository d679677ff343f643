// One dikkat layer against nn.TransformerEncoderLayer / nn.TransformerDecoderLayer
// (post-LN and pre-LN, relu and gelu). The single-layer dikkat models have no
// positions and a token table that holds PyTorch's input activations row by
// row, so that tokens 0..N-1 feed the layer exactly those inputs; the decoder
// layer's memory goes in through MakeCrossCache. Tolerance: 1e-5 of the reference's largest
// magnitude (parity::MaxRelDiff; fp32).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/io/safetensors.h"
#include "model/transformer.h"
#include "tests/parity/parity_util.h"

namespace dikkat::model {
namespace {

using json = nlohmann::json;
constexpr double kTolerance = 1e-5;

constexpr char kLayersSuite[] = "layers";

class LayerParityTest : public parity::FixtureSuite<kLayersSuite> {
 protected:
  static void SetUpTestSuite() {
    FixtureSuite::SetUpTestSuite();
    if (Ok()) cases_ = new json(json::parse(parity::ReadFile(Dir() + "/cases.json")));
  }
  static void TearDownTestSuite() {
    delete cases_;
    cases_ = nullptr;
    FixtureSuite::TearDownTestSuite();
  }

  static std::vector<json> Cases(const std::string& kind) {
    std::vector<json> out;
    for (const json& c : *cases_) {
      if (c.at("kind") == kind) out.push_back(c);
    }
    return out;
  }

  static json* cases_;
};
json* LayerParityTest::cases_ = nullptr;

// Token ids 0..N-1 split into consecutive chunks of the given lengths.
std::vector<std::vector<int32_t>> TokenRuns(const std::vector<int64_t>& lens) {
  std::vector<std::vector<int32_t>> runs;
  int32_t next = 0;
  for (int64_t n : lens) {
    std::vector<int32_t> run(n);
    std::iota(run.begin(), run.end(), next);
    next += static_cast<int32_t>(n);
    runs.push_back(run);
  }
  return runs;
}

// The three sequences (lengths 7, 5, 2) go through one Encode call, as the
// engine batches them; PyTorch ran them as one padded batch with
// src_key_padding_mask.
TEST_F(LayerParityTest, EncoderLayerMatchesTorch) {
  const std::vector<json> cases = Cases("encoder");
  ASSERT_EQ(cases.size(), 4u);
  for (const json& c : cases) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const std::string dir = Dir() + "/" + name;
    absl::StatusOr<parity::LoadedModel> m = parity::LoadModelDir(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(m->report.unused_tensors.empty());
    absl::StatusOr<TensorMap> expected = ReadSafetensors(dir + "/expected.safetensors");
    ASSERT_TRUE(expected.ok()) << expected.status();
    const auto runs = TokenRuns(c.at("lens").get<std::vector<int64_t>>());
    std::vector<SequenceChunk> chunks(runs.size());
    for (size_t b = 0; b < runs.size(); ++b) chunks[b].tokens = runs[b];
    for (int64_t hidden : {int64_t{1}, ForwardOptions::kFinalHidden}) {
      ForwardOptions options;
      options.hidden_layer = hidden;  // no final norm: both are the layer's output
      ForwardResult r = m->model->Encode(chunks, options);
      ASSERT_EQ(r.hidden.size(), runs.size());
      EXPECT_FALSE(r.logits.defined());
      double err = 0;
      for (size_t b = 0; b < runs.size(); ++b) {
        err = std::max(err, parity::MaxRelDiff(r.hidden[b], expected->at(absl::StrCat("expected_", b))));
      }
      if (hidden == 1) parity::ReportError("layer." + name, err);
      EXPECT_LE(err, kTolerance);
    }
  }
}

// Two target sequences, each with its own encoder memory, in one Decode call
// without a cache; then the same through the paged cache, prefilling two
// tokens and feeding the rest one by one.
TEST_F(LayerParityTest, DecoderLayerMatchesTorch) {
  const std::vector<json> cases = Cases("decoder");
  ASSERT_EQ(cases.size(), 4u);
  for (const json& c : cases) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const std::string dir = Dir() + "/" + name;
    absl::StatusOr<parity::LoadedModel> m = parity::LoadModelDir(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(m->report.unused_tensors.empty());
    absl::StatusOr<TensorMap> expected = ReadSafetensors(dir + "/expected.safetensors");
    ASSERT_TRUE(expected.ok()) << expected.status();
    const auto runs = TokenRuns(c.at("lens").get<std::vector<int64_t>>());
    std::vector<CrossAttentionCache> cross;
    for (size_t b = 0; b < runs.size(); ++b) {
      cross.push_back(m->model->MakeCrossCache(expected->at(absl::StrCat("memory_", b))));
    }
    std::vector<SequenceChunk> chunks(runs.size());
    for (size_t b = 0; b < runs.size(); ++b) {
      chunks[b].tokens = runs[b];
      chunks[b].cross = &cross[b];
    }
    ForwardOptions options;
    options.hidden_layer = 1;
    ForwardResult r = m->model->Decode(chunks, nullptr, options);
    ASSERT_EQ(r.hidden.size(), runs.size());
    double err = 0;
    for (size_t b = 0; b < runs.size(); ++b) {
      err = std::max(err, parity::MaxRelDiff(r.hidden[b], expected->at(absl::StrCat("expected_", b))));
    }
    parity::ReportError("layer." + name, err);
    EXPECT_LE(err, kTolerance);
    SequenceChunk no_cross;  // an encoder-decoder decode without the encoder's K/V
    no_cross.tokens = runs[0];
    EXPECT_THROW(m->model->Decode({no_cross}, nullptr, options), c10::Error);

    absl::StatusOr<KvCache> cache = parity::MakeCache(m->config, 2, /*block_size=*/2);
    ASSERT_TRUE(cache.ok()) << cache.status();
    double cached_err = 0;
    for (size_t b = 0; b < runs.size(); ++b) {
      std::vector<int32_t> table;
      std::vector<at::Tensor> hidden;
      const int64_t n = static_cast<int64_t>(runs[b].size());
      for (int64_t pos = 0; pos < n;) {
        const int64_t take = pos == 0 ? std::min<int64_t>(2, n) : 1;
        ASSERT_TRUE(cache->allocator().EnsureCapacity(&table, pos + take));
        SequenceChunk chunk;
        chunk.tokens = absl::MakeConstSpan(runs[b]).subspan(pos, take);
        chunk.start_pos = pos;
        chunk.block_table = &table;
        chunk.cross = &cross[b];
        hidden.push_back(m->model->Decode({chunk}, &*cache, options).hidden.at(0));
        pos += take;
      }
      cache->allocator().Release(&table);
      cached_err = std::max(cached_err, parity::MaxRelDiff(at::cat(hidden),
                                                           expected->at(absl::StrCat("expected_", b))));
    }
    parity::ReportError("layer." + name + ".paged_cache", cached_err);
    EXPECT_LE(cached_err, kTolerance);
    EXPECT_EQ(cache->allocator().num_free(), cache->allocator().num_blocks());
  }
}

}  // namespace
}  // namespace dikkat::model
