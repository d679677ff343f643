// Token sampling: logit bias, greedy, temperature, top-k, top-p, min-p,
// repetition / presence / frequency penalties, per-request seeds,
// log-probabilities.
//
// A Sampler holds one request's state: its random generator and the counts of
// tokens seen so far (for the penalties). It is not thread-safe; the engine
// thread owns every Sampler. The vocab-sized working buffers (logits copy,
// weights, rank keys: 16 bytes per vocab entry) are per thread, not per
// Sampler, so thousands of live requests do not each hold them.
//
// What Sample() does, in order (the contract the tests check):
//  0. logit_bias (OpenAI's): each listed token's bias is added to its logit
//     before anything else (so before the penalties, as OpenAI and vLLM
//     order them). The biased logits decide the token in steps 2 and 3,
//     greedy included: a bias of -100 bans a token in practice, +100 forces
//     it. They are not the reported distribution (step 4). Ids outside
//     [0, vocab) are ignored. No bias: none of this costs anything.
//  1. Penalties, as vLLM and OpenAI apply them, with c = times generated
//     so far (Observe) and "in the prompt" from ObservePrompt:
//       repetition (CTRL, on prompt and generated tokens, as Hugging Face's):
//                          logit > 0 ? logit / repetition_penalty
//                                    : logit * repetition_penalty
//       presence:          logit -= presence_penalty        (once, c > 0)
//       frequency:         logit -= frequency_penalty * c
//     Presence and frequency count generated tokens only (OpenAI: "tokens
//     sampled prior to the current position"): a chat prompt's end-of-turn
//     token, once per message, is not penalized for being in the prompt.
//     Seen ids outside [0, vocab) are ignored.
//  2. temperature == 0: greedy. The token is the argmax of the penalized
//     logits (ties -> lowest id). No random number is drawn.
//  3. Otherwise the penalized logits are divided by the temperature and
//     softmaxed. Candidates are the tokens in descending probability order
//     (which is the order of the penalized logits; ties -> lower id first),
//     filtered in this order, each filter on the renormalized survivors of
//     the previous one:
//       top_k > 0: the first k (exactly k, even with ties at the boundary);
//       top_p < 1: the shortest prefix whose mass >= top_p (a tolerance of
//                  1e-6 absorbs float rounding; always at least one token);
//       min_p > 0: drop tokens with p < min_p * p_max.
//     One uniform double u in [0, 1) is drawn per call as
//     (rng() >> 11) * 2^-53 from the request's std::mt19937_64, and the token
//     is the first candidate, in the order above, whose cumulative mass
//     exceeds u * (total candidate mass). The same seed, history and logits
//     therefore always give the same token, whatever the thread count (on
//     one machine: the vectorized exp and the masses, summed in vector
//     lanes, may differ in the last bits between CPU instruction sets).
//     Zero-probability tokens are never drawn.
//     Cost on a 50k vocab: O(V), never a full sort (a short sorted prefix
//     plus a radix select on the rank keys, 8 bits a pass; see
//     bench/sampler_bench.cc).
//  4. Reported log-probabilities (the chosen token's and the top_logprobs
//     alternatives) are of the distribution after penalties and temperature,
//     without the logit bias, before top-k / top-p / min-p filtering
//     (greedy: temperature 1), so they stay comparable across filter and bias
//     settings (and a bias cannot be used to read the logprobs of tokens
//     the model would not rank, OpenAI's rule too). Alternatives are the
//     most likely tokens of that distribution, best first, ties -> lower id
//     first. With a bias, the chosen token may be none of them.
// Logits may contain -inf (masked tokens) but not NaN or +inf, and at least
// one must be finite; otherwise Sample returns INVALID_ARGUMENT.
#ifndef DIKKAT_MODEL_SAMPLER_H_
#define DIKKAT_MODEL_SAMPLER_H_

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
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
  float logprob = 0.0f;           // of the chosen token
  std::vector<TokenLogprob> top;  // the top_logprobs most likely, best first
};

class Sampler {
 public:
  // `params` must have passed Validate(). `seed` is used when params.seed is
  // unset (the engine draws one per request so that results are reportable).
  Sampler(const SamplingParams& params, uint64_t seed);

  // Generated tokens, for the repetition/presence/frequency penalties.
  // Sample() does not observe its own result: the engine calls Observe with
  // the token it keeps. When every penalty is neutral nothing is recorded.
  void Observe(int32_t token_id);
  void ObserveAll(absl::Span<const int32_t> token_ids);
  // The prompt's tokens: they count for the repetition penalty only.
  void ObservePrompt(absl::Span<const int32_t> token_ids);

  // Picks the next token from `logits`: a [vocab] floating tensor of any
  // dtype and device (copied to CPU float32; not modified). INVALID_ARGUMENT
  // for another rank or dtype, an empty vocab, or bad values (see above).
  absl::StatusOr<SampledToken> Sample(const at::Tensor& logits);
  // The same on host float32 logits (the torch-free core).
  absl::StatusOr<SampledToken> Sample(absl::Span<const float> logits);

  const SamplingParams& params() const { return params_; }
  // The seed in effect: params.seed if set, else the constructor's `seed`.
  uint64_t seed() const { return seed_; }

 private:
  bool penalties_active() const;
  struct Seen {
    int32_t generated = 0;  // times generated
    bool in_prompt = false;
  };
  // Step 1 on one logit of a token seen as `seen`.
  float Penalized(float logit, Seen seen) const;
  void ApplyPenalties(absl::Span<float> logits) const;
  // Steps 0, 2 and 3 with a logit bias: the token chosen from `penalized`
  // (the step-1 logits) with each biased token's logit recomputed from its
  // `raw` logit plus the bias.
  absl::StatusOr<int32_t> ChooseBiased(absl::Span<const float> raw,
                                       absl::Span<const float> penalized);

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, Seen> seen_;  // token id -> how it was seen
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_SAMPLER_H_
