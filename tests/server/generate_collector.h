// GenerateCollector: a GenerateObserver that records one Generate request's
// output for tests, per sample (GeneratedChunk::index), and lets the test
// wait for OnFinish. It checks the observer contract as it goes: no chunk
// after OnFinish, no chunk of a sample after that sample's finish, prompt
// logprobs at most once. Thread-safe (the engine thread writes, the test
// reads).
#ifndef DIKKAT_TESTS_SERVER_GENERATE_COLLECTOR_H_
#define DIKKAT_TESTS_SERVER_GENERATE_COLLECTOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/sync.h"
#include "server/engine.h"

namespace dikkat::server {

// One sample's output, as the chunks delivered it.
struct CollectedSample {
  std::vector<GeneratedToken> tokens;
  std::vector<int32_t> ids;
  std::string text;
  std::optional<FinishReason> finish;  // set by the chunk ending it (several samples, beams)
  double cumulative = 0.0;
  std::optional<double> beam_score;
};

class GenerateCollector : public GenerateObserver {
 public:
  void OnChunk(GeneratedChunk chunk) override {
    dikkat::MutexLock lock(&mu_);
    chunk_bytes_ += ChunkBytes(chunk);  // before the prompt logprobs move out
    EXPECT_FALSE(done_.HasBeenNotified()) << "a chunk after OnFinish";
    CollectedSample& s = samples_[chunk.index];
    EXPECT_FALSE(s.finish.has_value()) << "sample " << chunk.index << " has a chunk after its end";
    for (const GeneratedToken& t : chunk.tokens) {
      s.tokens.push_back(t);
      s.ids.push_back(t.token_id);
    }
    s.text += chunk.text;
    if (chunk.finish.has_value()) {
      s.finish = chunk.finish;
      s.cumulative = chunk.cumulative_logprob;
      s.beam_score = chunk.beam_score;
    }
    if (!chunk.prompt_logprobs.empty()) {
      EXPECT_TRUE(prompt_logprobs_.empty()) << "prompt logprobs sent twice";
      prompt_logprobs_ = std::move(chunk.prompt_logprobs);
      prompt_logprobs_chunk_ = chunks_;
    }
    order_.push_back(chunk.index);
    ++chunks_;
    if (chunk.held) ++held_chunks_;
  }
  void OnFinish(GenerateSummary summary) override {
    dikkat::MutexLock lock(&mu_);
    summary_ = summary;
    done_.Notify();
  }

  bool Wait(absl::Duration timeout = absl::Seconds(120)) {
    return done_.WaitForNotificationWithTimeout(timeout);
  }
  // Sample 0 (the only one of a single-sample request); empty before any chunk.
  std::vector<int32_t> ids() { return First().ids; }
  std::vector<GeneratedToken> tokens() { return First().tokens; }
  std::string text() { return First().text; }
  // Every sample that sent a chunk, by index.
  std::map<int32_t, CollectedSample> samples() {
    dikkat::MutexLock lock(&mu_);
    return samples_;
  }
  std::vector<GeneratedToken> prompt_logprobs() {
    dikkat::MutexLock lock(&mu_);
    return prompt_logprobs_;
  }
  // The chunk (0 = the first) that carried the prompt logprobs; -1: none.
  int prompt_logprobs_chunk() {
    dikkat::MutexLock lock(&mu_);
    return prompt_logprobs_chunk_;
  }
  // The sample index of every chunk, in the order they came.
  std::vector<int32_t> order() {
    dikkat::MutexLock lock(&mu_);
    return order_;
  }
  int chunks() {
    dikkat::MutexLock lock(&mu_);
    return chunks_;
  }
  // Chunks marked GeneratedChunk::held (released at the end: best_of > n, beams).
  // The chunks' ChunkBytes, summed (what the engine counts while it holds them).
  int64_t chunk_bytes() {
    dikkat::MutexLock lock(&mu_);
    return chunk_bytes_;
  }
  int held_chunks() {
    dikkat::MutexLock lock(&mu_);
    return held_chunks_;
  }
  GenerateSummary summary() {
    dikkat::MutexLock lock(&mu_);
    return summary_;
  }

 private:
  CollectedSample First() {
    dikkat::MutexLock lock(&mu_);
    auto it = samples_.find(0);
    return it == samples_.end() ? CollectedSample{} : it->second;
  }

  dikkat::Mutex mu_;
  std::map<int32_t, CollectedSample> samples_;
  std::vector<GeneratedToken> prompt_logprobs_;
  int prompt_logprobs_chunk_ = -1;
  std::vector<int32_t> order_;
  GenerateSummary summary_;
  int chunks_ = 0;
  int held_chunks_ = 0;
  int64_t chunk_bytes_ = 0;
  dikkat::Notification done_;
};

}  // namespace dikkat::server

#endif  // DIKKAT_TESTS_SERVER_GENERATE_COLLECTOR_H_
