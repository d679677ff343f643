// The client library against real in-process gRPC servers on 127.0.0.1
// running a fake dikkat service (tests/client/fake_dikkat_server.h).
#include "client/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "client/tensor.h"
#include "fake_dikkat_server.h"
#include "grpcpp/health_check_service_interface.h"

namespace dikkat::client {
namespace {

using ::dikkat::testing::FakeDikkatServer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> MakeClient(ClientOptions options = {}) {
    options.targets = {server_.address()};
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(options));
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  static v1::GenerateRequest GenerateRequest(int max_new_tokens) {
    v1::GenerateRequest request;
    *request.mutable_input() = TextInput("abc");
    request.set_max_new_tokens(max_new_tokens);
    return request;
  }

  static CallOptions WithDelay(int ms) {
    CallOptions call;
    call.metadata.emplace_back("x-fake-delay-ms", absl::StrCat(ms));
    return call;
  }

  FakeDikkatServer server_;
};

TEST_F(ClientTest, UnaryCallsRoundTripAndFillTheDefaultModel) {
  ClientOptions options;
  options.default_model = "tiny";
  auto client = MakeClient(options);

  v1::EncodeRequest encode;
  *encode.add_inputs() = TextInput("hello");
  *encode.add_inputs() = TextInput("world");
  absl::StatusOr<v1::EncodeResponse> encoded = client->Encode(encode);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(encoded->model(), "tiny");  // the default model went on the wire
  ASSERT_EQ(encoded->results_size(), 2);
  absl::StatusOr<DecodedTensor> embedding = DecodeTensor(encoded->results(1).embedding());
  ASSERT_TRUE(embedding.ok()) << embedding.status();
  EXPECT_THAT(embedding->shape, ElementsAre(4));
  EXPECT_THAT(embedding->values, ElementsAre(0.5f, -1.0f, 2.0f, 2.0f));

  encode.set_model("other");
  encoded = client->Encode(encode);
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(encoded->model(), "other");  // an explicit model is kept

  v1::TokenizeRequest tokenize;
  tokenize.set_text("hi");
  absl::StatusOr<v1::TokenizeResponse> tokens = client->Tokenize(tokenize);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(tokens->ids(), ElementsAre('h', 'i'));
  EXPECT_EQ(server_.service().last().model, "tiny");

  v1::DetokenizeRequest detokenize;
  detokenize.add_ids('o');
  detokenize.add_ids('k');
  absl::StatusOr<v1::DetokenizeResponse> text = client->Detokenize(detokenize);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->text(), "ok");

  absl::StatusOr<v1::GetModelInfoResponse> info = client->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->models_size(), 1);
  EXPECT_EQ(info->models(0).name(), "tiny");
  // GetModelInfo with no name asks for every model: no default filled in.
  EXPECT_EQ(server_.service().last().model, "");
}

TEST_F(ClientTest, DeadlinesPropagateToTheServer) {
  ClientOptions options;
  options.default_timeout = absl::Seconds(30);
  auto client = MakeClient(options);
  v1::EncodeRequest request;
  *request.add_inputs() = TextInput("x");

  ASSERT_TRUE(client->Encode(request).ok());
  EXPECT_GT(server_.service().last().deadline_seconds, 28.0);
  // The grpc-timeout header is rounded up to its unit, hence the slack.
  EXPECT_LE(server_.service().last().deadline_seconds, 30.5);

  CallOptions call;
  call.timeout = absl::Seconds(7);
  ASSERT_TRUE(client->Encode(request, call).ok());
  EXPECT_GT(server_.service().last().deadline_seconds, 5.0);
  EXPECT_LE(server_.service().last().deadline_seconds, 7.5);
}

TEST_F(ClientTest, SlowCallEndsWithDeadlineExceeded) {
  auto client = MakeClient();
  v1::EncodeRequest request;
  *request.add_inputs() = TextInput("sleep");  // the fake sleeps 3 s
  CallOptions call;
  call.timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::EncodeResponse> response = client->Encode(request, call);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded) << response.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(ClientTest, BearerTokenAndCallMetadataArrive) {
  ClientOptions options;
  options.bearer_token = "s3cret";
  auto client = MakeClient(options);
  CallOptions call;
  call.metadata.emplace_back("x-request-id", "42");
  v1::TokenizeRequest request;
  request.set_text("a");
  ASSERT_TRUE(client->Tokenize(request, call).ok());
  const auto seen = server_.service().last();
  EXPECT_EQ(seen.authorization, "Bearer s3cret");
  ASSERT_EQ(seen.metadata.count("x-request-id"), 1u);
  EXPECT_EQ(seen.metadata.find("x-request-id")->second, "42");

  auto anonymous = MakeClient();
  ASSERT_TRUE(anonymous->Tokenize(request).ok());
  EXPECT_EQ(server_.service().last().authorization, "");
}

TEST_F(ClientTest, UnavailableIsRetriedByTheServiceConfig) {
  ClientOptions options;
  options.retry.max_attempts = 4;
  options.retry.initial_backoff = absl::Milliseconds(10);
  options.retry.max_backoff = absl::Milliseconds(50);
  auto client = MakeClient(options);

  server_.service().fail_next_model_info = 2;
  absl::StatusOr<v1::GetModelInfoResponse> info = client->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(server_.service().model_info_calls.load(), 3);

  // More failures than attempts: the last UNAVAILABLE comes back.
  server_.service().model_info_calls = 0;
  server_.service().fail_next_model_info = 10;
  info = client->GetModelInfo();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(server_.service().model_info_calls.load(), 4);
  server_.service().fail_next_model_info = 0;
}

TEST_F(ClientTest, RetriesOffMeansOneAttemptAndOtherCodesAreNotRetried) {
  ClientOptions options;
  options.retry.max_attempts = 1;
  auto client = MakeClient(options);
  server_.service().fail_next_model_info = 1;
  EXPECT_EQ(client->GetModelInfo().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(server_.service().model_info_calls.load(), 1);

  auto retrying = MakeClient();
  const int before = server_.service().calls.load();
  v1::TokenizeRequest request;
  request.set_text(absl::StrCat("status:", static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT)));
  EXPECT_EQ(retrying->Tokenize(request).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server_.service().calls.load() - before, 1);
}

TEST_F(ClientTest, EveryStatusCodeMapsOneToOne) {
  ClientOptions options;
  options.retry.max_attempts = 1;
  auto client = MakeClient(options);
  for (int code = 1; code <= 16; ++code) {
    v1::TokenizeRequest request;
    request.set_text(absl::StrCat("status:", code));
    absl::Status status = client->Tokenize(request).status();
    EXPECT_EQ(static_cast<int>(status.code()), code) << status;
    EXPECT_EQ(status.message(), absl::StrCat("fake code ", code));
    if (code == static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)) {
      ASSERT_TRUE(RetryAfter(status).has_value());
      EXPECT_EQ(*RetryAfter(status), absl::Milliseconds(250));
    } else {
      EXPECT_FALSE(RetryAfter(status).has_value()) << code;
    }
  }
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST_F(ClientTest, StreamingCallbackReceivesChunksInOrder) {
  auto client = MakeClient();
  std::vector<int> ids;
  std::string text;
  absl::Status status = client->GenerateStream(GenerateRequest(20), [&](const auto& chunk) {
    for (const auto& token : chunk.tokens()) ids.push_back(token.id());
    text += chunk.text();
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(ids.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ids[i], i);
  EXPECT_EQ(text.substr(0, 9), "t0 t1 t2 ");
}

TEST_F(ClientTest, GenerateCollectsTheWholeStream) {
  auto client = MakeClient();
  v1::GenerateRequest request = GenerateRequest(4);
  request.set_echo_prompt_tokens(true);
  absl::StatusOr<GenerateResult> result = client->Generate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->text, "t0 t1 t2 t3 ");
  EXPECT_THAT(result->token_ids, ElementsAre(0, 1, 2, 3));
  EXPECT_FLOAT_EQ(result->tokens[2].logprob(), -1.0f);
  EXPECT_THAT(result->prompt_token_ids, ElementsAre('a', 'b', 'c'));
  EXPECT_EQ(result->finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(result->stats.generated_tokens(), 4);
  EXPECT_EQ(result->stats.seed(), 42u);
  EXPECT_EQ(result->chunks, 4);
  EXPECT_LT(result->time_to_first_token, absl::Seconds(5));
  EXPECT_LE(result->time_to_first_token, result->total_time);
}

TEST_F(ClientTest, StreamWithoutFinishReasonIsAnError) {
  auto client = MakeClient();
  CallOptions call;
  call.metadata.emplace_back("x-fake-no-finish", "1");
  absl::StatusOr<GenerateResult> result = client->Generate(GenerateRequest(3), call);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), HasSubstr("finish_reason"));
}

TEST_F(ClientTest, CallbackReturningFalseCancelsTheServerSide) {
  auto client = MakeClient();
  int seen = 0;
  absl::Status status = client->GenerateStream(
      GenerateRequest(1000), [&](const auto&) { return ++seen < 3; }, WithDelay(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(seen, 3);
  ASSERT_TRUE(server_.service().generate_cancel_observed.WaitForNotificationWithTimeout(
      absl::Seconds(5)));
  EXPECT_LT(server_.service().generate_chunks_written.load(), 1000);
}

TEST_F(ClientTest, CancelHandleCancelsFromAnotherThread) {
  auto client = MakeClient();
  CallOptions call = WithDelay(5);
  call.cancel = std::make_shared<CancelHandle>();
  dikkat::Notification first_chunk;
  std::thread canceller([&] {
    first_chunk.WaitForNotification();
    call.cancel->Cancel();
  });
  int seen = 0;
  absl::Status status = client->GenerateStream(
      GenerateRequest(1000),
      [&](const auto&) {
        if (++seen == 1) first_chunk.Notify();
        return true;
      },
      call);
  canceller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_LT(seen, 1000);
  EXPECT_TRUE(server_.service().generate_cancel_observed.WaitForNotificationWithTimeout(
      absl::Seconds(5)));

  // A handle stays cancelled: later calls with it fail at once.
  v1::TokenizeRequest request;
  request.set_text("a");
  const int before = server_.service().calls.load();
  EXPECT_EQ(client->Tokenize(request, call).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(server_.service().calls.load(), before);
}

TEST_F(ClientTest, GenerateAsyncStreamsAndCompletes) {
  auto client = MakeClient();
  dikkat::Mutex mu;
  std::vector<int> ids;
  dikkat::Notification done;
  absl::Status done_status = absl::UnknownError("not called");
  GenerateCall call = client->GenerateAsync(
      GenerateRequest(10),
      [&](const v1::GenerateResponse& chunk) {
        dikkat::MutexLock lock(&mu);
        for (const auto& token : chunk.tokens()) ids.push_back(token.id());
        return true;
      },
      [&](absl::Status status) {
        done_status = status;
        done.Notify();
      });
  EXPECT_TRUE(call.Wait().ok());
  ASSERT_TRUE(done.HasBeenNotified());  // Wait() returns after on_done
  EXPECT_TRUE(done_status.ok()) << done_status;
  EXPECT_TRUE(call.done());
  dikkat::MutexLock lock(&mu);
  EXPECT_THAT(ids, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

// The Client and the call's handle go while the done callback runs, so the
// call's own state holds the channel's last reference when its last reaction
// returns, on a gRPC callback thread. Destroying the channel there shut down
// gRPC's callback completion queue from one of its own threads (a double free
// in grpc_cq_internal_unref under ASan; without ASan a crash or a hang, here
// or at the next callback call). The client library hands that reference to
// a thread of its own (client.cc, ChannelReaper). The server here has no
// callback service (the default health service is one): a server that has
// one holds gRPC's callback queue too, and the clients' channel is then never
// its last user. (server_process_test's clients talk to another process: 2
// runs in 3 of it ended in that double free under ASan before the fix.)
TEST(ClientLifetimeTest, ClientAndHandleGoneWhileTheDoneCallbackRuns) {
  grpc::EnableDefaultHealthCheckService(false);
  ::dikkat::testing::FakeDikkatService service("fake");
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto make_client = [port] {
    ClientOptions options;
    options.targets = {absl::StrCat("127.0.0.1:", port)};
    return *Client::Create(options);
  };
  auto request = [](int n) {
    v1::GenerateRequest r;
    *r.mutable_input() = TextInput("abc");
    r.set_max_new_tokens(n);
    return r;
  };
  for (int round = 0; round < 3; ++round) {
    std::unique_ptr<Client> client = make_client();
    dikkat::Notification in_callback, client_gone, returned;
    std::optional<GenerateCall> call = client->GenerateAsync(
        request(2), nullptr, [&](absl::Status status) {
          EXPECT_TRUE(status.ok()) << status;
          in_callback.Notify();
          client_gone.WaitForNotification();
          returned.Notify();
        });
    // Unary calls too: their state is freed by their completion callback.
    dikkat::Notification unary_in_callback, unary_release, unary_returned;
    v1::TokenizeRequest tokenize;
    tokenize.set_text("abc");
    client->TokenizeAsync(tokenize, [&](absl::StatusOr<v1::TokenizeResponse> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      unary_in_callback.Notify();
      unary_release.WaitForNotification();
      unary_returned.Notify();
    });
    ASSERT_TRUE(in_callback.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(unary_in_callback.WaitForNotificationWithTimeout(absl::Seconds(10)));
    call.reset();
    client.reset();
    client_gone.Notify();
    unary_release.Notify();
    ASSERT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(unary_returned.WaitForNotificationWithTimeout(absl::Seconds(10)));
    // Let the calls' last reactions end before another channel exists: then
    // their channel is the process's last user of the callback queue.
    absl::SleepFor(absl::Milliseconds(100));
  }
  // gRPC's callback machinery still works for the next client.
  std::unique_ptr<Client> client = make_client();
  EXPECT_TRUE(client->GenerateAsync(request(3), nullptr, nullptr).Wait().ok());
  server->Shutdown();
}

TEST_F(ClientTest, GenerateAsyncCancelStopsTheServer) {
  auto client = MakeClient();
  dikkat::Notification first_chunk;
  GenerateCall call = client->GenerateAsync(
      GenerateRequest(1000),
      [&](const v1::GenerateResponse&) {
        if (!first_chunk.HasBeenNotified()) first_chunk.Notify();
        return true;
      },
      nullptr, WithDelay(5));
  ASSERT_TRUE(first_chunk.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_FALSE(call.WaitFor(absl::Milliseconds(1)).has_value());  // still streaming
  call.Cancel();
  EXPECT_EQ(call.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(server_.service().generate_cancel_observed.WaitForNotificationWithTimeout(
      absl::Seconds(5)));
}

TEST_F(ClientTest, GenerateAsyncCallbackReturningFalseCancels) {
  auto client = MakeClient();
  std::atomic<int> seen{0};
  GenerateCall call = client->GenerateAsync(
      GenerateRequest(1000), [&](const v1::GenerateResponse&) { return ++seen < 2; }, nullptr,
      WithDelay(5));
  EXPECT_EQ(call.Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(seen.load(), 2);
  EXPECT_TRUE(server_.service().generate_cancel_observed.WaitForNotificationWithTimeout(
      absl::Seconds(5)));
}

TEST_F(ClientTest, AsyncUnaryCallsDeliverThroughCallbacksAndFutures) {
  ClientOptions options;
  options.default_model = "tiny";
  auto client = MakeClient(options);
  v1::EncodeRequest request;
  *request.add_inputs() = TextInput("a");
  request.set_output_dtype(v1::DTYPE_BFLOAT16);

  auto future = client->EncodeFuture(request);
  absl::StatusOr<v1::EncodeResponse> response = future.get();
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->model(), "tiny");
  absl::StatusOr<DecodedTensor> embedding = DecodeTensor(response->results(0).embedding());
  ASSERT_TRUE(embedding.ok()) << embedding.status();
  EXPECT_THAT(embedding->values, ElementsAre(0.5f, -1.0f, 2.0f, 1.0f));

  dikkat::Notification done;
  absl::StatusOr<v1::TokenizeResponse> tokens;
  v1::TokenizeRequest tokenize;
  tokenize.set_text(absl::StrCat("status:", static_cast<int>(grpc::StatusCode::NOT_FOUND)));
  client->TokenizeAsync(tokenize, [&](absl::StatusOr<v1::TokenizeResponse> result) {
    tokens = std::move(result);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(tokens.status().code(), absl::StatusCode::kNotFound);

  dikkat::Notification detokenized;
  absl::StatusOr<v1::DetokenizeResponse> text;
  v1::DetokenizeRequest detokenize;
  for (char c : std::string("hi!")) detokenize.add_ids(c);
  client->DetokenizeAsync(detokenize, [&](absl::StatusOr<v1::DetokenizeResponse> result) {
    text = std::move(result);
    detokenized.Notify();
  });
  ASSERT_TRUE(detokenized.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->text(), "hi!");

  dikkat::Notification described;
  absl::StatusOr<v1::GetModelInfoResponse> info;
  client->GetModelInfoAsync({}, [&](absl::StatusOr<v1::GetModelInfoResponse> result) {
    info = std::move(result);
    described.Notify();
  });
  ASSERT_TRUE(described.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->models_size(), 1);
  EXPECT_EQ(info->models(0).name(), "tiny");
  // As the blocking call: no default model filled in, every model asked for.
  EXPECT_EQ(server_.service().last().model, "");

  v1::AttentionRequest attention;
  *attention.mutable_input() = TextInput("abc");
  attention.add_layers(1);
  absl::StatusOr<v1::AttentionResponse> maps = client->AttentionFuture(attention).get();
  ASSERT_TRUE(maps.ok()) << maps.status();
  EXPECT_EQ(maps->maps_size(), 2);  // layer 1, heads 0 and 1
}

TEST_F(ClientTest, AsyncCallsOutliveTheClient) {
  std::future<absl::StatusOr<v1::EncodeResponse>> future;
  {
    auto client = MakeClient();
    v1::EncodeRequest request;
    *request.add_inputs() = TextInput("a");
    future = client->EncodeFuture(request);
  }
  absl::StatusOr<v1::EncodeResponse> response = future.get();
  EXPECT_TRUE(response.ok()) << response.status();
}

TEST_F(ClientTest, HealthCheckSpeaksGrpcHealthV1) {
  auto client = MakeClient();
  absl::StatusOr<HealthStatus> health = client->HealthCheck();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ::grpc::health::v1::HealthCheckResponse::SERVING);

  server_.server()->GetHealthCheckService()->SetServingStatus(false);
  health = client->HealthCheck();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ::grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(HealthStatusName(*health), "NOT_SERVING");

  EXPECT_EQ(client->HealthCheck("no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

TEST(ClientRoundRobinTest, CallsReachBothServers) {
  FakeDikkatServer a("server-a"), b("server-b");
  ClientOptions options;
  options.targets = {a.address(), absl::StrCat("localhost:", b.port())};
  options.wait_for_ready = true;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->channel_target(),
            absl::StrCat("ipv4:127.0.0.1:", a.port(), ",127.0.0.1:", b.port()));

  // round_robin only rotates over connected subchannels: the first calls
  // may all land on whichever server connected first.
  for (int i = 0; i < 200 && (a.service().model_info_calls.load() == 0 ||
                              b.service().model_info_calls.load() == 0);
       ++i) {
    ASSERT_TRUE((*client)->GetModelInfo().ok());
  }
  EXPECT_GT(a.service().model_info_calls.load(), 0);
  EXPECT_GT(b.service().model_info_calls.load(), 0);

  // Once both are connected, calls alternate.
  const int a_before = a.service().model_info_calls.load();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*client)->GetModelInfo().ok());
  EXPECT_EQ(a.service().model_info_calls.load() - a_before, 5);
}

TEST(ClientOptionsTest, InvalidOptionsAreRejectedWithTheirName) {
  auto error_of = [](ClientOptions o) { return Client::Create(std::move(o)).status(); };
  ClientOptions o;
  o.targets.clear();
  EXPECT_THAT(error_of(o).message(), HasSubstr("targets"));
  o = {};
  o.retry.max_attempts = 6;
  EXPECT_THAT(error_of(o).message(), HasSubstr("retry.max_attempts 6"));
  o = {};
  o.tls.enabled = true;
  o.tls.client_cert_pem = "cert";
  EXPECT_THAT(error_of(o).message(), HasSubstr("client_key_pem"));
  o = {};
  o.tls.root_certs_pem = "roots";
  EXPECT_THAT(error_of(o).message(), HasSubstr("tls.enabled"));
  o = {};
  o.targets = {"127.0.0.1:1", "127.0.0.1:99999"};
  EXPECT_THAT(error_of(o).message(), HasSubstr("99999"));
  o = {};
  // Backoffs gRPC's service config cannot hold fail here, not on every call.
  o.retry.max_backoff = absl::InfiniteDuration();
  EXPECT_THAT(error_of(o).message(), HasSubstr("retry backoff"));
  o = {};
  o.retry.backoff_multiplier = std::numeric_limits<double>::infinity();
  EXPECT_THAT(error_of(o).message(), HasSubstr("retry backoff"));
  o = {};
  o.retry.initial_backoff = absl::Nanoseconds(1) / 2;
  EXPECT_THAT(error_of(o).message(), HasSubstr("retry backoff"));
  o.retry.max_attempts = 1;  // no retries: the backoffs are not used
  EXPECT_TRUE(error_of(o).ok());
  o = {};
  o.load_balancing = "random";
  EXPECT_EQ(error_of(o).code(), absl::StatusCode::kInvalidArgument);
  o = {};
  EXPECT_TRUE(error_of(o).ok());
}

TEST(ClientOptionsTest, ServiceConfigCarriesPolicyAndRetries) {
  ClientOptions o;
  o.targets = {"127.0.0.1:1", "127.0.0.1:2"};
  o.retry.max_attempts = 3;
  const std::string json = BuildServiceConfigJson(o);
  EXPECT_THAT(json, HasSubstr("\"round_robin\""));
  EXPECT_THAT(json, HasSubstr("\"maxAttempts\":3"));
  EXPECT_THAT(json, HasSubstr("\"initialBackoff\":\"0.100000000s\""));
  EXPECT_THAT(json, HasSubstr("\"retryableStatusCodes\":[\"UNAVAILABLE\"]"));
  o.targets = {"127.0.0.1:1"};
  o.retry.max_attempts = 1;
  EXPECT_EQ(BuildServiceConfigJson(o), "{\"loadBalancingConfig\":[{\"pick_first\":{}}]}");
}

TEST(ClientOptionsTest, ChannelToADownServerFailsWithUnavailable) {
  ClientOptions o;
  o.targets = {"127.0.0.1:1"};  // nothing listens on port 1
  o.retry.initial_backoff = absl::Milliseconds(10);
  o.retry.max_backoff = absl::Milliseconds(20);
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok());
  CallOptions call;
  call.timeout = absl::Seconds(5);
  EXPECT_EQ((*client)->GetModelInfo({}, call).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dikkat::client
