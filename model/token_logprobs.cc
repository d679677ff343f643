#include "model/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace dikkat::model {

ScoredToken ScoreToken(absl::Span<const float> logits, int32_t token, int32_t top_n) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  auto logprob = [&](int32_t id) { return static_cast<float>(logits[id] - log_z); };

  ScoredToken out;
  out.logprob = logprob(token);
  const size_t n = std::min<size_t>(static_cast<size_t>(std::max(top_n, 0)), logits.size());
  if (n == 0) return out;
  // A min-heap of the best n seen: its front is the worst of them. "Better"
  // is a larger logit, then a lower id.
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  std::vector<int32_t> heap;
  heap.reserve(n);
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (heap.size() < n) {
      heap.push_back(id);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(id, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = id;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  out.top.reserve(n);
  for (int32_t id : heap) out.top.push_back({id, logprob(id)});
  return out;
}

}  // namespace dikkat::model
