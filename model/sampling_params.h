// SamplingParams: what a caller may ask of the sampler. Torch-free so the
// server's request conversion can include it.
#ifndef DIKKAT_MODEL_SAMPLING_PARAMS_H_
#define DIKKAT_MODEL_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace dikkat::model {

// Bounds of SamplingParams::repetition_penalty (Validate).
inline constexpr float kMinRepetitionPenalty = 0.01f;
inline constexpr float kMaxRepetitionPenalty = 100.0f;
// Bounds of SamplingParams::logit_bias (Validate): |bias| <= kMaxLogitBias
// (OpenAI's range: -100 bans a token in practice, +100 forces it), at most
// kMaxLogitBiasEntries tokens (OpenAI's 300; each costs every step of the
// request a lookup).
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr int32_t kMaxLogitBiasEntries = 300;

// One entry of SamplingParams::logit_bias.
struct LogitBias {
  int32_t token_id = 0;
  float bias = 0.0f;
};

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy (argmax); must be >= 0
  int32_t top_k = 0;               // keep the k most likely; 0 = off; must be >= 0
  float top_p = 1.0f;              // nucleus: smallest set with mass >= top_p; (0, 1]
  float min_p = 0.0f;              // drop tokens with p < min_p * p_max; [0, 1]
  float repetition_penalty = 1.0f; // CTRL-style: logit/pen if >0 else logit*pen, for seen tokens; [0.01, 100]
  float presence_penalty = 0.0f;   // subtracted once from each seen token's logit; [-2, 2]
  float frequency_penalty = 0.0f;  // subtracted count times; [-2, 2]
  std::optional<uint64_t> seed;    // same seed + same input -> same tokens
  int32_t top_logprobs = 0;        // alternatives reported per token; [0, 20]
  // Added to these tokens' logits before anything else, for the choice of
  // the token only: reported log-probabilities are of the distribution
  // without it (model/sampler.h). Ids unique and >= 0 (the vocabulary bound
  // is the request check's), biases in [-100, 100], at most 300 entries.
  std::vector<LogitBias> logit_bias;

  bool greedy() const { return temperature == 0.0f; }
};

// INVALID_ARGUMENT naming the field, its value and the allowed range.
absl::Status Validate(const SamplingParams& params);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_SAMPLING_PARAMS_H_
