#include "server/status_util.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dikkat::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode are both the canonical code set.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context) {
  if (context != nullptr && status.code() == absl::StatusCode::kResourceExhausted &&
      !NeverFits(status)) {
    context->AddTrailingMetadata(kRetryAfterMetadataKey, std::to_string(RetryAfterMs(status)));
  }
  return ToGrpcStatus(status);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

int64_t RetryAfterMs(const absl::Status& status) {
  auto payload = status.GetPayload(kRetryAfterPayloadUrl);
  int64_t ms = 0;
  if (payload.has_value() && absl::SimpleAtoi(std::string(*payload), &ms) && ms >= 0) return ms;
  return kDefaultRetryAfterMs;
}

void SetRetryAfterMs(absl::Status& status, int64_t ms) {
  status.SetPayload(kRetryAfterPayloadUrl, absl::Cord(std::to_string(ms)));
}

absl::Status NeverFitsError(absl::string_view message) {
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(kNeverFitsPayloadUrl, absl::Cord("1"));
  return status;
}

bool NeverFits(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         status.GetPayload(kNeverFitsPayloadUrl).has_value();
}

absl::Status WithMessage(const absl::Status& status, absl::string_view message) {
  if (status.ok()) return status;
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::Status WithMessagePrefix(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  return WithMessage(status, absl::StrCat(prefix, status.message()));
}

}  // namespace dikkat::server
