// MetricsHttpServer: serves GET /metrics (Prometheus text format) and
// GET /healthz on its own address, with cpp-httplib.
//
// prometheus-cpp's own Exposer is not used: its civetweb threads have a
// fixed 100 KiB stack, too small for the static TLS of libtorch + OpenBLAS
// (docs/metrics.md, "Why not prometheus-cpp's Exposer"). cpp-httplib's
// threads have normal stacks.
//
// The port takes no input but a request line and a few headers, so every
// connection is bounded (MetricsHttpOptions): one request per connection,
// the whole request (line and headers) within a byte limit and a deadline
// counted from the moment a worker takes the connection (a client that
// trickles header bytes is cut off at the deadline, however often it sends),
// no request body (413), GET and HEAD only (405), a bounded response write,
// and a bounded set of workers with a short waiting line (past it, 503 at
// once). cpp-httplib 0.11.4 (Debian 12) has no total request deadline and no
// header-size bound of its own, so the connection loop is dikkat's
// (metrics_http.cc, over server/bounded_socket.h, shared with the OpenAI
// port). It reads the request head itself and checks it
// (server/metrics_http_request.h, fuzzed) before httplib parses anything:
// a malformed head is 400, more than 100 header lines or the byte limit
// without the end of the head 431, other methods 405, a body 413.
//
// Owns its listening thread and its workers. Start and Stop are not
// thread-safe with each other; handlers run on the workers.
#ifndef DIKKAT_SERVER_METRICS_HTTP_H_
#define DIKKAT_SERVER_METRICS_HTTP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace dikkat::server {

struct MetricsHttpOptions {
  // Connections served at once, one worker thread each (started when
  // needed). Scrapes and probes are short: each holds a worker for at most
  // request_timeout + write_timeout.
  int max_workers = 32;
  // Connections accepted while every worker is busy; past it a connection
  // is answered 503 and closed at once instead of waiting.
  int max_waiting = 32;
  // The request line and headers must arrive within this time and these
  // bytes, or the connection is closed (a Prometheus or kubelet request is
  // a few hundred bytes, sent at once).
  absl::Duration request_timeout = absl::Seconds(2);
  int64_t max_request_bytes = 16 << 10;
  // Time to write one response.
  absl::Duration write_timeout = absl::Seconds(5);
};

class MetricsHttpServer {
 public:
  // `metrics` must outlive this server. `healthy` decides /healthz:
  // 200 "ok" when true, 503 "not serving" otherwise.
  MetricsHttpServer(Metrics* metrics, std::function<bool()> healthy,
                    MetricsHttpOptions options = {});
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds "host:port" (port 0 picks a free one) and serves on a thread.
  // Returns the bound port. INVALID_ARGUMENT for a malformed address,
  // UNAVAILABLE when the port cannot be bound.
  absl::StatusOr<int> Start(const std::string& address);

  // Stops serving, ends the connections being served and joins the
  // threads. Idempotent.
  void Stop();

 private:
  class BoundedServer;

  Metrics* metrics_;  // not owned
  std::function<bool()> healthy_;
  const MetricsHttpOptions options_;
  std::unique_ptr<BoundedServer> http_;
  std::thread thread_;
};

// Splits "host:port" / "[v6]:port". INVALID_ARGUMENT names the address.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_METRICS_HTTP_H_
