// PromptFanOut: the engine requests of one OpenAI call with several prompts
// (server/openai_request.h, GenerateCall) seen as one Generate output.
//
// Each prompt is its own engine request (so that they batch like any
// others); the observer of prompt p renumbers its chunks to the call's
// choice p * n + sample, and the target observer receives:
//  - every chunk, renumbered, as it comes;
//  - when prompt p's request ends normally (EOS, length, stop, deadline), a
//    text-less chunk with that finish for each of its samples whose finish
//    the engine did not send itself (a single-sample request's finish comes
//    only in its summary), so that each choice carries its own prompt's
//    finish reason;
//  - once every prompt's request has finished, one summary: token counts
//    and samples summed, reason kError (with the first error's status) if
//    any request failed, else kCancelled if any was cancelled, else the last
//    request's reason; seed of the first prompt; the longest times.
// The first request that fails while siblings still run calls `on_error`
// (once, outside the lock, on the failing request's thread): the whole call
// fails anyway, so the caller cancels the siblings there rather than let
// them use compute and KV blocks to the end.
//
// Thread-safe: the per-prompt observers may be called from any thread (an
// engine thread); the target is called under the fan-out's lock, one call at
// a time, and must not block.
#ifndef DIKKAT_SERVER_PROMPT_FAN_OUT_H_
#define DIKKAT_SERVER_PROMPT_FAN_OUT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/sync.h"
#include "server/engine.h"

namespace dikkat::server::openai {

class PromptFanOut : public std::enable_shared_from_this<PromptFanOut> {
 public:
  // `prompts` >= 1 requests of `n` >= 1 returned samples each.
  // `on_error` may be empty.
  static std::shared_ptr<PromptFanOut> Create(int32_t prompts, int32_t n,
                                              std::shared_ptr<GenerateObserver> target,
                                              std::function<void()> on_error = {});

  // The observer to submit prompt `prompt`'s request with (0 <= prompt <
  // prompts); it keeps the fan-out alive.
  std::shared_ptr<GenerateObserver> ObserverFor(int32_t prompt);

 private:
  class PromptObserver;

  PromptFanOut(int32_t prompts, int32_t n, std::shared_ptr<GenerateObserver> target,
               std::function<void()> on_error);
  void OnChunk(int32_t prompt, GeneratedChunk chunk);
  void OnFinish(int32_t prompt, const GenerateSummary& summary);
  // Merges one request's end; true for the first failure while siblings run.
  bool Merge(int32_t prompt, const GenerateSummary& summary);

  const int32_t prompts_;
  const int32_t n_;
  const std::shared_ptr<GenerateObserver> target_;
  const std::function<void()> on_error_;
  dikkat::Mutex mu_;
  // Per choice (prompt * n + sample): its finish was sent.
  std::vector<bool> finished_ ABSL_GUARDED_BY(mu_);
  int32_t prompts_left_ ABSL_GUARDED_BY(mu_);
  GenerateSummary merged_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> first_error_ ABSL_GUARDED_BY(mu_);
  bool any_cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dikkat::server::openai

#endif  // DIKKAT_SERVER_PROMPT_FAN_OUT_H_
