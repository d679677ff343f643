#include "model/sampler.h"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/status_macros.h"

namespace dikkat::model {
namespace {

// Float logits carry ~1e-7 relative rounding, so a nucleus whose mass is
// exactly top_p in real numbers may sum to a hair below it; without this the
// boundary token would flip in and out with the last bit.
constexpr double kTopPTolerance = 1e-6;

// Reused across calls on a thread: a 50k vocab would otherwise cost two
// 200 KB allocations (each an mmap/munmap pair) per token.
struct Scratch {
  std::vector<float> logits;
  std::vector<int32_t> order;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// 53 random bits -> [0, 1). Spelled out rather than std::uniform_real_distribution /
// generate_canonical, whose algorithms differ between standard libraries.
double UniformDouble(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Token ids in descending logit order (ties -> lower id), sorted lazily: only
// as long a prefix as the caller reads is ever sorted. Each extension runs
// nth_element on the unsorted rest and sorts the new block; blocks double, so
// a scan through the whole vocab stays O(V log V) and a short one O(V).
class DescendingOrder {
 public:
  DescendingOrder(const float* logits, std::vector<int32_t>* order)
      : logits_(logits), order_(*order) {}

  // Token at rank `rank` (0 = most likely). rank < size().
  int32_t operator[](size_t rank) {
    EnsureSorted(rank + 1);
    return order_[rank];
  }
  size_t size() const { return order_.size(); }

  void EnsureSorted(size_t n) {
    n = std::min(n, order_.size());
    if (n <= sorted_) return;
    const size_t target =
        std::max(n, std::min(order_.size(), std::max<size_t>(2 * sorted_, kFirstBlock)));
    const auto better = [this](int32_t a, int32_t b) {
      return logits_[a] > logits_[b] || (logits_[a] == logits_[b] && a < b);
    };
    const auto first = order_.begin() + sorted_;
    const auto mid = order_.begin() + target;
    if (mid != order_.end()) std::nth_element(first, mid, order_.end(), better);
    std::sort(first, mid, better);
    sorted_ = target;
  }

 private:
  static constexpr size_t kFirstBlock = 64;
  const float* logits_;
  std::vector<int32_t>& order_;
  size_t sorted_ = 0;
};

// NaN and +inf would poison the softmax; -inf is a legitimate mask.
absl::Status CheckValues(absl::Span<const float> logits) {
  bool any_finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == INFINITY) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "logits[%d] = %f (after penalties): logits must be finite or -inf", i, v));
    }
    any_finite |= std::isfinite(v);
  }
  if (!any_finite) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits: all %d values are -inf, nothing can be sampled", logits.size()));
  }
  return absl::OkStatus();
}

int32_t Argmax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);  // strict: ties keep lowest id
  }
  return best;
}

std::string ShapeString(const at::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

// [rows, vocab] (or [vocab]) of any floating dtype/device -> CPU float32
// contiguous. Copies only when the input is not already that.
absl::StatusOr<at::Tensor> ToHostFloat(const at::Tensor& logits, int64_t expected_dim) {
  if (!logits.defined()) return absl::InvalidArgumentError("logits: undefined tensor");
  if (logits.dim() != expected_dim || !c10::isFloatingType(logits.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits: expected a %d-D floating tensor (%s), got shape %s dtype %s",
                        expected_dim, expected_dim == 1 ? "[vocab]" : "[batch, vocab]",
                        ShapeString(logits), c10::toString(logits.scalar_type())));
  }
  if (logits.size(-1) == 0) return absl::InvalidArgumentError("logits: empty vocab dimension");
  try {
    return logits.to(at::kCPU, at::kFloat).contiguous();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("logits: copy to CPU float32 failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("logits: copy to CPU float32 failed: ", e.what()));
  }
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, uint64_t seed)
    : params_(params), seed_(params.seed.value_or(seed)), rng_(seed_) {}

bool Sampler::penalties_active() const {
  return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

void Sampler::Observe(int32_t token_id) {
  if (penalties_active()) ++counts_[token_id];
}

void Sampler::ObserveAll(absl::Span<const int32_t> token_ids) {
  if (!penalties_active()) return;
  for (int32_t id : token_ids) ++counts_[id];
}

void Sampler::ApplyPenalties(absl::Span<float> logits) const {
  const float rep = params_.repetition_penalty;
  for (const auto& [id, count] : counts_) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    float& v = logits[id];
    if (rep != 1.0f) v = v > 0.0f ? v / rep : v * rep;
    v -= params_.presence_penalty;
    v -= params_.frequency_penalty * static_cast<float>(count);
  }
}

absl::StatusOr<SampledToken> Sampler::Sample(const at::Tensor& logits) {
  DIKKAT_ASSIGN_OR_RETURN(const at::Tensor host, ToHostFloat(logits, 1));
  return Sample(absl::MakeConstSpan(host.data_ptr<float>(), host.numel()));
}

absl::StatusOr<SampledToken> Sampler::Sample(absl::Span<const float> input) {
  if (input.empty()) return absl::InvalidArgumentError("logits: empty vocab dimension");
  Scratch& scratch = ThreadScratch();
  scratch.logits.assign(input.begin(), input.end());
  const absl::Span<float> x(scratch.logits);
  ApplyPenalties(x);
  if (absl::Status s = CheckValues(x); !s.ok()) return s;

  const bool greedy = params_.greedy();
  const int32_t greedy_token = greedy ? Argmax(x) : 0;

  // Probabilities are exp((x - max) / T - log_z), in double: the same
  // distribution as softmax(x / T), without overflow for tiny temperatures.
  // The order is that of x itself (division by T > 0 is monotone), so float
  // rounding in x / T can never reorder or tie two tokens.
  const double max_logit = *std::max_element(x.begin(), x.end());
  const double temperature = greedy ? 1.0 : params_.temperature;
  double sum_exp = 0.0;  // the max term is exp(0) = 1, so sum_exp >= 1
  for (float v : x) sum_exp += std::exp((v - max_logit) / temperature);
  const double log_z = std::log(sum_exp);
  const auto logprob = [&](int32_t id) { return (x[id] - max_logit) / temperature - log_z; };
  const auto prob = [&](int32_t id) { return std::exp(logprob(id)); };

  scratch.order.resize(x.size());
  std::iota(scratch.order.begin(), scratch.order.end(), 0);
  DescendingOrder order(x.data(), &scratch.order);

  SampledToken out;
  if (greedy) {
    out.token_id = greedy_token;
  } else {
    // Candidates are order[0, n); their total mass is kept_mass.
    size_t n = x.size();
    double kept_mass = 1.0;  // all tokens (up to rounding, handled below)
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
      n = static_cast<size_t>(params_.top_k);
      kept_mass = 0.0;
      for (size_t r = 0; r < n; ++r) kept_mass += prob(order[r]);
    }
    if (params_.top_p < 1.0f || params_.min_p > 0.0f) {
      // Both are prefix filters on the same order, so applying top_p and then
      // min_p keeps the shorter of the two prefixes. top_p is relative to the
      // top-k survivors' mass; min_p's ratio does not depend on normalization.
      const double mass_goal = (params_.top_p - kTopPTolerance) * kept_mass;
      const double min_prob = params_.min_p * prob(order[0]);
      double mass = 0.0;
      size_t kept = 0;
      while (kept < n) {
        const double p = prob(order[kept]);
        if (kept > 0 && p < min_prob) break;
        mass += p;
        ++kept;
        if (params_.top_p < 1.0f && mass >= mass_goal) break;
      }
      n = kept;
      kept_mass = mass;
    }
    // The first candidate whose cumulative mass exceeds the target. A token of
    // probability 0 never exceeds it, so masked (-inf) tokens are never drawn;
    // if rounding leaves the target past the end, the last candidate with
    // mass is the one whose interval it lies in.
    const double target = UniformDouble(rng_) * kept_mass;
    double mass = 0.0;
    int32_t chosen = order[0];
    for (size_t r = 0; r < n; ++r) {
      const int32_t id = order[r];
      const double p = prob(id);
      if (p <= 0.0) break;  // sorted: everything after is 0 as well
      chosen = id;
      mass += p;
      if (mass > target) break;
    }
    out.token_id = chosen;
  }

  out.logprob = static_cast<float>(logprob(out.token_id));
  const size_t num_top = std::min<size_t>(params_.top_logprobs, x.size());
  out.top.reserve(num_top);
  for (size_t r = 0; r < num_top; ++r) {
    const int32_t id = order[r];
    out.top.push_back({id, static_cast<float>(logprob(id))});
  }
  return out;
}

absl::StatusOr<std::vector<SampledToken>> SampleRows(absl::Span<Sampler* const> samplers,
                                                     const at::Tensor& logits) {
  absl::StatusOr<at::Tensor> host = ToHostFloat(logits, 2);
  if (!host.ok()) return host.status();
  if (host->size(0) != static_cast<int64_t>(samplers.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits: %d rows for %d samplers", host->size(0), samplers.size()));
  }
  const int64_t vocab = host->size(1);
  const float* data = host->data_ptr<float>();
  std::vector<SampledToken> out;
  out.reserve(samplers.size());
  for (size_t b = 0; b < samplers.size(); ++b) {
    absl::StatusOr<SampledToken> token =
        samplers[b]->Sample(absl::MakeConstSpan(data + b * vocab, vocab));
    if (!token.ok()) {
      return absl::Status(token.status().code(),
                          absl::StrFormat("row %d: %s", b, token.status().message()));
    }
    out.push_back(*std::move(token));
  }
  return out;
}

}  // namespace dikkat::model
