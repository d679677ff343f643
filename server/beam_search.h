// BeamSearch: the hypotheses of one beam-search Generate call, step by step.
// Pure bookkeeping (no tensors, no KV blocks): the engine runs the forward
// over the live beams and hands their logits here; the choices it gets back
// say which beam each next beam continues, so that it can move or fork their
// KV blocks (server/engine_beams.cc).
//
// The algorithm (the textbook one; tests/parity/beam_reference.py is its
// Python twin on PyTorch's modules), with width k:
//   * a beam's score is the sum of its generated tokens' log-probabilities
//     under the model's own distribution (log-softmax of the logits; no
//     temperature, penalties or filters);
//   * each step, every live beam proposes its 2k most likely next tokens
//     (ties: lower id); all proposals are ranked by the new sum (ties: lower
//     beam, then lower token), and walked in that order: a proposal ending the
//     hypothesis (EOS unless ignore_eos, or a stop token id) is finished if
//     its rank is below k, and dropped otherwise; the others become the next
//     live beams until there are k;
//   * a finished hypothesis is ranked by sum / length^length_penalty, length
//     counting its generated tokens with the one that ended it; only the k
//     best are kept;
//   * the search is done when k are finished and either early_stopping, or
//     the best live beam's sum / (its length)^length_penalty cannot beat the
//     worst kept one; or when max_new tokens were generated (the live beams
//     are then finished with reason kLength).
// Thread-safety: none; the engine thread owns it.
#ifndef DIKKAT_SERVER_BEAM_SEARCH_H_
#define DIKKAT_SERVER_BEAM_SEARCH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/engine.h"

namespace dikkat::server {

struct BeamOptions {
  int32_t width = 4;
  float length_penalty = 1.0f;
  bool early_stopping = false;
  int32_t max_new = 16;
  std::vector<int32_t> end_tokens;  // EOS (unless ignore_eos) and stop token ids
  std::vector<int32_t> eos_tokens;  // those of end_tokens reported as kEos; others as kStop
};

struct BeamHypothesis {
  std::vector<GeneratedToken> tokens;  // generated, with the ending token if any
  double sum = 0.0;                    // of the tokens' logprobs
  double score = 0.0;                  // sum / length^length_penalty
  FinishReason reason = FinishReason::kLength;
};

class BeamSearch {
 public:
  explicit BeamSearch(BeamOptions options);

  // The next live beams: beam i continues live beam `parent` with `token`.
  struct Choice {
    int32_t parent = 0;
    int32_t token = 0;
    float logprob = 0.0f;
  };

  // One step: `logits[i]` are live beam i's next-token logits (one beam, the
  // prompt, before the first step). Returns the next live beams' choices
  // (empty when the search is done).
  std::vector<Choice> Step(const std::vector<absl::Span<const float>>& logits);

  int32_t live() const { return static_cast<int32_t>(live_.size()); }
  int32_t generated() const { return generated_; }
  bool done() const { return done_; }
  // When done(): the best `n` hypotheses, best first.
  std::vector<BeamHypothesis> Best(int32_t n) const;

 private:
  struct Live {
    std::vector<GeneratedToken> tokens;
    double sum = 0.0;
  };
  double Score(double sum, int64_t length) const;
  void AddFinished(BeamHypothesis hypothesis);
  bool IsDone() const;

  const BeamOptions options_;
  std::vector<Live> live_;
  std::vector<BeamHypothesis> finished_;  // best first, at most width
  int32_t generated_ = 0;
  bool done_ = false;
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_BEAM_SEARCH_H_
