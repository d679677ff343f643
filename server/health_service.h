// HealthService: grpc.health.v1.Health (Check and Watch) with a state that
// dikkat-server owns from before the port opens.
//
// Why not gRPC's default health service: it is created inside
// ServerBuilder::BuildAndStart and starts with the server ("") SERVING, so a
// probe arriving between the port opening and the first SetServingStatus
// call could be told SERVING while the models are still warming up. This
// one starts NOT_SERVING for every service it knows and only turns SERVING
// when told to.
//
// Known services: "" (the whole server) and the names given at construction
// (dikkat.v1.Dikkat). Check of any other name: NOT_FOUND (the name is not
// echoed). Watch of one: SERVICE_UNKNOWN, as the protocol asks, and then the
// stream ends with NOT_FOUND: the protocol keeps such a stream open in case
// the service becomes known, which here never happens, and an open stream
// would hold its request (the name) for as long as the client likes. Watch
// of a known service sends the current status at once and then every change
// (only the latest if several come while a write is in flight); Shutdown()
// sends NOT_SERVING and ends every Watch with OK so that a draining server is
// not held up by watchers.
//
// Health is open to every caller (no token), so it is bounded (HealthLimits):
// a request larger than max_request_bytes is refused with INVALID_ARGUMENT,
// unread; at most max_watchers Watch streams are open at once (more:
// RESOURCE_EXHAUSTED). gRPC itself has received and parsed the request (up
// to the server's --max_message_bytes) before the service sees it.
//
// Thread-safe. Must outlive the gRPC server it is registered with.
#ifndef DIKKAT_SERVER_HEALTH_SERVICE_H_
#define DIKKAT_SERVER_HEALTH_SERVICE_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/sync.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace dikkat::server {

struct HealthLimits {
  // Service names are short ("dikkat.v1.Dikkat"); a request is little more.
  int64_t max_request_bytes = 1024;
  // Watch streams open at once (each holds a reactor and its call).
  int max_watchers = 1024;
};

class HealthService final : public ::grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = ::grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Every service named here (and "") starts NOT_SERVING.
  explicit HealthService(std::vector<std::string> services, HealthLimits limits = {});

  // Sets every known service SERVING or NOT_SERVING. Ignored after Shutdown().
  void SetServing(bool serving);

  // NOT_SERVING for good; every Watch stream gets it and ends with OK.
  void Shutdown();

  ::grpc::ServerUnaryReactor* Check(::grpc::CallbackServerContext* context,
                                    const ::grpc::health::v1::HealthCheckRequest* request,
                                    ::grpc::health::v1::HealthCheckResponse* response) override;
  ::grpc::ServerWriteReactor<::grpc::health::v1::HealthCheckResponse>* Watch(
      ::grpc::CallbackServerContext* context,
      const ::grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;

  ServingStatus StatusOf(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(Watcher* watcher);
  // OK, or the INVALID_ARGUMENT for an oversized request.
  ::grpc::Status CheckRequestSize(const ::grpc::health::v1::HealthCheckRequest& request) const;

  const std::set<std::string> services_;
  const HealthLimits limits_;
  mutable Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_HEALTH_SERVICE_H_
