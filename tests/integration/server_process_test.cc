// The dikkat-server binary as a child process, driven through the client
// library: health transitions from start-up to SERVING, a SIGTERM drain
// (health NOT_SERVING, new requests UNAVAILABLE, in-flight streams finish,
// exit 0), a drain whose grace period ends before the streams do, a second
// SIGTERM that ends the drain at once, RESOURCE_EXHAUSTED with a retry hint
// when the queue is full, and the transport's connection limits.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/sync.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration_harness.h"

namespace dikkat::integration {
namespace {

using ::testing::HasSubstr;
using Health = grpc::health::v1::HealthCheckResponse;

constexpr int kLong = 500;  // tiny-lm's context is 512

std::unique_ptr<client::Client> ClientFor(const std::string& address,
                                          absl::Duration timeout = absl::Seconds(20)) {
  client::ClientOptions options;
  options.targets = {address};
  options.default_timeout = timeout;
  options.retry.max_attempts = 1;  // see every UNAVAILABLE as it happens
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// "UNAVAILABLE" (no answer), "NOT_SERVING", "SERVING", ...
std::string HealthOf(client::Client& c) {
  absl::StatusOr<client::HealthStatus> h = c.HealthCheck();
  if (!h.ok()) return std::string(absl::StatusCodeToString(h.status().code()));
  return client::HealthStatusName(*h);
}

bool ExitedCleanly(const std::optional<int>& status) {
  return status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

// Streams started together; each records its chunks and final status.
class Streams {
 public:
  Streams(client::Client& c, int n, int max_new_tokens) : results_(n) {
    for (int i = 0; i < n; ++i) {
      Result* r = &results_[i];
      calls_.push_back(c.GenerateAsync(
          GreedyRequest(absl::StrCat("stream ", i), max_new_tokens),
          [r](const v1::GenerateResponse& chunk) {
            if (r->tokens.load() == 0 && chunk.tokens_size() > 0) r->first_token_at = absl::Now();
            r->tokens += chunk.tokens_size();
            if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) r->finish = chunk.finish_reason();
            return true;
          },
          [r](absl::Status s) {
            r->ended_at = absl::Now();
            r->status = std::move(s);
          }));
    }
  }
  // Every stream has produced a token.
  bool AllStarted() const {
    for (const Result& r : results_) {
      if (r.tokens.load() == 0) return false;
    }
    return true;
  }
  bool WaitAll(absl::Duration timeout) {
    for (auto& c : calls_) {
      if (!c.WaitFor(timeout).has_value()) return false;
    }
    return true;
  }
  absl::Time FirstEnd() const {
    absl::Time t = absl::InfiniteFuture();
    for (const Result& r : results_) t = std::min(t, r.ended_at);
    return t;
  }

  struct Result {
    std::atomic<int> tokens{0};
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    absl::Status status;
    absl::Time ended_at = absl::InfiniteFuture();
    absl::Time first_token_at = absl::InfiniteFuture();  // set before `tokens` moves
  };
  std::vector<Result>& results() { return results_; }

 private:
  std::vector<Result> results_;
  std::vector<client::GenerateCall> calls_;
};

TEST(ServerProcessTest, HealthGoesServingAfterWarmupAndSigtermDrainsInFlightStreams) {
  // A known port, so that health can be asked before the server listens:
  // the gRPC port opens only after every model is loaded.
  const int port = PickFreePort();
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--model=s2s=" + ModelDir("tiny-seq2seq"),
       "--model=enc=" + ModelDir("tiny-encoder"), "--listen=" + address,
       "--metrics_listen=127.0.0.1:0", "--kv_cache_bytes=16MiB", "--grace_period=20s",
       "--threads=1"},
      absl::Seconds(30), /*wait_for_listening=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;

  // 1. Start-up. /metrics and /healthz come up before the models load; the
  // gRPC port only once they are loaded; health says SERVING only after the
  // warm-up. Loading three models takes about a second.
  absl::StatusOr<HttpResponse> healthz =
      HttpGet(server.metrics_host(), server.metrics_port(), "/healthz");
  ASSERT_TRUE(healthz.ok()) << healthz.status();
  EXPECT_EQ(healthz->status, 503) << "/healthz OK while the models load";
  {
    // Its own channel: a refused connection puts the channel into
    // reconnect backoff, which the probe below must not inherit.
    std::unique_ptr<client::Client> early = ClientFor(address, absl::Milliseconds(500));
    EXPECT_EQ(HealthOf(*early), "UNAVAILABLE") << "health answered while the models load";
  }
  ASSERT_TRUE(server.WaitForListening(absl::Seconds(30)).ok()) << server.Logs();
  EXPECT_EQ(server.grpc_address(), address);
  std::unique_ptr<client::Client> probe = ClientFor(address, absl::Milliseconds(500));
  std::vector<std::string> seen;
  const bool serving = WaitFor(
      [&] {
        const std::string h = HealthOf(*probe);
        if (seen.empty() || seen.back() != h) seen.push_back(h);
        return h == "SERVING";
      },
      absl::Seconds(30));
  ASSERT_TRUE(serving) << "health never became SERVING; seen: " << absl::StrJoin(seen, " -> ")
                       << "\n" << server.Logs();
  // Between "listening on" and the end of the warm-up (a few tens of ms)
  // health is NOT_SERVING; whether a probe catches it is timing.
  for (size_t i = 0; i + 1 < seen.size(); ++i) {
    EXPECT_EQ(seen[i], "NOT_SERVING") << "seen: " << absl::StrJoin(seen, " -> ");
  }
  const std::string log = server.Stderr();
  for (const char* model : {"'tiny-lm'", "'s2s'", "'enc'"}) {
    EXPECT_THAT(log, HasSubstr(absl::StrCat("warmed up ", model))) << "SERVING before warm-up";
  }
  healthz = HttpGet(server.metrics_host(), server.metrics_port(), "/healthz");
  ASSERT_TRUE(healthz.ok()) << healthz.status();
  EXPECT_EQ(healthz->status, 200);

  // 2. SIGTERM while streams run. 24 streams share each step, so they last
  // far longer than the checks below (a lone tiny-model stream would not).
  std::unique_ptr<client::Client> c = ClientFor(address);
  constexpr int kStreams = 24;
  Streams streams(*c, kStreams, kLong);
  ASSERT_TRUE(WaitFor([&] { return streams.AllStarted(); }, absl::Seconds(20)))
      << "the streams did not start\n" << server.Logs();
  server.Signal(SIGTERM);

  std::string drain_health;
  const bool not_serving = WaitFor(
      [&] {
        drain_health = HealthOf(*probe);
        return drain_health != "SERVING";
      },
      absl::Seconds(10));
  EXPECT_TRUE(not_serving) << "health stayed SERVING after SIGTERM";
  EXPECT_EQ(drain_health, "NOT_SERVING");
  absl::StatusOr<client::GenerateResult> refused = c->Generate(GreedyRequest("too late", 4));
  const absl::Time refused_at = absl::Now();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  v1::EncodeRequest encode;
  *encode.add_inputs() = client::TextInput("too late");
  EXPECT_EQ(c->Encode(encode).status().code(), absl::StatusCode::kUnavailable);

  ASSERT_TRUE(streams.WaitAll(absl::Seconds(20))) << "streams still running\n" << server.Logs();
  EXPECT_LT(refused_at, streams.FirstEnd())
      << "a stream ended before the drain checks: they prove nothing about in-flight work";
  for (size_t i = 0; i < streams.results().size(); ++i) {
    const Streams::Result& r = streams.results()[i];
    EXPECT_TRUE(r.status.ok()) << "stream " << i << ": " << r.status;
    EXPECT_EQ(r.tokens.load(), kLong) << "stream " << i;
    EXPECT_EQ(r.finish, v1::FINISH_REASON_LENGTH) << "stream " << i;
  }
  const std::optional<int> exit = server.WaitForExit(absl::Seconds(20));
  EXPECT_TRUE(ExitedCleanly(exit)) << DescribeWaitStatus(exit) << "\n" << server.Logs();
  EXPECT_THAT(server.Stderr(), HasSubstr("SIGTERM, draining"));
  // Gone: calls fail fast as UNAVAILABLE.
  EXPECT_EQ(HealthOf(*probe), "UNAVAILABLE");
}

// Callers that send their next call as soon as the previous one ends, and
// stop at their first refusal, while the server drains: every call ends OK
// or UNAVAILABLE. gRPC 1.51 ends a call that arrives once Server::Shutdown
// has begun with CANCELLED (grpc/grpc#41785), which callers do not retry;
// before the server lingered for callers to stop (server/main.cc), about 1
// call in 100 of the chaos soak's drain ended that way.
TEST(ServerProcessTest, CallsSentDuringTheDrainAreUnavailableNeverCancelled) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--kv_cache_bytes=16MiB", "--grace_period=10s", "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;
  std::unique_ptr<client::Client> c = ClientFor(server.grpc_address());
  ASSERT_TRUE(WaitFor([&] { return HealthOf(*c) == "SERVING"; }, absl::Seconds(20)))
      << server.Logs();
  constexpr int kCallers = 48;
  dikkat::Mutex mu;
  std::map<absl::StatusCode, int> codes;
  std::vector<std::string> others;
  std::atomic<int> served{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      while (true) {
        absl::Status s = c->Generate(GreedyRequest(absl::StrCat("caller ", i), 12)).status();
        dikkat::MutexLock lock(&mu);
        ++codes[s.code()];
        if (s.ok()) {
          ++served;
          continue;
        }
        if (s.code() != absl::StatusCode::kUnavailable) others.push_back(s.ToString());
        return;
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return served.load() >= 4 * kCallers; }, absl::Seconds(30)))
      << server.Logs();
  server.Signal(SIGTERM);
  for (std::thread& t : callers) t.join();
  EXPECT_TRUE(ExitedCleanly(server.WaitForExit(absl::Seconds(20)))) << server.Logs();
  EXPECT_TRUE(others.empty()) << others.size() << " calls, e.g. " << others.front();
  EXPECT_EQ(codes[absl::StatusCode::kUnavailable], kCallers);
}

TEST(ServerProcessTest, ShortGracePeriodEndsLongStreamsAndStillExitsZero) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--kv_cache_bytes=16MiB", "--grace_period=50ms", "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;
  std::unique_ptr<client::Client> c = ClientFor(server.grpc_address());
  ASSERT_TRUE(WaitFor([&] { return HealthOf(*c) == "SERVING"; }, absl::Seconds(20)))
      << server.Logs();

  constexpr int kStreams = 32;
  Streams streams(*c, kStreams, kLong);
  ASSERT_TRUE(WaitFor([&] { return streams.AllStarted(); }, absl::Seconds(20)))
      << "the streams did not start\n" << server.Logs();
  const absl::Time term_at = absl::Now();
  server.Signal(SIGTERM);
  ASSERT_TRUE(streams.WaitAll(absl::Seconds(20))) << "streams still running\n" << server.Logs();
  const std::optional<int> exit = server.WaitForExit(absl::Seconds(20));
  EXPECT_TRUE(ExitedCleanly(exit)) << DescribeWaitStatus(exit) << "\n" << server.Logs();
  EXPECT_LT(absl::Now() - term_at, absl::Seconds(5)) << "the drain did not respect the grace period";

  // The service documents streams cut short by shutdown as UNAVAILABLE
  // (retry elsewhere); a stream whose transport closed first may see
  // CANCELLED. None may claim to have finished normally.
  int cut = 0;
  for (size_t i = 0; i < streams.results().size(); ++i) {
    const Streams::Result& r = streams.results()[i];
    if (r.status.ok()) {
      EXPECT_EQ(r.tokens.load(), kLong) << "stream " << i << " ended OK but short";
      continue;
    }
    ++cut;
    EXPECT_TRUE(r.status.code() == absl::StatusCode::kUnavailable ||
                r.status.code() == absl::StatusCode::kCancelled)
        << "stream " << i << ": " << r.status;
    EXPECT_LT(r.tokens.load(), kLong) << "stream " << i;
  }
  EXPECT_GT(cut, 0) << "every stream finished within 50 ms: the grace period was not tested";
}

TEST(ServerProcessTest, FullQueueIsResourceExhaustedWithARetryHint) {
  // One sequence runs, one may wait; everything else is turned away.
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
       "--kv_cache_bytes=16MiB", "--max_queue=1", "--max_batch_size=1", "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;
  std::unique_ptr<client::Client> c = ClientFor(server.grpc_address());
  ASSERT_TRUE(WaitFor([&] { return HealthOf(*c) == "SERVING"; }, absl::Seconds(20)))
      << server.Logs();

  constexpr int kRequests = 32;
  Streams streams(*c, kRequests, kLong);
  ASSERT_TRUE(streams.WaitAll(absl::Seconds(30))) << server.Logs();
  int exhausted = 0;
  for (size_t i = 0; i < streams.results().size(); ++i) {
    const Streams::Result& r = streams.results()[i];
    if (r.status.ok()) {
      EXPECT_EQ(r.tokens.load(), kLong) << "stream " << i;
      continue;
    }
    ASSERT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << "stream " << i << ": " << r.status;
    ++exhausted;
    EXPECT_THAT(r.status.message(), HasSubstr("queue is full"));
    EXPECT_EQ(r.tokens.load(), 0);
    const std::optional<absl::Duration> retry_after = client::RetryAfter(r.status);
    ASSERT_TRUE(retry_after.has_value()) << "no retry-after-ms trailer on " << r.status;
    EXPECT_GT(*retry_after, absl::ZeroDuration());
  }
  // 32 requests sent at once to a server that holds two: most are refused.
  EXPECT_GE(exhausted, kRequests / 2);

  // Metrics count the refusals, and nothing is left holding KV blocks.
  std::string body;
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<HttpResponse> r = HttpGet(server.metrics_host(), server.metrics_port(), "/metrics");
        if (!r.ok()) return false;
        body = r->body;
        return PrometheusValue(body, "dikkat_kv_cache_blocks_used", "model=\"tiny-lm\"") == 0.0 &&
               PrometheusValue(body, "dikkat_requests_running", "model=\"tiny-lm\"") == 0.0;
      },
      absl::Seconds(10)))
      << body;
  EXPECT_EQ(PrometheusValue(body, "dikkat_request_failures_total",
                            "model=\"tiny-lm\",reason=\"overloaded\""),
            static_cast<double>(exhausted))
      << body;

  // The server recovers: a request now succeeds.
  absl::StatusOr<client::GenerateResult> after = c->Generate(GreedyRequest("after", 4));
  EXPECT_TRUE(after.ok()) << after.status();
  server.Signal(SIGTERM);
  EXPECT_TRUE(ExitedCleanly(server.WaitForExit(absl::Seconds(20)))) << server.Logs();
}

TEST(ServerProcessTest, SecondSigtermDuringTheDrainForcesExit) {
  // One sequence at a time, 64 queued: the drain has seconds of work (about
  // 4 s on main for 32) and a grace period of minutes, so only the second
  // signal can end it soon.
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--kv_cache_bytes=16MiB", "--grace_period=300s", "--max_batch_size=1", "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;
  std::unique_ptr<client::Client> c = ClientFor(server.grpc_address(), absl::Seconds(60));
  ASSERT_TRUE(WaitFor([&] { return HealthOf(*c) == "SERVING"; }, absl::Seconds(20)))
      << server.Logs();
  constexpr int kStreams = 64;
  Streams streams(*c, kStreams, kLong);
  ASSERT_TRUE(WaitFor([&] { return streams.results()[0].tokens.load() > 0 ||
                                   streams.results()[1].tokens.load() > 0; },
                      absl::Seconds(20)))
      << server.Logs();
  server.Signal(SIGTERM);
  ASSERT_TRUE(server.WaitForOutput(std::regex("SIGTERM, draining"), absl::Seconds(10)))
      << server.Logs();
  const absl::Time second_at = absl::Now();
  server.Signal(SIGTERM);
  const std::optional<int> exit = server.WaitForExit(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value()) << "the second SIGTERM did not end the drain\n" << server.Logs();
  EXPECT_LT(absl::Now() - second_at, absl::Seconds(3));
  // Not a clean exit: the code a shell reports for a process SIGTERM killed.
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 128 + SIGTERM)
      << DescribeWaitStatus(exit) << "\n" << server.Logs();
  EXPECT_THAT(server.Stderr(), HasSubstr("second SIGTERM during the drain: exiting now"));
  ASSERT_TRUE(streams.WaitAll(absl::Seconds(20)));
  int cut = 0;
  for (const Streams::Result& r : streams.results()) cut += r.status.ok() ? 0 : 1;
  EXPECT_GT(cut, 0) << "every stream finished: the drain was not cut short";
}

TEST(ServerProcessTest, ConnectionLimitsFromFlags) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--kv_cache_bytes=16MiB", "--max_concurrent_streams=2", "--max_connection_idle=500ms",
       "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;

  // 1. Two calls at once per connection: the client holds the third back
  // until one of the first two has ended (without the limit the engine
  // batches all three and they start together).
  {
    std::unique_ptr<client::Client> c = ClientFor(server.grpc_address(), absl::Seconds(60));
    ASSERT_TRUE(WaitFor([&] { return HealthOf(*c) == "SERVING"; }, absl::Seconds(20)))
        << server.Logs();
    Streams streams(*c, 3, kLong);
    ASSERT_TRUE(streams.WaitAll(absl::Seconds(60))) << server.Logs();
    std::vector<Streams::Result>& r = streams.results();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(r[i].status.ok()) << i << ": " << r[i].status;
    // Whichever two went first, the last to start began after one ended.
    std::vector<int> order = {0, 1, 2};
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return r[a].first_token_at < r[b].first_token_at; });
    const absl::Time first_end = std::min(r[order[0]].ended_at, r[order[1]].ended_at);
    EXPECT_GE(r[order[2]].first_token_at + absl::Milliseconds(20), first_end)
        << "a third stream ran on a connection limited to two";
  }

  // 2. A connection without calls is closed after --max_connection_idle:
  // the channel goes back to IDLE by itself.
  auto channel = grpc::CreateChannel(server.grpc_address(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  Health response;
  ASSERT_TRUE(health->Check(&context, request, &response).ok());
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  // 500 ms of idleness, then the server's GOAWAY has to reach the client: 15 s
  // leaves room for a loaded CI machine (5 s was missed once at -j2, 2026-11-24).
  EXPECT_TRUE(WaitFor([&] { return channel->GetState(false) == GRPC_CHANNEL_IDLE; },
                      absl::Seconds(15)))
      << "the idle connection was kept open";
  server.Signal(SIGTERM);
  EXPECT_TRUE(ExitedCleanly(server.WaitForExit(absl::Seconds(20)))) << server.Logs();
}

TEST(ServerProcessTest, InconsistentTransportFlagsStopTheServerAtStart) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--max_message_bytes=64MiB", "--grpc_memory_bytes=48MiB"},
      absl::Seconds(30), /*wait_for_listening=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::optional<int> exit = (*p)->WaitForExit(absl::Seconds(20));
  EXPECT_TRUE(exit.has_value() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 2)
      << DescribeWaitStatus(exit);
  EXPECT_THAT((*p)->Stderr(), HasSubstr("--grpc_memory_bytes=48MiB is smaller than"));
}

TEST(ServerProcessTest, AnUnknownReasoningParserStopsTheServerAtStart) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--listen=127.0.0.1:0", "--metrics_listen=",
       "--openai_reasoning_parser=granite"},
      absl::Seconds(30), /*wait_for_listening=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::optional<int> exit = (*p)->WaitForExit(absl::Seconds(20));
  EXPECT_TRUE(exit.has_value() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 2)
      << DescribeWaitStatus(exit);
  EXPECT_THAT((*p)->Stderr(), HasSubstr("--openai_reasoning_parser is 'granite'"));
}

}  // namespace
}  // namespace dikkat::integration
