#include "server/health_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dikkat::server {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

// One Watch stream. Lock order: the service's mu_, then a watcher's mu_
// (SetServing/Shutdown hold the first while calling Update); a watcher never
// takes the service's lock while holding its own.
class HealthService::Watcher final : public ::grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string name) : service_(service), name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Sends `status` unless it is the last one sent; ends the stream after it
  // with `end` when `last`. Called with the service's lock held.
  void Update(ServingStatus status, bool last, const ::grpc::Status& end = ::grpc::Status::OK) {
    MutexLock lock(&mu_);
    if (finished_) return;
    pending_ = status;
    has_pending_ = !(sent_any_ && status == sent_);
    if (last && !finish_after_) end_status_ = end;
    finish_after_ = finish_after_ || last;
    MaybeWriteLocked();
  }

  // Ends the stream at once with `status` (nothing sent).
  void Refuse(const ::grpc::Status& status) {
    MutexLock lock(&mu_);
    FinishLocked(status);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The client is gone (or the call was cancelled): nothing more to send.
      FinishLocked(::grpc::Status(::grpc::StatusCode::CANCELLED, "watch write failed"));
      return;
    }
    MaybeWriteLocked();
  }

  void OnCancel() override {
    MutexLock lock(&mu_);
    if (!writing_) FinishLocked(::grpc::Status::CANCELLED);
    // else OnWriteDone(false) follows and finishes.
  }

  void OnDone() override {
    service_->Remove(this);
    delete this;
  }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (has_pending_) {
      response_.set_status(pending_);
      sent_ = pending_;
      sent_any_ = true;
      has_pending_ = false;
      writing_ = true;
      StartWrite(&response_);
      return;
    }
    if (finish_after_) FinishLocked(end_status_);
  }

  void FinishLocked(const ::grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService* const service_;
  const std::string name_;  // the service watched
  Mutex mu_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(mu_);  // the one write in flight
  ServingStatus pending_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  ServingStatus sent_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_after_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  ::grpc::Status end_status_ ABSL_GUARDED_BY(mu_);  // the status after the last message
};

HealthService::HealthService(std::vector<std::string> services, HealthLimits limits)
    : services_([&services] {
        std::set<std::string> names(services.begin(), services.end());
        names.insert("");
        return names;
      }()),
      limits_(limits) {}

::grpc::Status HealthService::CheckRequestSize(const HealthCheckRequest& request) const {
  const size_t bytes = request.ByteSizeLong();
  if (static_cast<int64_t>(bytes) <= limits_.max_request_bytes) return ::grpc::Status::OK;
  return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("health request of ", bytes, " bytes; at most ",
                                     limits_.max_request_bytes,
                                     " are accepted (service names are short)"));
}

namespace {

// The names this server reports, for error messages (the caller's name is
// never echoed).
std::string KnownServices(const std::set<std::string>& services) {
  std::string out;
  for (const std::string& s : services) absl::StrAppend(&out, out.empty() ? "" : ", ", "'", s, "'");
  return out;
}

}  // namespace

HealthService::ServingStatus HealthService::StatusOf(const std::string& service) const {
  if (services_.count(service) == 0) return HealthCheckResponse::SERVICE_UNKNOWN;
  return serving_ && !shut_down_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::SetServing(bool serving) {
  MutexLock lock(&mu_);
  if (shut_down_ || serving_ == serving) return;
  serving_ = serving;
  for (Watcher* w : watchers_) w->Update(StatusOf(w->name()), /*last=*/false);
}

void HealthService::Shutdown() {
  MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (Watcher* w : watchers_) w->Update(StatusOf(w->name()), /*last=*/true);
}

void HealthService::Remove(Watcher* watcher) {
  MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

::grpc::ServerUnaryReactor* HealthService::Check(::grpc::CallbackServerContext* context,
                                                 const HealthCheckRequest* request,
                                                 HealthCheckResponse* response) {
  ::grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (::grpc::Status size = CheckRequestSize(*request); !size.ok()) {
    reactor->Finish(size);
    return reactor;
  }
  ServingStatus status;
  {
    MutexLock lock(&mu_);
    status = StatusOf(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(::grpc::Status(
        ::grpc::StatusCode::NOT_FOUND,
        absl::StrCat("unknown service; this server reports ", KnownServices(services_))));
  } else {
    response->set_status(status);
    reactor->Finish(::grpc::Status::OK);
  }
  return reactor;
}

::grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    ::grpc::CallbackServerContext* /*context*/, const HealthCheckRequest* request) {
  if (::grpc::Status size = CheckRequestSize(*request); !size.ok()) {
    auto* refused = new Watcher(this, "");
    refused->Refuse(size);
    return refused;
  }
  auto* watcher = new Watcher(this, request->service());
  MutexLock lock(&mu_);
  const ServingStatus status = StatusOf(watcher->name());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    // The set of services never changes: say so and end the stream rather
    // than hold it (and its request) open for a status that cannot come.
    watcher->Update(status, /*last=*/true,
                    ::grpc::Status(::grpc::StatusCode::NOT_FOUND,
                                   absl::StrCat("unknown service; this server reports ",
                                                KnownServices(services_))));
    return watcher;
  }
  if (static_cast<int>(watchers_.size()) >= limits_.max_watchers) {
    watcher->Refuse(::grpc::Status(
        ::grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(watchers_.size(), " health Watch streams are open, the most this server "
                                       "keeps; use Check, or retry later")));
    return watcher;
  }
  // After Shutdown() the stream gets its status and ends at once.
  watchers_.insert(watcher);
  watcher->Update(status, /*last=*/shut_down_);
  return watcher;
}

}  // namespace dikkat::server
