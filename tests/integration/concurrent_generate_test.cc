// Continuous batching must not change what a request gets: 16 concurrent
// greedy Generate streams (different prompts and lengths, joining the running
// batch at different steps, with chunked prefill) return exactly what each
// returns when it runs alone; also when the KV cache is too small for all of
// them and sequences are preempted and recomputed.
#include <memory>
#include <string>
#include <vector>

#include "common/sync.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "integration_harness.h"

namespace dikkat::model {
// model/cpu_kernels.h, declared here to keep LibTorch's headers out of this
// test (it links the model through dikkat::server).
void SetInt8OneRowInt16X(int mode);
}  // namespace dikkat::model

namespace dikkat::integration {
namespace {

constexpr int kStreams = 16;

struct Outcome {
  absl::Status status;
  std::vector<int32_t> ids;
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

std::vector<v1::GenerateRequest> Requests() {
  std::vector<v1::GenerateRequest> requests;
  const std::string words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do ";
  for (int i = 0; i < kStreams; ++i) {
    std::string prompt = "#" + std::to_string(i) + ": ";
    for (int k = 0; k < i * 7 % 90; ++k) prompt += words[(k * 5 + i) % words.size()];
    v1::GenerateRequest r = GreedyRequest(prompt, 3 + (i * 11) % 37);
    // A few may stop at EOS: that too must not depend on the company.
    if (i % 4 == 3) r.set_ignore_eos(false);
    requests.push_back(r);
  }
  return requests;
}

Outcome Solo(client::Client& c, const v1::GenerateRequest& r) {
  Outcome o;
  absl::StatusOr<client::GenerateResult> g = c.Generate(r);
  o.status = g.status();
  if (g.ok()) {
    o.ids = g->token_ids;
    o.text = g->text;
    o.finish = g->finish_reason;
  }
  return o;
}

// Starts every request at once on the async API and collects the streams.
std::vector<Outcome> Concurrent(client::Client& c, const std::vector<v1::GenerateRequest>& requests) {
  std::vector<Outcome> out(requests.size());
  std::vector<client::GenerateCall> calls;
  for (size_t i = 0; i < requests.size(); ++i) {
    Outcome* o = &out[i];
    calls.push_back(c.GenerateAsync(
        requests[i],
        [o](const v1::GenerateResponse& chunk) {
          for (const auto& t : chunk.tokens()) o->ids.push_back(t.id());
          o->text += chunk.text();
          if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) o->finish = chunk.finish_reason();
          return true;
        },
        nullptr));
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    std::optional<absl::Status> s = calls[i].WaitFor(absl::Seconds(30));
    out[i].status = s.has_value() ? *s : absl::DeadlineExceededError("stream still running after 30s");
  }
  return out;
}

void ExpectSameAsSolo(const std::vector<Outcome>& solo, const std::vector<Outcome>& together,
                      const std::vector<v1::GenerateRequest>& requests) {
  ASSERT_EQ(solo.size(), together.size());
  for (size_t i = 0; i < solo.size(); ++i) {
    SCOPED_TRACE("stream " + std::to_string(i) + " prompt '" + requests[i].input().text() + "'");
    ASSERT_TRUE(solo[i].status.ok()) << solo[i].status;
    ASSERT_TRUE(together[i].status.ok()) << together[i].status;
    EXPECT_EQ(together[i].ids, solo[i].ids);
    EXPECT_EQ(together[i].text, solo[i].text);
    EXPECT_EQ(together[i].finish, solo[i].finish);
    EXPECT_FALSE(solo[i].ids.empty());
  }
}

// The engine sleeps 1 ms after each step: the tiny model decodes in tens of
// microseconds, so on a quiet machine the 16 streams could otherwise finish
// one after another before the next arrives, sharing no step and never
// filling the cache: what these tests must exercise.
std::unique_ptr<InProcessServer> StartLm(server::EngineOptions options) {
  absl::StatusOr<std::unique_ptr<InProcessServer>> s = InProcessServer::Start(
      {{"tiny-lm", ModelDir("tiny-lm"), options, absl::Milliseconds(1)}});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(ConcurrentGenerateTest, SixteenStreamsMatchTheirSoloRuns) {
  server::EngineOptions options = SmallEngineOptions();
  options.max_batch_tokens = 48;  // long prompts prefill in chunks next to decodes
  std::unique_ptr<InProcessServer> server = StartLm(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<client::Client> c = server->NewClient();
  const std::vector<v1::GenerateRequest> requests = Requests();

  std::vector<Outcome> solo;
  for (const auto& r : requests) solo.push_back(Solo(*c, r));
  const std::vector<Outcome> together = Concurrent(*c, requests);
  ExpectSameAsSolo(solo, together, requests);

  // The streams really shared steps (otherwise this proves nothing).
  EXPECT_GE(server->listener("tiny-lm")->max_batch(), 4);
  EXPECT_EQ(server->WaitUntilIdle(), "");
}

TEST(ConcurrentGenerateTest, PreemptedStreamsStillMatchTheirSoloRuns) {
  server::EngineOptions options = SmallEngineOptions();
  // tiny-lm holds 2 layers x (K, V) x 64 floats = 1 KiB per token: 16 KiB
  // per 16-token block. The engine insists on room for one full-context
  // sequence (512 tokens = 32 blocks); 32 blocks cannot hold 16 sequences of
  // 10..140 tokens at once.
  options.kv_cache_bytes = 32 * 16 * 1024;
  std::unique_ptr<InProcessServer> server = StartLm(options);
  ASSERT_NE(server, nullptr);
  server::Engine* engine = server->engine("tiny-lm");
  ASSERT_LE(engine->stats().kv_blocks_total, 32) << "the cache is larger than intended";
  std::unique_ptr<client::Client> c = server->NewClient();
  const std::vector<v1::GenerateRequest> requests = Requests();

  std::vector<Outcome> solo;
  for (const auto& r : requests) solo.push_back(Solo(*c, r));
  const int64_t preemptions_before = engine->stats().preemptions;
  const std::vector<Outcome> together = Concurrent(*c, requests);
  ExpectSameAsSolo(solo, together, requests);
  EXPECT_GT(engine->stats().preemptions, preemptions_before)
      << "no sequence was preempted: the cache was not under pressure";
  EXPECT_EQ(server->WaitUntilIdle(), "");
}

// --dtype int8: the engine's batches (row blocks of the int8 kernel, prefill
// chunks next to decodes) give every stream the tokens of its solo run, and
// the model describes itself as int8. The solo runs' one-row steps go
// through the float32-x kernel as the batches' rows do
// (SetInt8OneRowInt16X(0)): by default on Intel's AVX-512, and on Zen 4's
// with AVX512_VNNI, a one-row step rounds x to int16, within the int16
// rounding bound of these logits but not their bits (model/cpu_kernels.h).
TEST(ConcurrentGenerateTest, Int8WeightsStreamsMatchTheirSoloRuns) {
  struct FloatXOneRow {  // restored however the test ends
    FloatXOneRow() { model::SetInt8OneRowInt16X(0); }
    ~FloatXOneRow() { model::SetInt8OneRowInt16X(-1); }
  } float_x_one_row;
  server::EngineOptions options = SmallEngineOptions();
  options.dtype = "int8";
  options.max_batch_tokens = 48;
  std::unique_ptr<InProcessServer> server = StartLm(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<client::Client> c = server->NewClient();
  absl::StatusOr<v1::GetModelInfoResponse> info = c->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->models_size(), 1);
  EXPECT_EQ(info->models(0).dtype(), "int8");
  const std::vector<v1::GenerateRequest> requests = Requests();
  std::vector<Outcome> solo;
  for (const auto& r : requests) solo.push_back(Solo(*c, r));
  ExpectSameAsSolo(solo, Concurrent(*c, requests), requests);
  EXPECT_GE(server->listener("tiny-lm")->max_batch(), 4);
  EXPECT_EQ(server->WaitUntilIdle(), "");
}

// The dikkat-server binary: --dtype int8 loads, logs and serves; an unknown
// dtype stops it at start with the values allowed.
TEST(ConcurrentGenerateProcessTest, ServesInt8WeightsAndNamesTheAllowedDtypes) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--dtype=int8", "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;
  EXPECT_NE(server.Stderr().find(", int8 on cpu"), std::string::npos) << server.Logs();
  client::ClientOptions options;
  options.targets = {server.grpc_address()};
  options.wait_for_ready = true;
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<v1::GetModelInfoResponse> info = (*c)->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status() << server.Logs();
  EXPECT_EQ(info->models(0).dtype(), "int8");
  const Outcome out = Solo(**c, GreedyRequest("int8 weights", 12));
  EXPECT_TRUE(out.status.ok()) << out.status << server.Logs();
  EXPECT_FALSE(out.ids.empty());

  absl::StatusOr<std::unique_ptr<ServerProcess>> bad = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--dtype=int4"},
      absl::Seconds(30), /*wait_for_listening=*/false);
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_TRUE((*bad)->WaitForOutput(std::regex("dtype 'int4' is not supported; use float32, "
                                               "bfloat16, float16 or int8"),
                                    absl::Seconds(30)))
      << (*bad)->Logs();
}

}  // namespace
}  // namespace dikkat::integration
