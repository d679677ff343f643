// HealthService over a real in-process gRPC server (127.0.0.1:0): the state
// before SetServing, Check of known and unknown services, Watch updates,
// Shutdown ending watch streams, and a client leaving a watch.
#include "server/health_service.h"

#include <chrono>
#include <memory>
#include <string>
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

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceSaysSoAndStaysOpen) {
  grpc::ClientContext context;
  auto reader = Watch("no.such.Service", &context, HealthCheckResponse::SERVICE_UNKNOWN);
  HealthCheckResponse r;
  health_.SetServing(true);  // not this service's business: nothing sent
  health_.Shutdown();
  EXPECT_FALSE(reader->Read(&r));
  EXPECT_TRUE(reader->Finish().ok());
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
