// Sampler::Sample on a GPT-2-sized vocab (50257), per parameter set, next to
// the cost of one full sort of the same logits (what a naive sampler pays).
// Timings on this machine are noisy: read the ratios within one run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "model/sampler.h"
#include "model/sampling_params.h"

namespace dikkat::model {
namespace {

constexpr size_t kVocab = 50257;

// Normal logits; `scale` sets how peaked the softmax is (3: a few hundred
// tokens hold most of the mass; 0.5: nearly flat).
std::vector<float> Logits(float scale) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(kVocab);
  for (float& v : out) v = normal(gen);
  return out;
}

void Run(benchmark::State& state, const SamplingParams& params) {
  const std::vector<float> logits = Logits(state.range(0) / 10.0f);
  Sampler sampler(params, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(absl::MakeConstSpan(logits)));
  }
}

void BM_Greedy(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  Run(state, p);
}
void BM_GreedyTop20(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_logprobs = 20;
  Run(state, p);
}
void BM_Temperature(benchmark::State& state) { Run(state, SamplingParams{}); }
void BM_TopK40(benchmark::State& state) {
  SamplingParams p;
  p.top_k = 40;
  Run(state, p);
}
void BM_TopK2000(benchmark::State& state) {
  SamplingParams p;
  p.top_k = 2000;
  Run(state, p);
}
void BM_TopP09(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  Run(state, p);
}
void BM_MinP005(benchmark::State& state) {
  SamplingParams p;
  p.min_p = 0.05f;
  Run(state, p);
}
void BM_AllFiltersAndPenalties(benchmark::State& state) {
  SamplingParams p;
  p.top_k = 50;
  p.top_p = 0.95f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.2f;
  p.top_logprobs = 5;
  std::vector<float> logits = Logits(state.range(0) / 10.0f);
  Sampler sampler(p, 1);
  std::vector<int32_t> history(1000);
  std::iota(history.begin(), history.end(), 0);
  sampler.ObserveAll(history);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.Sample(absl::MakeConstSpan(logits)));
}
// Reference point: one full sort of (logit, id) keys.
void BM_FullSortBaseline(benchmark::State& state) {
  const std::vector<float> logits = Logits(state.range(0) / 10.0f);
  std::vector<int32_t> order(kVocab);
  for (auto _ : state) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    benchmark::DoNotOptimize(order.data());
  }
}

// Argument: 10 x the logit scale (30 = peaked, 5 = nearly flat).
BENCHMARK(BM_Greedy)->Arg(30)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GreedyTop20)->Arg(30)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Temperature)->Arg(30)->Arg(5)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK40)->Arg(30)->Arg(5)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK2000)->Arg(30)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09)->Arg(30)->Arg(5)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MinP005)->Arg(30)->Arg(5)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllFiltersAndPenalties)->Arg(30)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FullSortBaseline)->Arg(30)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dikkat::model

BENCHMARK_MAIN();
