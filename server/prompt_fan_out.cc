#include "server/prompt_fan_out.h"

#include <algorithm>
#include <utility>

namespace dikkat::server::openai {

class PromptFanOut::PromptObserver final : public GenerateObserver {
 public:
  PromptObserver(std::shared_ptr<PromptFanOut> fan_out, int32_t prompt)
      : fan_out_(std::move(fan_out)), prompt_(prompt) {}
  void OnChunk(GeneratedChunk chunk) override { fan_out_->OnChunk(prompt_, std::move(chunk)); }
  void OnFinish(GenerateSummary summary) override { fan_out_->OnFinish(prompt_, summary); }

 private:
  const std::shared_ptr<PromptFanOut> fan_out_;
  const int32_t prompt_;
};

std::shared_ptr<PromptFanOut> PromptFanOut::Create(int32_t prompts, int32_t n,
                                                   std::shared_ptr<GenerateObserver> target,
                                                   std::function<void()> on_error) {
  return std::shared_ptr<PromptFanOut>(
      new PromptFanOut(prompts, n, std::move(target), std::move(on_error)));
}

PromptFanOut::PromptFanOut(int32_t prompts, int32_t n, std::shared_ptr<GenerateObserver> target,
                           std::function<void()> on_error)
    : prompts_(std::max(prompts, 1)),
      n_(std::max(n, 1)),
      target_(std::move(target)),
      on_error_(std::move(on_error)),
      finished_(static_cast<size_t>(prompts_) * n_, false),
      prompts_left_(prompts_) {
  merged_.samples = 0;
}

std::shared_ptr<GenerateObserver> PromptFanOut::ObserverFor(int32_t prompt) {
  return std::make_shared<PromptObserver>(shared_from_this(), prompt);
}

void PromptFanOut::OnChunk(int32_t prompt, GeneratedChunk chunk) {
  dikkat::MutexLock lock(&mu_);
  // The engine numbers a request's samples 0..n-1.
  const int32_t sample = std::clamp(chunk.index, 0, n_ - 1);
  chunk.index = prompt * n_ + sample;
  if (chunk.finish.has_value()) finished_[chunk.index] = true;
  target_->OnChunk(std::move(chunk));
}

void PromptFanOut::OnFinish(int32_t prompt, const GenerateSummary& summary) {
  if (Merge(prompt, summary) && on_error_) on_error_();
}

bool PromptFanOut::Merge(int32_t prompt, const GenerateSummary& summary) {
  dikkat::MutexLock lock(&mu_);
  bool first_error = false;
  const bool failed =
      summary.reason == FinishReason::kError || summary.reason == FinishReason::kCancelled;
  if (!failed) {
    for (int32_t sample = 0; sample < n_; ++sample) {
      const int32_t index = prompt * n_ + sample;
      if (finished_[index]) continue;
      finished_[index] = true;
      GeneratedChunk finish;
      finish.index = index;
      finish.finish = summary.reason;
      target_->OnChunk(std::move(finish));
    }
  }
  if (summary.reason == FinishReason::kError && !first_error_.has_value()) {
    first_error_ = summary.status;
    first_error = true;
  }
  any_cancelled_ |= summary.reason == FinishReason::kCancelled;
  if (prompt == 0) merged_.seed = summary.seed;
  merged_.reason = summary.reason;
  merged_.prompt_tokens += summary.prompt_tokens;
  merged_.generated_tokens += summary.generated_tokens;
  merged_.cached_prompt_tokens += summary.cached_prompt_tokens;
  merged_.samples += summary.samples;
  merged_.queue_time = std::max(merged_.queue_time, summary.queue_time);
  merged_.time_to_first_token = std::max(merged_.time_to_first_token, summary.time_to_first_token);
  merged_.total_time = std::max(merged_.total_time, summary.total_time);
  if (--prompts_left_ > 0) return first_error;
  if (first_error_.has_value()) {
    merged_.reason = FinishReason::kError;
    merged_.status = *first_error_;
  } else if (any_cancelled_) {
    merged_.reason = FinishReason::kCancelled;
  }
  target_->OnFinish(merged_);
  return false;  // no sibling left to cancel
}

}  // namespace dikkat::server::openai
