// The paged KV cache and its block allocator, through Transformer::Decode on
// small random models (weights from at::randn, no files): incremental
// decoding equals recomputing without a cache, a batch of sequences at
// different positions equals each one alone, blocks all come back, and the
// edges (one token, exactly max_positions, one past it, bfloat16).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "model/huge_pages.h"
#include "model/io/config.h"
#include "model/kv_block_allocator.h"
#include "model/kv_cache.h"
#include "model/transformer.h"

namespace dikkat::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Incremental decoding runs other kernels than a full pass (GEMV and the paged
// decode attention instead of GEMM and batched softmax), so sums are taken in
// another order: fp32 rounding only. Logits here reach |30|: 5e-5 is ~2e-6 relative.
constexpr double kTolerance = 5e-5;

ModelConfig GptConfig() {
  ModelConfig c;
  c.architecture = Architecture::kDecoderOnly;
  c.vocab_size = 50;
  c.d_model = 32;
  c.n_heads = 4;
  c.ffn_dim = 64;
  c.n_layers = 2;
  c.max_positions = 24;
  c.positions = PositionKind::kLearned;
  c.activation = Activation::kGelu;
  c.tie_embeddings = true;
  return c;
}

ModelConfig LlamaConfig(int64_t window) {
  ModelConfig c = GptConfig();
  c.n_kv_heads = 2;
  c.norm = NormKind::kRmsNorm;
  c.positions = PositionKind::kRotary;
  c.activation = Activation::kSwiGlu;
  c.attention_bias = false;
  c.mlp_bias = false;
  c.tie_embeddings = false;
  c.sliding_window = window;
  return c;
}

// Random weights under dikkat's canonical names (see WeightBinder in
// transformer.cc). Scaled so that activations stay O(1) through the layers.
TensorMap RandomWeights(const ModelConfig& c, bool fused_qkv) {
  const int64_t d = c.d_model, f = c.ffn_dim, hd = c.head_size();
  const int64_t q_rows = c.n_heads * hd, kv_rows = c.kv_heads() * hd;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  TensorMap w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double scale) {
    w[name] = at::randn(shape) * scale;
  };
  auto norm = [&](const std::string& p) {
    w[p + ".weight"] = 1.0 + at::randn({d}) * 0.1;
    if (c.norm == NormKind::kLayerNorm && c.norm_bias) add(p + ".bias", {d}, 0.1);
  };
  add("embed_tokens.weight", {c.vocab_size, d}, 1.0);
  if (c.positions == PositionKind::kLearned) add("embed_positions.weight", {c.max_positions, d}, 0.5);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = absl::StrCat("layers.", i, ".");
    if (fused_qkv) {
      add(p + "self_attn.in_proj_weight", {q_rows + 2 * kv_rows, d}, s);
      if (c.attention_bias) add(p + "self_attn.in_proj_bias", {q_rows + 2 * kv_rows}, 0.1);
    } else {
      add(p + "self_attn.q_proj.weight", {q_rows, d}, s);
      add(p + "self_attn.k_proj.weight", {kv_rows, d}, s);
      add(p + "self_attn.v_proj.weight", {kv_rows, d}, s);
      if (c.attention_bias) {
        add(p + "self_attn.q_proj.bias", {q_rows}, 0.1);
        add(p + "self_attn.k_proj.bias", {kv_rows}, 0.1);
        add(p + "self_attn.v_proj.bias", {kv_rows}, 0.1);
      }
    }
    add(p + "self_attn.out_proj.weight", {d, q_rows}, s);
    if (c.attention_bias) add(p + "self_attn.out_proj.bias", {d}, 0.1);
    norm(p + "norm1");
    norm(p + "norm2");
    add(p + "linear1.weight", {f, d}, s);
    add(p + "linear2.weight", {d, f}, 1.0 / std::sqrt(static_cast<double>(f)));
    if (c.is_gated()) add(p + "linear_gate.weight", {f, d}, s);
    if (c.mlp_bias) {
      add(p + "linear1.bias", {f}, 0.1);
      add(p + "linear2.bias", {d}, 0.1);
      if (c.is_gated()) add(p + "linear_gate.bias", {f}, 0.1);
    }
  }
  if (c.final_norm) norm("final_norm");
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab_size, d}, s);
  return w;
}

std::unique_ptr<Transformer> LoadRandom(const ModelConfig& config, uint64_t seed,
                                        c10::ScalarType dtype = at::kFloat,
                                        bool fused_qkv = false, bool huge_pages = true) {
  at::manual_seed(seed);
  LoadOptions options;
  options.dtype = dtype;
  options.huge_pages = huge_pages;
  LoadReport report;
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Load(config, RandomWeights(config, fused_qkv), options, &report);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  EXPECT_TRUE(report.unused_tensors.empty());
  // Every weight in the arena, or none (the quantized matrices as int8 and
  // scales, never their float32 first).
  EXPECT_EQ(report.huge_page_bytes,
            huge_pages && HugePageArena::Supported() ? report.parameter_bytes : 0);
  return std::move(*model);
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor t = at::randint(vocab, {n}, at::kInt);
  return std::vector<int32_t>(t.data_ptr<int32_t>(), t.data_ptr<int32_t>() + n);
}

KvCache MakeCache(const ModelConfig& config, int64_t blocks, int32_t block_size,
                  c10::ScalarType dtype = at::kFloat, bool huge_pages = true) {
  absl::StatusOr<KvCache> cache =
      KvCache::Create(config, KvCache::BytesPerToken(config, dtype) * block_size * blocks,
                      block_size, dtype, c10::Device(c10::DeviceType::CPU), huge_pages);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return std::move(*cache);
}

// Logits of every token of `tokens`, recomputed from scratch (no cache).
at::Tensor FullLogits(const Transformer& model, const std::vector<int32_t>& tokens) {
  SequenceChunk chunk;
  chunk.tokens = tokens;
  ForwardOptions options;
  options.all_logits = true;
  return model.Decode({chunk}, nullptr, options).logits;  // [T, V]
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return 1e30;
  return a.to(at::kDouble).sub(b.to(at::kDouble)).abs().max().item<double>();
}

// Prefill `prefill` tokens, then one token per step; returns every token's
// logits [T, V]. Releases the sequence's blocks at the end.
at::Tensor IncrementalLogits(const Transformer& model, KvCache* cache,
                             const std::vector<int32_t>& tokens, size_t prefill) {
  std::vector<int32_t> table;
  std::vector<at::Tensor> rows;
  ForwardOptions options;
  options.all_logits = true;
  for (size_t pos = 0; pos < tokens.size();) {
    const size_t n = pos == 0 ? prefill : 1;
    EXPECT_TRUE(cache->allocator().EnsureCapacity(&table, pos + n));
    SequenceChunk chunk;
    chunk.tokens = absl::MakeConstSpan(tokens).subspan(pos, n);
    chunk.start_pos = static_cast<int64_t>(pos);
    chunk.block_table = &table;
    rows.push_back(model.Decode({chunk}, cache, options).logits);
    pos += n;
  }
  cache->allocator().Release(&table);
  return at::cat(rows);
}

struct Variant {
  std::string name;
  ModelConfig config;
  bool fused_qkv;
};

std::vector<Variant> Variants() {
  ModelConfig post_ln = GptConfig();
  post_ln.pre_norm = false;
  post_ln.final_norm = false;
  return {{"gpt_fused_qkv", GptConfig(), true},
          {"post_ln_sinusoidal", [&] {
             post_ln.positions = PositionKind::kSinusoidal;
             return post_ln;
           }(),
           false},
          {"llama_gqa", LlamaConfig(0), false},
          {"llama_window5", LlamaConfig(5), false}};
}

TEST(KvCacheDecodeTest, IncrementalDecodingEqualsRecomputingWithoutCache) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    std::unique_ptr<Transformer> model = LoadRandom(v.config, 1, at::kFloat, v.fused_qkv);
    ASSERT_NE(model, nullptr);
    const std::vector<int32_t> tokens = RandomTokens(20, v.config.vocab_size, 2);
    const at::Tensor full = FullLogits(*model, tokens);
    for (int32_t block_size : {1, 3, 16}) {
      KvCache cache = MakeCache(v.config, 2 * ((v.config.max_positions + block_size - 1) / block_size),
                                block_size);
      const at::Tensor incremental = IncrementalLogits(*model, &cache, tokens, /*prefill=*/7);
      EXPECT_LE(MaxAbsDiff(incremental, full), kTolerance) << "block size " << block_size;
      EXPECT_EQ(cache.allocator().num_free(), cache.allocator().num_blocks());
    }
  }
}

// The reference really depends on the earlier tokens (so that the test above
// would notice a cache that returned the wrong keys).
TEST(KvCacheDecodeTest, LogitsDependOnEarlierTokens) {
  const ModelConfig config = LlamaConfig(0);
  std::unique_ptr<Transformer> model = LoadRandom(config, 1);
  std::vector<int32_t> a = RandomTokens(10, config.vocab_size, 3);
  std::vector<int32_t> b = a;
  b[2] = (b[2] + 1) % static_cast<int32_t>(config.vocab_size);
  EXPECT_GT(MaxAbsDiff(FullLogits(*model, a)[9], FullLogits(*model, b)[9]), 1e-3);
}

// Several prompts in one Decode call, then batched steps of sequences at
// different positions (one of them still prefilling a chunk of 3 tokens),
// each compared with the sequence recomputed alone.
TEST(KvCacheDecodeTest, MixedBatchEqualsEachSequenceAlone) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    std::unique_ptr<Transformer> model = LoadRandom(v.config, 4, at::kFloat, v.fused_qkv);
    ASSERT_NE(model, nullptr);
    KvCache cache = MakeCache(v.config, 40, /*block_size=*/4);
    // Final lengths 18, 14, 20; prompts 5, 9, 1.
    std::vector<std::vector<int32_t>> seqs = {RandomTokens(18, v.config.vocab_size, 5),
                                              RandomTokens(14, v.config.vocab_size, 6),
                                              RandomTokens(20, v.config.vocab_size, 7)};
    std::vector<size_t> done = {5, 9, 1};
    std::vector<std::vector<int32_t>> tables(3);
    std::vector<at::Tensor> got(3);  // logits produced so far, per sequence

    ForwardOptions all;
    all.all_logits = true;
    std::vector<SequenceChunk> prefill(3);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(cache.allocator().EnsureCapacity(&tables[i], done[i]));
      prefill[i].tokens = absl::MakeConstSpan(seqs[i]).subspan(0, done[i]);
      prefill[i].block_table = &tables[i];
    }
    at::Tensor logits = model->Decode(prefill, &cache, all).logits;  // [15, V]
    ASSERT_EQ(logits.size(0), 15);
    got[0] = logits.narrow(0, 0, 5);
    got[1] = logits.narrow(0, 5, 9);
    got[2] = logits.narrow(0, 14, 1);

    // Steps: sequence 2 takes 3 tokens at once while the others take one;
    // a sequence leaves the batch when it reaches its length.
    while (true) {
      std::vector<SequenceChunk> step;
      std::vector<int> who;
      for (int i = 0; i < 3; ++i) {
        const size_t n = std::min<size_t>(i == 2 ? 3 : 1, seqs[i].size() - done[i]);
        if (n == 0) continue;
        ASSERT_TRUE(cache.allocator().EnsureCapacity(&tables[i], done[i] + n));
        SequenceChunk c;
        c.tokens = absl::MakeConstSpan(seqs[i]).subspan(done[i], n);
        c.start_pos = static_cast<int64_t>(done[i]);
        c.block_table = &tables[i];
        step.push_back(c);
        who.push_back(i);
      }
      if (step.empty()) break;
      // Alternate between last-token logits (what the engine asks for) and
      // all logits.
      const bool last_only = done[0] % 2 == 0;
      ForwardOptions options;
      options.all_logits = !last_only;
      at::Tensor out = model->Decode(step, &cache, options).logits;
      int64_t row = 0;
      for (size_t k = 0; k < step.size(); ++k) {
        const int i = who[k];
        const int64_t n = static_cast<int64_t>(step[k].tokens.size());
        const at::Tensor expected = FullLogits(*model, std::vector<int32_t>(seqs[i].begin(),
                                                                             seqs[i].begin() + done[i] + n));
        if (last_only) {
          EXPECT_LE(MaxAbsDiff(out[k], expected[-1]), kTolerance) << "sequence " << i;
        } else {
          EXPECT_LE(MaxAbsDiff(out.narrow(0, row, n), expected.narrow(0, done[i], n)), kTolerance)
              << "sequence " << i;
          row += n;
        }
        done[i] += n;
      }
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_LE(MaxAbsDiff(got[i], FullLogits(*model, seqs[i]).narrow(0, 0, got[i].size(0))),
                kTolerance);
      cache.allocator().Release(&tables[i]);
      EXPECT_TRUE(tables[i].empty());
    }
    EXPECT_EQ(cache.allocator().num_free(), cache.allocator().num_blocks());
  }
}

TEST(KvCacheDecodeTest, SingleTokenSequence) {
  const ModelConfig config = GptConfig();
  std::unique_ptr<Transformer> model = LoadRandom(config, 8);
  const std::vector<int32_t> one = {7};
  KvCache cache = MakeCache(config, 8, 4);
  const at::Tensor full = FullLogits(*model, one);
  ASSERT_EQ(full.sizes(), (std::vector<int64_t>{1, config.vocab_size}));
  EXPECT_LE(MaxAbsDiff(IncrementalLogits(*model, &cache, one, 1), full), kTolerance);
  // Default options: the last token's logits, one row per chunk.
  SequenceChunk chunk;
  chunk.tokens = one;
  EXPECT_LE(MaxAbsDiff(model->Decode({chunk}, nullptr, ForwardOptions()).logits, full), kTolerance);
}

TEST(KvCacheDecodeTest, ExactlyMaxPositionsWorksAndOnePastThrows) {
  const ModelConfig config = GptConfig();  // max_positions 24
  std::unique_ptr<Transformer> model = LoadRandom(config, 9);
  const std::vector<int32_t> tokens = RandomTokens(config.max_positions + 1, config.vocab_size, 10);
  const std::vector<int32_t> fits(tokens.begin(), tokens.end() - 1);

  const at::Tensor full = FullLogits(*model, fits);
  EXPECT_EQ(full.size(0), config.max_positions);
  KvCache cache = MakeCache(config, 6, 4);  // exactly one full-context sequence
  EXPECT_LE(MaxAbsDiff(IncrementalLogits(*model, &cache, fits, 10), full), kTolerance);

  EXPECT_THROW(FullLogits(*model, tokens), c10::Error);
  // Through the cache: the step that would write position max_positions.
  std::vector<int32_t> table;
  ASSERT_TRUE(cache.allocator().EnsureCapacity(&table, config.max_positions));
  SequenceChunk prompt;
  prompt.tokens = fits;
  prompt.block_table = &table;
  model->Decode({prompt}, &cache, ForwardOptions());
  SequenceChunk past;
  past.tokens = absl::MakeConstSpan(tokens).subspan(config.max_positions, 1);
  past.start_pos = config.max_positions;
  past.block_table = &table;
  EXPECT_THROW(model->Decode({past}, &cache, ForwardOptions()), c10::Error);
  cache.allocator().Release(&table);
  EXPECT_EQ(cache.allocator().num_free(), cache.allocator().num_blocks());
}

TEST(KvCacheDecodeTest, MisuseThrowsInsteadOfReadingOutOfBounds) {
  const ModelConfig config = GptConfig();
  std::unique_ptr<Transformer> model = LoadRandom(config, 11);
  KvCache cache = MakeCache(config, 12, 4);
  const std::vector<int32_t> tokens = RandomTokens(9, config.vocab_size, 12);
  std::vector<int32_t> table;
  ASSERT_TRUE(cache.allocator().EnsureCapacity(&table, 8));  // 2 blocks, 9 tokens
  SequenceChunk chunk;
  chunk.tokens = tokens;
  chunk.block_table = &table;
  EXPECT_THROW(model->Decode({chunk}, &cache, ForwardOptions()), c10::Error);
  SequenceChunk late;  // no cache but not at position 0
  late.tokens = tokens;
  late.start_pos = 3;
  EXPECT_THROW(model->Decode({late}, nullptr, ForwardOptions()), c10::Error);
  EXPECT_THROW(model->Decode({}, nullptr, ForwardOptions()), c10::Error);
  SequenceChunk empty;
  EXPECT_THROW(model->Decode({empty}, nullptr, ForwardOptions()), c10::Error);
  cache.allocator().Release(&table);
}

// bfloat16 weights and cache: within bf16 precision of the fp32 model (8-bit
// mantissa: ~0.4% per rounding, accumulated over 2 layers; measured 0.6-1.5%
// of the largest logit), through the cache as well as without it. The two bf16
// paths round differently (GEMV vs GEMM, cached K/V), so each is held to the
// fp32 reference rather than to the other.
TEST(KvCacheDecodeTest, BFloat16LoadIsCloseToFloat32) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    std::unique_ptr<Transformer> fp32 = LoadRandom(v.config, 13, at::kFloat, v.fused_qkv);
    std::unique_ptr<Transformer> bf16 = LoadRandom(v.config, 13, at::kBFloat16, v.fused_qkv);
    ASSERT_NE(bf16, nullptr);
    const std::vector<int32_t> tokens = RandomTokens(16, v.config.vocab_size, 14);
    const at::Tensor ref = FullLogits(*fp32, tokens);
    const at::Tensor got = FullLogits(*bf16, tokens);
    EXPECT_EQ(got.scalar_type(), at::kFloat);  // logits are always float32
    const double scale = ref.abs().max().item<double>();
    const double err = MaxAbsDiff(got, ref);
    std::printf("[ bf16 ] %-20s max abs err %.3g (max |logit| %.3g)\n", v.name.c_str(), err, scale);
    EXPECT_LE(err, 0.05 * scale);
    // Most next-token choices survive the lower precision.
    const double agree = got.argmax(-1).eq(ref.argmax(-1)).to(at::kFloat).mean().item<double>();
    EXPECT_GE(agree, 0.75);

    KvCache cache = MakeCache(v.config, 12, 4, at::kBFloat16);
    const double cached_err = MaxAbsDiff(IncrementalLogits(*bf16, &cache, tokens, 4), ref);
    std::printf("[ bf16 ] %-20s through the cache: max abs err %.3g\n", v.name.c_str(), cached_err);
    EXPECT_LE(cached_err, 0.05 * scale);
  }
}

// Gemma's token scale is taken in the weights' dtype, as Hugging Face's
// embedding multiplies by embed_scale.to(weight.dtype): sqrt(3) = 1.7320508
// is 1.734375 in bfloat16; float32 weights keep it exact.
TEST(KvCacheDecodeTest, EmbeddingScaleInTheWeightsDtype) {
  ModelConfig c = LlamaConfig(0);
  c.embedding_scale = std::sqrt(3.0);
  const auto embeddings = [&](bool rounded, c10::ScalarType dtype) {
    c.embedding_scale_in_weight_dtype = rounded;
    std::unique_ptr<Transformer> model = LoadRandom(c, 7, dtype);
    std::vector<SequenceChunk> chunks(1);
    const std::vector<int32_t> ids = {3, 9};
    chunks[0].tokens = ids;
    ForwardOptions options;
    options.last_logits = false;
    options.hidden_layer = 0;  // the scaled token embeddings
    return model->Decode(chunks, nullptr, options).hidden[0].to(at::kFloat);
  };
  const at::Tensor exact = embeddings(false, at::kBFloat16);
  const at::Tensor rounded = embeddings(true, at::kBFloat16);
  const at::Tensor ratio = rounded / exact;
  EXPECT_NEAR(ratio.min().item<double>(), 1.734375 / std::sqrt(3.0), 1e-6);
  EXPECT_NEAR(ratio.max().item<double>(), 1.734375 / std::sqrt(3.0), 1e-6);
  EXPECT_TRUE(at::equal(embeddings(true, at::kFloat), embeddings(false, at::kFloat)));
}

// float32 weights with a 16-bit cache (--kv_cache_dtype): only the cached keys
// and values are rounded (once each, as written), so the logits stay much
// closer to float32 than with bfloat16 weights: bfloat16 has an 8-bit
// mantissa (~0.4% per rounding), float16 11 bits. Measured: bf16 0.07-0.15%,
// fp16 0.01-0.02% of the largest logit; held to 1% and 0.2%.
TEST(KvCacheDecodeTest, SixteenBitCacheForFloat32WeightsIsCloseToFloat32) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    std::unique_ptr<Transformer> fp32 = LoadRandom(v.config, 13, at::kFloat, v.fused_qkv);
    ASSERT_NE(fp32, nullptr);
    const std::vector<int32_t> tokens = RandomTokens(16, v.config.vocab_size, 14);
    const at::Tensor ref = FullLogits(*fp32, tokens);
    const double scale = ref.abs().max().item<double>();
    for (auto [dtype, bound] : {std::pair<c10::ScalarType, double>{at::kBFloat16, 0.01},
                                {at::kHalf, 0.002}}) {
      KvCache cache = MakeCache(v.config, 12, 4, dtype);
      const at::Tensor got = IncrementalLogits(*fp32, &cache, tokens, 4);
      EXPECT_EQ(got.scalar_type(), at::kFloat);
      const double err = MaxAbsDiff(got, ref);
      std::printf("[ fp32 + %s cache ] %-20s max abs err %.3g (max |logit| %.3g)\n",
                  c10::toString(dtype), v.name.c_str(), err, scale);
      EXPECT_LE(err, bound * scale) << c10::toString(dtype);
      EXPECT_GT(err, 0.0) << "the cache must have rounded something";
    }
  }
}

// The weights and the cache in HugePageArena's 2 MiB pages (the default)
// or in ordinary allocations: the same values, so the same bits, through
// prefill and cached steps, for float32 and int8 weights and for q, k and v
// given fused or separately (separate ones are placed side by side and fused
// as a view: MultiHeadAttention).
TEST(KvCacheDecodeTest, HugePagesChangeNoBits) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    for (c10::ScalarType dtype : {at::kFloat, at::kChar}) {
      std::unique_ptr<Transformer> small = LoadRandom(v.config, 21, dtype, v.fused_qkv, false);
      std::unique_ptr<Transformer> huge = LoadRandom(v.config, 21, dtype, v.fused_qkv, true);
      ASSERT_NE(small, nullptr);
      ASSERT_NE(huge, nullptr);
      const std::vector<int32_t> tokens = RandomTokens(12, v.config.vocab_size, 22);
      KvCache small_cache = MakeCache(v.config, 12, 4, at::kFloat, false);
      KvCache huge_cache = MakeCache(v.config, 12, 4, at::kFloat, true);
      const at::Tensor a = IncrementalLogits(*small, &small_cache, tokens, 5);
      const at::Tensor b = IncrementalLogits(*huge, &huge_cache, tokens, 5);
      EXPECT_TRUE(at::equal(a, b)) << c10::toString(dtype) << ": max abs diff " << MaxAbsDiff(a, b);
    }
  }
}

// Forwards under LibTorch's inference mode (the default) and under autograd's
// dispatch (SetForwardInferenceMode(false)): only the operators' bookkeeping
// differs, so the same bits through prefill and cached steps (the decoder-only
// variants; DemoModelsTest.NumbersModelLogitsMatchPyTorch checks the
// encoder-decoder's MakeCrossCache). The logits come back as inference
// tensors; the cache the forwards write stays an ordinary tensor (a forward
// that replaced it with one of its own would fail this).
TEST(KvCacheDecodeTest, InferenceModeChangesNoBits) {
  // Inference mode back on whatever happens below (the other tests run with it).
  struct Restore {
    ~Restore() { SetForwardInferenceMode(true); }
  } restore;
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    for (c10::ScalarType dtype : {at::kFloat, at::kChar}) {
      std::unique_ptr<Transformer> model = LoadRandom(v.config, 23, dtype, v.fused_qkv, true);
      ASSERT_NE(model, nullptr);
      const std::vector<int32_t> tokens = RandomTokens(12, v.config.vocab_size, 24);
      KvCache plain_cache = MakeCache(v.config, 12, 4, at::kFloat, false);
      KvCache inference_cache = MakeCache(v.config, 12, 4, at::kFloat, false);
      SetForwardInferenceMode(false);
      const at::Tensor a = IncrementalLogits(*model, &plain_cache, tokens, 5);
      SetForwardInferenceMode(true);
      const at::Tensor b = IncrementalLogits(*model, &inference_cache, tokens, 5);
      EXPECT_TRUE(at::equal(a, b)) << c10::toString(dtype) << ": max abs diff " << MaxAbsDiff(a, b);
      SequenceChunk chunk;
      chunk.tokens = absl::MakeConstSpan(tokens).subspan(0, 1);
      EXPECT_TRUE(model->Decode({chunk}, nullptr, ForwardOptions()).logits.is_inference());
      EXPECT_FALSE(inference_cache.keys(0).is_inference());
    }
  }
}

// ---- KvBlockAllocator ------------------------------------------------------

TEST(KvBlockAllocatorTest, EnsureCapacityGrowsTablesAndFailsWithoutSideEffects) {
  KvBlockAllocator alloc(/*num_blocks=*/5, /*block_size=*/4);
  EXPECT_EQ(alloc.BlocksFor(0), 0);
  EXPECT_EQ(alloc.BlocksFor(1), 1);
  EXPECT_EQ(alloc.BlocksFor(4), 1);
  EXPECT_EQ(alloc.BlocksFor(5), 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(alloc.EnsureCapacity(&a, 9));  // 3 blocks
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(alloc.num_free(), 2);
  EXPECT_EQ(alloc.num_used(), 3);
  ASSERT_TRUE(alloc.EnsureCapacity(&a, 12));  // still 3
  EXPECT_EQ(a.size(), 3u);
  ASSERT_TRUE(alloc.EnsureCapacity(&b, 4));
  const std::vector<int32_t> a_before = a, b_before = b;
  EXPECT_FALSE(alloc.EnsureCapacity(&b, 13));  // needs 3 more, 1 free
  EXPECT_EQ(b, b_before);
  EXPECT_EQ(alloc.num_free(), 1);
  // Distinct blocks, each held once.
  std::vector<int32_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  for (int32_t block : all) EXPECT_EQ(alloc.ref_count(block), 1);
  alloc.Release(&a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(alloc.num_free(), 4);
  for (int32_t block : a_before) EXPECT_EQ(alloc.ref_count(block), 0);
  ASSERT_TRUE(alloc.EnsureCapacity(&b, 20));  // now fits: 4 more
  EXPECT_EQ(alloc.num_free(), 0);
  EXPECT_FALSE(alloc.EnsureCapacity(&a, 1));
  EXPECT_TRUE(a.empty());
  alloc.Release(&b);
  EXPECT_EQ(alloc.num_free(), alloc.num_blocks());
}

TEST(KvBlockAllocatorTest, RecentlyFreedBlocksAreReusedFirst) {
  KvBlockAllocator alloc(4, 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(alloc.EnsureCapacity(&a, 2));
  EXPECT_EQ(a, std::vector<int32_t>{0});
  ASSERT_TRUE(alloc.EnsureCapacity(&b, 2));
  const int32_t freed = a[0];
  alloc.Release(&a);
  ASSERT_TRUE(alloc.EnsureCapacity(&a, 2));
  EXPECT_EQ(a[0], freed);
}

// ---- KvCache::Create ---------------------------------------------------------

TEST(KvCacheCreateTest, SizesTheStorageFromTheBudget) {
  const ModelConfig config = LlamaConfig(0);  // 2 layers, 2 KV heads of 8
  EXPECT_EQ(KvCache::BytesPerToken(config, at::kFloat), 2 * 2 * 2 * 8 * 4);
  EXPECT_EQ(KvCache::BytesPerToken(config, at::kBFloat16), 2 * 2 * 2 * 8 * 2);
  const int64_t per_block = KvCache::BytesPerToken(config, at::kFloat) * 4;
  absl::StatusOr<KvCache> cache = KvCache::Create(config, per_block * 10 + per_block / 2, 4,
                                                  at::kFloat, c10::Device(c10::DeviceType::CPU));
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->allocator().num_blocks(), 10);
  EXPECT_EQ(cache->allocator().num_free(), 10);
  EXPECT_EQ(cache->block_size(), 4);
  EXPECT_EQ(cache->total_bytes(), per_block * 10);
  EXPECT_EQ(cache->keys(1).sizes(), (std::vector<int64_t>{40, 2, 8}));
  EXPECT_EQ(cache->values(0).scalar_type(), at::kFloat);
}

TEST(KvCacheCreateTest, BudgetErrorsSayWhatIsNeeded) {
  const ModelConfig config = GptConfig();  // max_positions 24
  const c10::Device cpu(c10::DeviceType::CPU);
  const int64_t per_block = KvCache::BytesPerToken(config, at::kFloat) * 4;
  // One full-context sequence needs 6 blocks; 5.9 blocks' worth is too little.
  absl::StatusOr<KvCache> small = KvCache::Create(config, per_block * 6 - 1, 4, at::kFloat, cpu);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(small.status().message()),
              AllOf(HasSubstr("budget"), HasSubstr("24 tokens"),
                    HasSubstr(absl::StrCat(per_block * 6, " bytes"))));
  EXPECT_TRUE(KvCache::Create(config, per_block * 6, 4, at::kFloat, cpu).ok());
  absl::StatusOr<KvCache> zero = KvCache::Create(config, 0, 4, at::kFloat, cpu);
  EXPECT_FALSE(zero.ok());
  absl::StatusOr<KvCache> bad_block = KvCache::Create(config, per_block * 100, 0, at::kFloat, cpu);
  ASSERT_FALSE(bad_block.ok());
  EXPECT_THAT(std::string(bad_block.status().message()), HasSubstr("block size"));
}

}  // namespace
}  // namespace dikkat::model
