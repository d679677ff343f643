#include "server/sample_group.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/status_util.h"

namespace dikkat::server {

int64_t LeastHeldOutputBytes(const GenerateRequest& request, int32_t best_of,
                             int64_t new_tokens, int64_t vocab_size) {
  const auto entry = [&](int32_t alternatives) {
    return static_cast<int64_t>(sizeof(GeneratedToken)) +
           std::min<int64_t>(std::max(alternatives, 0), vocab_size) *
               static_cast<int64_t>(sizeof(TokenAlternative));
  };
  const int64_t per_token =
      static_cast<int64_t>(sizeof(GeneratedChunk)) + entry(request.sampling.top_logprobs);
  int64_t bytes = static_cast<int64_t>(best_of) * std::max<int64_t>(new_tokens, 0) * per_token;
  if (request.prompt_logprobs >= 0 && request.prompt.size() > 1) {
    bytes += static_cast<int64_t>(request.prompt.size() - 1) * entry(request.prompt_logprobs);
  }
  return bytes;
}

SampleGroup::SampleGroup(std::shared_ptr<GenerateObserver> observer, int32_t n, int32_t best_of,
                         std::optional<uint64_t> seed,
                         std::shared_ptr<HeldOutputBudget> budget,
                         std::shared_ptr<int64_t> call_held)
    : observer_(std::move(observer)),
      n_(n),
      best_of_(best_of),
      held_(best_of > n ? best_of : 0),
      reasons_(best_of, FinishReason::kLength),
      cumulative_(best_of, 0.0),
      base_seed_(seed),
      budget_(std::move(budget)),
      call_held_(std::move(call_held)) {}

SampleGroup::~SampleGroup() { ReleaseHeld(); }

void SampleGroup::ReleaseHeld() {
  for (std::vector<GeneratedChunk>& chunks : held_) chunks.clear();
  prompt_logprobs_.clear();
  if (budget_ != nullptr && held_bytes_ != 0) {
    budget_->used.fetch_sub(held_bytes_, std::memory_order_relaxed);
  }
  if (call_held_ != nullptr) *call_held_ -= held_bytes_;
  held_bytes_ = 0;
}

void SampleGroup::Forward(GeneratedChunk chunk) {
  if (!prompt_logprobs_.empty()) chunk.prompt_logprobs = std::move(prompt_logprobs_);
  prompt_logprobs_.clear();
  observer_->OnChunk(std::move(chunk));
}

void SampleGroup::Pass(int32_t index, GeneratedChunk chunk) {
  if (waiting_scores_ && index != 0) {
    before_scores_.push_back(std::move(chunk));
    return;
  }
  Forward(std::move(chunk));
  if (!waiting_scores_) return;
  // Sample 0's first chunk (or end) is out: then what the others sent.
  waiting_scores_ = false;
  std::vector<GeneratedChunk> held = std::move(before_scores_);
  before_scores_.clear();
  for (GeneratedChunk& c : held) Forward(std::move(c));
}

bool SampleGroup::OnChunk(int32_t index, GeneratedChunk chunk) {
  chunk.index = index;
  int64_t bytes = 0;
  if (best_of_ > n_) {
    if (ended_.has_value()) return false;  // nothing held will be sent
    // With the prompt's logprobs (sample 0's first chunk): held as long.
    bytes = ChunkBytes(chunk);
    // One writer (the engine thread): checked, then counted, so the count
    // never passes the limit.
    if (budget_ != nullptr && budget_->limit > 0 &&
        budget_->used.load(std::memory_order_relaxed) + bytes > budget_->limit) {
      // Alone past the bound (with the other prompts of its call), the call
      // would fail again on a retry.
      const int64_t call = call_held_ != nullptr ? *call_held_ : held_bytes_;
      const bool alone = call + bytes > budget_->limit;
      const std::string message = absl::StrCat(
          "best_of = ", best_of_, " > n = ", n_,
          " holds every sample's output until the last sample ends, and the output held that "
          "way ",
          alone ? "by this call alone" : "by all such calls together",
          " would pass the server's bound of ", budget_->limit,
          " bytes (--max_held_output_bytes); ",
          !alone                   ? "retry later"
          : call_held_ != nullptr ? "send fewer prompts, or ask for fewer samples, tokens or logprobs"
                                  : "ask for fewer samples, tokens or logprobs");
      error_ = alone ? NeverFitsError(message) : absl::ResourceExhaustedError(message);
      ended_ = FinishReason::kError;
      ReleaseHeld();
      return true;
    }
  }
  if (!chunk.prompt_logprobs.empty()) {
    prompt_logprobs_ = std::move(chunk.prompt_logprobs);
    chunk.prompt_logprobs.clear();
  }
  if (best_of_ <= n_) {
    // A sample ended the call (error, deadline, cancel): its siblings' last
    // tokens are not sent before that status.
    if (ended_.has_value()) return false;
    Pass(index, std::move(chunk));
    return false;
  }
  if (budget_ != nullptr) budget_->used.fetch_add(bytes, std::memory_order_relaxed);
  held_bytes_ += bytes;
  if (call_held_ != nullptr) *call_held_ += bytes;
  held_[index].push_back(std::move(chunk));
  return false;
}

bool SampleGroup::OnSampleFinish(int32_t index, const GenerateSummary& summary,
                                 double cumulative_logprob) {
  reasons_[index] = summary.reason;
  cumulative_[index] = cumulative_logprob;
  if (finished_++ == 0) {
    summary_ = summary;
    summary_.samples = best_of_;
  } else {
    summary_.generated_tokens += summary.generated_tokens;
    summary_.cached_prompt_tokens =
        std::min(summary_.cached_prompt_tokens, summary.cached_prompt_tokens);
    summary_.queue_time = std::min(summary_.queue_time, summary.queue_time);
    if (summary.time_to_first_token > absl::ZeroDuration() &&
        (summary_.time_to_first_token == absl::ZeroDuration() ||
         summary.time_to_first_token < summary_.time_to_first_token)) {
      summary_.time_to_first_token = summary.time_to_first_token;
    }
    summary_.total_time = std::max(summary_.total_time, summary.total_time);
  }
  // Sample i used seed + i; a call whose samples never started reports 0.
  summary_.seed = base_seed_.value_or(0);
  if (!error_.ok()) {  // the budget ended the call (OnChunk)
    summary_.reason = FinishReason::kError;
    summary_.status = error_;
  }
  if (ended_.has_value()) return false;  // the others are being stopped already
  const bool ends_call = summary.reason == FinishReason::kError ||
                         summary.reason == FinishReason::kDeadline ||
                         summary.reason == FinishReason::kCancelled;
  summary_.reason = summary.reason;
  if (ends_call) {
    ended_ = summary.reason;
    summary_.status = summary.status;
    return true;
  }
  if (best_of_ == n_) {
    GeneratedChunk end;
    end.index = index;
    end.finish = summary.reason;
    end.cumulative_logprob = cumulative_logprob;
    Pass(index, std::move(end));
  }
  return false;
}

void SampleGroup::Finish() {
  if (!ended_.has_value() && best_of_ > n_) {
    std::vector<int32_t> order(best_of_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [this](int32_t a, int32_t b) { return cumulative_[a] > cumulative_[b]; });
    for (int32_t rank = 0; rank < n_; ++rank) {
      const int32_t sample = order[rank];
      for (GeneratedChunk& chunk : held_[sample]) {
        chunk.index = rank;
        chunk.held = true;
        Forward(std::move(chunk));
      }
      GeneratedChunk end;
      end.held = true;
      end.index = rank;
      end.finish = reasons_[sample];
      end.cumulative_logprob = cumulative_[sample];
      Forward(std::move(end));
    }
  }
  ReleaseHeld();
  observer_->OnFinish(summary_);
}

}  // namespace dikkat::server
