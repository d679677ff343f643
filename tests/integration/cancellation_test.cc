// Cancellation and deadlines stop work and free the KV cache at once:
// a stream cancelled from the client's chunk callback, a deadline passing
// mid-generation, a request cancelled while it waits in the queue. Checked
// in-process through Engine::stats() and the engine's own account of each
// request, and against the dikkat-server binary through its /metrics gauges.
#include <atomic>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration_harness.h"

namespace dikkat::integration {
namespace {

constexpr int kLong = 500;  // tiny-lm's context is 512

// Streams that keep the engine busy so that each step takes longer: the
// tiny model decodes a lone token in a few tens of microseconds, faster than a
// cancel can cross the wire. Their prompts are 4 tokens long ("ld00"), which
// no request under test uses. Cancelled and awaited on destruction.
class BackgroundLoad {
 public:
  BackgroundLoad(client::Client& c, int streams, const std::string& model = "")
      : handle_(std::make_shared<client::CancelHandle>()), started_(streams) {
    client::CallOptions call;
    call.cancel = handle_;
    for (int i = 0; i < streams; ++i) {
      const std::string prompt = absl::StrCat("ld", i / 10, i % 10);
      std::atomic<bool>* started = &started_[i];
      calls_.push_back(c.GenerateAsync(
          GreedyRequest(prompt, kLong, model),
          [started](const v1::GenerateResponse&) {
            started->store(true);
            return true;
          },
          nullptr, call));
    }
  }
  ~BackgroundLoad() {
    handle_->Cancel();
    for (auto& call : calls_) {
      EXPECT_TRUE(call.WaitFor(absl::Seconds(10)).has_value()) << "a load stream did not end";
    }
  }

  // Every stream has produced a token, so all of them are in the running
  // batch (engine stats lag a step behind admission; tokens do not).
  bool WaitStarted(absl::Duration timeout = absl::Seconds(10)) {
    return WaitFor(
        [&] {
          for (const auto& s : started_) {
            if (!s.load()) return false;
          }
          return true;
        },
        timeout);
  }

 private:
  std::shared_ptr<client::CancelHandle> handle_;
  std::vector<std::atomic<bool>> started_;
  std::vector<client::GenerateCall> calls_;
};

constexpr int kLoadStreams = 32;

class CancellationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::EngineOptions one_at_a_time = SmallEngineOptions();
    one_at_a_time.max_batch_size = 1;  // a second request waits in the queue
    // 2 ms per step: a 500-token stream lasts over a second (see
    // RecordingListener), far longer than a cancel or the deadlines below.
    absl::StatusOr<std::unique_ptr<InProcessServer>> s = InProcessServer::Start({
        {"tiny-lm", ModelDir("tiny-lm"), SmallEngineOptions(), absl::Milliseconds(2)},
        {"serial", ModelDir("tiny-lm"), one_at_a_time, absl::Milliseconds(2)},
    });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    client_ = server_->NewClient([](client::ClientOptions* o) { o->retry.max_attempts = 1; });
    ASSERT_NE(client_, nullptr);
  }

  // The engine's summary of the last finished request whose prompt had
  // `prompt_tokens` tokens (the tests give each request its own length).
  // Waits for it: the client may see its call end before the engine has
  // processed the cancel.
  server::GenerateSummary FinishedWithPrompt(const std::string& model, int prompt_tokens) {
    std::optional<server::GenerateSummary> found;
    WaitFor(
        [&] {
          std::vector<server::GenerateSummary> f = server_->listener(model)->finished();
          for (auto it = f.rbegin(); it != f.rend(); ++it) {
            if (it->prompt_tokens == prompt_tokens) {
              found = *it;
              return true;
            }
          }
          return false;
        },
        absl::Seconds(10));
    if (found.has_value()) return *found;
    ADD_FAILURE() << "no finished request with a " << prompt_tokens << "-token prompt; "
                  << Finished(model);
    return {};
  }

  // What the engine finished, for failure messages.
  std::string Finished(const std::string& model) {
    std::string all = "finished:";
    for (const server::GenerateSummary& g : server_->listener(model)->finished()) {
      absl::StrAppend(&all, "\n  prompt ", g.prompt_tokens, " generated ", g.generated_tokens, " ",
                      server::FinishReasonName(g.reason), " ", g.status.ToString(), " total ",
                      absl::FormatDuration(g.total_time));
    }
    return all;
  }

  std::unique_ptr<InProcessServer> server_;
  std::unique_ptr<client::Client> client_;
};

TEST_F(CancellationTest, CancelFromTheChunkCallbackStopsGenerationAndFreesBlocks) {
  server::Engine* engine = server_->engine("tiny-lm");
  int tokens = 0;
  server::EngineStats during;
  absl::Status status = client_->GenerateStream(
      GreedyRequest("cancel me", kLong), [&](const v1::GenerateResponse& chunk) {
        tokens += chunk.tokens_size();
        during = engine->stats();
        return tokens < 3;  // false: cancel
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_GE(tokens, 3);
  EXPECT_EQ(during.running, 1) << "the request was not running while it streamed";
  EXPECT_GT(during.kv_blocks_used, 0);

  const server::GenerateSummary summary = FinishedWithPrompt("tiny-lm", 9);
  EXPECT_EQ(server_->WaitUntilIdle(), "");
  EXPECT_EQ(summary.reason, server::FinishReason::kCancelled);
  EXPECT_LT(summary.generated_tokens, kLong) << "generation ran to its end despite the cancel";
  // Nothing is generated once everything has finished.
  const int64_t emitted = server_->listener("tiny-lm")->tokens();
  EXPECT_FALSE(WaitFor([&] { return server_->listener("tiny-lm")->tokens() != emitted; },
                       absl::Milliseconds(50)));
}

TEST_F(CancellationTest, CancelHandleStopsAnAsyncStream) {
  std::optional<absl::Status> status;
  {
    auto handle = std::make_shared<client::CancelHandle>();
    client::CallOptions call;
    call.cancel = handle;
    std::atomic<int> chunks{0};
    client::GenerateCall gen = client_->GenerateAsync(
        GreedyRequest("cancel me too", kLong),
        [&](const v1::GenerateResponse&) {
          ++chunks;
          return true;
        },
        nullptr, call);
    ASSERT_TRUE(WaitFor([&] { return chunks > 0; }, absl::Seconds(10))) << "no chunk arrived";
    handle->Cancel();
    status = gen.WaitFor(absl::Seconds(10));
  }
  ASSERT_TRUE(status.has_value()) << "the cancelled call did not end";
  EXPECT_EQ(status->code(), absl::StatusCode::kCancelled) << *status;
  const server::GenerateSummary summary = FinishedWithPrompt("tiny-lm", 13);
  EXPECT_EQ(server_->WaitUntilIdle(), "");
  EXPECT_EQ(summary.reason, server::FinishReason::kCancelled);
  EXPECT_LT(summary.generated_tokens, kLong);
}

TEST_F(CancellationTest, DeadlinePassingMidGenerationStopsItAndFreesBlocks) {
  client::CallOptions call;
  call.timeout = absl::Milliseconds(300);
  int tokens = 0;
  absl::Status status;
  absl::Duration took;
  {
    const absl::Time start = absl::Now();
    status = client_->GenerateStream(
        GreedyRequest("too slow", kLong),
        [&](const v1::GenerateResponse& chunk) {
          tokens += chunk.tokens_size();
          return true;
        },
        call);
    took = absl::Now() - start;
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_GT(tokens, 0) << "the deadline passed before the first token: not mid-generation";
  EXPECT_LT(tokens, kLong);
  const server::GenerateSummary summary = FinishedWithPrompt("tiny-lm", 8);
  EXPECT_EQ(server_->WaitUntilIdle(), "");
  // The engine sees the deadline itself, or the transport's cancel first.
  EXPECT_TRUE(summary.reason == server::FinishReason::kDeadline ||
              summary.reason == server::FinishReason::kCancelled)
      << server::FinishReasonName(summary.reason);
  EXPECT_GT(summary.generated_tokens, 0);
  EXPECT_LT(summary.generated_tokens, kLong) << "generation ran to its end despite the deadline";
  EXPECT_LT(summary.total_time, absl::Seconds(2));
}

TEST_F(CancellationTest, CancelWhileQueuedNeverRuns) {
  server::Engine* engine = server_->engine("serial");
  std::optional<absl::Status> s2;
  bool queued = false;
  {
    BackgroundLoad load(*client_, 1, "serial");  // takes the only batch slot
    ASSERT_TRUE(load.WaitStarted());
    auto handle = std::make_shared<client::CancelHandle>();
    client::CallOptions call;
    call.cancel = handle;
    client::GenerateCall second =
        client_->GenerateAsync(GreedyRequest("second", 8, "serial"), nullptr, nullptr, call);
    queued = WaitFor([&] { return engine->stats().waiting == 1; }, absl::Seconds(10));
    handle->Cancel();
    s2 = second.WaitFor(absl::Seconds(10));
  }
  ASSERT_TRUE(queued) << "the second request never waited in the queue (did the first finish?)";
  ASSERT_TRUE(s2.has_value());
  EXPECT_EQ(s2->code(), absl::StatusCode::kCancelled) << *s2;
  const server::GenerateSummary summary = FinishedWithPrompt("serial", 6);
  EXPECT_EQ(server_->WaitUntilIdle(), "");
  EXPECT_EQ(summary.reason, server::FinishReason::kCancelled);
  EXPECT_EQ(summary.generated_tokens, 0);
}

TEST_F(CancellationTest, DeadlineInTheQueueIsDeadlineExceeded) {
  absl::StatusOr<client::GenerateResult> r;
  {
    BackgroundLoad load(*client_, 1, "serial");
    ASSERT_TRUE(load.WaitStarted());
    client::CallOptions call;
    call.timeout = absl::Milliseconds(100);
    r = client_->Generate(GreedyRequest("queued", 4, "serial"), call);
  }
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  const server::GenerateSummary summary = FinishedWithPrompt("serial", 6);
  EXPECT_EQ(server_->WaitUntilIdle(), "");
  EXPECT_EQ(summary.generated_tokens, 0) << Finished("serial");
}

// Draining (SIGTERM in dikkat-server) lets what was accepted finish within
// the grace period, including a request still waiting in the queue when the
// drain starts: it is admitted once the batch has room.
TEST_F(CancellationTest, ShutdownLetsQueuedRequestsFinishWithinTheGracePeriod) {
  server::Engine* engine = server_->engine("serial");
  struct Call {
    std::atomic<int> tokens{0};
    client::GenerateCall call;
  };
  Call first, second;
  auto count = [](Call* c) {
    return [c](const v1::GenerateResponse& chunk) {
      c->tokens += chunk.tokens_size();
      return true;
    };
  };
  // 100 tokens at 2+ ms per step: the first runs a few hundred ms.
  first.call = client_->GenerateAsync(GreedyRequest("first", 100, "serial"), count(&first), nullptr);
  ASSERT_TRUE(WaitFor([&] { return first.tokens > 0; }, absl::Seconds(10)));
  second.call = client_->GenerateAsync(GreedyRequest("second", 20, "serial"), count(&second), nullptr);
  ASSERT_TRUE(WaitFor([&] { return engine->stats().waiting == 1; }, absl::Seconds(10)))
      << "the second request did not queue";
  ASSERT_LT(first.tokens.load(), 100) << "the first request ended before the drain began";

  std::thread drain([engine] { engine->Shutdown(absl::Seconds(20)); });
  std::optional<absl::Status> s1 = first.call.WaitFor(absl::Seconds(20));
  std::optional<absl::Status> s2 = second.call.WaitFor(absl::Seconds(20));
  drain.join();
  ASSERT_TRUE(s1.has_value() && s2.has_value());
  EXPECT_TRUE(s1->ok()) << *s1;
  EXPECT_EQ(first.tokens.load(), 100);
  EXPECT_TRUE(s2->ok()) << "the queued request was cut by the drain: " << *s2;
  EXPECT_EQ(second.tokens.load(), 20);
  // And the engine now refuses work.
  absl::StatusOr<client::GenerateResult> late = client_->Generate(GreedyRequest("late", 2, "serial"));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
}

// ---- the same through the dikkat-server binary and its /metrics ------------------

std::optional<double> Gauge(const ServerProcess& p, const std::string& name) {
  absl::StatusOr<HttpResponse> r = HttpGet(p.metrics_host(), p.metrics_port(), "/metrics");
  if (!r.ok() || r->status != 200) return std::nullopt;
  return PrometheusValue(r->body, name, "model=\"tiny-lm\"");
}

TEST(CancellationProcessTest, MetricsShowEveryBlockFreedAfterCancelAndDeadline) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
       "--kv_cache_bytes=16MiB", "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;
  client::ClientOptions options;
  options.targets = {server.grpc_address()};
  options.retry.max_attempts = 1;
  options.wait_for_ready = true;
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<client::HealthStatus> h = (*c)->HealthCheck();
        return h.ok() && *h == grpc::health::v1::HealthCheckResponse::SERVING;
      },
      absl::Seconds(20)))
      << server.Logs();

  // The binary cannot be slowed down like the in-process engines: other
  // streams in the batch make each step slower instead, so that the streams
  // below are still running when their cancel or deadline arrives.
  std::optional<double> used_during;
  int tokens = 0, deadline_tokens = 0;
  absl::Status cancelled, expired;
  {
    BackgroundLoad load(**c, kLoadStreams);
    ASSERT_TRUE(load.WaitStarted()) << server.Logs();
    // Cancelled from the chunk callback.
    cancelled = (*c)->GenerateStream(
        GreedyRequest("cancel me", kLong), [&](const v1::GenerateResponse& chunk) {
          tokens += chunk.tokens_size();
          if (!used_during.has_value()) used_during = Gauge(server, "dikkat_kv_cache_blocks_used");
          return tokens < 3;
        });
    // A deadline that passes mid-generation: with 33 streams per step, 500
    // tokens take about a second here; the first comes within milliseconds.
    client::CallOptions call;
    call.timeout = absl::Milliseconds(150);
    expired = (*c)->GenerateStream(
        GreedyRequest("too slow", kLong),
        [&](const v1::GenerateResponse& chunk) {
          deadline_tokens += chunk.tokens_size();
          return true;
        },
        call);
  }
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled) << cancelled;
  ASSERT_TRUE(used_during.has_value()) << "no dikkat_kv_cache_blocks_used{model=\"tiny-lm\"} gauge";
  EXPECT_GT(*used_during, 0) << "the gauge does not move: its dropping to 0 would prove nothing";
  EXPECT_EQ(expired.code(), absl::StatusCode::kDeadlineExceeded) << expired;
  EXPECT_GT(deadline_tokens, 0) << "the deadline passed before the first token";
  EXPECT_LT(deadline_tokens, kLong) << "the stream ended before its deadline";

  std::optional<double> used, running, waiting;
  const bool freed = WaitFor(
      [&] {
        used = Gauge(server, "dikkat_kv_cache_blocks_used");
        running = Gauge(server, "dikkat_requests_running");
        waiting = Gauge(server, "dikkat_requests_waiting");
        return used == 0.0 && running == 0.0 && waiting == 0.0;
      },
      absl::Seconds(10));
  EXPECT_TRUE(freed) << "blocks used " << used.value_or(-1) << ", running "
                     << running.value_or(-1) << ", waiting " << waiting.value_or(-1);
  absl::StatusOr<HttpResponse> scrape = HttpGet(server.metrics_host(), server.metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  // The load streams and the callback's cancel are "cancelled"; the deadline
  // is seen by the engine itself or as the transport's cancel.
  const double cancelled_total = PrometheusValue(scrape->body, "dikkat_generate_finished_total",
                                                 "finish_reason=\"cancelled\",model=\"tiny-lm\"")
                                     .value_or(-1);
  const double deadline_total = PrometheusValue(scrape->body, "dikkat_generate_finished_total",
                                                "finish_reason=\"deadline\",model=\"tiny-lm\"")
                                    .value_or(-1);
  EXPECT_EQ(cancelled_total + deadline_total, kLoadStreams + 2) << scrape->body;
  server.Signal(SIGTERM);
  const std::optional<int> exit = server.WaitForExit(absl::Seconds(20));
  EXPECT_TRUE(exit.has_value() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << DescribeWaitStatus(exit) << "\n" << server.Logs();
}

}  // namespace
}  // namespace dikkat::integration
