// MultiHeadAttention's pieces (ProjectQ/K/V, CausalKeepMask,
// ScaledDotProductAttention, ProjectOut), composed as nn.MultiheadAttention
// composes them, against torch.nn.MultiheadAttention(batch_first=True):
// outputs and per-head attention weights (need_weights=True,
// average_attn_weights=False) with key padding, a causal mask, both,
// cross-attention, one head and no biases. Fixtures: make_parity_fixtures.py
// attention. Tolerance: 1e-5 of the reference's largest
// magnitude (parity::MaxRelDiff; fp32).
#include "model/attention.h"
#include "model/io/safetensors.h"

#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/parity/parity_util.h"

namespace dikkat::model {
namespace {

using json = nlohmann::json;
constexpr double kTolerance = 1e-5;

constexpr char kAttentionSuite[] = "attention";
using AttentionParityTest = parity::FixtureSuite<kAttentionSuite>;

// nn.MultiheadAttention(batch_first=True) semantics, for whole sequences:
//   query [B, Tq, d], key/value [B, Tk, d]
//   key_padding: undefined or bool [B, Tk], true = padding (ignored key)
//   causal: query i sees keys j <= i (Tq == Tk)
// Returns [B, Tq, d]; `probs` receives [B, Hq, Tq, Tk]. The server's forward
// composes the same pieces over packed batches (BatchSelfAttention).
at::Tensor Forward(const MultiHeadAttention& mha, const at::Tensor& query, const at::Tensor& key,
                   const at::Tensor& value, const at::Tensor& key_padding, bool causal,
                   at::Tensor* probs = nullptr) {
  const int64_t b = query.size(0), tq = query.size(1), tk = key.size(1);
  const int64_t hq = mha.n_heads(), hkv = mha.n_kv_heads(), hd = mha.head_dim();
  // [B, T, H*D] -> [B, H, T, D]
  at::Tensor q = mha.ProjectQ(query).view({b, tq, hq, hd}).transpose(1, 2);
  at::Tensor k = mha.ProjectK(key).view({b, tk, hkv, hd}).transpose(1, 2);
  at::Tensor v = mha.ProjectV(value).view({b, tk, hkv, hd}).transpose(1, 2);
  at::Tensor keep;  // [B or 1, 1, Tq, Tk]
  if (causal) keep = CausalKeepMask(tq, 0, tk, 0, query.device()).view({1, 1, tq, tk});
  if (key_padding.defined()) {
    at::Tensor kp = key_padding.logical_not().view({b, 1, 1, tk});
    keep = keep.defined() ? keep.logical_and(kp) : kp.expand({b, 1, tq, tk});
  }
  at::Tensor out = ScaledDotProductAttention(q, k, v, keep, probs);  // [B, Hq, Tq, D]
  return mha.ProjectOut(out.transpose(1, 2).reshape({b, tq, hq * hd}));
}

at::Tensor Optional(const TensorMap& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? at::Tensor() : it->second;
}

TEST_F(AttentionParityTest, MatchesTorchMultiheadAttention) {
  const json cases = json::parse(parity::ReadFile(Dir() + "/cases.json"));
  ASSERT_EQ(cases.size(), 6u);
  for (const json& c : cases) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    absl::StatusOr<TensorMap> t = ReadSafetensors(Dir() + "/" + name + ".safetensors");
    ASSERT_TRUE(t.ok()) << t.status();
    const int64_t heads = c.at("n_heads");
    MultiHeadAttention mha = MultiHeadAttention::FromFused(
        t->at("in_proj_weight"), Optional(*t, "in_proj_bias"), t->at("out_proj.weight"),
        Optional(*t, "out_proj.bias"), heads, heads);
    EXPECT_EQ(Optional(*t, "in_proj_bias").defined(), c.at("bias").get<bool>());
    at::Tensor probs;
    at::Tensor out = Forward(mha, t->at("query"), t->at("key"), t->at("value"),
                                 Optional(*t, "key_padding_mask"), c.at("causal"), &probs);
    const double out_err = parity::MaxRelDiff(out, t->at("expected_out"));
    const double w_err = parity::MaxRelDiff(probs, t->at("expected_weights"));
    parity::ReportError("mha." + name + ".out", out_err);
    parity::ReportError("mha." + name + ".weights", w_err);
    EXPECT_LE(out_err, kTolerance);
    EXPECT_LE(w_err, kTolerance);
  }
}

// PyTorch yields NaN for a query that may see no key at all; dikkat promises
// zeros (an attention output of nothing), so that one bad row cannot poison
// a batch.
TEST(AttentionMaskedRows, QueryWithNoVisibleKeyGivesZerosNotNaN) {
  at::manual_seed(7);
  at::Tensor q = at::randn({2, 3, 4});  // [H, Tq, D]
  at::Tensor k = at::randn({2, 5, 4});
  at::Tensor v = at::randn({2, 5, 4});
  at::Tensor keep = at::ones({3, 5}, at::kBool);
  keep[1].fill_(false);  // query 1 sees nothing
  keep[2].narrow(0, 3, 2).fill_(false);
  at::Tensor probs;
  at::Tensor out = ScaledDotProductAttention(q, k, v, keep, &probs);
  EXPECT_FALSE(out.isnan().any().item<bool>());
  EXPECT_EQ(out.select(1, 1).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(probs.select(1, 1).abs().max().item<float>(), 0.0f);
  // The other rows are untouched: query 2 equals attention over its 3 keys.
  at::Tensor alone =
      ScaledDotProductAttention(q.narrow(1, 2, 1), k.narrow(1, 0, 3), v.narrow(1, 0, 3), at::Tensor());
  EXPECT_LE(parity::MaxRelDiff(out.narrow(1, 2, 1), alone), 1e-6);
  EXPECT_NEAR(probs.select(1, 0).sum().item<float>(), 2.0f, 1e-5);  // rows sum to 1 per head
}

TEST(AttentionMaskedRows, FullyPaddedSequenceOutputsTheOutputBias) {
  at::manual_seed(8);
  const int64_t d = 8, heads = 2;
  MultiHeadAttention mha =
      MultiHeadAttention::FromFused(at::randn({3 * d, d}), at::randn({3 * d}), at::randn({d, d}),
                                    at::randn({d}), heads, heads);
  at::Tensor x = at::randn({2, 4, d});
  at::Tensor padding = at::zeros({2, 4}, at::kBool);
  padding[1].fill_(true);  // the second sequence is all padding
  at::Tensor probs;
  at::Tensor out = Forward(mha, x, x, x, padding, /*causal=*/false, &probs);
  EXPECT_FALSE(out.isnan().any().item<bool>());
  // Zero attention output -> out_proj(0) = its bias, for every row.
  at::Tensor bias = mha.ProjectOut(at::zeros({1, d}));
  EXPECT_LE(parity::MaxRelDiff(out[1], bias.expand({4, d})), 1e-6);
  EXPECT_EQ(probs[1].abs().max().item<float>(), 0.0f);
  // The first sequence is unaffected by its neighbour.
  at::Tensor first = Forward(mha, x.narrow(0, 0, 1), x.narrow(0, 0, 1), x.narrow(0, 0, 1),
                                 at::Tensor(), false);
  EXPECT_LE(parity::MaxRelDiff(out.narrow(0, 0, 1), first), 1e-6);
}

// Grouped-query attention: query head h reads KV head h / G.
TEST(AttentionGroupedQuery, EqualsRepeatedKvHeads) {
  at::manual_seed(9);
  at::Tensor q = at::randn({6, 5, 4});  // Hq = 6
  at::Tensor k = at::randn({2, 5, 4});  // Hkv = 2, G = 3
  at::Tensor v = at::randn({2, 5, 4});
  at::Tensor keep = CausalKeepMask(5, 0, 5, 0, q.device());
  at::Tensor probs;
  at::Tensor out = ScaledDotProductAttention(q, k, v, keep, &probs);
  at::Tensor k_rep = at::cat({k[0].expand({3, 5, 4}), k[1].expand({3, 5, 4})});
  at::Tensor v_rep = at::cat({v[0].expand({3, 5, 4}), v[1].expand({3, 5, 4})});
  at::Tensor ref_probs;
  at::Tensor ref = ScaledDotProductAttention(q, k_rep, v_rep, keep, &ref_probs);
  EXPECT_LE(parity::MaxRelDiff(out, ref), 1e-6);
  EXPECT_LE(parity::MaxRelDiff(probs, ref_probs), 1e-6);
}

}  // namespace
}  // namespace dikkat::model
