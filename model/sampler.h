// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition /
// presence / frequency penalties, per-request seeds, log-probabilities.
//
// A Sampler holds one request's state (its random generator and the counts
// of tokens seen so far, for the penalties). It is not thread-safe; the
// engine thread owns every Sampler.
#ifndef DIKKAT_MODEL_SAMPLER_H_
#define DIKKAT_MODEL_SAMPLER_H_

#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/sampling_params.h"

namespace at {
class Tensor;
}

namespace dikkat::model {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;  // natural log, of the distribution after penalties and temperature
};

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;               // of the chosen token
  std::vector<TokenLogprob> top;      // the top_logprobs most likely, best first
};

class Sampler {
 public:
  // `params` must have passed Validate(). `seed` is used when params.seed is
  // unset (the engine draws one per request so that results are reportable).
  Sampler(const SamplingParams& params, uint64_t seed);

  // Tokens that count for the repetition/presence/frequency penalties
  // (the prompt, then every generated token; the engine calls this).
  void Observe(int32_t token_id);
  void ObserveAll(const std::vector<int32_t>& token_ids);

  // Picks the next token from `logits` ([vocab] float32, any device; not
  // modified). Deterministic for a given seed, history and logits.
  SampledToken Sample(const at::Tensor& logits);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> counts_;  // token id -> times seen
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_SAMPLER_H_
