// HealthService over a real in-process gRPC server (127.0.0.1:0): the state
// before SetServing, Check of known and unknown services, Watch updates,
// Shutdown ending watch streams, a client leaving a watch, and the limits
// (request size, names not echoed, unknown-service watches end, watchers
// bounded).
#include "server/health_service.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dikkat::server {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    health_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  // Check's status, or -1 with `code` set when the call fails.
  int Check(const std::string& service, grpc::StatusCode* code = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status status = stub_->Check(&context, request, &response);
    if (code != nullptr) *code = status.error_code();
    return status.ok() ? response.status() : -1;
  }

  // A Watch stream of `service`; its first message must be `first`.
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> Watch(const std::string& service,
                                                                 grpc::ClientContext* context,
                                                                 int first) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    HealthCheckRequest request;
    request.set_service(service);
    auto reader = stub_->Watch(context, request);
    HealthCheckResponse r;
    EXPECT_TRUE(reader->Read(&r));
    EXPECT_EQ(r.status(), first);
    return reader;
  }

  HealthService health_{{"dikkat.v1.Dikkat"}};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, NotServingUntilToldOtherwise) {
  // Unlike gRPC's default health service, "" is not SERVING on its own.
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check("dikkat.v1.Dikkat"), HealthCheckResponse::NOT_SERVING);
  health_.SetServing(true);
  EXPECT_EQ(Check(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check("dikkat.v1.Dikkat"), HealthCheckResponse::SERVING);
  health_.SetServing(false);
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, UnknownServiceIsNotFound) {
  health_.SetServing(true);
  grpc::StatusCode code = grpc::StatusCode::OK;
  EXPECT_EQ(Check("no.such.Service", &code), -1);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
}

TEST_F(HealthServiceTest, ShutdownIsNotServingForGood) {
  health_.SetServing(true);
  health_.Shutdown();
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
  health_.SetServing(true);  // ignored after Shutdown
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchSendsEveryChangeAndEndsOnShutdown) {
  grpc::ClientContext context;
  auto reader = Watch("dikkat.v1.Dikkat", &context, HealthCheckResponse::NOT_SERVING);
  HealthCheckResponse r;
  health_.SetServing(true);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  health_.SetServing(true);  // no change: nothing sent
  health_.SetServing(false);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  health_.SetServing(true);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  // Shutdown: NOT_SERVING, then the stream ends with OK (not at the
  // transport's shutdown deadline).
  const auto start = std::chrono::steady_clock::now();
  health_.Shutdown();
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&r));
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceSaysSoAndEnds) {
  // The protocol keeps such a stream open in case the service becomes
  // known; this server's services never change, so it ends the stream
  // instead of holding the request (and its name) for as long as the client
  // likes (it used to stay open until the client left).
  grpc::ClientContext context;
  auto reader = Watch("no.such.Service", &context, HealthCheckResponse::SERVICE_UNKNOWN);
  HealthCheckResponse r;
  EXPECT_FALSE(reader->Read(&r));
  const grpc::Status end = reader->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(end.error_message().find("no.such.Service"), std::string::npos) << end.error_message();
}

TEST_F(HealthServiceTest, OversizedRequestsAreRefusedAndNamesNotEchoed) {
  health_.SetServing(true);
  // A 4 KiB name: refused by size, whether Check or Watch.
  const std::string huge(4096, 'n');
  grpc::StatusCode code = grpc::StatusCode::OK;
  EXPECT_EQ(Check(huge, &code), -1);
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(huge);
    auto reader = stub_->Watch(&context, request);
    HealthCheckResponse r;
    EXPECT_FALSE(reader->Read(&r));
    const grpc::Status end = reader->Finish();
    EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(end.error_message().find("at most 1024"), std::string::npos) << end.error_message();
  }
  // Unknown names are not echoed back (they used to be, whatever their size).
  grpc::ClientContext context;
  HealthCheckRequest request;
  request.set_service("not-a-service-" + std::string(500, 'x'));
  HealthCheckResponse response;
  const grpc::Status s = stub_->Check(&context, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message().find("not-a-service"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("'dikkat.v1.Dikkat'"), std::string::npos) << s.error_message();
  // Known names still work.
  EXPECT_EQ(Check("dikkat.v1.Dikkat"), HealthCheckResponse::SERVING);
}

TEST(HealthServiceLimitsTest, WatchStreamsAreBounded) {
  HealthLimits limits;
  limits.max_watchers = 2;
  HealthService health({"dikkat.v1.Dikkat"}, limits);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = Health::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  auto open = [&](grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    HealthCheckRequest request;
    return stub->Watch(context, request);
  };
  grpc::ClientContext c1, c2, c3, c4;
  auto w1 = open(&c1);
  auto w2 = open(&c2);
  HealthCheckResponse r;
  ASSERT_TRUE(w1->Read(&r));
  ASSERT_TRUE(w2->Read(&r));
  auto w3 = open(&c3);
  EXPECT_FALSE(w3->Read(&r));
  EXPECT_EQ(w3->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // A watcher that leaves frees its place.
  c1.TryCancel();
  while (w1->Read(&r)) {
  }
  w1->Finish();
  bool reopened = false;
  for (int attempt = 0; attempt < 50 && !reopened; ++attempt) {
    grpc::ClientContext context;
    auto w = open(&context);
    reopened = w->Read(&r);
    context.TryCancel();
    while (w->Read(&r)) {
    }
    w->Finish();
    if (!reopened) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(reopened) << "a place freed by a watcher that left was not reused";
  // Check is never limited by watchers.
  grpc::ClientContext check;
  HealthCheckRequest request;
  EXPECT_TRUE(stub->Check(&check, request, &r).ok());
  health.Shutdown();
  while (w2->Read(&r)) {
  }
  EXPECT_TRUE(w2->Finish().ok());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

TEST_F(HealthServiceTest, ManyWatchersAndOnesThatLeave) {
  // Watchers that cancel while others keep reading; state changes meanwhile.
  constexpr int kWatchers = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<HealthCheckResponse>>> readers;
  for (int i = 0; i < kWatchers; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(Watch("", contexts.back().get(), HealthCheckResponse::NOT_SERVING));
  }
  for (int i = 0; i < kWatchers; i += 2) contexts[i]->TryCancel();
  health_.SetServing(true);
  for (int i = 0; i < kWatchers; ++i) {
    HealthCheckResponse r;
    if (i % 2 == 0) {
      while (readers[i]->Read(&r)) {
      }
      EXPECT_EQ(readers[i]->Finish().error_code(), grpc::StatusCode::CANCELLED);
    } else {
      ASSERT_TRUE(readers[i]->Read(&r));
      EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
    }
  }
  health_.Shutdown();
  for (int i = 1; i < kWatchers; i += 2) {
    HealthCheckResponse r;
    ASSERT_TRUE(readers[i]->Read(&r));
    EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
    EXPECT_FALSE(readers[i]->Read(&r));
    EXPECT_TRUE(readers[i]->Finish().ok());
  }
}

}  // namespace
}  // namespace dikkat::server
