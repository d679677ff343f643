// absl::Status <-> grpc::Status is 1:1 by code, keeps the message, and
// RESOURCE_EXHAUSTED carries a retry hint.
#include "server/status_util.h"

#include "gtest/gtest.h"

namespace dikkat::server {
namespace {

TEST(StatusUtilTest, EveryCanonicalCodeMapsToTheSameGrpcCode) {
  const std::pair<absl::StatusCode, grpc::StatusCode> pairs[] = {
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const auto& [absl_code, grpc_code] : pairs) {
    const absl::Status s(absl_code, "why: field x = 3");
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(g.error_code(), grpc_code);
    EXPECT_EQ(g.error_message(), "why: field x = 3");
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(StatusUtilTest, RetryHintComesFromThePayloadOrTheDefault) {
  absl::Status s = absl::ResourceExhaustedError("queue full");
  EXPECT_EQ(RetryAfterMs(s), kDefaultRetryAfterMs);
  SetRetryAfterMs(s, 1234);
  EXPECT_EQ(RetryAfterMs(s), 1234);
  EXPECT_EQ(ToGrpcStatus(s).error_message(), "queue full");
}

// A prefixed message keeps the code and every payload: NeverFits stays
// NeverFits (the OpenAI door's 400), a retry hint stays.
TEST(StatusUtilTest, MessagePrefixKeepsCodeAndPayloads) {
  const absl::Status never = WithMessagePrefix(NeverFitsError("too big"), "prompt[1]: ");
  EXPECT_EQ(never.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(never.message(), "prompt[1]: too big");
  EXPECT_TRUE(NeverFits(never));
  absl::Status hinted = absl::ResourceExhaustedError("busy");
  SetRetryAfterMs(hinted, 77);
  const absl::Status prefixed = WithMessagePrefix(hinted, "x: ");
  EXPECT_EQ(RetryAfterMs(prefixed), 77);
  EXPECT_FALSE(NeverFits(prefixed));
  EXPECT_TRUE(WithMessagePrefix(absl::OkStatus(), "x: ").ok());
}

}  // namespace
}  // namespace dikkat::server
