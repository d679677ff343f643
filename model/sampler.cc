#include "model/sampler.h"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/cpu_elementwise.h"

namespace dikkat::model {
namespace {

// Float logits carry ~1e-7 relative rounding, so a nucleus whose mass is
// exactly top_p in real numbers may sum to a hair below it; without this the
// boundary token would flip in and out with the last bit.
constexpr double kTopPTolerance = 1e-6;

// Ranks sorted up front: covers the whole draw for a peaked distribution.
constexpr size_t kSortedBlock = 64;
// top_k up to this is sorted with partial_sort, larger ones selected with
// nth_element: on 50k, partial_sort costs ~50 us for k = 64 and overtakes
// nth_element's ~240 us near k = 1000.
constexpr size_t kSortTopKUpTo = 256;

// Reused across calls on a thread: a 50k vocab would otherwise cost two
// vocab-sized allocations (each an mmap/munmap pair) per token.
struct Scratch {
  std::vector<float> logits;
  std::vector<float> weights;
  std::vector<uint64_t> keys;
  // With a logit bias: the biased logits and their weights and ranking
  // (the ones above stay the reported distribution).
  std::vector<float> biased_logits;
  std::vector<float> biased_weights;
  std::vector<uint64_t> biased_keys;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// 53 random bits -> [0, 1). Spelled out rather than std::uniform_real_distribution /
// generate_canonical, whose algorithms differ between standard libraries.
double UniformDouble(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Tokens ranked by penalized logit (descending, ties -> lower id), held as
// 64-bit keys whose ascending integer order is exactly that rank order, so
// the selection algorithms compare integers instead of chasing indices.
// Nothing is fully sorted: a short sorted prefix serves greedy alternatives
// and peaked distributions; beyond it, a weighted quickselect finds where a
// cumulative mass is crossed in expected O(V).
//
// Invariants: keys_[0, positive_) are the tokens of weight > 0 (a prefix of
// the ranking, since weights are monotone in the logit); keys_[0, sorted_)
// are ranks 0 .. sorted_ - 1 in order. Later reorderings only touch
// [sorted_, ...).
class Ranking {
 public:
  // weights[id] = exp((logit - max) / T) in [0, 1].
  Ranking(absl::Span<const float> logits, const float* weights, std::vector<uint64_t>* keys)
      : weights_(weights), keys_(*keys) {
    keys_.resize(logits.size());
    size_t front = 0, back = logits.size();
    for (size_t id = 0; id < logits.size(); ++id) {
      const uint64_t key = Key(logits[id], static_cast<uint32_t>(id));
      if (weights[id] > 0.0f) {
        keys_[front++] = key;
      } else {
        keys_[--back] = key;
      }
    }
    positive_ = front;
  }

  size_t positive() const { return positive_; }
  // Token of rank `rank`; rank < sorted_, or rank = a FindCrossing result.
  int32_t Id(size_t rank) const { return static_cast<int32_t>(keys_[rank] & 0xffffffffu); }
  double Weight(size_t rank) const { return weights_[Id(rank)]; }

  // Sorts ranks [0, n). Called once, before any other reordering.
  void SortPrefix(size_t n) {
    n = std::min(n, keys_.size());
    const auto begin = keys_.begin();
    std::partial_sort(begin, begin + std::min(n, positive_), begin + positive_);
    if (n > positive_) std::partial_sort(begin + positive_, begin + n, keys_.end());
    sorted_ = n;
  }

  // Puts the n best tokens (n <= positive_) in keys_[0, n), unordered past sorted_.
  void SelectBest(size_t n) {
    if (n <= sorted_ || n >= positive_) return;
    std::nth_element(keys_.begin() + sorted_, keys_.begin() + n, keys_.begin() + positive_);
  }

  // Of the candidates keys_[0, n) (the n best, n <= positive_), moves those of
  // weight >= min_weight, a prefix of the ranking, to the front; returns how many.
  size_t KeepAtLeast(size_t n, float min_weight) {
    const auto heavy = [&](uint64_t key) { return weights_[key & 0xffffffffu] >= min_weight; };
    const size_t kept = std::count_if(keys_.begin(), keys_.begin() + n, heavy);
    if (kept > sorted_) std::partition(keys_.begin() + sorted_, keys_.begin() + n, heavy);
    return kept;
  }

  double Mass(size_t n) const {
    double mass = 0.0;
    for (size_t r = 0; r < n; ++r) mass += Weight(r);
    return mass;
  }

  // The smallest rank r < n with reached(mass of ranks 0..r), n - 1 if none.
  // Afterwards keys_[r] holds rank r and keys_[0, r] the r + 1 best.
  template <typename Reached>
  size_t FindCrossing(size_t n, Reached reached) {
    double mass = 0.0;
    const size_t sorted_end = std::min(sorted_, n);
    for (size_t r = 0; r < sorted_end; ++r) {
      mass += Weight(r);
      if (reached(mass)) return r;
    }
    // Narrow by rank, most significant key bits first (a radix select):
    // one pass sums the weight of each of 256 key buckets (ascending key:
    // better ranks first), the bucket the crossing lies in is moved between
    // the better and the worse ones, and the next 8 bits split it. A pass or
    // two over the vocab instead of a quickselect's ~2 x log2(V) partitions.
    auto first = keys_.begin() + sorted_end;
    auto last = keys_.begin() + n;
    if (last - first > kLinearScan) {
      // Bits above the highest one that differs are shared by every candidate.
      uint64_t differ = 0;
      for (auto it = first; it != last; ++it) differ |= *it ^ *first;
      int shift = std::max(0, 63 - __builtin_clzll(differ | 1) - 7);
      while (last - first > kLinearScan) {
        const unsigned bucket = CrossingBucket(first, last, shift, mass, reached);
        const auto in_or_after = std::partition(first, last, [&](uint64_t key) {
          return ((key >> shift) & 0xff) < bucket;
        });
        last = std::partition(in_or_after, last, [&](uint64_t key) {
          return ((key >> shift) & 0xff) == bucket;
        });
        first = in_or_after;
        if (shift == 0) break;
        shift = std::max(0, shift - 8);
      }
    }
    std::sort(first, last);
    for (auto it = first; it != last; ++it) {
      mass += weights_[*it & 0xffffffffu];
      if (reached(mass)) return it - keys_.begin();
    }
    return n - 1;
  }

 private:
  static constexpr ptrdiff_t kLinearScan = 32;

  // Of the keys in [first, last), grouped into 256 buckets by bits
  // [shift, shift + 8): the first bucket b with reached(mass + the weight of
  // buckets 0..b), or the last non-empty one when none reaches; `mass` gains
  // the weight of the buckets before it. Four partial sums per bucket, so
  // that a run of keys in one bucket is not one long chain of additions.
  template <typename Reached>
  unsigned CrossingBucket(std::vector<uint64_t>::iterator first,
                          std::vector<uint64_t>::iterator last, int shift, double& mass,
                          Reached reached) const {
    double sums[4][256] = {};
    ptrdiff_t count = last - first, i = 0;
    for (; i + 4 <= count; i += 4) {
      for (int l = 0; l < 4; ++l) {
        const uint64_t key = first[i + l];
        sums[l][(key >> shift) & 0xff] += weights_[key & 0xffffffffu];
      }
    }
    for (; i < count; ++i) sums[0][(first[i] >> shift) & 0xff] += weights_[first[i] & 0xffffffffu];
    unsigned last_seen = 0;
    double before_last = mass;
    for (unsigned b = 0; b < 256; ++b) {
      const double w = (sums[0][b] + sums[1][b]) + (sums[2][b] + sums[3][b]);
      if (w == 0.0) continue;  // empty: every candidate weighs more than 0
      if (reached(mass + w)) return b;
      before_last = mass;
      mass += w;
      last_seen = b;
    }
    mass = before_last;
    return last_seen;
  }

  // Ascending key = descending logit, then ascending id. The float's bits are
  // mapped to an unsigned integer of the same order (flip all bits of
  // negatives, the sign bit of positives), then inverted.
  // Branch-free: logit signs are random, and a branch on them mispredicted
  // half the time.
  static uint64_t Key(float logit, uint32_t id) {
    logit += 0.0f;  // -0 -> +0: one logit, so the tie goes to id order
    uint32_t bits;
    std::memcpy(&bits, &logit, sizeof(bits));
    bits ^= (0u - (bits >> 31)) | 0x80000000u;
    return (static_cast<uint64_t>(~bits) << 32) | id;
  }

  const float* weights_;
  std::vector<uint64_t>& keys_;
  size_t positive_ = 0;
  size_t sorted_ = 0;
};

// The largest logit, after checking the values: NaN and +inf would poison
// the softmax; -inf is a legitimate mask, but not everywhere. One vector
// pass (CpuMaxChecked); the offending entry is looked for only on failure.
absl::StatusOr<float> CheckedMax(absl::Span<const float> logits) {
  const size_t n = logits.size();
  const float* v = logits.data();
  bool bad = false;  // NaN or +inf
  const float max = CpuMaxChecked(v, static_cast<int64_t>(n), &bad);
  if (bad) {
    const size_t at = std::find_if(v, v + n, [](float x) { return !(x < INFINITY); }) - v;
    return absl::InvalidArgumentError(absl::StrFormat(
        "logits[%d] = %f (after penalties): logits must be finite or -inf", at, v[at]));
  }
  if (max == -INFINITY) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits: all %d values are -inf, nothing can be sampled", n));
  }
  return max;
}

// weights[i] = exp((logits[i] - max) / temperature) (null: not stored), by
// the CPU kernels' vector exponential (cpu_elementwise.h) on this thread,
// and their sum: scalar expf over 50k entries was the largest single cost of
// a draw, and LibTorch's exp over them woke its OpenMP threads at every
// token. Elementwise, so the result does not depend on the thread count;
// exp(-inf) = 0 (masked tokens weigh nothing).
double ComputeWeights(absl::Span<const float> logits, float max, float temperature,
                      std::vector<float>* weights) {
  float* out = nullptr;
  if (weights != nullptr) {
    weights->resize(logits.size());
    out = weights->data();
  }
  return CpuExpShifted(logits.data(), max, temperature, out,
                       static_cast<int64_t>(logits.size()));
}

// Filters (top_k, then top_p, then min_p) and draws one token; see sampler.h.
// `total` is the weight of every token (summed in id order): the candidates'
// mass while no filter has removed any, without a pass over them.
int32_t Draw(const SamplingParams& params, std::mt19937_64& rng, Ranking& ranking, size_t top_k,
             double total) {
  const auto mass_of = [&](size_t n) { return n == ranking.positive() ? total : ranking.Mass(n); };
  // Candidates are ranks [0, n); zero-weight tokens never are.
  size_t n = std::min(ranking.positive(), top_k);
  ranking.SelectBest(n);
  if (params.top_p < 1.0f) {
    const double goal = (params.top_p - kTopPTolerance) * mass_of(n);
    n = ranking.FindCrossing(n, [goal](double mass) { return mass >= goal; }) + 1;
  }
  // The max's weight is 1, so min_p * p_max is min_p in weight units.
  if (params.min_p > 0.0f) n = ranking.KeepAtLeast(n, params.min_p);
  // Always one draw, so the generator advances the same way whatever the filters.
  const double target = UniformDouble(rng) * mass_of(n);
  return ranking.Id(ranking.FindCrossing(n, [target](double mass) { return mass > target; }));
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
  if (penalties_active()) ++seen_[token_id].generated;
}

void Sampler::ObserveAll(absl::Span<const int32_t> token_ids) {
  if (!penalties_active()) return;
  for (int32_t id : token_ids) ++seen_[id].generated;
}

void Sampler::ObservePrompt(absl::Span<const int32_t> token_ids) {
  // Only the repetition penalty reads the prompt.
  if (params_.repetition_penalty == 1.0f) return;
  for (int32_t id : token_ids) seen_[id].in_prompt = true;
}

float Sampler::Penalized(float v, Seen seen) const {
  if (seen.generated == 0 && !seen.in_prompt) return v;
  const float rep = params_.repetition_penalty;
  if (rep != 1.0f) v = v > 0.0f ? v / rep : v * rep;
  if (seen.generated == 0) return v;
  v -= params_.presence_penalty;
  v -= params_.frequency_penalty * static_cast<float>(seen.generated);
  return v;
}

void Sampler::ApplyPenalties(absl::Span<float> logits) const {
  for (const auto& [id, seen] : seen_) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    logits[id] = Penalized(logits[id], seen);
  }
}

absl::StatusOr<int32_t> Sampler::ChooseBiased(absl::Span<const float> raw,
                                              absl::Span<const float> penalized) {
  Scratch& scratch = ThreadScratch();
  scratch.biased_logits.assign(penalized.begin(), penalized.end());
  const absl::Span<float> x(scratch.biased_logits);
  for (const LogitBias& entry : params_.logit_bias) {
    if (entry.token_id < 0 || static_cast<size_t>(entry.token_id) >= x.size()) continue;
    const auto seen = seen_.find(entry.token_id);
    x[entry.token_id] =
        Penalized(raw[entry.token_id] + entry.bias, seen == seen_.end() ? Seen{} : seen->second);
  }
  DIKKAT_ASSIGN_OR_RETURN(const float max_logit, CheckedMax(x));
  if (params_.greedy()) {
    return static_cast<int32_t>(std::find(x.begin(), x.end(), max_logit) - x.begin());
  }
  const double total =
      ComputeWeights(x, max_logit, params_.temperature, &scratch.biased_weights);
  Ranking ranking(x, scratch.biased_weights.data(), &scratch.biased_keys);
  const size_t top_k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : x.size();
  ranking.SortPrefix(std::max(kSortedBlock, top_k <= kSortTopKUpTo ? top_k : size_t{0}));
  return Draw(params_, rng_, ranking, top_k, total);
}

absl::StatusOr<SampledToken> Sampler::Sample(const at::Tensor& logits) {
  DIKKAT_ASSIGN_OR_RETURN(const at::Tensor host, ToHostFloat(logits, 1));
  return Sample(absl::MakeConstSpan(host.data_ptr<float>(), host.numel()));
}

absl::StatusOr<SampledToken> Sampler::Sample(absl::Span<const float> input) {
  if (input.empty()) return absl::InvalidArgumentError("logits: empty vocab dimension");
  Scratch& scratch = ThreadScratch();
  // The logits as penalized: a copy only when a penalty changes some.
  absl::Span<const float> x = input;
  if (penalties_active() && !seen_.empty()) {
    scratch.logits.assign(input.begin(), input.end());
    ApplyPenalties(absl::MakeSpan(scratch.logits));
    x = scratch.logits;
  }
  DIKKAT_ASSIGN_OR_RETURN(const float max_logit, CheckedMax(x));

  // Everything below works on exp((x - max) / T): the distribution of
  // softmax(x / T) without overflow for tiny temperatures. The rank order is
  // that of x itself (dividing by T > 0 is monotone), so rounding in x / T
  // never reorders or ties two tokens. Greedy reports T = 1.
  const bool greedy = params_.greedy();
  const float temperature = greedy ? 1.0f : params_.temperature;
  const size_t num_top = std::min<size_t>(params_.top_logprobs, x.size());
  // Greedy without alternatives needs only the normalizer, not the weights.
  const bool argmax_only = greedy && num_top == 0 && params_.logit_bias.empty();
  const double sum_exp =  // >= 1: the max's weight is exp(0)
      ComputeWeights(x, max_logit, temperature, argmax_only ? nullptr : &scratch.weights);
  const double log_z = std::log(sum_exp);
  const auto logprob = [&](int32_t id) {
    return (static_cast<double>(x[id]) - max_logit) / temperature - log_z;
  };

  SampledToken out;
  if (!params_.logit_bias.empty()) {
    DIKKAT_ASSIGN_OR_RETURN(out.token_id, ChooseBiased(input, x));
    out.logprob = static_cast<float>(logprob(out.token_id));
    if (num_top > 0) {
      Ranking ranking(x, scratch.weights.data(), &scratch.keys);
      ranking.SortPrefix(num_top);
      out.top.reserve(num_top);
      for (size_t r = 0; r < num_top; ++r) {
        out.top.push_back({ranking.Id(r), static_cast<float>(logprob(ranking.Id(r)))});
      }
    }
    return out;
  }
  if (argmax_only) {
    out.token_id = static_cast<int32_t>(std::find(x.begin(), x.end(), max_logit) - x.begin());
    out.logprob = static_cast<float>(logprob(out.token_id));
    return out;
  }
  Ranking ranking(x, scratch.weights.data(), &scratch.keys);
  const size_t top_k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : x.size();
  // Greedy needs only the alternatives sorted; a draw starts from a sorted
  // block (and the whole top-k when partial_sort is the cheaper selection).
  ranking.SortPrefix(
      greedy ? num_top
             : std::max({num_top, kSortedBlock, top_k <= kSortTopKUpTo ? top_k : size_t{0}}));
  out.token_id = greedy ? ranking.Id(0) : Draw(params_, rng_, ranking, top_k, sum_exp);
  out.logprob = static_cast<float>(logprob(out.token_id));
  out.top.reserve(num_top);
  for (size_t r = 0; r < num_top; ++r) {
    out.top.push_back({ranking.Id(r), static_cast<float>(logprob(ranking.Id(r)))});
  }
  return out;
}

}  // namespace dikkat::model
