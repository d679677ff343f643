// MetricsHttpServer: serves GET /metrics (Prometheus text format) and
// GET /healthz on its own address, with cpp-httplib.
//
// prometheus-cpp's own Exposer is not used: its civetweb threads have a
// fixed 100 KiB stack, too small for the static TLS of libtorch + OpenBLAS
// (docs/metrics.md, "Why not prometheus-cpp's Exposer"). cpp-httplib's
// threads have normal stacks.
//
// Owns its listening thread. Start and Stop are not thread-safe with each
// other; handlers run on httplib's worker threads.
#ifndef DIKKAT_SERVER_METRICS_HTTP_H_
#define DIKKAT_SERVER_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace dikkat::server {

class MetricsHttpServer {
 public:
  // `metrics` must outlive this server. `healthy` decides /healthz:
  // 200 "ok" when true, 503 "not serving" otherwise.
  MetricsHttpServer(Metrics* metrics, std::function<bool()> healthy);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds "host:port" (port 0 picks a free one) and serves on a thread.
  // Returns the bound port. INVALID_ARGUMENT for a malformed address,
  // UNAVAILABLE when the port cannot be bound.
  absl::StatusOr<int> Start(const std::string& address);

  // Stops serving and joins the thread. Idempotent.
  void Stop();

 private:
  Metrics* metrics_;  // not owned
  std::function<bool()> healthy_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

// Splits "host:port" / "[v6]:port". INVALID_ARGUMENT names the address.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_METRICS_HTTP_H_
