#include "server/beam_search.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "model/token_logprobs.h"

namespace dikkat::server {

BeamSearch::BeamSearch(BeamOptions options) : options_(std::move(options)) {
  live_.emplace_back();  // the prompt
}

double BeamSearch::Score(double sum, int64_t length) const {
  return sum / std::pow(static_cast<double>(std::max<int64_t>(length, 1)),
                        static_cast<double>(options_.length_penalty));
}

void BeamSearch::AddFinished(BeamHypothesis hypothesis) {
  // Kept best first; equal scores: the earlier one first.
  auto it = std::upper_bound(
      finished_.begin(), finished_.end(), hypothesis,
      [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
  finished_.insert(it, std::move(hypothesis));
  if (static_cast<int32_t>(finished_.size()) > options_.width) finished_.pop_back();
}

bool BeamSearch::IsDone() const {
  if (live_.empty()) return true;
  if (static_cast<int32_t>(finished_.size()) < options_.width) return false;
  if (options_.early_stopping) return true;
  // Live beams are best first: the first is the best a continuation can be
  // if it ended now.
  return finished_.back().score >= Score(live_.front().sum, generated_);
}

std::vector<BeamSearch::Choice> BeamSearch::Step(
    const std::vector<absl::Span<const float>>& logits) {
  const int32_t k = options_.width;
  struct Proposal {
    double sum;
    int32_t beam;
    int32_t token;
    float logprob;
  };
  std::vector<Proposal> proposals;
  proposals.reserve(logits.size() * 2 * k);
  for (size_t b = 0; b < logits.size(); ++b) {
    // The top 2k of the beam's distribution (ties: lower id first).
    const model::ScoredToken scored = model::ScoreToken(logits[b], 0, 2 * k);
    for (const model::TokenLogprob& t : scored.top) {
      proposals.push_back({live_[b].sum + t.logprob, static_cast<int32_t>(b), t.token_id,
                           t.logprob});
    }
  }
  std::stable_sort(proposals.begin(), proposals.end(), [](const Proposal& a, const Proposal& b) {
    return std::tie(b.sum, a.beam, a.token) < std::tie(a.sum, b.beam, b.token);
  });
  ++generated_;
  std::vector<Choice> choices;
  std::vector<Live> next;
  for (size_t rank = 0; rank < proposals.size() && static_cast<int32_t>(next.size()) < k; ++rank) {
    const Proposal& p = proposals[rank];
    GeneratedToken token{p.token, p.logprob, {}};
    const bool ends = std::find(options_.end_tokens.begin(), options_.end_tokens.end(),
                                p.token) != options_.end_tokens.end();
    if (ends) {
      if (static_cast<int32_t>(rank) >= k) continue;
      BeamHypothesis h;
      h.tokens = live_[p.beam].tokens;
      h.tokens.push_back(token);
      h.sum = p.sum;
      h.score = Score(p.sum, generated_);
      h.reason = std::find(options_.eos_tokens.begin(), options_.eos_tokens.end(), p.token) !=
                         options_.eos_tokens.end()
                     ? FinishReason::kEos
                     : FinishReason::kStop;
      AddFinished(std::move(h));
      continue;
    }
    Live beam;
    beam.tokens = live_[p.beam].tokens;
    beam.tokens.push_back(token);
    beam.sum = p.sum;
    next.push_back(std::move(beam));
    choices.push_back({p.beam, p.token, p.logprob});
  }
  live_ = std::move(next);
  if (generated_ >= options_.max_new) {
    for (Live& beam : live_) {
      BeamHypothesis h;
      h.sum = beam.sum;
      h.score = Score(beam.sum, static_cast<int64_t>(beam.tokens.size()));
      h.tokens = std::move(beam.tokens);
      h.reason = FinishReason::kLength;
      AddFinished(std::move(h));
    }
    live_.clear();
  }
  done_ = IsDone();
  if (done_) {
    live_.clear();
    choices.clear();
  }
  return choices;
}

std::vector<BeamHypothesis> BeamSearch::Best(int32_t n) const {
  std::vector<BeamHypothesis> out(finished_.begin(),
                                  finished_.begin() + std::min<size_t>(n, finished_.size()));
  return out;
}

}  // namespace dikkat::server
