// Prompt log-probabilities served by the engine against PyTorch: the
// fixtures' model (make_hf_fixtures.py gpt2: a GPT-2 randomly initialised,
// run by PyTorch's own modules, with a real byte-level BPE tokenizer) gives the reference
// logits of every prompt position; LibTorch's log_softmax of those is the
// reference log-probability of each next prompt token and of the top
// alternatives. The engine scores the prompts in chunks of 5 tokens, beside
// another running request, through its KV cache.
// Tolerance (fp32): |logprob - reference| <= 2e-4 x (1 + the largest |logit|
// of the row): a log-softmax moves by at most twice the largest logit error,
// and the logits are held to 1e-4 of the largest logit (hf_gpt2_test.cc).
#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/sync.h"
#include "server/engine.h"
#include "tests/server/generate_collector.h"
#include "tests/parity/hf_parity_util.h"

namespace dikkat::server {
namespace {

class PromptLogprobsParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptLogprobsParityTest, MatchesLogSoftmaxOfPyTorchLogits) {
  absl::StatusOr<std::unique_ptr<model::parity::HfSuite>> suite =
      model::parity::MakeHfSuite(GetParam());
  ASSERT_TRUE(suite.ok()) << suite.status();
  EngineOptions options;
  options.max_batch_tokens = 5;  // prompts run in chunks of up to 5 tokens
  options.kv_cache_bytes = 4 << 20;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(GetParam(), (*suite)->Folder("st"), options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  constexpr int kTop = 3;
  double worst = 0;
  for (int b = 0; b < (*suite)->sequences(); ++b) {
    const std::vector<int32_t> prompt = model::parity::Ids((*suite)->Expected("prompt", b));
    // Another request runs beside it: its rows are interleaved with ours.
    GenerateRequest other;
    other.prompt = prompt;
    other.sampling.temperature = 0;
    other.max_new_tokens = 8;
    auto other_c = std::make_shared<GenerateCollector>();
    ASSERT_TRUE((*engine)->SubmitGenerate(other, other_c).ok());
    GenerateRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.max_new_tokens = 2;
    r.prompt_logprobs = kTop;
    auto c = std::make_shared<GenerateCollector>();
    ASSERT_TRUE((*engine)->SubmitGenerate(r, c).ok());
    ASSERT_TRUE(c->Wait());
    ASSERT_TRUE(other_c->Wait());
    ASSERT_EQ(c->summary().reason, FinishReason::kLength) << c->summary().status;
    EXPECT_EQ(c->summary().cached_prompt_tokens, 0);

    const at::Tensor logits = (*suite)->Expected("logits", b).to(at::kDouble);  // [T, V]
    const at::Tensor reference = at::log_softmax(logits, -1);
    const std::vector<GeneratedToken> scores = c->prompt_logprobs();
    ASSERT_EQ(scores.size(), prompt.size() - 1);
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
      const at::Tensor row = reference[static_cast<int64_t>(p)];
      const double tolerance =
          2e-4 * (1.0 + logits[static_cast<int64_t>(p)].abs().max().item<double>());
      EXPECT_EQ(scores[p].token_id, prompt[p + 1]);
      const double err = std::abs(scores[p].logprob - row[prompt[p + 1]].item<double>());
      worst = std::max(worst, err);
      EXPECT_LE(err, tolerance) << "prompt " << b << " position " << p + 1;
      // The alternatives: the reference's best first, unless two are closer
      // than the tolerance (then either order is right).
      ASSERT_EQ(scores[p].top.size(), static_cast<size_t>(kTop));
      const auto top = row.topk(kTop + 1);
      const at::Tensor values = std::get<0>(top);
      const at::Tensor ids = std::get<1>(top);
      for (int k = 0; k < kTop; ++k) {
        const TokenAlternative& alt = scores[p].top[k];
        EXPECT_LE(std::abs(alt.logprob - row[alt.token_id].item<double>()), tolerance);
        const bool clear = (k == 0 || values[k - 1].item<double>() - values[k].item<double>() >
                                          2 * tolerance) &&
                           values[k].item<double>() - values[k + 1].item<double>() > 2 * tolerance;
        if (clear) {
          EXPECT_EQ(alt.token_id, ids[k].item<int64_t>()) << "position " << p + 1 << " rank " << k;
        }
      }
    }
    // Scoring did not change generation.
    const std::vector<int32_t> other_ids = other_c->ids();
    ASSERT_GE(other_ids.size(), 2u);
    EXPECT_EQ(c->ids(), std::vector<int32_t>(other_ids.begin(), other_ids.begin() + 2));
  }
  model::parity::ReportError(GetParam() + " prompt logprobs", worst);
  engine->reset();
  model::parity::RemoveFixtures((*suite)->dir);
}

// (The Llama-style fixtures carry no tokenizer, which the engine requires.)
INSTANTIATE_TEST_SUITE_P(Models, PromptLogprobsParityTest, ::testing::Values("gpt2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dikkat::server
