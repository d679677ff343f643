#include "server/metrics_http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dikkat::server {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address, "' is not host:port (e.g. 127.0.0.1:9090, [::1]:9090, port 0..65535)"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

MetricsHttpServer::MetricsHttpServer(Metrics* metrics, std::function<bool()> healthy)
    : metrics_(metrics), healthy_(std::move(healthy)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<int> MetricsHttpServer::Start(const std::string& address) {
  auto host_port = SplitHostPort(address);
  if (!host_port.ok()) return host_port.status();
  const auto& [host, port] = *host_port;

  http_ = std::make_unique<httplib::Server>();
  // httplib's default options add SO_REUSEPORT, which lets a second process
  // bind the same port and silently take half of the scrapes. Keep only
  // SO_REUSEADDR (restarts do not wait for TIME_WAIT).
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = healthy_ == nullptr || healthy_();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ok\n" : "not serving\n", "text/plain");
  });

  int bound = port;
  if (port == 0) {
    bound = http_->bind_to_any_port(host);
    if (bound < 0) bound = 0;
  } else if (!http_->bind_to_port(host, port)) {
    bound = 0;
  }
  if (bound <= 0) {
    http_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot bind the metrics address ", address, " (in use or not local?)"));
  }
  thread_ = std::thread([server = http_.get()] { server->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs; wait for it so
  // that an early Stop() cannot leave the thread listening forever.
  while (!http_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void MetricsHttpServer::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace dikkat::server
