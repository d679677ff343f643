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
// (dikkat.v1.Dikkat). Check of any other name: NOT_FOUND; Watch of one:
// SERVICE_UNKNOWN, as the protocol asks. Watch sends the current status at
// once and then every change (only the latest if several come while a write
// is in flight); Shutdown() sends NOT_SERVING and ends every Watch with OK so
// that a draining server is not held up by watchers.
//
// Thread-safe. Must outlive the gRPC server it is registered with.
#ifndef DIKKAT_SERVER_HEALTH_SERVICE_H_
#define DIKKAT_SERVER_HEALTH_SERVICE_H_

#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/sync.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace dikkat::server {

class HealthService final : public ::grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = ::grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Every service named here (and "") starts NOT_SERVING.
  explicit HealthService(std::vector<std::string> services);

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

  const std::set<std::string> services_;
  mutable Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_HEALTH_SERVICE_H_
