// Prefix caching through the engine (tiny-lm, byte tokenizer): the same
// requests on an engine with caching and one without give the same greedy
// tokens and the same log-probabilities, whatever the prompts share (nothing,
// part of a block, whole blocks, the entire prompt), with preemptions in the
// middle and with cached blocks evicted between requests.
//
// Tolerance: tokens are equal exactly; log-probabilities within 1e-4 absolute.
// With caching, the uncached rest of a prompt runs as a shorter prefill chunk
// than without, and the kernels may route a different row count through a
// different summation order (model/cpu_kernels.h), so bit equality is not a
// property of the math. The differences seen are below 1e-6 (AMD EPYC Zen 3,
// avx2 kernels); 1e-4 leaves room for other ISAs and still catches a wrong
// block (which changes log-probabilities by far more, or the tokens).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sync.h"
#include "server/engine.h"
#include "tests/server/generate_collector.h"

namespace dikkat::server {
namespace {

constexpr float kLogprobTolerance = 1e-4f;

std::vector<int32_t> Ids(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);  // byte tokenizer: id == byte
  return ids;
}

GenerateRequest Greedy(std::vector<int32_t> prompt, int max_new) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  return r;
}

std::unique_ptr<Engine> Make(bool prefix_caching, int64_t kv_cache_bytes = 8 << 20) {
  EngineOptions options;
  options.prefix_caching = prefix_caching;
  options.kv_cache_bytes = kv_cache_bytes;
  auto engine = Engine::Create("tiny-lm", std::string(DIKKAT_BINARY_DIR) + "/models/tiny-lm",
                               options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

std::shared_ptr<GenerateCollector> Start(Engine& engine, const GenerateRequest& request) {
  auto s = std::make_shared<GenerateCollector>();
  EXPECT_TRUE(engine.SubmitGenerate(request, s).ok());
  return s;
}

std::shared_ptr<GenerateCollector> RunToEnd(Engine& engine, const GenerateRequest& request) {
  auto s = Start(engine, request);
  EXPECT_TRUE(s->Wait());
  return s;
}

void ExpectSameOutput(GenerateCollector& cached, GenerateCollector& plain, const std::string& what) {
  const std::vector<GeneratedToken> a = cached.tokens(), b = plain.tokens();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token_id, b[i].token_id) << what << ", token " << i;
    EXPECT_NEAR(a[i].logprob, b[i].logprob, kLogprobTolerance) << what << ", token " << i;
  }
  EXPECT_EQ(cached.summary().reason, plain.summary().reason) << what;
}

void WaitIdle(Engine& engine) {
  for (int i = 0; i < 500; ++i) {
    const EngineStats s = engine.stats();
    if (s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// 45 bytes: two full blocks of 16 and 13 tokens of a third.
const std::string kPrefix = "The quick brown fox jumps over the lazy dog. ";

TEST(PrefixCacheTest, OutputsEqualWithAndWithoutCachingWhateverIsShared) {
  auto cached = Make(true);
  auto plain = Make(false);
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(plain, nullptr);
  ASSERT_EQ(kPrefix.size(), 45u);
  struct Case {
    std::string what;
    std::vector<int32_t> prompt;
    int32_t cached_tokens;  // expected on the caching engine, in this order
  };
  std::vector<Case> cases = {
      {"first request", Ids(kPrefix + "first"), 0},  // 50 tokens + 20 generated: 4 full blocks
      {"shares nothing", Ids("Z" + kPrefix.substr(1) + "first"), 0},
      {"shares part of a block", Ids(kPrefix.substr(0, 8) + "--------unrelated"), 0},
      {"shares whole blocks", Ids(kPrefix.substr(0, 32) + "and something else"), 32},
      // 50 tokens: the block holding the 50th runs again, 3 blocks are mapped.
      {"shares the entire prompt", Ids(kPrefix + "first"), 48},
      // The first request's generated tokens were cached too (filled below).
      {"extends a generation", {}, 64},
      // A prompt of exactly 4 blocks, all cached: the last block runs again.
      {"a whole-block prompt, all cached", {}, 48},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto a = RunToEnd(*cached, Greedy(cases[i].prompt, 20));
    auto b = RunToEnd(*plain, Greedy(cases[i].prompt, 20));
    ExpectSameOutput(*a, *b, cases[i].what);
    EXPECT_EQ(a->summary().cached_prompt_tokens, cases[i].cached_tokens) << cases[i].what;
    EXPECT_EQ(b->summary().cached_prompt_tokens, 0) << cases[i].what;
    if (i == 0) {
      std::vector<int32_t> all = cases[0].prompt;
      for (const GeneratedToken& t : a->tokens()) all.push_back(t.token_id);
      ASSERT_EQ(all.size(), 70u);
      cases[5].prompt.assign(all.begin(), all.begin() + 66);
      cases[6].prompt.assign(all.begin(), all.begin() + 64);
    }
  }
  WaitIdle(*cached);
  const EngineStats s = cached->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.kv_blocks_cached, 0);
  EXPECT_EQ(s.prefix_cache_hit_tokens, 32 + 48 + 64 + 48);
  EXPECT_EQ(plain->stats().kv_blocks_cached, 0);
  EXPECT_EQ(plain->stats().prefix_cache_hit_tokens, 0);
}

TEST(PrefixCacheTest, ConcurrentSharersWithPreemptionMatchPlainRuns) {
  // 32 blocks of 16 tokens (tiny-lm: 1 KiB per token; the least that holds
  // one 512-token sequence); 12 streams of ~85 tokens need ~6 blocks each,
  // 2 of them shared: preemption all the time.
  auto cached = Make(true, 32 * 16 * 1024);
  auto plain = Make(false);
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(plain, nullptr);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    requests.push_back(
        Greedy(Ids(kPrefix + std::string(1 + i % 5, static_cast<char>('a' + i))), 36));
  }
  std::vector<std::shared_ptr<GenerateCollector>> alone;
  for (const auto& r : requests) alone.push_back(RunToEnd(*plain, r));
  std::vector<std::shared_ptr<GenerateCollector>> together;
  for (const auto& r : requests) together.push_back(Start(*cached, r));
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(together[i]->Wait());
    ExpectSameOutput(*together[i], *alone[i], "stream " + std::to_string(i));
  }
  WaitIdle(*cached);
  const EngineStats s = cached->stats();
  EXPECT_GT(s.preemptions, 0);
  EXPECT_GT(s.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_LE(s.kv_blocks_cached, s.kv_blocks_total);
}

TEST(PrefixCacheTest, EvictedBlocksAreRecomputedCorrectly) {
  auto cached = Make(true, 32 * 16 * 1024);  // 32 blocks
  auto plain = Make(false);
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(plain, nullptr);
  const GenerateRequest a = Greedy(Ids(kPrefix + "evict me"), 10);  // 53 + 10: 3 full blocks
  auto first = RunToEnd(*cached, a);
  EXPECT_EQ(first->summary().cached_prompt_tokens, 0);
  auto again = RunToEnd(*cached, a);
  EXPECT_EQ(again->summary().cached_prompt_tokens, 48);
  // Unrelated requests fill the cache: each needs 14 of the 32 blocks and
  // leaves 13 cached, so the third evicts the least recently released (a's).
  for (int i = 0; i < 3; ++i) {
    RunToEnd(*cached, Greedy(Ids(std::string(200, static_cast<char>('k' + i))), 10));
  }
  auto after = RunToEnd(*cached, a);
  EXPECT_EQ(after->summary().cached_prompt_tokens, 0);
  auto reference = RunToEnd(*plain, a);
  ExpectSameOutput(*first, *reference, "before eviction");
  ExpectSameOutput(*again, *reference, "from the cache");
  ExpectSameOutput(*after, *reference, "after eviction");
  WaitIdle(*cached);
  EXPECT_EQ(cached->stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace dikkat::server
