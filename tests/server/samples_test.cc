// Several samples of one prompt (n, best_of) and prompt log-probabilities,
// through the engine on the build-time tiny models. The references are the
// engine's own single-sample runs: sample i of a call with seed s must equal
// a call with n = 1 and seed s + i, token for token, and best_of must return
// the samples of highest cumulative logprob among those runs. (Prompt
// log-probabilities against PyTorch: tests/parity/prompt_logprobs_parity_test.cc.)
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/sync.h"
#include "server/engine.h"
#include "server/sample_group.h"
#include "server/status_util.h"
#include "tests/server/generate_collector.h"

namespace dikkat::server {
namespace {

std::string ModelPath(const std::string& name) {
  return std::string(DIKKAT_BINARY_DIR) + "/models/" + name;
}

double SumLogprobs(const CollectedSample& s) {
  double sum = 0.0;
  for (const GeneratedToken& t : s.tokens) sum += t.logprob;
  return sum;
}

GenerateRequest Sampled(const std::string& prompt, int max_new, uint64_t seed) {
  GenerateRequest r;
  r.prompt.assign(prompt.begin(), prompt.end());  // byte tokenizer: id == byte
  r.sampling.temperature = 1.5f;  // a flat distribution: samples differ
  r.sampling.seed = seed;
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  return r;
}

class SamplesTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> Make(const std::string& model, EngineOptions options = {}) {
    options.kv_cache_bytes = options.kv_cache_bytes ? options.kv_cache_bytes : 8 << 20;
    auto engine = Engine::Create(model, ModelPath(model), options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  std::shared_ptr<GenerateCollector> Run(Engine& engine, const GenerateRequest& request) {
    auto c = std::make_shared<GenerateCollector>();
    absl::StatusOr<RequestId> id = engine.SubmitGenerate(request, c);
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) {
      EXPECT_TRUE(c->Wait());
    }
    return c;
  }

  void ExpectIdle(Engine& engine) {
    for (int i = 0; i < 300; ++i) {
      const EngineStats s = engine.stats();
      if (s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0) return;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "the engine did not go idle with every block released";
  }

  // Of two calls of 2 samples x 400 tokens past the held-output bound
  // together: one refused by it (NeverFits or not; its message with `word`),
  // nothing of it sent; the other whole.
  void ExpectOneRefusedOneWhole(const std::vector<std::shared_ptr<GenerateCollector>>& calls,
                                bool never_fits, const std::string& word) {
    int refused = 0, whole = 0;
    for (const auto& c : calls) {
      ASSERT_TRUE(c->Wait());
      const GenerateSummary s = c->summary();
      if (s.reason == FinishReason::kError) {
        ++refused;
        EXPECT_EQ(s.status.code(), absl::StatusCode::kResourceExhausted) << s.status;
        EXPECT_EQ(NeverFits(s.status), never_fits) << s.status;
        EXPECT_NE(s.status.message().find(word), std::string::npos) << s.status;
        EXPECT_EQ(c->chunks(), 0);
      } else {
        ++whole;
        EXPECT_EQ(s.reason, FinishReason::kLength) << s.status;
        ASSERT_EQ(c->samples().size(), 1u);
        EXPECT_EQ(c->samples().at(0).ids.size(), 400u);
      }
    }
    EXPECT_EQ(refused, 1);
    EXPECT_EQ(whole, 1);
  }
};

// Sample i of a call with seed s equals the call with n = 1 and seed s + i.
TEST_F(SamplesTest, EachSampleEqualsTheSingleRunWithItsSeed) {
  for (const std::string model : {"tiny-lm", "tiny-seq2seq"}) {
    SCOPED_TRACE(model);
    auto engine = Make(model);
    ASSERT_NE(engine, nullptr);
    const std::string prompt = "the samples share this prompt, which spans blocks";
    auto request = [&](uint64_t seed) {
      GenerateRequest r = Sampled(prompt, 12, seed);
      if (model == "tiny-seq2seq") r.source.swap(r.prompt);  // the encoder's input
      return r;
    };
    GenerateRequest call = request(1234);
    call.n = 3;
    auto c = Run(*engine, call);
    const GenerateSummary summary = c->summary();
    ASSERT_EQ(summary.reason, FinishReason::kLength) << summary.status;
    EXPECT_EQ(summary.samples, 3);
    EXPECT_EQ(summary.seed, 1234u);
    EXPECT_EQ(summary.generated_tokens, 36);
    EXPECT_EQ(c->held_chunks(), 0);  // streamed as generated, not held to the end
    const auto samples = c->samples();
    ASSERT_EQ(samples.size(), 3u);
    std::vector<std::vector<int32_t>> distinct;
    for (int i = 0; i < 3; ++i) {
      auto alone = Run(*engine, request(1234 + i))->samples();
      ASSERT_EQ(alone.size(), 1u);
      EXPECT_EQ(samples.at(i).ids, alone.at(0).ids) << "sample " << i;
      EXPECT_EQ(samples.at(i).text, alone.at(0).text) << "sample " << i;
      ASSERT_TRUE(samples.at(i).finish.has_value());
      EXPECT_EQ(*samples.at(i).finish, FinishReason::kLength);
      const double sum = SumLogprobs(samples.at(i));
      EXPECT_NEAR(samples.at(i).cumulative, sum, 1e-3);
      if (std::find(distinct.begin(), distinct.end(), samples.at(i).ids) == distinct.end()) {
        distinct.push_back(samples.at(i).ids);
      }
    }
    EXPECT_GE(distinct.size(), 2u) << "three samples at temperature 1.5 were all equal";
    ExpectIdle(*engine);
  }
}

// The prompt is computed once: the other samples map its blocks from the
// prefix cache.
TEST_F(SamplesTest, SamplesShareThePromptThroughThePrefixCache) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  const std::string prompt(160, 'x');  // 10 blocks of 16
  GenerateRequest call = Sampled(prompt, 4, 7);
  call.n = 4;
  const EngineStats before = engine->stats();
  auto c = Run(*engine, call);
  EXPECT_EQ(c->summary().reason, FinishReason::kLength);
  const EngineStats after = engine->stats();
  // Samples 1..3 map the 9 full blocks before the one holding the last token.
  EXPECT_EQ(after.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens, 3 * 144);
  ExpectIdle(*engine);
}

// best_of = 4, n = 2: the two of highest cumulative logprob among the four
// runs, best first.
TEST_F(SamplesTest, BestOfReturnsTheMostLikelySamplesBestFirst) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  const std::string prompt = "rank these";
  std::vector<std::pair<double, std::vector<int32_t>>> runs;
  for (int i = 0; i < 4; ++i) {
    auto alone = Run(*engine, Sampled(prompt, 8, 99 + i))->samples().at(0);
    runs.emplace_back(SumLogprobs(alone),
                      alone.ids);
  }
  std::stable_sort(runs.begin(), runs.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  GenerateRequest call = Sampled(prompt, 8, 99);
  call.n = 2;
  call.best_of = 4;
  auto c = Run(*engine, call);
  EXPECT_EQ(c->summary().samples, 4);
  EXPECT_EQ(c->summary().generated_tokens, 32);
  // Held to the end and released at once: every chunk marked so, for the
  // front doors' slow-reader bound (GeneratedChunk::held).
  EXPECT_GT(c->chunks(), 0);
  EXPECT_EQ(c->held_chunks(), c->chunks());
  const auto samples = c->samples();
  ASSERT_EQ(samples.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(samples.at(rank).ids, runs[rank].second) << "rank " << rank;
    EXPECT_NEAR(samples.at(rank).cumulative, runs[rank].first, 1e-3);
  }
  EXPECT_GE(samples.at(0).cumulative, samples.at(1).cumulative);
}

// best_of > n holds every sample's output until the last one ends: counted
// in the engine's budget (stats, metrics) and bounded by it. The call whose
// chunk would pass it ends with RESOURCE_EXHAUSTED, nothing of it sent, its
// samples stopped; the count returns to zero and smaller calls go on.
TEST_F(SamplesTest, HeldOutputIsCountedAndBounded) {
  EngineOptions options;
  options.max_held_output_bytes = 64 << 10;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);

  // Counted while held: a long call, cancelled once some output is held.
  // 2 samples x 100 tokens (~170 bytes each as counted) stay under the bound
  // however late the poll below sees them. A loaded machine can run the
  // whole call (~15 ms) before the first poll: then it is submitted again.
  GenerateRequest counted = Sampled("hold me", 100, 3);
  counted.n = 1;
  counted.best_of = 2;
  std::shared_ptr<GenerateCollector> held;
  absl::StatusOr<RequestId> id;
  int64_t seen = 0;
  for (int attempt = 0; attempt < 20 && seen == 0; ++attempt) {
    held = std::make_shared<GenerateCollector>();
    id = engine->SubmitGenerate(counted, held);
    ASSERT_TRUE(id.ok()) << id.status();
    while (seen == 0 && !held->Wait(absl::ZeroDuration())) {
      seen = engine->stats().held_output_bytes;
      if (seen == 0) absl::SleepFor(absl::Microseconds(100));
    }
  }
  EXPECT_GT(seen, 0);
  EXPECT_LE(seen, options.max_held_output_bytes);
  engine->Cancel(*id);
  ASSERT_TRUE(held->Wait());
  EXPECT_EQ(held->chunks(), 0);
  EXPECT_EQ(held->summary().reason, FinishReason::kCancelled);  // not the bound
  ExpectIdle(*engine);
  EXPECT_EQ(engine->stats().held_output_bytes, 0);

  // Past the bound: 4 samples x 400 tokens x (a chunk of a token and 5
  // alternatives, ~200 bytes as counted) need ~320 KB. A stop string (never
  // met) could end it early, so it is not refused at submission
  // (LeastHeldOutputIsRefusedBeforeCompute): it runs until it passes.
  GenerateRequest big = Sampled("too much to hold", 400, 4);
  big.n = 1;
  big.best_of = 4;
  big.sampling.top_logprobs = 5;
  big.stop_strings = {"\x01\x02\x03\x04\x05\x06\x07\x08"};
  auto refused = Run(*engine, big);
  EXPECT_EQ(refused->summary().reason, FinishReason::kError);
  EXPECT_EQ(refused->summary().status.code(), absl::StatusCode::kResourceExhausted)
      << refused->summary().status;
  EXPECT_NE(refused->summary().status.message().find("--max_held_output_bytes"),
            std::string::npos)
      << refused->summary().status;
  EXPECT_TRUE(NeverFits(refused->summary().status));  // alone past it: no retry hint
  EXPECT_EQ(refused->chunks(), 0);  // nothing of a refused call is sent
  EXPECT_LT(refused->summary().generated_tokens, 4 * 400);  // its samples were stopped
  ExpectIdle(*engine);
  EXPECT_EQ(engine->stats().held_output_bytes, 0);

  // A call within the bound still runs whole.
  GenerateRequest small = Sampled("fits", 8, 5);
  small.n = 1;
  small.best_of = 3;
  auto ok = Run(*engine, small);
  EXPECT_EQ(ok->summary().reason, FinishReason::kLength) << ok->summary().status;
  ASSERT_EQ(ok->samples().size(), 1u);
  EXPECT_EQ(ok->samples().at(0).ids.size(), 8u);
  EXPECT_EQ(engine->stats().held_output_bytes, 0);
}

// Calls that each fit the bound but not together: the one whose chunk would
// pass it ends with a retryable RESOURCE_EXHAUSTED (a retry hint: not
// NeverFits), the other runs whole.
TEST_F(SamplesTest, HeldOutputOfCallsTogetherIsRetryable) {
  EngineOptions options;
  // 2 samples x 400 chunks of ~161 bytes (one token, no logprobs): ~129 KB a
  // call, ~258 KB for two. The bound is passed ~250 steps in, so the two
  // need only overlap in their last ~150 steps.
  options.max_held_output_bytes = 160 << 10;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  std::vector<std::shared_ptr<GenerateCollector>> calls;
  for (uint64_t seed : {11, 12}) {
    GenerateRequest r = Sampled("two at once", 400, seed);
    r.n = 1;
    r.best_of = 2;
    auto c = std::make_shared<GenerateCollector>();
    ASSERT_TRUE(engine->SubmitGenerate(r, c).ok());
    calls.push_back(c);
  }
  ExpectOneRefusedOneWhole(calls, /*never_fits=*/false, "together");
  ExpectIdle(*engine);
  EXPECT_EQ(engine->stats().held_output_bytes, 0);
}

// The requests of one call (an OpenAI call with several prompts) that each
// fit the bound but not together: through SubmitGenerateAll they count as
// one call's, so the one whose chunk passes the bound ends with NeverFits (a
// retry would fail again), not a retry hint. A never-met stop string keeps
// them from being refused at submission.
TEST_F(SamplesTest, HeldOutputOfOneCallsPromptsIsOneCalls) {
  EngineOptions options;
  options.max_held_output_bytes = 160 << 10;  // as HeldOutputOfCallsTogetherIsRetryable
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  std::vector<GenerateRequest> requests;
  std::vector<std::shared_ptr<GenerateObserver>> observers;
  std::vector<std::shared_ptr<GenerateCollector>> calls;
  for (uint64_t seed : {11, 12}) {
    GenerateRequest r = Sampled("two at once", 400, seed);
    r.n = 1;
    r.best_of = 2;
    r.stop_strings = {"\x01\x02\x03\x04\x05\x06\x07\x08"};
    requests.push_back(r);
    calls.push_back(std::make_shared<GenerateCollector>());
    observers.push_back(calls.back());
  }
  absl::StatusOr<std::vector<RequestId>> ids =
      engine->SubmitGenerateAll(std::move(requests), std::move(observers));
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ(ids->at(1), ids->at(0) + 2);  // the first one's 2 samples, then the second's
  // The engine does not stop the other request (the OpenAI door does).
  ExpectOneRefusedOneWhole(calls, /*never_fits=*/true, "alone");
  ExpectIdle(*engine);
  EXPECT_EQ(engine->stats().held_output_bytes, 0);
}

// SubmitGenerateAll checks every request first and queues all or none: the
// least output the call's prompts must hold counts together at submission
// (NeverFits, nothing runs), a bad request refuses the whole call (its
// index named), and the ids returned are each request's first.
TEST_F(SamplesTest, SubmitGenerateAllIsAllOrNothing) {
  GenerateRequest a = Sampled("each fits alone", 200, 4);
  a.n = 1;
  a.best_of = 2;
  a.sampling.top_logprobs = 5;
  const int64_t least = LeastHeldOutputBytes(a, 2, 200, 259);
  EngineOptions options;
  options.max_held_output_bytes = least * 3 / 2;  // one fits, two do not
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);

  auto submit = [&](std::vector<GenerateRequest> requests,
                    std::vector<std::shared_ptr<GenerateCollector>>* calls) {
    std::vector<std::shared_ptr<GenerateObserver>> observers;
    for (size_t i = 0; i < requests.size(); ++i) {
      calls->push_back(std::make_shared<GenerateCollector>());
      observers.push_back(calls->back());
    }
    return engine->SubmitGenerateAll(std::move(requests), std::move(observers));
  };
  std::vector<std::shared_ptr<GenerateCollector>> refused_calls;
  absl::Status together = submit({a, a}, &refused_calls).status();
  EXPECT_EQ(together.code(), absl::StatusCode::kResourceExhausted) << together;
  EXPECT_TRUE(NeverFits(together)) << together;
  EXPECT_NE(together.message().find("2 prompts together"), std::string::npos) << together;

  GenerateRequest bad = Sampled("", 8, 5);  // an empty prompt
  absl::Status invalid = submit({Sampled("fine", 8, 6), bad}, &refused_calls).status();
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument) << invalid;
  EXPECT_EQ(invalid.message().rfind("prompt[1]: ", 0), 0u) << invalid;
  // A prompt that alone never fits keeps its NeverFits mark under the
  // prefix (the OpenAI door's 400 rather than 429).
  GenerateRequest alone_too_big = a;
  alone_too_big.best_of = 4;
  absl::Status never = submit({Sampled("fine", 8, 6), alone_too_big}, &refused_calls).status();
  EXPECT_TRUE(NeverFits(never)) << never;
  EXPECT_EQ(never.message().rfind("prompt[1]: best_of = 4", 0), 0u) << never;
  // More requests (prompts x samples) than the queue holds: never queued.
  {
    EngineOptions small_queue;
    small_queue.max_queue = 4;
    auto queue_engine = Make("tiny-lm", small_queue);
    ASSERT_NE(queue_engine, nullptr);
    GenerateRequest three = Sampled("three", 8, 9);
    three.n = 3;
    std::vector<std::shared_ptr<GenerateObserver>> two_observers = {
        std::make_shared<GenerateCollector>(), std::make_shared<GenerateCollector>()};
    absl::Status queue = queue_engine->SubmitGenerateAll({three, three}, two_observers).status();
    EXPECT_TRUE(NeverFits(queue)) << queue;
    EXPECT_NE(queue.message().find("--max_queue of 4"), std::string::npos) << queue;
    auto one = std::make_shared<GenerateCollector>();
    ASSERT_TRUE(queue_engine->SubmitGenerateAll({three}, {one}).ok());
    ASSERT_TRUE(one->Wait());
    EXPECT_EQ(one->summary().reason, FinishReason::kLength);
  }
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(engine->stats().requests_finished, 0);  // nothing of either ran
  for (auto& c : refused_calls) EXPECT_FALSE(c->Wait(absl::ZeroDuration()));

  // Alone it runs whole; beside a call that holds nothing, too.
  std::vector<std::shared_ptr<GenerateCollector>> calls;
  GenerateRequest streamed = Sampled("streamed", 8, 7);
  streamed.n = 3;
  absl::StatusOr<std::vector<RequestId>> ids = submit({a, streamed, Sampled("one", 8, 8)}, &calls);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ(ids->at(1), ids->at(0) + 2);
  EXPECT_EQ(ids->at(2), ids->at(1) + 3);
  for (auto& c : calls) {
    ASSERT_TRUE(c->Wait());
    EXPECT_EQ(c->summary().reason, FinishReason::kLength) << c->summary().status;
  }
  EXPECT_EQ(calls[0]->samples().at(0).ids.size(), 200u);
  EXPECT_EQ(calls[1]->samples().size(), 3u);
  EXPECT_EQ(calls[2]->ids().size(), 8u);
  ExpectIdle(*engine);
  EXPECT_EQ(engine->stats().held_output_bytes, 0);
}

// A call that must hold more than the bound (nothing can end it early:
// ignore_eos, no stop tokens or strings) is refused at submission, before
// any compute, as NeverFits; the same call that could stop early is taken.
TEST_F(SamplesTest, LeastHeldOutputIsRefusedBeforeCompute) {
  EngineOptions options;
  options.max_held_output_bytes = 64 << 10;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  // 4 samples x 400 tokens x (a chunk, a token, 5 alternatives) > 64 KiB.
  GenerateRequest r = Sampled("too much to hold", 400, 4);
  r.n = 1;
  r.best_of = 4;
  r.sampling.top_logprobs = 5;
  EXPECT_GT(LeastHeldOutputBytes(r, 4, 400, 256), options.max_held_output_bytes);
  auto c = std::make_shared<GenerateCollector>();
  absl::Status refused = engine->SubmitGenerate(r, c).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(NeverFits(refused)) << refused;
  EXPECT_NE(refused.message().find("--max_held_output_bytes"), std::string::npos) << refused;
  EXPECT_EQ(engine->stats().requests_finished, 0);  // nothing ran

  // The bound counts from the tokens every sample must make: a short call,
  // or one n == best_of (nothing held), is taken.
  GenerateRequest shorter = r;
  shorter.max_new_tokens = 8;
  EXPECT_EQ(Run(*engine, shorter)->summary().reason, FinishReason::kLength);
  GenerateRequest streamed = r;
  streamed.n = 4;
  EXPECT_EQ(Run(*engine, streamed)->summary().reason, FinishReason::kLength);
  // Nor is a call that could stop early (at EOS, a stop token or a stop
  // string) refused here: its held output is bounded as it runs
  // (HeldOutputIsCountedAndBounded).
  GenerateRequest may_stop = r;
  may_stop.ignore_eos = false;
  GenerateRequest stop_token = r;
  stop_token.stop_token_ids = {1};
  GenerateRequest stop_string = r;
  stop_string.stop_strings = {"\x01\x02\x03\x04\x05\x06\x07\x08"};
  // The tokens counted are those the context leaves: a call asking for more
  // than fit after its prompt is bounded by what it can make. Here the
  // capped call fits with a margin, the uncapped one would not.
  GenerateRequest one = r;
  one.sampling.top_logprobs = 0;
  const int64_t per_token = LeastHeldOutputBytes(one, 1, 1, 259);
  const int64_t fits = options.max_held_output_bytes / (2 * per_token) - 16;
  GenerateRequest capped = Sampled(std::string(512 - fits, 'a'), 400, 6);
  capped.n = 1;
  capped.best_of = 2;
  ASSERT_LT(fits, 400);
  EXPECT_GT(LeastHeldOutputBytes(capped, 2, 400, 259), options.max_held_output_bytes);
  for (const GenerateRequest& taken : {may_stop, stop_token, stop_string, capped}) {
    auto c = std::make_shared<GenerateCollector>();
    absl::StatusOr<RequestId> id = engine->SubmitGenerate(taken, c);
    ASSERT_TRUE(id.ok()) << id.status();
    engine->Cancel(*id);
    ASSERT_TRUE(c->Wait());
  }
  // The prompt's logprobs are held whatever is generated: alone past the
  // bound, the call is refused too, and says what to shorten.
  GenerateRequest scored = r;
  scored.ignore_eos = false;
  scored.prompt_logprobs = 2;
  EXPECT_EQ(LeastHeldOutputBytes(scored, 4, 0, 259),
            static_cast<int64_t>(r.prompt.size() - 1) *
                static_cast<int64_t>(sizeof(GeneratedToken) + 2 * sizeof(TokenAlternative)));
  scored.prompt.assign(400, 'b');
  scored.prompt_logprobs = 20;
  ASSERT_GT(LeastHeldOutputBytes(scored, 4, 0, 259), options.max_held_output_bytes);
  absl::Status too_many = engine->SubmitGenerate(scored, std::make_shared<GenerateCollector>()).status();
  EXPECT_TRUE(NeverFits(too_many)) << too_many;
  EXPECT_NE(too_many.message().find("prompt_logprobs"), std::string::npos) << too_many;
  ExpectIdle(*engine);
}

// LeastHeldOutputBytes is a lower bound of what the engine counts: the same
// call streamed (n == best_of, nothing held) delivers at least that many
// bytes of chunks, as ChunkBytes counts them.
TEST_F(SamplesTest, LeastHeldOutputIsALowerBound) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  GenerateRequest r = Sampled("count what you hold", 40, 8);
  r.n = 3;
  r.best_of = 3;
  r.sampling.top_logprobs = 4;
  r.prompt_logprobs = 3;
  auto c = Run(*engine, r);
  EXPECT_EQ(c->summary().reason, FinishReason::kLength) << c->summary().status;
  const int64_t least = LeastHeldOutputBytes(r, 3, 40, 259);
  EXPECT_GT(least, 0);
  EXPECT_GE(c->chunk_bytes(), least);
  // Tight: beyond the bound, only the text and the samples' end chunks.
  int64_t text = 0;
  for (const auto& [index, sample] : c->samples()) text += static_cast<int64_t>(sample.text.size());
  EXPECT_LE(c->chunk_bytes(),
            least + text + 3 * static_cast<int64_t>(sizeof(GeneratedChunk)));
}

TEST_F(SamplesTest, CancellingTheCallStopsEverySample) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  GenerateRequest call = Sampled("cancel all of us", 400, 5);
  call.n = 3;
  auto c = std::make_shared<GenerateCollector>();
  absl::StatusOr<RequestId> id = engine->SubmitGenerate(call, c);
  ASSERT_TRUE(id.ok());
  while (c->chunks() < 6) absl::SleepFor(absl::Milliseconds(1));
  engine->Cancel(*id);
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->summary().reason, FinishReason::kCancelled);
  EXPECT_LT(c->summary().generated_tokens, 3 * 400);
  ExpectIdle(*engine);
}

TEST_F(SamplesTest, RejectsBadSampleCounts) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  auto submit = [&](GenerateRequest r) {
    return engine->SubmitGenerate(std::move(r), std::make_shared<GenerateCollector>()).status();
  };
  GenerateRequest r = Sampled("x", 4, 1);
  r.n = 17;
  r.best_of = 17;
  EXPECT_EQ(submit(r).code(), absl::StatusCode::kInvalidArgument);
  r.n = 3;
  r.best_of = 2;
  EXPECT_EQ(submit(r).code(), absl::StatusCode::kInvalidArgument);
  r.best_of = 3;
  r.sampling.temperature = 0;
  const absl::Status greedy = submit(r);
  EXPECT_EQ(greedy.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(greedy.message().find("temperature"), std::string::npos) << greedy;
  GenerateRequest score = Sampled("x", 0, 1);
  score.prompt_only = true;
  EXPECT_EQ(submit(score).code(), absl::StatusCode::kInvalidArgument);  // needs prompt_logprobs
  score.prompt_logprobs = 21;
  EXPECT_EQ(submit(score).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SamplesTest, BeamSearchChecksAndCancellation) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  auto submit = [&](GenerateRequest r) {
    return engine->SubmitGenerate(std::move(r), std::make_shared<GenerateCollector>()).status();
  };
  GenerateRequest r = Sampled("beams", 8, 1);
  r.beam_width = 3;
  r.n = 4;  // more hypotheses than beams
  EXPECT_EQ(submit(r).code(), absl::StatusCode::kInvalidArgument);
  r.n = 2;
  r.stop_strings = {"x"};
  const absl::Status stops = submit(r);
  EXPECT_EQ(stops.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stops.message().find("stop_token_ids"), std::string::npos) << stops;
  r.stop_strings.clear();
  r.beam_width = 17;
  EXPECT_EQ(submit(r).code(), absl::StatusCode::kInvalidArgument);
  r.beam_width = 3;
  r.length_penalty = 11.0f;
  EXPECT_EQ(submit(r).code(), absl::StatusCode::kInvalidArgument);
  r.length_penalty = 1.0f;
  r.prompt_logprobs = 0;
  EXPECT_EQ(submit(r).code(), absl::StatusCode::kInvalidArgument);

  // A long search, cancelled: it ends CANCELLED and frees every block.
  GenerateRequest slow = Sampled("cancel the beams", 400, 1);
  slow.beam_width = 4;
  auto c = std::make_shared<GenerateCollector>();
  absl::StatusOr<RequestId> id = engine->SubmitGenerate(slow, c);
  ASSERT_TRUE(id.ok()) << id.status();
  // Cancelled as soon as it runs: the whole search takes only tens of
  // milliseconds on tiny-lm, so a fixed wait could outlast it.
  for (int i = 0; i < 2000 && engine->stats().running == 0; ++i) {
    absl::SleepFor(absl::Microseconds(100));
  }
  engine->Cancel(*id);
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->summary().reason, FinishReason::kCancelled);
  EXPECT_TRUE(c->samples().empty());
  ExpectIdle(*engine);

  // n = 1 of 2 beams, ignore_eos: one hypothesis of exactly max_new tokens.
  GenerateRequest one = Sampled("one hypothesis", 10, 1);
  one.beam_width = 2;
  one.n = 1;
  auto b = Run(*engine, one);
  ASSERT_EQ(b->samples().size(), 1u);
  EXPECT_EQ(b->samples().at(0).ids.size(), 10u);
  EXPECT_TRUE(b->samples().at(0).finish.has_value());
  EXPECT_EQ(b->held_chunks(), b->chunks());  // the final beams: released at the end
  ExpectIdle(*engine);
}

// Prompt logprobs: sent once with the first chunk, one per prompt token after
// the first, the same whether the prompt runs in one chunk or many, beside
// other requests or not, and whether or not its prefix is cached.
TEST_F(SamplesTest, PromptLogprobsDoNotDependOnChunkingOrTheCache) {
  const std::string prompt = "score every token of this prompt, which is long enough to need "
                             "several chunks and several blocks";
  auto score = [&](Engine& engine, bool prompt_only) {
    GenerateRequest r = Sampled(prompt, prompt_only ? 0 : 3, 3);
    r.prompt_logprobs = 2;
    r.prompt_only = prompt_only;
    return Run(engine, r);
  };
  auto whole = Make("tiny-lm");
  ASSERT_NE(whole, nullptr);
  auto reference = score(*whole, /*prompt_only=*/true);
  EXPECT_EQ(reference->summary().reason, FinishReason::kLength);
  EXPECT_EQ(reference->summary().generated_tokens, 0);
  const std::vector<GeneratedToken> expected = reference->prompt_logprobs();
  ASSERT_EQ(expected.size(), prompt.size() - 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].token_id, static_cast<unsigned char>(prompt[i + 1]));
    EXPECT_LE(expected[i].logprob, 0.0f);
    ASSERT_EQ(expected[i].top.size(), 2u);
    EXPECT_GE(expected[i].top[0].logprob, expected[i].top[1].logprob);
    EXPECT_GE(expected[i].top[0].logprob + 1e-6f, expected[i].logprob);
  }

  EngineOptions chunked;
  chunked.max_batch_tokens = 7;  // the prompt runs in chunks of at most 7 tokens
  auto small = Make("tiny-lm", chunked);
  ASSERT_NE(small, nullptr);
  // Cache the prompt's blocks first: the scoring request must not map them.
  Run(*small, Sampled(prompt, 1, 1));
  auto c = score(*small, /*prompt_only=*/false);
  EXPECT_EQ(c->summary().cached_prompt_tokens, 0);
  EXPECT_EQ(c->summary().generated_tokens, 3);
  const std::vector<GeneratedToken> got = c->prompt_logprobs();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token_id, expected[i].token_id);
    EXPECT_NEAR(got[i].logprob, expected[i].logprob, 1e-4) << "position " << i + 1;
    ASSERT_EQ(got[i].top.size(), 2u);
    EXPECT_EQ(got[i].top[0].token_id, expected[i].top[0].token_id);
  }
  ExpectIdle(*small);

  // A budget of one token a step: every chunk is one token long, and each is
  // scored (they were skipped, and with them every later position).
  EngineOptions single;
  single.max_batch_tokens = 1;
  auto one = Make("tiny-lm", single);
  ASSERT_NE(one, nullptr);
  auto d = score(*one, /*prompt_only=*/true);
  const std::vector<GeneratedToken> each = d->prompt_logprobs();
  ASSERT_EQ(each.size(), expected.size());
  for (size_t i = 0; i < each.size(); ++i) {
    EXPECT_EQ(each[i].token_id, expected[i].token_id);
    EXPECT_NEAR(each[i].logprob, expected[i].logprob, 1e-4) << "position " << i + 1;
  }
  ExpectIdle(*one);
}

// Sample 0 alone scores the prompt, and the caller's first chunk must carry
// the scores (gRPC: the first message's prompt_logprobs; the OpenAI port
// echoes them in every choice). Another sample may run ahead of sample 0,
// whose prefill returns every row's logits in smaller chunks (or without
// the prefix cache): its chunks, and even its end, wait for sample 0's.
TEST(SampleGroupTest, TheFirstChunkCarriesThePromptScores) {
  auto collector = std::make_shared<GenerateCollector>();
  SampleGroup group(collector, /*n=*/3, /*best_of=*/3, std::nullopt);
  group.ExpectPromptScores();
  GeneratedChunk ahead;
  ahead.tokens = {GeneratedToken{7, -0.5f, {}}};
  ahead.text = "a";
  EXPECT_FALSE(group.OnChunk(1, ahead));
  EXPECT_FALSE(group.OnChunk(2, ahead));
  GenerateSummary ended;
  ended.reason = FinishReason::kLength;
  EXPECT_FALSE(group.OnSampleFinish(2, ended, -0.5));
  EXPECT_EQ(collector->chunks(), 0);
  GeneratedChunk scored;
  scored.tokens = {GeneratedToken{8, -0.25f, {}}};
  scored.text = "b";
  scored.prompt_logprobs = {GeneratedToken{3, -1.0f, {}}};
  EXPECT_FALSE(group.OnChunk(0, scored));
  EXPECT_EQ(collector->prompt_logprobs_chunk(), 0);
  EXPECT_EQ(collector->order(), (std::vector<int32_t>{0, 1, 2, 2}));
  // From then on, in the order they come.
  EXPECT_FALSE(group.OnChunk(1, ahead));
  EXPECT_FALSE(group.OnSampleFinish(1, ended, -1.0));
  EXPECT_FALSE(group.OnSampleFinish(0, ended, -0.25));
  EXPECT_EQ(collector->order(), (std::vector<int32_t>{0, 1, 2, 2, 1, 1, 0}));
  ASSERT_TRUE(group.done());
  group.Finish();
  ASSERT_TRUE(collector->Wait(absl::Seconds(1)));
  const std::map<int32_t, CollectedSample> samples = collector->samples();
  EXPECT_EQ(samples.at(1).text, "aa");
  EXPECT_EQ(samples.at(2).text, "a");

  // Sample 0 ending without a chunk lets the others' out too.
  auto second = std::make_shared<GenerateCollector>();
  SampleGroup quiet(second, 2, 2, std::nullopt);
  quiet.ExpectPromptScores();
  EXPECT_FALSE(quiet.OnChunk(1, ahead));
  EXPECT_EQ(second->chunks(), 0);
  EXPECT_FALSE(quiet.OnSampleFinish(0, ended, 0.0));
  EXPECT_EQ(second->order(), (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace dikkat::server
