// Bearer-token authentication and TLS credential checks (server/security.h),
// and the service's use of them over a real in-process gRPC server with a
// FakeEngine: every dikkat.v1 RPC refuses a missing or wrong token, the
// health service does not ask for one.
#include "server/security.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "fake_engine.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/service.h"

namespace dikkat::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "0123456789abcdef-token";

std::string TempFile(const std::string& contents) {
  char pattern[] = "/tmp/dikkat_auth_test_XXXXXX";
  const int fd = mkstemp(pattern);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(pattern) << contents;
  return pattern;
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abcdef", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdeg", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abcdefabc", "abcdef"));
  // A prefix repeated to the secret's length must not pass.
  EXPECT_FALSE(ConstantTimeEquals("ab", "abab"));
  EXPECT_FALSE(ConstantTimeEquals("", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
}

TEST(BearerTokenAuthenticatorTest, AcceptsOnlyConfiguredTokens) {
  auto auth = BearerTokenAuthenticator::Create({kToken, "second-token-0000000"});
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->CheckAuthorization(absl::StrCat("Bearer ", kToken)).ok());
  EXPECT_TRUE((*auth)->CheckAuthorization(absl::StrCat("bearer ", kToken)).ok());
  EXPECT_TRUE((*auth)->CheckAuthorization("Bearer second-token-0000000").ok());

  absl::Status missing = (*auth)->CheckAuthorization("");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("authorization: Bearer <token>"));
  absl::Status scheme = (*auth)->CheckAuthorization(absl::StrCat("Basic ", kToken));
  EXPECT_EQ(scheme.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(scheme.message()), HasSubstr("not of the form"));
  absl::Status wrong = (*auth)->CheckAuthorization("Bearer 0123456789abcdef-tokeN");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(wrong.message()), Not(HasSubstr("0123456789")));
  EXPECT_FALSE((*auth)->CheckAuthorization(absl::StrCat("Bearer ", kToken, "x")).ok());
  EXPECT_FALSE((*auth)->CheckAuthorization("Bearer ").ok());
}

TEST(BearerTokenAuthenticatorTest, RefusesWeakOrUnsendableTokens) {
  EXPECT_THAT(std::string(BearerTokenAuthenticator::Create({"short"}).status().message()),
              HasSubstr("at least 16"));
  EXPECT_FALSE(BearerTokenAuthenticator::Create({"has a space in the token"}).ok());
  EXPECT_FALSE(BearerTokenAuthenticator::Create({"non-ascii-\xc3\xa9-token-here"}).ok());
  EXPECT_FALSE(BearerTokenAuthenticator::Create({}).ok());
}

TEST(BearerTokenAuthenticatorTest, ReadsATokenFile) {
  const std::string path = TempFile(absl::StrCat("# comment\n\n  ", kToken, "  \r\nsecond-token-0000000\n"));
  auto auth = BearerTokenAuthenticator::FromFile(path);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ((*auth)->token_count(), 2u);
  EXPECT_TRUE((*auth)->CheckAuthorization(absl::StrCat("Bearer ", kToken)).ok());
  unlink(path.c_str());

  const std::string empty = TempFile("# nothing\n");
  EXPECT_THAT(std::string(BearerTokenAuthenticator::FromFile(empty).status().message()),
              HasSubstr("no token"));
  unlink(empty.c_str());
  EXPECT_THAT(std::string(BearerTokenAuthenticator::FromFile("/nonexistent/t").status().message()),
              HasSubstr("/nonexistent/t"));
}

TEST(LoadAuthenticatorTest, FileOrEnvironmentButNotBoth) {
  auto none = LoadAuthenticator("", nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  EXPECT_EQ(*LoadAuthenticator("", ""), nullptr);
  auto env = LoadAuthenticator("", kToken);
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_NE(*env, nullptr);
  EXPECT_TRUE((*env)->CheckAuthorization(absl::StrCat("Bearer ", kToken)).ok());
  const std::string path = TempFile(kToken);
  EXPECT_THAT(std::string(LoadAuthenticator(path, kToken).status().message()),
              HasSubstr("use one"));
  unlink(path.c_str());
}

TEST(MakeServerCredentialsTest, ChecksTheFlagCombinations) {
  EXPECT_TRUE(MakeServerCredentials({}).ok());
  EXPECT_THAT(std::string(MakeServerCredentials({"", "", "/ca.pem"}).status().message()),
              HasSubstr("--tls_client_ca needs"));
  EXPECT_THAT(std::string(MakeServerCredentials({"/cert.pem", "", ""}).status().message()),
              HasSubstr("both --tls_cert and --tls_key"));
  const std::string not_pem = TempFile("hello");
  absl::Status s = MakeServerCredentials({not_pem, not_pem, ""}).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a PEM file"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--tls_cert"));
  unlink(not_pem.c_str());
}

// ---- the service with an authenticator ----------------------------------------

class AuthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto lm = std::make_unique<testing::FakeEngine>("lm", model::Architecture::kDecoderOnly);
    lm_ = lm.get();
    ASSERT_TRUE(registry_.Add("lm", std::move(lm)).ok());
    auto auth = BearerTokenAuthenticator::Create({kToken});
    ASSERT_TRUE(auth.ok());
    auth_ = std::move(*auth);
    ServiceOptions options;
    options.auth = auth_.get();
    service_ = std::make_unique<DikkatService>(&registry_, nullptr, "test", options);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Dikkat::NewStub(channel_);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    registry_.ShutdownAll(absl::ZeroDuration());
  }

  // Context with `authorization` set to `value` (none when empty).
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& value) {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!value.empty()) context->AddMetadata("authorization", value);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return context;
  }

  // The status of each of the six RPCs with this authorization value.
  std::vector<grpc::Status> CallEverything(const std::string& authorization) {
    std::vector<grpc::Status> out;
    {
      v1::GenerateRequest r;
      r.mutable_input()->set_text("ab");
      auto context = Context(authorization);
      auto reader = stub_->Generate(context.get(), r);
      v1::GenerateResponse m;
      while (reader->Read(&m)) {
      }
      out.push_back(reader->Finish());
    }
    {
      v1::EncodeRequest r;
      r.add_inputs()->set_text("ab");
      v1::EncodeResponse response;
      out.push_back(stub_->Encode(Context(authorization).get(), r, &response));
    }
    {
      v1::AttentionRequest r;
      r.mutable_input()->set_text("ab");
      v1::AttentionResponse response;
      out.push_back(stub_->Attention(Context(authorization).get(), r, &response));
    }
    {
      v1::GetModelInfoResponse response;
      out.push_back(
          stub_->GetModelInfo(Context(authorization).get(), v1::GetModelInfoRequest(), &response));
    }
    {
      v1::TokenizeRequest r;
      r.set_text("ab");
      v1::TokenizeResponse response;
      out.push_back(stub_->Tokenize(Context(authorization).get(), r, &response));
    }
    {
      v1::DetokenizeRequest r;
      r.add_ids('a');
      v1::DetokenizeResponse response;
      out.push_back(stub_->Detokenize(Context(authorization).get(), r, &response));
    }
    return out;
  }

  ModelRegistry registry_;
  testing::FakeEngine* lm_ = nullptr;
  std::unique_ptr<BearerTokenAuthenticator> auth_;
  std::unique_ptr<DikkatService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dikkat::Stub> stub_;
};

TEST_F(AuthServiceTest, EveryRpcNeedsTheToken) {
  for (const std::string& bad : {std::string(), std::string("Bearer wrong-token-0000000000"),
                                 absl::StrCat("Basic ", kToken)}) {
    const std::vector<grpc::Status> statuses = CallEverything(bad);
    ASSERT_EQ(statuses.size(), 6u);
    for (size_t i = 0; i < statuses.size(); ++i) {
      EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << "rpc #" << i << " with '" << bad << "': " << statuses[i].error_message();
    }
  }
  // Nothing reached the engine.
  EXPECT_EQ(lm_->submits(), 0);

  const std::vector<grpc::Status> statuses = CallEverything(absl::StrCat("Bearer ", kToken));
  for (size_t i = 0; i < statuses.size(); ++i) {
    EXPECT_TRUE(statuses[i].ok()) << "rpc #" << i << ": " << statuses[i].error_message();
  }
  EXPECT_EQ(lm_->submits(), 3);
}

TEST_F(AuthServiceTest, HealthNeedsNoToken) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status s = health->Check(Context("").get(), request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace dikkat::server
