#include "model/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"

namespace dikkat::model {
namespace {

// Each check is written so that NaN fails it.
absl::Status OutOfRange(const char* field, double value, const char* allowed) {
  return absl::InvalidArgumentError(
      absl::StrFormat("sampling.%s = %g is out of range: must be %s", field, value, allowed));
}

absl::Status ValidateLogitBias(const std::vector<LogitBias>& entries) {
  if (entries.size() > static_cast<size_t>(kMaxLogitBiasEntries)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.logit_bias has %d entries; at most %d are allowed",
                        entries.size(), kMaxLogitBiasEntries));
  }
  std::vector<int32_t> ids;
  ids.reserve(entries.size());
  for (const LogitBias& e : entries) {
    if (e.token_id < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sampling.logit_bias: token id %d is not a token id (ids are >= 0)", e.token_id));
    }
    if (!(e.bias >= -kMaxLogitBias && e.bias <= kMaxLogitBias)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sampling.logit_bias[%d] = %g is out of range: must be in [-100, 100]",
                          e.token_id, e.bias));
    }
    ids.push_back(e.token_id);
  }
  std::sort(ids.begin(), ids.end());
  const auto repeated = std::adjacent_find(ids.begin(), ids.end());
  if (repeated != ids.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling.logit_bias: token id %d is listed twice; list each at most once", *repeated));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const SamplingParams& params) {
  if (!(params.temperature >= 0.0f && std::isfinite(params.temperature))) {
    return OutOfRange("temperature", params.temperature, "finite and >= 0 (0 = greedy)");
  }
  if (params.top_k < 0) {
    return OutOfRange("top_k", params.top_k, ">= 0 (0 = off)");
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return OutOfRange("top_p", params.top_p, "in (0, 1] (1 = off)");
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return OutOfRange("min_p", params.min_p, "in [0, 1] (0 = off)");
  }
  // Bounded on both sides: a penalty of 1e-40 divides a negative logit into
  // -inf or multiplies a positive one past float's range (+inf logits).
  if (!(params.repetition_penalty >= kMinRepetitionPenalty &&
        params.repetition_penalty <= kMaxRepetitionPenalty)) {
    return OutOfRange("repetition_penalty", params.repetition_penalty,
                      "within [0.01, 100] (1 = off)");
  }
  if (!(params.presence_penalty >= -2.0f && params.presence_penalty <= 2.0f)) {
    return OutOfRange("presence_penalty", params.presence_penalty, "in [-2, 2] (0 = off)");
  }
  if (!(params.frequency_penalty >= -2.0f && params.frequency_penalty <= 2.0f)) {
    return OutOfRange("frequency_penalty", params.frequency_penalty, "in [-2, 2] (0 = off)");
  }
  if (params.top_logprobs < 0 || params.top_logprobs > 20) {
    return OutOfRange("top_logprobs", params.top_logprobs, "in [0, 20]");
  }
  return ValidateLogitBias(params.logit_bias);
}

}  // namespace dikkat::model
