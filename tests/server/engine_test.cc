// The engine on the build-time tiny models: generation, continuous batching
// equivalence, cancellation and deadlines freeing KV blocks, backpressure,
// Encode and Attention.
#include "server/engine.h"
#include "tests/server/generate_collector.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "common/sync.h"
#include "server/convert.h"
#include "server/status_util.h"

namespace dikkat::server {
namespace {

std::string ModelPath(const std::string& name) {
  return std::string(DIKKAT_BINARY_DIR) + "/models/" + name;
}

GenerateRequest Greedy(const std::string& prompt, int max_new) {
  GenerateRequest r;
  r.prompt.assign(prompt.begin(), prompt.end());  // byte tokenizer: id == byte
  r.sampling.temperature = 0;
  r.max_new_tokens = max_new;
  r.ignore_eos = true;
  return r;
}

// Records the engine's steps (the metrics' view of them).
class StepRecorder : public EngineListener {
 public:
  void OnStep(const StepTiming& step) override {
    dikkat::MutexLock lock(&mu_);
    steps_.push_back(step);
  }
  std::vector<StepTiming> steps() {
    dikkat::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  dikkat::Mutex mu_;
  std::vector<StepTiming> steps_;
};

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> Make(const std::string& model, EngineOptions options = {}) {
    options.kv_cache_bytes = options.kv_cache_bytes ? options.kv_cache_bytes : 8 << 20;
    auto engine = Engine::Create(model, ModelPath(model), options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  std::vector<int32_t> RunAlone(Engine& engine, const GenerateRequest& request) {
    auto c = std::make_shared<GenerateCollector>();
    EXPECT_TRUE(engine.SubmitGenerate(request, c).ok());
    EXPECT_TRUE(c->Wait());
    return c->ids();
  }

  void WaitIdle(Engine& engine) {
    for (int i = 0; i < 200; ++i) {
      EngineStats s = engine.stats();
      if (s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0) return;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
};

TEST_F(EngineTest, GeneratesExactlyMaxNewTokensAndFreesBlocks) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->Warmup().ok());
  auto c = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(Greedy("Hello, dikkat", 20), c).ok());
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->ids().size(), 20u);
  EXPECT_EQ(c->summary().reason, FinishReason::kLength);
  EXPECT_EQ(c->summary().prompt_tokens, 13);
  EXPECT_EQ(c->summary().generated_tokens, 20);
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, ConcurrentGreedyStreamsMatchEachAlone) {
  EngineOptions options;
  options.max_batch_tokens = 64;  // forces chunked prefill and mixed steps
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    requests.push_back(Greedy(std::string(5 + 7 * i, static_cast<char>('a' + i)) + "xyz", 8 + i));
  }
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : requests) alone.push_back(RunAlone(*engine, r));
  std::vector<std::shared_ptr<GenerateCollector>> collectors;
  for (const auto& r : requests) {
    collectors.push_back(std::make_shared<GenerateCollector>());
    ASSERT_TRUE(engine->SubmitGenerate(r, collectors.back()).ok());
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(collectors[i]->Wait());
    EXPECT_EQ(collectors[i]->ids(), alone[i]) << "request " << i;
  }
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

// Every EOS id of the config ends generation as EOS (Llama-3 Instruct's
// <|eot_id|> beside <|end_of_text|>): a copy of tiny-lm whose second EOS id is
// a token seeded sampling makes.
TEST_F(EngineTest, EveryEosIdEndsGeneration) {
  namespace fs = std::filesystem;
  GenerateRequest r = Greedy("hello", 12);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  auto plain = Make("tiny-lm");
  ASSERT_NE(plain, nullptr);
  const std::vector<int32_t> ids = RunAlone(*plain, r);
  ASSERT_EQ(ids.size(), 12u);
  size_t k = 1;  // the first id from 1 on that sampling did not make before
  while (k < ids.size() && std::find(ids.begin(), ids.begin() + k, ids[k]) != ids.begin() + k) ++k;
  ASSERT_LT(k, ids.size()) << "sampling repeated one token";
  plain.reset();

  std::string dir = (fs::temp_directory_path() / "dikkat_eos_XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  fs::copy_file(ModelPath("tiny-lm") + "/model.safetensors", dir + "/model.safetensors");
  std::ifstream in(ModelPath("tiny-lm") + "/dikkat.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t brace = config.rfind('}');
  ASSERT_NE(brace, std::string::npos);
  config.insert(brace, absl::StrCat(", \"more_eos_token_ids\": [", ids[k], "]\n"));
  std::ofstream(dir + "/dikkat.json") << config;

  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create("eos", dir, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  r.ignore_eos = false;
  auto c = std::make_shared<GenerateCollector>();
  ASSERT_TRUE((*engine)->SubmitGenerate(r, c).ok());
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->ids(), std::vector<int32_t>(ids.begin(), ids.begin() + k + 1));
  EXPECT_EQ(c->summary().reason, FinishReason::kEos);
  // ignore_eos runs past it.
  r.ignore_eos = true;
  EXPECT_EQ(RunAlone(**engine, r), ids);
  engine->reset();
  fs::remove_all(dir);
}

// --max_context serves a model with a shorter context than its
// max_positions, so that a KV budget too small for its full context still
// serves it; without it the error (before any weights are read) says how
// many tokens fit.
TEST_F(EngineTest, MaxContextCapsTheContextTheKvCacheMustHold) {
  EngineOptions options;
  options.kv_cache_bytes = 128 << 10;  // tiny-lm: 1 KiB a token, 512 positions
  absl::StatusOr<std::unique_ptr<Engine>> refused =
      Engine::Create("tiny-lm", ModelPath("tiny-lm"), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::AllOf(::testing::HasSubstr("--max_context (128 tokens fit)"),
                               ::testing::HasSubstr("512 tokens")));
  options.max_context = 100;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create("tiny-lm", ModelPath("tiny-lm"), options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->description().config.max_positions, 100);
  // A prompt within the capped context runs up to it; past it is refused.
  GenerateRequest r = Greedy(std::string(90, 'a'), 50);
  auto c = std::make_shared<GenerateCollector>();
  ASSERT_TRUE((*engine)->SubmitGenerate(r, c).ok());
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->ids().size(), 10u);  // 90 + 10 = the context
  EXPECT_EQ(c->summary().reason, FinishReason::kLength);
  absl::StatusOr<RequestId> too_long =
      (*engine)->SubmitGenerate(Greedy(std::string(100, 'a'), 1), std::make_shared<GenerateCollector>());
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()), ::testing::HasSubstr("100"));
  options.max_context = -1;
  EXPECT_FALSE(Engine::Create("tiny-lm", ModelPath("tiny-lm"), options).ok());
}

// logit_bias through the engine: +100 forces a token at every step, -100
// keeps the greedy choice out, and an id outside the vocabulary is refused
// at submit.
TEST_F(EngineTest, LogitBiasForcesAndBansTokens) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  const GenerateRequest plain = Greedy("Hello, dikkat", 10);
  const std::vector<int32_t> base = RunAlone(*engine, plain);
  ASSERT_EQ(base.size(), 10u);

  GenerateRequest forced = plain;
  forced.sampling.logit_bias = {{'z', 100.0f}};
  EXPECT_THAT(RunAlone(*engine, forced), ::testing::Each('z'));

  GenerateRequest banned = plain;
  banned.sampling.logit_bias = {{base[0], -100.0f}};
  const std::vector<int32_t> without = RunAlone(*engine, banned);
  ASSERT_EQ(without.size(), 10u);
  EXPECT_THAT(without, ::testing::Not(::testing::Contains(base[0])));

  GenerateRequest outside = plain;
  outside.sampling.logit_bias = {{259, 1.0f}};
  absl::StatusOr<RequestId> refused =
      engine->SubmitGenerate(outside, std::make_shared<GenerateCollector>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("logit_bias: token id 259"));
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, AHighPriorityRequestOvertakesAFullBatch) {
  EngineOptions options;
  options.max_batch_size = 2;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  GenerateRequest low = Greedy("low priority, long", 480);
  GenerateRequest high = Greedy("urgent", 8);
  high.priority = 5;
  const std::vector<int32_t> high_alone = RunAlone(*engine, high);
  const std::vector<int32_t> low_alone = RunAlone(*engine, low);
  auto low1 = std::make_shared<GenerateCollector>(), low2 = std::make_shared<GenerateCollector>();
  const absl::Time submitted = absl::Now();
  ASSERT_TRUE(engine->SubmitGenerate(low, low1).ok());
  ASSERT_TRUE(engine->SubmitGenerate(low, low2).ok());
  while (low2->ids().size() < 5) absl::SleepFor(absl::Milliseconds(1));  // both run
  const absl::Duration both_running = absl::Now() - submitted;
  auto urgent = std::make_shared<GenerateCollector>();
  const bool raced = low1->ids().size() > 400;  // this thread slept through most of it
  ASSERT_TRUE(engine->SubmitGenerate(high, urgent).ok());
  ASSERT_TRUE(urgent->Wait());
  // The batch was full of lower priorities: one was preempted to make room,
  // so the urgent request finished while both long ones were still going.
  if (!raced) {
    EXPECT_LT(low1->ids().size(), 480u);
    EXPECT_LT(low2->ids().size(), 480u);
  }
  EXPECT_EQ(urgent->ids(), high_alone);
  ASSERT_TRUE(low1->Wait());
  ASSERT_TRUE(low2->Wait());
  EXPECT_EQ(low1->ids(), low_alone);
  EXPECT_EQ(low2->ids(), low_alone);  // recomputed after its preemption, same tokens
  if (!raced) {
    EXPECT_GE(engine->stats().preemptions, 1);
  }
  // Both were admitted before they both ran: the queue time ends at the first
  // admission, not at the preempted one's readmission.
  EXPECT_LT(low1->summary().queue_time, both_running);
  EXPECT_LT(low2->summary().queue_time, both_running);
}

TEST_F(EngineTest, CancelStopsGenerationAndFreesBlocks) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  auto c = std::make_shared<GenerateCollector>();
  auto id = engine->SubmitGenerate(Greedy("cancel me", 400), c);
  ASSERT_TRUE(id.ok());
  while (c->chunks() < 2) absl::SleepFor(absl::Milliseconds(1));
  engine->Cancel(*id);
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->summary().reason, FinishReason::kCancelled);
  EXPECT_LT(c->summary().generated_tokens, 400);
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, DeadlineStopsGeneration) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  auto c = std::make_shared<GenerateCollector>();
  GenerateRequest r = Greedy("deadline", 480);
  // tiny-lm generates 480 tokens in ~30 ms on a fast core: a deadline well
  // inside that (if the machine is slow, it passes while queued: the same
  // reason).
  r.deadline = absl::Now() + absl::Milliseconds(5);
  ASSERT_TRUE(engine->SubmitGenerate(r, c).ok());
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->summary().reason, FinishReason::kDeadline);
  EXPECT_LT(c->summary().generated_tokens, 480);
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, ABeamSearchTheCacheCanNeverHoldIsRefusedAsNeverFitting) {
  // The smallest cache the engine takes: one full-context sequence (512
  // tokens of tiny-lm). Two beams over ~400 tokens can never fit in it,
  // whatever finishes: RESOURCE_EXHAUSTED marked as no retry helping.
  EngineOptions options;
  options.kv_cache_bytes = 524288;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  GenerateRequest beams = Greedy("ab", 400);
  beams.beam_width = 2;
  auto c = std::make_shared<GenerateCollector>();
  absl::StatusOr<RequestId> id = engine->SubmitGenerate(beams, c);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
  EXPECT_THAT(std::string(id.status().message()),
              ::testing::HasSubstr("KV blocks but the cache has"));
  EXPECT_TRUE(NeverFits(id.status())) << id.status();
  // What fits runs; a full queue is not marked.
  beams.max_new_tokens = 8;
  EXPECT_FALSE(RunAlone(*engine, beams).empty());
  EXPECT_FALSE(NeverFits(absl::ResourceExhaustedError("the request queue is full")));
}

TEST_F(EngineTest, BeamSearchesThatFitOnlyOneAtATimeRunOneAfterTheOther) {
  // One full context of tiny-lm (512 tokens, 32 blocks); two beams over 202
  // tokens take 26 blocks at their worst (no block shared), so two such
  // searches cannot both be sure to fit: the second starts when the first
  // has ended, instead of both starting and one perhaps running out of
  // blocks halfway.
  EngineOptions options;
  options.kv_cache_bytes = 524288;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  GenerateRequest beams = Greedy("ab", 200);
  beams.beam_width = 2;
  const std::vector<int32_t> alone = RunAlone(*engine, beams);
  ASSERT_EQ(alone.size(), 200u);
  auto first = std::make_shared<GenerateCollector>();
  auto second = std::make_shared<GenerateCollector>();
  const absl::Time before = absl::Now();
  ASSERT_TRUE(engine->SubmitGenerate(beams, first).ok());
  ASSERT_TRUE(engine->SubmitGenerate(beams, second).ok());
  const absl::Duration submitting = absl::Now() - before;
  ASSERT_TRUE(first->Wait());
  ASSERT_TRUE(second->Wait());
  EXPECT_TRUE(first->summary().status.ok()) << first->summary().status;
  EXPECT_TRUE(second->summary().status.ok()) << second->summary().status;
  EXPECT_EQ(first->ids(), alone);
  EXPECT_EQ(second->ids(), alone);
  // The second started after the first ended: its start (submitted within
  // `submitting` of the first's submission, then queued) is not before the
  // first's end (its total time after its submission).
  EXPECT_GE(submitting + second->summary().queue_time, first->summary().total_time)
      << "queued " << second->summary().queue_time << ", the first ran "
      << first->summary().total_time << ", submitting took " << submitting;
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, KvCacheDtypeIsChosenByTheOperatorAndCheckedAtStart) {
  EngineOptions options;
  auto fp32 = Make("tiny-lm", options);
  ASSERT_NE(fp32, nullptr);
  EXPECT_EQ(fp32->description().kv_cache_dtype, "float32");  // auto: the weights'
  options.kv_cache_dtype = "bfloat16";
  auto bf16 = Make("tiny-lm", options);
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->description().kv_cache_dtype, "bfloat16");
  EXPECT_EQ(bf16->description().dtype, "float32");
  // Half the bytes per token: twice the blocks in the same budget.
  EXPECT_EQ(bf16->stats().kv_blocks_total, 2 * fp32->stats().kv_blocks_total);
  EXPECT_EQ(RunAlone(*bf16, Greedy("ab", 12)).size(), 12u);
  options.dtype = "int8";
  options.kv_cache_dtype = "auto";
  auto int8 = Make("tiny-lm", options);
  ASSERT_NE(int8, nullptr);
  EXPECT_EQ(int8->description().kv_cache_dtype, "float32");
  for (const char* bad : {"int8", "float64", ""}) {
    options.kv_cache_dtype = bad;
    absl::StatusOr<std::unique_ptr<Engine>> refused =
        Engine::Create("tiny-lm", ModelPath("tiny-lm"), options);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("kv_cache_dtype"));
  }
}

TEST_F(EngineTest, FullQueueIsResourceExhausted) {
  EngineOptions options;
  options.max_queue = 2;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  std::vector<std::shared_ptr<GenerateCollector>> collectors;
  int exhausted = 0;
  for (int i = 0; i < 20; ++i) {
    collectors.push_back(std::make_shared<GenerateCollector>());
    auto id = engine->SubmitGenerate(Greedy("overload", 50), collectors.back());
    if (!id.ok()) {
      EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
      ++exhausted;
      collectors.pop_back();
    }
  }
  EXPECT_GT(exhausted, 0);
  for (auto& c : collectors) ASSERT_TRUE(c->Wait());
}

TEST_F(EngineTest, InvalidRequestsAreRejectedWithTheField) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  auto c = std::make_shared<GenerateCollector>();
  GenerateRequest empty;
  auto s = engine->SubmitGenerate(empty, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("input is empty"));

  GenerateRequest bad_id = Greedy("x", 1);
  bad_id.prompt.push_back(100000);
  s = engine->SubmitGenerate(bad_id, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("100000"));

  GenerateRequest too_long = Greedy(std::string(600, 'a'), 1);
  s = engine->SubmitGenerate(too_long, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("context"));

  GenerateRequest bad_temp = Greedy("x", 1);
  bad_temp.sampling.temperature = -1;
  s = engine->SubmitGenerate(bad_temp, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("temperature"));

  GenerateRequest too_many = Greedy("x", 100000);
  s = engine->SubmitGenerate(too_many, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("max_new_tokens"));
}

TEST_F(EngineTest, StopStringEndsTheTextBeforeIt) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  // Find what the model says greedily, then stop on a piece of it.
  auto first = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(Greedy("stop test", 12), first).ok());
  ASSERT_TRUE(first->Wait());
  const std::vector<int32_t> ids = first->ids();
  // Choose the 6th..7th generated bytes as the stop string when they are ASCII.
  std::string stop;
  for (int i = 5; i < 7; ++i) {
    if (ids[i] < 128 && ids[i] > 0) stop.push_back(static_cast<char>(ids[i]));
  }
  if (stop.size() < 2) GTEST_SKIP() << "random model produced non-ASCII bytes";
  GenerateRequest r = Greedy("stop test", 12);
  r.stop_strings = {stop};
  auto c = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(r, c).ok());
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->summary().reason, FinishReason::kStop);
  EXPECT_EQ(c->text().find(stop), std::string::npos);
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  GenerateRequest r = Greedy("seed", 24);
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 42;
  EXPECT_EQ(RunAlone(*engine, r), RunAlone(*engine, r));
}

TEST_F(EngineTest, EncodeReturnsPooledAndHiddenStates) {
  for (const char* model : {"tiny-lm", "tiny-encoder", "tiny-seq2seq"}) {
    auto engine = Make(model);
    ASSERT_NE(engine, nullptr);
    EncodeRequest req;
    req.inputs = {{'a', 'b', 'c'}, {'d', 'e'}};
    req.normalize = true;
    req.return_hidden_states = true;
    dikkat::Notification done;
    absl::StatusOr<EncodeResult> result;
    ASSERT_TRUE(engine->SubmitEncode(req, [&](absl::StatusOr<EncodeResult> r) {
                          result = std::move(r);
                          done.Notify();
                        }).ok());
    done.WaitForNotification();
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->embeddings.size(), 2u);
    ASSERT_EQ(result->hidden_states[0].shape, (std::vector<int64_t>{3, 64}));
    double norm = 0;
    for (float v : result->embeddings[0].values) norm += v * v;
    EXPECT_NEAR(norm, 1.0, 1e-4) << model;
  }
}

TEST_F(EngineTest, AttentionMapsAreDistributions) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  AttentionRequest req;
  req.input = {'h', 'e', 'l', 'l', 'o'};
  req.layers = {1};
  dikkat::Notification done;
  absl::StatusOr<AttentionResult> result;
  ASSERT_TRUE(engine->SubmitAttention(req, [&](absl::StatusOr<AttentionResult> r) {
                      result = std::move(r);
                      done.Notify();
                    }).ok());
  done.WaitForNotification();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->maps.size(), 4u);  // 4 heads of layer 1
  for (const AttentionMap& m : result->maps) {
    ASSERT_EQ(m.weights.shape, (std::vector<int64_t>{5, 5}));
    for (int i = 0; i < 5; ++i) {
      double sum = 0;
      for (int j = 0; j < 5; ++j) {
        const float w = m.weights.values[i * 5 + j];
        if (j > i) {
          EXPECT_EQ(w, 0.0f) << "causal mask leaks at " << i << "," << j;
        }
        sum += w;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
  AttentionRequest bad = req;
  bad.layers = {7};
  auto s = engine->SubmitAttention(bad, [](absl::StatusOr<AttentionResult>) {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

// docs/metrics.md: Encode and Attention work counts in the step histograms
// (phase prefill). Only failed jobs used to reach OnStep.
TEST_F(EngineTest, EncodeAndAttentionStepsReachTheListener) {
  StepRecorder recorder;  // outlives the engine
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  auto engine = Engine::Create("tiny-lm", ModelPath("tiny-lm"), options, &recorder);
  ASSERT_TRUE(engine.ok()) << engine.status();

  EncodeRequest encode;
  encode.inputs = {{'a', 'b', 'c'}, {'d', 'e'}};
  dikkat::Notification encoded;
  ASSERT_TRUE((*engine)
                  ->SubmitEncode(encode,
                                 [&](absl::StatusOr<EncodeResult> r) {
                                   EXPECT_TRUE(r.ok()) << r.status();
                                   encoded.Notify();
                                 })
                  .ok());
  encoded.WaitForNotification();
  AttentionRequest attention;
  attention.input = {'h', 'i'};
  attention.layers = {0};
  dikkat::Notification attended;
  ASSERT_TRUE((*engine)
                  ->SubmitAttention(attention,
                                    [&](absl::StatusOr<AttentionResult> r) {
                                      EXPECT_TRUE(r.ok()) << r.status();
                                      attended.Notify();
                                    })
                  .ok());
  attended.WaitForNotification();

  const std::vector<StepTiming> steps = recorder.steps();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_TRUE(steps[0].prefill);
  EXPECT_EQ(steps[0].sequences, 2);  // one per input
  EXPECT_EQ(steps[0].tokens, 5);
  EXPECT_TRUE(steps[1].prefill);
  EXPECT_EQ(steps[1].sequences, 1);
  EXPECT_EQ(steps[1].tokens, 2);
}

// Issue "Hardening II" item 4: an Encode request of many inputs used to run
// as one forward of all their tokens, whatever --max_batch_tokens said, and
// stalled every decoding stream meanwhile. Now each engine step runs a group
// of inputs within the budget (one input always runs); results are the same
// as inputs encoded one by one.
TEST_F(EngineTest, EncodeRunsInGroupsUnderTheStepBudget) {
  StepRecorder recorder;  // outlives the engine
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  options.max_batch_tokens = 8;
  auto engine = Engine::Create("tiny-encoder", ModelPath("tiny-encoder"), options, &recorder);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto encode = [&](const std::vector<std::vector<int32_t>>& inputs) {
    EncodeRequest req;
    req.inputs = inputs;
    dikkat::Notification done;
    absl::StatusOr<EncodeResult> result;
    EXPECT_TRUE((*engine)
                    ->SubmitEncode(req,
                                   [&](absl::StatusOr<EncodeResult> r) {
                                     result = std::move(r);
                                     done.Notify();
                                   })
                    .ok());
    done.WaitForNotification();
    return result;
  };
  // 5 + 3 | 4 + 2 | 12 (alone, over the budget) | 1: four forwards.
  const std::vector<std::vector<int32_t>> inputs = {
      {'a', 'b', 'c', 'd', 'e'}, {'f', 'g', 'h'}, {'i', 'j', 'k', 'l'}, {'m', 'n'},
      std::vector<int32_t>(12, 'o'), {'p'}};
  absl::StatusOr<EncodeResult> all = encode(inputs);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->prompt_tokens, 27);
  ASSERT_EQ(all->embeddings.size(), inputs.size());
  std::vector<StepTiming> steps = recorder.steps();
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].tokens, 8);
  EXPECT_EQ(steps[0].sequences, 2);
  EXPECT_EQ(steps[1].tokens, 6);
  EXPECT_EQ(steps[2].tokens, 12);
  EXPECT_EQ(steps[3].tokens, 1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StatusOr<EncodeResult> alone = encode({inputs[i]});
    ASSERT_TRUE(alone.ok()) << alone.status();
    const std::vector<float>& a = all->embeddings[i].values;
    const std::vector<float>& b = alone->embeddings[0].values;
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-5) << "input " << i;
  }
}

// Issue "Hardening II" item 4: Attention kept every layer's [H, q, k] weights
// and selected afterwards. It now records the selected layers only and
// answers in the request's order; the maps equal those of an all-layer run.
TEST_F(EngineTest, AttentionRecordsOnlyTheSelectedLayers) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  auto attend = [&](std::vector<int32_t> layers) {
    AttentionRequest req;
    req.input = {'s', 'e', 'l', 'e', 'c', 't'};
    req.layers = std::move(layers);
    req.aggregation = HeadAggregation::kMean;
    dikkat::Notification done;
    absl::StatusOr<AttentionResult> result;
    EXPECT_TRUE(engine->SubmitAttention(req, [&](absl::StatusOr<AttentionResult> r) {
                          result = std::move(r);
                          done.Notify();
                        }).ok());
    done.WaitForNotification();
    return result;
  };
  absl::StatusOr<AttentionResult> every = attend({});
  ASSERT_TRUE(every.ok()) << every.status();
  const int n_layers = static_cast<int>(every->maps.size());
  ASSERT_GE(n_layers, 2);
  for (int i = 0; i < n_layers; ++i) EXPECT_EQ(every->maps[i].layer, i);
  absl::StatusOr<AttentionResult> picked = attend({n_layers - 1, 0});
  ASSERT_TRUE(picked.ok()) << picked.status();
  ASSERT_EQ(picked->maps.size(), 2u);
  EXPECT_EQ(picked->maps[0].layer, n_layers - 1);  // the request's order
  EXPECT_EQ(picked->maps[1].layer, 0);
  EXPECT_EQ(picked->maps[0].weights.values, every->maps[n_layers - 1].weights.values);
  EXPECT_EQ(picked->maps[1].weights.values, every->maps[0].weights.values);
}

// Issue "Hardening II" item 8: the encoder pass of an encoder-decoder request
// runs when the request is admitted, outside the forward's error handling; an
// exception there (LibTorch out of memory, say) terminated the process. Now
// that request alone fails with INTERNAL and the engine goes on serving.
TEST_F(EngineTest, EncoderFailureAtAdmissionFailsOnlyThatRequest) {
  auto engine = Make("tiny-seq2seq");
  ASSERT_NE(engine, nullptr);
  GenerateRequest r;
  r.source = {'4', '5', '6'};
  r.sampling.temperature = 0;
  r.max_new_tokens = 4;
  r.ignore_eos = true;
  SetFailpoint("engine.encode_source", true);
  auto failing = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(r, failing).ok());
  const bool finished = failing->Wait();
  SetFailpoint("engine.encode_source", false);
  ASSERT_TRUE(finished);
  EXPECT_EQ(failing->summary().status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failing->summary().status.message()),
              ::testing::HasSubstr("encoder forward failed"));
  EXPECT_EQ(failing->summary().reason, FinishReason::kError);
  auto ok = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(r, ok).ok());
  ASSERT_TRUE(ok->Wait());
  EXPECT_EQ(ok->ids().size(), 4u);
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, AFailureWhileEmittingATokenFailsOnlyThatRequest) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  SetFailpoint("engine.emit", true);
  auto failing = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(Greedy("abc", 4), failing).ok());
  const bool finished = failing->Wait();
  SetFailpoint("engine.emit", false);
  ASSERT_TRUE(finished);
  EXPECT_EQ(failing->summary().reason, FinishReason::kError);
  EXPECT_EQ(failing->summary().status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failing->summary().status.message()),
              ::testing::HasSubstr("emitting a token failed"));
  // The engine thread lives on and serves the next request.
  EXPECT_EQ(RunAlone(*engine, Greedy("abc", 4)).size(), 4u);
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

// NaN logits (a float16 overflow, say) fail the request with INTERNAL, the
// server's failure: sampling said INVALID_ARGUMENT, a beam search ranked NaN
// proposals and ran to max_new_tokens.
TEST_F(EngineTest, NanLogitsFailTheRequestAsInternal) {
  auto engine = Make("tiny-lm");
  ASSERT_NE(engine, nullptr);
  GenerateRequest beams = Greedy("abc", 6);
  beams.beam_width = 2;
  SetFailpoint("engine.nan_logits", true);
  auto sampled = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(Greedy("abc", 4), sampled).ok());
  const bool sampled_done = sampled->Wait();
  auto searched = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(beams, searched).ok());
  const bool searched_done = searched->Wait();
  SetFailpoint("engine.nan_logits", false);
  ASSERT_TRUE(sampled_done && searched_done);
  EXPECT_EQ(sampled->summary().status.code(), absl::StatusCode::kInternal)
      << sampled->summary().status;
  EXPECT_EQ(searched->summary().status.code(), absl::StatusCode::kInternal)
      << searched->summary().status;
  EXPECT_THAT(std::string(searched->summary().status.message()), ::testing::HasSubstr("NaN"));
  EXPECT_EQ(RunAlone(*engine, Greedy("abc", 4)).size(), 4u);
  WaitIdle(*engine);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

// A beam search's prompt ran as one forward, whatever --max_batch_tokens
// said (a 30K-token prompt: one 30K-token step). It now runs in chunks
// within the budget, and the beams are those of an unchunked run.
TEST_F(EngineTest, BeamSearchPromptsRunInChunksUnderTheStepBudget) {
  GenerateRequest beams = Greedy(std::string(30, 'q') + "rst", 6);
  beams.beam_width = 3;
  auto unchunked = Make("tiny-lm");
  ASSERT_NE(unchunked, nullptr);
  const std::vector<int32_t> want = RunAlone(*unchunked, beams);
  ASSERT_EQ(want.size(), 6u);
  StepRecorder recorder;  // outlives the engine
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  options.max_batch_tokens = 8;
  auto engine = Engine::Create("tiny-lm", ModelPath("tiny-lm"), options, &recorder);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(RunAlone(**engine, beams), want);
  const std::vector<StepTiming> steps = recorder.steps();
  // 33 prompt tokens in chunks of 8: 5 prefill steps, then the beams.
  ASSERT_GE(steps.size(), 5u);
  for (const StepTiming& step : steps) EXPECT_LE(step.tokens, 8);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(steps[i].tokens, 8) << i;
  EXPECT_EQ(steps[4].tokens, 1);
  WaitIdle(**engine);
  EXPECT_EQ((*engine)->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, EncoderDecoderGeneratesAndShutsDownCleanly) {
  auto engine = Make("tiny-seq2seq");
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->Warmup().ok());
  GenerateRequest r;
  r.source = {'1', '2', '3'};
  r.sampling.temperature = 0;
  r.max_new_tokens = 10;
  r.ignore_eos = true;
  auto c = std::make_shared<GenerateCollector>();
  ASSERT_TRUE(engine->SubmitGenerate(r, c).ok());
  ASSERT_TRUE(c->Wait());
  EXPECT_EQ(c->ids().size(), 10u);
  engine->Shutdown(absl::Seconds(1));
  auto after = engine->SubmitGenerate(r, std::make_shared<GenerateCollector>());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, ErrorsNameTheModelAsItIsServed) {
  EngineOptions options;
  options.kv_cache_bytes = 8 << 20;
  auto engine = Engine::Create("served-as", ModelPath("tiny-lm"), options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const ModelDescription& d = (*engine)->description();
  ASSERT_GT(d.config.max_positions, 0);
  const ModelLimits limits{&d.config, &(*engine)->tokenizer(), &(*engine)->options(), 0};
  v1::GenerateRequest request;
  // Past max_positions: refused as the ids are converted (before the copy).
  request.mutable_input()->mutable_tokens()->mutable_ids()->Resize(d.config.max_positions + 1, 'a');
  auto refused = ToGenerateRequest(request, limits);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("model 'served-as'"));
  // A whole context leaves no room to generate: the engine's check.
  request.mutable_input()->mutable_tokens()->mutable_ids()->RemoveLast();
  auto converted = ToGenerateRequest(request, limits);
  ASSERT_TRUE(converted.ok()) << converted.status();  // the value check is the engine's
  // Refused at Submit (before anything is queued: the observer is never used).
  absl::StatusOr<RequestId> id = (*engine)->SubmitGenerate(std::move(converted->request), nullptr);
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), ::testing::HasSubstr("model 'served-as'"));
}


// Several caller threads at once, as the gRPC service's threads call the
// engine: Generate with cancels right after submit or mid-stream, deadlines
// that expire, Encode and Attention, stats() read all the while, and a
// Shutdown racing the last submissions. Every accepted request ends exactly
// once, every refusal is a documented code, and no KV block is left. Under
// ThreadSanitizer (docs/hardening.md) this is the engine's race check.
TEST_F(EngineTest, ManyCallerThreadsSubmitCancelAndShutDown) {
  EngineOptions options;
  options.max_queue = 24;  // small: some submissions meet a full queue
  options.max_batch_tokens = 64;
  auto engine = Make("tiny-lm", options);
  ASSERT_NE(engine, nullptr);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 24;
  std::atomic<int> accepted{0}, refused{0}, finished{0}, encodes{0}, attentions{0};
  std::vector<std::shared_ptr<GenerateCollector>> collectors[kThreads];
  std::vector<std::thread> threads;
  std::atomic<bool> stop_reader{false};
  std::thread reader([&] {
    while (!stop_reader.load()) {
      EngineStats s = engine->stats();
      EXPECT_GE(s.kv_blocks_used, 0);
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  auto count_refusal = [&](const absl::Status& s) {
    EXPECT_TRUE(s.code() == absl::StatusCode::kResourceExhausted ||
                s.code() == absl::StatusCode::kUnavailable)
        << s;
    ++refused;
  };
  // A well-behaved caller backs off while the queue is full (RESOURCE_EXHAUSTED).
  auto with_backoff = [&](auto submit) {
    auto id = submit();
    for (int i = 0; i < 5000 && !id.ok() &&
                    id.status().code() == absl::StatusCode::kResourceExhausted;
         ++i) {
      ++refused;
      absl::SleepFor(absl::Milliseconds(1));
      id = submit();
    }
    return id;
  };
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int kind = (t * kPerThread + i) % 6;
        if (kind == 4) {
          EncodeRequest req;
          req.inputs = {{'a', 'b', static_cast<int32_t>('c' + t)}, {'x', 'y'}};
          auto id = with_backoff([&] {
            return engine->SubmitEncode(req, [&](absl::StatusOr<EncodeResult> r) {
              EXPECT_TRUE(r.ok()) << r.status();
              ++encodes;
            });
          });
          if (id.ok()) ++accepted; else count_refusal(id.status());
          if (!id.ok()) ++encodes;  // never called back: count it here
          continue;
        }
        if (kind == 5) {
          AttentionRequest req;
          req.input = {'h', 'e', 'a', 'd', static_cast<int32_t>('0' + i % 10)};
          auto id = with_backoff([&] {
            return engine->SubmitAttention(req, [&](absl::StatusOr<AttentionResult> r) {
              EXPECT_TRUE(r.ok()) << r.status();
              ++attentions;
            });
          });
          if (id.ok()) ++accepted; else count_refusal(id.status());
          if (!id.ok()) ++attentions;
          continue;
        }
        GenerateRequest r = Greedy(std::string(3 + i % 9, static_cast<char>('a' + t)), 6 + i % 20);
        if (kind == 1) r.deadline = absl::Now() + absl::Milliseconds(2 + i % 5);
        auto c = std::make_shared<GenerateCollector>();
        auto id = with_backoff([&] { return engine->SubmitGenerate(r, c); });
        if (!id.ok()) {
          count_refusal(id.status());
          continue;
        }
        ++accepted;
        collectors[t].push_back(c);
        if (kind == 2) engine->Cancel(*id);  // before it is scheduled, most likely
        if (kind == 3) {
          absl::SleepFor(absl::Microseconds(300 * (i % 4)));
          engine->Cancel(*id);
        }
        engine->Cancel(*id + 100000);  // unknown ids are ignored
      }
    });
  }
  for (auto& th : threads) th.join();
  // The last submissions race the shutdown; some are refused UNAVAILABLE.
  std::thread late([&] {
    for (int i = 0; i < 8; ++i) {
      auto c = std::make_shared<GenerateCollector>();
      auto id = engine->SubmitGenerate(Greedy("late", 5), c);
      if (id.ok()) {
        ++accepted;
        collectors[0].push_back(c);
      } else {
        count_refusal(id.status());
      }
    }
  });
  engine->Shutdown(absl::Seconds(20));
  late.join();
  stop_reader = true;
  reader.join();
  for (auto& per_thread : collectors) {
    for (auto& c : per_thread) {
      ASSERT_TRUE(c->Wait(absl::Seconds(30)));
      ++finished;
      const FinishReason why = c->summary().reason;
      EXPECT_TRUE(why == FinishReason::kLength || why == FinishReason::kCancelled ||
                  why == FinishReason::kDeadline)
          << static_cast<int>(why);
    }
  }
  for (int i = 0; i < 3000 && (encodes.load() + attentions.load()) <
                                  kThreads * kPerThread / 3; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(encodes.load() + attentions.load(), kThreads * kPerThread / 3);
  // Before the shutdown nothing is refused for good: the callers back off.
  EXPECT_GE(accepted.load(), kThreads * kPerThread);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(engine->stats().running, 0);
}

}  // namespace
}  // namespace dikkat::server
