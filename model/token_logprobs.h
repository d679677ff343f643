// Log-probabilities of tokens under the model's own distribution: the
// log-softmax of raw logits (no penalties, temperature 1), as scoring and
// perplexity want them. What Sampler reports for generated tokens is another
// distribution (after penalties and temperature): see model/sampler.h.
//
// Torch-free and stateless; safe from any thread.
#ifndef DIKKAT_MODEL_TOKEN_LOGPROBS_H_
#define DIKKAT_MODEL_TOKEN_LOGPROBS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "model/sampler.h"

namespace dikkat::model {

struct ScoredToken {
  float logprob = 0.0f;           // of the scored token; -inf when its logit is -inf
  std::vector<TokenLogprob> top;  // the top_n most likely, best first, ties -> lower id
};

// Scores `token` (in [0, logits.size())) against `logits` (finite or -inf,
// at least one finite) and lists the `top_n` (>= 0) most likely tokens.
// O(V log top_n); the sums are in double.
ScoredToken ScoreToken(absl::Span<const float> logits, int32_t token, int32_t top_n);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TOKEN_LOGPROBS_H_
