// Sampler and SamplingParams::Validate. Expected values are computed here
// from the documented formulas in double precision, or by an independent,
// deliberately naive reference implementation (full sort) of the documented
// draw, never typed in.
#include "model/sampler.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/sampling_params.h"

namespace dikkat::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- helpers ----------------------------------------------------------------

std::vector<double> LogSoftmax(const std::vector<double>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0.0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> out;
  for (double v : x) out.push_back(v - m - std::log(s));
  return out;
}

std::vector<double> Softmax(const std::vector<double>& x) {
  std::vector<double> out = LogSoftmax(x);
  for (double& v : out) v = std::exp(v);
  return out;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> LogitsFromProbs(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

int32_t SampleId(Sampler& s, const std::vector<float>& logits) {
  absl::StatusOr<SampledToken> t = s.Sample(absl::MakeConstSpan(logits));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? t->token_id : -1;
}

std::set<int32_t> DrawnSet(const SamplingParams& params, const std::vector<float>& logits,
                           int draws) {
  Sampler s(params, 1234);
  std::set<int32_t> ids;
  for (int i = 0; i < draws; ++i) ids.insert(SampleId(s, logits));
  return ids;
}

std::vector<float> RandomLogits(size_t vocab, std::mt19937& gen, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(vocab);
  for (float& v : out) v = normal(gen);
  return out;
}

// ---- Validate ----------------------------------------------------------------

TEST(ValidateTest, AcceptsDefaultsAndBoundaries) {
  EXPECT_TRUE(Validate(SamplingParams{}).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.repetition_penalty = 0.01f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.top_logprobs = 20;
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
  p.top_p = 1e-6f;
  p.min_p = 0.0f;
  p.presence_penalty = 2.0f;
  p.frequency_penalty = -2.0f;
  p.top_logprobs = 0;
  p.repetition_penalty = 100.0f;
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
}

struct BadParam {
  std::string field;
  std::function<void(SamplingParams&)> set;
};

TEST(ValidateTest, RejectsEachBadFieldNamingIt) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadParam> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [=](SamplingParams& p) { p.temperature = nan; }},
      {"temperature", [=](SamplingParams& p) { p.temperature = inf; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_p", [=](SamplingParams& p) { p.top_p = nan; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"min_p", [=](SamplingParams& p) { p.min_p = nan; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = -1.0f; }},
      {"repetition_penalty", [=](SamplingParams& p) { p.repetition_penalty = inf; }},
      // Tiny or huge penalties push logits to +-inf (issue "Hardening II").
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 1e-40f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0099f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 100.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -2.01f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 3.0f; }},
      {"frequency_penalty", [=](SamplingParams& p) { p.frequency_penalty = nan; }},
      {"top_logprobs", [](SamplingParams& p) { p.top_logprobs = -1; }},
      {"top_logprobs", [](SamplingParams& p) { p.top_logprobs = 21; }},
  };
  for (const BadParam& c : cases) {
    SamplingParams p;
    c.set(p);
    const absl::Status s = Validate(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field));
  }
}

TEST(ValidateTest, MessageHasValueAndRange) {
  SamplingParams p;
  p.top_p = 1.5f;
  const std::string msg(Validate(p).message());
  EXPECT_THAT(msg, HasSubstr("top_p"));
  EXPECT_THAT(msg, HasSubstr("1.5"));
  EXPECT_THAT(msg, HasSubstr("(0, 1]"));
}

// ---- greedy ------------------------------------------------------------------

TEST(SamplerTest, GreedyIsArgmaxWithLogSoftmaxLogprob) {
  std::mt19937 gen(7);
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_logprobs = 5;
  Sampler s(params, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = RandomLogits(50000, gen, 2.0f);
    const int32_t expected =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    absl::StatusOr<SampledToken> t = s.Sample(absl::MakeConstSpan(logits));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->token_id, expected);
    const std::vector<double> lsm = LogSoftmax(std::vector<double>(logits.begin(), logits.end()));
    EXPECT_NEAR(t->logprob, lsm[expected], 1e-4);
    ASSERT_EQ(t->top.size(), 5u);
    EXPECT_EQ(t->top[0].token_id, expected);
    for (size_t i = 0; i < t->top.size(); ++i) {
      EXPECT_NEAR(t->top[i].logprob, lsm[t->top[i].token_id], 1e-4);
      if (i > 0) {
        EXPECT_GE(t->top[i - 1].logprob, t->top[i].logprob);
      }
    }
  }
}

TEST(SamplerTest, GreedyTiesGoToLowestIdAndAlternativesTooI) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_logprobs = 4;
  Sampler s(params, 1);
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 3.0f};
  absl::StatusOr<SampledToken> t = s.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token_id, 1);
  std::vector<int32_t> top_ids;
  for (const TokenLogprob& tl : t->top) top_ids.push_back(tl.token_id);
  EXPECT_THAT(top_ids, ElementsAre(1, 3, 5, 2));
}

// ---- seeds ---------------------------------------------------------------------

std::vector<int32_t> Generate(const SamplingParams& params, uint64_t seed, int steps) {
  // Logits depend on the history, as a model's would.
  Sampler s(params, seed);
  std::vector<int32_t> out;
  std::mt19937 gen(99);
  for (int i = 0; i < steps; ++i) {
    std::vector<float> logits = RandomLogits(1000, gen, 1.0f);
    if (!out.empty()) logits[(out.back() * 7) % 1000] += 3.0f;
    const int32_t id = SampleId(s, logits);
    s.Observe(id);
    out.push_back(id);
  }
  return out;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.95f;
  params.frequency_penalty = 0.5f;
  const std::vector<int32_t> a = Generate(params, 42, 200);
  EXPECT_EQ(a, Generate(params, 42, 200));
  EXPECT_NE(a, Generate(params, 43, 200));

  // A flat distribution: only the seed decides.
  const std::vector<float> flat(1000, 0.0f);
  Sampler s1(SamplingParams{}, 1), s2(SamplingParams{}, 2), s1b(SamplingParams{}, 1);
  std::vector<int32_t> x1, x2, x1b;
  for (int i = 0; i < 50; ++i) {
    x1.push_back(SampleId(s1, flat));
    x2.push_back(SampleId(s2, flat));
    x1b.push_back(SampleId(s1b, flat));
  }
  EXPECT_EQ(x1, x1b);
  EXPECT_NE(x1, x2);
  // 50 uniform draws over 1000 ids are not all the same id.
  EXPECT_GT(std::set<int32_t>(x1.begin(), x1.end()).size(), 30u);
}

TEST(SamplerTest, ParamsSeedOverridesEngineSeed) {
  SamplingParams params;
  params.seed = 5;
  Sampler a(params, 1), b(params, 2);
  EXPECT_EQ(a.seed(), 5u);
  EXPECT_EQ(Sampler(SamplingParams{}, 9).seed(), 9u);
  const std::vector<float> flat(1000, 0.0f);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(SampleId(a, flat), SampleId(b, flat));
}

// ---- filters -------------------------------------------------------------------

TEST(SamplerTest, TopKKeepsExactlyKBestWithLowestIdsAtTies) {
  // Ranks: 1 and 3 (logit 3), then 2, 5, 7 tie at logit 2.5; k = 3 keeps id 2.
  const std::vector<float> logits = {1.0f, 3.0f, 2.5f, 3.0f, 0.0f, 2.5f, -1.0f, 2.5f};
  SamplingParams params;
  params.top_k = 3;
  EXPECT_EQ(DrawnSet(params, logits, 3000), (std::set<int32_t>{1, 2, 3}));
  params.top_k = 4;
  EXPECT_EQ(DrawnSet(params, logits, 3000), (std::set<int32_t>{1, 2, 3, 5}));
  params.top_k = 1;
  EXPECT_EQ(DrawnSet(params, logits, 100), (std::set<int32_t>{1}));
  params.top_k = 100;  // more than the vocab: everything
  EXPECT_EQ(DrawnSet(params, logits, 20000).size(), 8u);
}

TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  // ids permuted so that order != id order: p(3)=.5 p(0)=.3 p(2)=.15 p(1)=.05
  const std::vector<float> logits = LogitsFromProbs({0.3, 0.05, 0.15, 0.5});
  SamplingParams params;
  params.top_p = 0.8f;  // .5 + .3 reaches it exactly
  EXPECT_EQ(DrawnSet(params, logits, 3000), (std::set<int32_t>{0, 3}));
  params.top_p = 0.81f;
  EXPECT_EQ(DrawnSet(params, logits, 3000), (std::set<int32_t>{0, 2, 3}));
  params.top_p = 0.5f;
  EXPECT_EQ(DrawnSet(params, logits, 300), (std::set<int32_t>{3}));
  params.top_p = 0.01f;  // never empty
  EXPECT_EQ(DrawnSet(params, logits, 300), (std::set<int32_t>{3}));
  params.top_p = 0.96f;
  EXPECT_EQ(DrawnSet(params, logits, 5000), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(SamplerTest, TopPIsRelativeToTopKSurvivors) {
  // top_k 2 leaves .4/.3 -> renormalized .571/.429; top_p .5 then keeps only
  // the first (it would keep two if top_p saw the unrenormalized .4).
  const std::vector<float> logits = LogitsFromProbs({0.4, 0.3, 0.2, 0.1});
  SamplingParams params;
  params.top_k = 2;
  params.top_p = 0.5f;
  EXPECT_EQ(DrawnSet(params, logits, 1000), (std::set<int32_t>{0}));
  params.top_k = 0;
  EXPECT_EQ(DrawnSet(params, logits, 3000), (std::set<int32_t>{0, 1}));
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  const std::vector<float> logits = LogitsFromProbs({0.1, 0.4, 0.2, 0.3});
  SamplingParams params;
  params.min_p = 0.6f;  // threshold .24
  EXPECT_EQ(DrawnSet(params, logits, 3000), (std::set<int32_t>{1, 3}));
  params.min_p = 0.45f;  // threshold .18
  EXPECT_EQ(DrawnSet(params, logits, 3000), (std::set<int32_t>{1, 2, 3}));
  params.min_p = 1.0f;  // only the max
  EXPECT_EQ(DrawnSet(params, logits, 300), (std::set<int32_t>{1}));
}

TEST(SamplerTest, MaskedTokensAreNeverDrawn) {
  std::vector<float> logits(100, kNegInf);
  logits[17] = 0.0f;
  logits[64] = 0.0f;
  EXPECT_EQ(DrawnSet(SamplingParams{}, logits, 500), (std::set<int32_t>{17, 64}));
  SamplingParams params;
  params.top_k = 10;  // k larger than the finite tokens
  EXPECT_EQ(DrawnSet(params, logits, 500), (std::set<int32_t>{17, 64}));
}

// ---- distribution ----------------------------------------------------------------

void ExpectFrequenciesMatch(const SamplingParams& params, const std::vector<float>& logits,
                            const std::vector<double>& expected_probs) {
  constexpr int kDraws = 20000;
  Sampler s(params, 2024);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[SampleId(s, logits)];
  for (size_t id = 0; id < logits.size(); ++id) {
    const double p = expected_probs[id];
    const double mean = kDraws * p;
    const double sigma = std::sqrt(kDraws * p * (1 - p));
    if (p == 0.0) {
      EXPECT_EQ(counts[id], 0) << "id " << id;
    } else {
      EXPECT_NEAR(counts[id], mean, 4 * sigma + 1) << "id " << id << " p " << p;
    }
  }
}

TEST(SamplerTest, TemperatureFrequenciesMatchSoftmax) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 1.2f, 0.0f, -0.3f, 1.9f, -2.5f};
  for (float temperature : {1.0f, 0.7f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    std::vector<double> scaled;
    for (float v : logits) scaled.push_back(static_cast<double>(v) / temperature);
    SCOPED_TRACE(temperature);
    ExpectFrequenciesMatch(params, logits, Softmax(scaled));
  }
}

TEST(SamplerTest, TopKFrequenciesMatchRenormalizedSoftmax) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 1.2f, 0.0f, -0.3f, 1.9f, -2.5f};
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 3;  // ids 2, 6, 3
  std::vector<double> top3;
  for (int id : {2, 6, 3}) top3.push_back(logits[id] / 0.8);
  const std::vector<double> p3 = Softmax(top3);
  std::vector<double> expected(logits.size(), 0.0);
  expected[2] = p3[0];
  expected[6] = p3[1];
  expected[3] = p3[2];
  ExpectFrequenciesMatch(params, logits, expected);
}

// ---- penalties and logprobs ------------------------------------------------------

// The documented formula, in double.
std::vector<double> Penalize(const std::vector<float>& logits, const std::map<int, int>& counts,
                             double rep, double presence, double frequency) {
  std::vector<double> out(logits.begin(), logits.end());
  for (const auto& [id, c] : counts) {
    double& v = out[id];
    v = v > 0 ? v / rep : v * rep;
    v -= presence;
    v -= frequency * c;
  }
  return out;
}

TEST(SamplerTest, PenaltiesFollowTheDocumentedFormula) {
  const std::vector<float> logits = {2.0f, 1.5f, -0.5f, 0.3f, -1.2f, 0.9f};
  const std::vector<int32_t> history = {1, 4, 1, 2, 4, 1};  // 1 x3, 4 x2, 2 x1
  const std::map<int, int> counts = {{1, 3}, {4, 2}, {2, 1}};
  struct Case {
    float rep, presence, frequency, temperature;
  };
  for (const Case& c :
       {Case{1.3f, 0.0f, 0.0f, 1.0f}, Case{1.0f, 0.7f, 0.0f, 1.0f}, Case{1.0f, 0.0f, 0.4f, 1.0f},
        Case{1.5f, -0.5f, 0.25f, 0.6f}, Case{0.7f, 1.0f, -0.3f, 0.0f}}) {
    SCOPED_TRACE(testing::Message() << "rep " << c.rep << " presence " << c.presence
                                    << " frequency " << c.frequency << " T " << c.temperature);
    SamplingParams params;
    params.repetition_penalty = c.rep;
    params.presence_penalty = c.presence;
    params.frequency_penalty = c.frequency;
    params.temperature = c.temperature;
    params.top_logprobs = 6;
    ASSERT_TRUE(Validate(params).ok());
    Sampler s(params, 3);
    s.ObserveAll(history);
    absl::StatusOr<SampledToken> t = s.Sample(absl::MakeConstSpan(logits));
    ASSERT_TRUE(t.ok()) << t.status();

    std::vector<double> expected = Penalize(logits, counts, c.rep, c.presence, c.frequency);
    const double temperature = c.temperature == 0.0f ? 1.0 : c.temperature;
    for (double& v : expected) v /= temperature;
    const std::vector<double> lsm = LogSoftmax(expected);
    ASSERT_EQ(t->top.size(), 6u);
    for (const TokenLogprob& tl : t->top) {
      EXPECT_NEAR(tl.logprob, lsm[tl.token_id], 1e-5) << "id " << tl.token_id;
    }
    EXPECT_NEAR(t->logprob, lsm[t->token_id], 1e-5);
    if (c.temperature == 0.0f) {
      EXPECT_EQ(t->token_id, std::max_element(lsm.begin(), lsm.end()) - lsm.begin());
    }
  }
}

// As vLLM and OpenAI: the prompt's tokens count for the repetition penalty
// only; presence and frequency count what was generated.
TEST(SamplerTest, PromptTokensCountForRepetitionOnly) {
  const std::vector<float> logits = {1.0f, 0.5f};
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_logprobs = 2;
  params.frequency_penalty = 2.0f;
  params.presence_penalty = 1.0f;
  Sampler prompt_only(params, 1);
  prompt_only.ObservePrompt({0, 0, 0});
  absl::StatusOr<SampledToken> t = prompt_only.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token_id, 0);  // not 1 - 6 - 1 < 0.5
  EXPECT_NEAR(t->top[0].logprob - t->top[1].logprob, 0.5, 1e-5);
  // Generated once: presence once, frequency once.
  prompt_only.Observe(0);
  t = prompt_only.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token_id, 1);
  EXPECT_NEAR(t->top[0].logprob - t->top[1].logprob, 0.5 - (1.0 - 1.0 - 2.0), 1e-5);

  // Repetition reads the prompt too (Hugging Face's and vLLM's rule).
  SamplingParams rep;
  rep.temperature = 0.0f;
  rep.top_logprobs = 2;
  rep.repetition_penalty = 4.0f;
  Sampler repeated(rep, 1);
  repeated.ObservePrompt({0});
  t = repeated.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token_id, 1);  // 1.0 / 4 < 0.5
  EXPECT_NEAR(t->top[0].logprob - t->top[1].logprob, 0.5 - 0.25, 1e-5);
  // Seen in the prompt and generated: the repetition penalty once.
  repeated.Observe(0);
  t = repeated.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(t->top[0].logprob - t->top[1].logprob, 0.5 - 0.25, 1e-5);
}

TEST(SamplerTest, FrequencyPenaltyScalesWithCountPresenceDoesNot) {
  // Tokens 0..4 share one logit; token i is seen i times.
  const std::vector<float> logits(5, 0.5f);
  std::vector<int32_t> history;
  for (int32_t id = 0; id < 5; ++id) history.insert(history.end(), id, id);

  SamplingParams params;
  params.temperature = 0.0f;
  params.top_logprobs = 5;
  params.frequency_penalty = 0.3f;
  Sampler freq(params, 1);
  freq.ObserveAll(history);
  absl::StatusOr<SampledToken> t = freq.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok());
  std::map<int32_t, float> lp;
  for (const TokenLogprob& tl : t->top) lp[tl.token_id] = tl.logprob;
  EXPECT_EQ(t->token_id, 0);  // the only unseen one
  for (int32_t id = 1; id < 5; ++id) EXPECT_NEAR(lp[0] - lp[id], 0.3 * id, 1e-5) << id;

  params.frequency_penalty = 0.0f;
  params.presence_penalty = 0.3f;
  Sampler presence(params, 1);
  presence.ObserveAll(history);
  t = presence.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok());
  lp.clear();
  for (const TokenLogprob& tl : t->top) lp[tl.token_id] = tl.logprob;
  for (int32_t id = 1; id < 5; ++id) EXPECT_NEAR(lp[0] - lp[id], 0.3, 1e-5) << id;
}

TEST(SamplerTest, RepetitionPenaltyCanChangeTheGreedyChoice) {
  const std::vector<float> logits = {2.0f, 1.8f, -3.0f};
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 1.2f;  // 2.0 / 1.2 = 1.67 < 1.8
  Sampler s(params, 1);
  EXPECT_EQ(SampleId(s, logits), 0);
  s.Observe(0);
  EXPECT_EQ(SampleId(s, logits), 1);
  s.Observe(7);  // out of the vocab: ignored, not a crash
  s.Observe(-1);
  EXPECT_EQ(SampleId(s, logits), 1);
}

// ---- logit bias ------------------------------------------------------------------

TEST(ValidateTest, LogitBiasIsBoundedAndUnique) {
  SamplingParams p;
  p.logit_bias = {{0, -100.0f}, {5, 100.0f}, {9, 0.5f}};
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
  for (int32_t id = 0; id < kMaxLogitBiasEntries; ++id) p.logit_bias.push_back({id + 10, 1.0f});
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("303 entries; at most 300"));
  p.logit_bias = {{3, 100.5f}};
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("logit_bias[3] = 100.5"));
  p.logit_bias = {{3, std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("logit_bias[3]"));
  p.logit_bias = {{-2, 1.0f}};
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("token id -2"));
  p.logit_bias = {{8, 1.0f}, {3, 1.0f}, {8, -1.0f}};
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("token id 8 is listed twice"));
}

TEST(SamplerTest, LogitBiasBansAndForcesUnderGreedyAndLogprobsIgnoreIt) {
  const std::vector<float> logits = {1.0f, 5.0f, 2.0f, -1.0f};
  const std::vector<double> lsm = LogSoftmax(std::vector<double>(logits.begin(), logits.end()));
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_logprobs = 2;
  params.logit_bias = {{1, -100.0f}};  // bans the argmax
  Sampler banned(params, 1);
  absl::StatusOr<SampledToken> t = banned.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->token_id, 2);
  // The reported distribution is the model's: token 2's own logprob, and
  // the banned token still the most likely alternative.
  EXPECT_NEAR(t->logprob, lsm[2], 1e-5);
  ASSERT_EQ(t->top.size(), 2u);
  EXPECT_EQ(t->top[0].token_id, 1);
  EXPECT_NEAR(t->top[0].logprob, lsm[1], 1e-5);
  EXPECT_EQ(t->top[1].token_id, 2);

  params.top_logprobs = 0;
  params.logit_bias = {{3, 100.0f}};  // forces the least likely
  Sampler forced(params, 1);
  t = forced.Sample(absl::MakeConstSpan(logits));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->token_id, 3);
  EXPECT_NEAR(t->logprob, lsm[3], 1e-5);
  EXPECT_TRUE(t->top.empty());

  params.logit_bias = {{4, 100.0f}};  // outside the vocab: ignored
  Sampler outside(params, 1);
  EXPECT_EQ(SampleId(outside, logits), 1);
  // A masked token stays masked.
  params.logit_bias = {{0, 100.0f}};
  Sampler masked(params, 1);
  EXPECT_EQ(SampleId(masked, {kNegInf, 5.0f, 2.0f, -1.0f}), 1);
}

TEST(SamplerTest, LogitBiasComesBeforeThePenalties) {
  // Token 0 (logit 1, seen once) biased by +3: (1 + 3) / 2 = 2 < 2.5 with the
  // bias first (documented); 1 / 2 + 3 = 3.5 > 2.5 were it added after.
  const std::vector<float> logits = {1.0f, 2.5f};
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  params.logit_bias = {{0, 3.0f}};
  Sampler s(params, 1);
  s.Observe(0);
  EXPECT_EQ(SampleId(s, logits), 1);
  params.repetition_penalty = 1.0f;
  Sampler unpenalized(params, 1);
  unpenalized.Observe(0);
  EXPECT_EQ(SampleId(unpenalized, logits), 0);  // 1 + 3 = 4 > 2.5
}

TEST(SamplerTest, LogitBiasShiftsSampledFrequencies) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 1.2f, 0.0f, -0.3f, 1.9f, -2.5f};
  SamplingParams params;
  params.temperature = 0.7f;
  params.logit_bias = {{2, -100.0f}, {7, 3.0f}, {1, 0.5f}};
  std::vector<double> biased(logits.begin(), logits.end());
  for (const LogitBias& b : params.logit_bias) biased[b.token_id] += b.bias;
  for (double& v : biased) v /= 0.7;
  ExpectFrequenciesMatch(params, logits, Softmax(biased));
  // Token 2, the most likely, is never drawn; reported logprobs are the
  // unbiased distribution's.
  params.top_logprobs = 1;
  Sampler s(params, 99);
  std::vector<double> scaled;
  for (float v : logits) scaled.push_back(v / 0.7);
  const std::vector<double> lsm = LogSoftmax(scaled);
  for (int i = 0; i < 500; ++i) {
    absl::StatusOr<SampledToken> t = s.Sample(absl::MakeConstSpan(logits));
    ASSERT_TRUE(t.ok());
    ASSERT_NE(t->token_id, 2);
    EXPECT_NEAR(t->logprob, lsm[t->token_id], 1e-5);
    EXPECT_EQ(t->top[0].token_id, 2);
  }
}

TEST(SamplerTest, ChosenLogprobIsBeforeFiltering) {
  std::mt19937 gen(11);
  const std::vector<float> logits = RandomLogits(1000, gen, 2.0f);
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 50;
  params.top_p = 0.9f;
  params.top_logprobs = 20;
  std::vector<double> scaled;
  for (float v : logits) scaled.push_back(v / 0.8);
  const std::vector<double> lsm = LogSoftmax(scaled);
  std::vector<int32_t> by_prob(logits.size());
  std::iota(by_prob.begin(), by_prob.end(), 0);
  std::stable_sort(by_prob.begin(), by_prob.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  Sampler s(params, 8);
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<SampledToken> t = s.Sample(absl::MakeConstSpan(logits));
    ASSERT_TRUE(t.ok());
    EXPECT_NEAR(t->logprob, lsm[t->token_id], 1e-4);
    ASSERT_EQ(t->top.size(), 20u);
    for (size_t r = 0; r < 20; ++r) {
      EXPECT_EQ(t->top[r].token_id, by_prob[r]);
      EXPECT_NEAR(t->top[r].logprob, lsm[by_prob[r]], 1e-4);
    }
  }
}

// ---- a naive reference of the documented draw, on a 50k vocab ----------------------

int32_t ReferenceDraw(const SamplingParams& params, const std::vector<float>& logits,
                      std::mt19937_64& rng) {
  std::vector<double> scaled;
  for (float v : logits) scaled.push_back(static_cast<double>(v) / params.temperature);
  std::vector<double> p = Softmax(scaled);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < order.size()) {
    order.resize(params.top_k);
  }
  double mass = 0.0;
  for (int32_t id : order) mass += p[id];
  if (params.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < order.size()) {
      cum += p[order[n++]] / mass;
      if (cum >= params.top_p - 1e-6) break;
    }
    order.resize(n);
  }
  const double p_max = p[order[0]];
  order.erase(std::remove_if(order.begin(), order.end(),
                             [&](int32_t id) { return p[id] < params.min_p * p_max; }),
              order.end());
  mass = 0.0;
  for (int32_t id : order) mass += p[id];
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  double cum = 0.0;
  for (int32_t id : order) {
    cum += p[id];
    if (cum > u * mass) return id;
  }
  return order.back();
}

TEST(SamplerTest, MatchesNaiveReferenceOnLargeVocab) {
  constexpr size_t kVocab = 50257;
  constexpr int kSteps = 60;
  std::vector<SamplingParams> cases(6);
  cases[1].temperature = 0.8f, cases[1].top_k = 40;
  cases[2].top_p = 0.9f;
  cases[3].min_p = 0.05f;
  cases[4].temperature = 1.3f, cases[4].top_k = 2000, cases[4].top_p = 0.95f,
  cases[4].min_p = 0.001f;
  cases[5].temperature = 0.5f, cases[5].top_p = 0.999f;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(c);
    std::mt19937 gen(static_cast<unsigned>(c));
    std::mt19937_64 ref_rng(77);
    Sampler s(cases[c], 77);
    int mismatches = 0;
    std::set<int32_t> distinct;
    for (int step = 0; step < kSteps; ++step) {
      // Scale 3 gives a peaked LM-like distribution; every 4th step is flat-ish.
      const std::vector<float> logits = RandomLogits(kVocab, gen, step % 4 == 0 ? 0.5f : 3.0f);
      const int32_t got = SampleId(s, logits);
      mismatches += got != ReferenceDraw(cases[c], logits, ref_rng);
      distinct.insert(got);
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(distinct.size(), kSteps / 2u);  // the draws really vary
  }
}

// The same on logits with many ties (rounded to steps of 0.25, all equal, or
// half of them masked): the rank crossing must then be found among tokens
// that differ only in their ids, lower ids first.
TEST(SamplerTest, MatchesNaiveReferenceWithManyTies) {
  constexpr size_t kVocab = 50257;
  constexpr int kSteps = 24;
  std::vector<SamplingParams> cases(4);
  cases[1].top_p = 0.9f;
  cases[2].temperature = 0.7f, cases[2].top_k = 2000;
  cases[3].min_p = 0.2f;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(c);
    std::mt19937 gen(static_cast<unsigned>(100 + c));
    std::mt19937_64 ref_rng(5);
    Sampler s(cases[c], 5);
    int mismatches = 0;
    std::set<int32_t> distinct;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> logits = RandomLogits(kVocab, gen, 2.0f);
      for (size_t i = 0; i < kVocab; ++i) {
        if (step % 3 == 0) {
          logits[i] = std::round(logits[i] * 4.0f) / 4.0f;
        } else if (step % 3 == 1) {
          logits[i] = 1.5f;
        } else if (i % 2 == 1) {
          logits[i] = -std::numeric_limits<float>::infinity();
        }
      }
      const int32_t got = SampleId(s, logits);
      mismatches += got != ReferenceDraw(cases[c], logits, ref_rng);
      if (step % 3 == 2) EXPECT_EQ(got % 2, 0);  // a masked token never
      distinct.insert(got);
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(distinct.size(), kSteps / 2u);
  }
}

// ---- tensors and errors ---------------------------------------------------------------

at::Tensor FloatTensor(std::vector<float>& values, std::vector<int64_t> shape) {
  return at::from_blob(values.data(), shape, at::kFloat);
}

TEST(SamplerTensorTest, AcceptsBf16AndMatchesFloat) {
  std::mt19937 gen(5);
  std::vector<float> values = RandomLogits(3000, gen, 2.0f);
  const at::Tensor bf16 = FloatTensor(values, {3000}).to(at::kBFloat16);
  const at::Tensor rounded = bf16.to(at::kFloat).contiguous();
  const std::vector<float> rounded_values(rounded.data_ptr<float>(),
                                          rounded.data_ptr<float>() + 3000);
  SamplingParams params;
  params.top_k = 100;
  params.top_logprobs = 3;
  Sampler a(params, 10), b(params, 10);
  for (int i = 0; i < 30; ++i) {
    absl::StatusOr<SampledToken> ta = a.Sample(bf16);
    absl::StatusOr<SampledToken> tb = b.Sample(absl::MakeConstSpan(rounded_values));
    ASSERT_TRUE(ta.ok()) << ta.status();
    ASSERT_TRUE(tb.ok());
    EXPECT_EQ(ta->token_id, tb->token_id);
    EXPECT_EQ(ta->logprob, tb->logprob);
  }
  // A non-contiguous float view works too.
  std::vector<float> wide(6000);
  for (size_t i = 0; i < 3000; ++i) wide[2 * i] = values[i];
  const at::Tensor strided = FloatTensor(wide, {3000, 2}).select(1, 0);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Sampler g(greedy, 0);
  absl::StatusOr<SampledToken> t = g.Sample(strided);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->token_id, std::max_element(values.begin(), values.end()) - values.begin());
}

TEST(SamplerTensorTest, RejectsBadTensorsAndValues) {
  Sampler s(SamplingParams{}, 0);
  std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  absl::StatusOr<SampledToken> t = s.Sample(FloatTensor(values, {2, 2}));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("[2, 2]"));
  t = s.Sample(FloatTensor(values, {4}).to(at::kLong));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("Long"));
  t = s.Sample(at::Tensor());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  t = s.Sample(absl::Span<const float>());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);

  values[2] = std::numeric_limits<float>::quiet_NaN();
  t = s.Sample(absl::MakeConstSpan(values));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("logits[2]"));
  values[2] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(s.Sample(absl::MakeConstSpan(values)).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> masked(4, kNegInf);
  t = s.Sample(absl::MakeConstSpan(masked));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("-inf"));
}

}  // namespace
}  // namespace dikkat::model
