// SamplingParams: what a caller may ask of the sampler. Torch-free so the
// server's request conversion can include it.
#ifndef DIKKAT_MODEL_SAMPLING_PARAMS_H_
#define DIKKAT_MODEL_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace dikkat::model {

// Bounds of SamplingParams::repetition_penalty (Validate).
inline constexpr float kMinRepetitionPenalty = 0.01f;
inline constexpr float kMaxRepetitionPenalty = 100.0f;

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

  bool greedy() const { return temperature == 0.0f; }
};

// INVALID_ARGUMENT naming the field, its value and the allowed range.
absl::Status Validate(const SamplingParams& params);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_SAMPLING_PARAMS_H_
