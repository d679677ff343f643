#include "server/metrics_http.h"

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sync.h"
#include "server/bounded_socket.h"
#include "server/http_worker_pool.h"
#include "server/metrics_http_request.h"

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

namespace {

constexpr int kListenBacklog = 128;

constexpr char kBusyResponse[] =
    "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
    "Content-Length: 31\r\n\r\nmetrics port busy; retry later\n";

}  // namespace

// httplib::Server whose connections are served one request each through a
// BoundedSocket by an HttpWorkerPool. process_and_close_socket is httplib's
// (private, virtual) per-connection entry point, called by its accept loop
// through the task queue; process_request (protected) parses the request,
// routes it and writes the response.
class MetricsHttpServer::BoundedServer final : public httplib::Server {
 public:
  explicit BoundedServer(const MetricsHttpOptions& options) : options_(options) {
    new_task_queue = [this] {
      return new HttpWorkerPool(options_.max_workers, options_.max_waiting);
    };
    // Backstops for anything httplib reads itself: no body, no second
    // request on the connection, socket timeouts like ours.
    set_payload_max_length(0);
    set_keep_alive_max_count(1);
    set_read_timeout(absl::ToChronoSeconds(absl::Ceil(options.request_timeout, absl::Seconds(1))));
    set_write_timeout(absl::ToChronoSeconds(absl::Ceil(options.write_timeout, absl::Seconds(1))));
  }
  // httplib 0.11.4 listens with a backlog of 5: a burst of connections
  // (scrapes, probes, or clients holding connections open) beyond it waits
  // for the clients' SYN retransmission, a second or more. Linux takes a
  // second listen() on a listening socket as a new backlog.
  void WidenBacklog() {
    if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, kListenBacklog);
  }

  // Ends every wait of every connection, now and later.
  void EndConnections() { stop_.Raise(); }

 private:
  bool process_and_close_socket(socket_t sock) override {
    bool served = false;
    if (HttpWorkerPool::RefusingConnection()) {
      if (send(sock, kBusyResponse, sizeof(kBusyResponse) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        // The client is gone or its buffer is full: closing says enough.
      }
    } else {
      BoundedSocket socket(sock, stop_, Bounds());
      // dikkat's own check of the request head first (bounded by the
      // request deadline and bytes): what the port never serves is refused
      // with a status of its own, before httplib parses anything. A head
      // that never completes is closed without an answer.
      if (socket.ReadHead() != BoundedSocket::Head::kMissing) {
        const RequestHeadCheck head = CheckRequestHead(
            socket.unread(), static_cast<size_t>(std::max<int64_t>(options_.max_request_bytes, 0)));
        if (head.verdict == RequestHeadCheck::Verdict::kServe) {
          bool connection_closed = false;
          served = process_request(socket, /*close_connection=*/true, connection_closed, nullptr);
        } else if (head.verdict == RequestHeadCheck::Verdict::kRefuse) {
          WriteRefusal(socket, head);
        }
      }
      socket.LingeringClose();
    }
    shutdown(sock, SHUT_RDWR);
    close(sock);
    return served;
  }

  // The answer to a refused head: its status, why, and Connection: close
  // (405 says which methods are served). No body for HEAD.
  static void WriteRefusal(BoundedSocket& socket, const RequestHeadCheck& head) {
    const std::string body = head.reason + "\n";
    std::string response = absl::StrCat(
        "HTTP/1.1 ", head.status, " ", RequestHeadStatusText(head.status),
        "\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ", body.size(),
        "\r\n", head.status == 405 ? "Allow: GET, HEAD\r\n" : "", "\r\n");
    if (head.method != "HEAD") response += body;
    socket.WriteAll(response);  // false: the client is gone or does not read
  }

  // The port takes a head and no body; the response (one) has write_timeout.
  SocketBounds Bounds() const {
    SocketBounds bounds;
    bounds.max_head_bytes = options_.max_request_bytes;
    bounds.max_body_bytes = 0;
    bounds.request_timeout = options_.request_timeout;
    bounds.write_timeout = options_.write_timeout;
    bounds.write_timeout_per_response = true;
    return bounds;
  }

  const MetricsHttpOptions options_;
  StopSignal stop_;
};

MetricsHttpServer::MetricsHttpServer(Metrics* metrics, std::function<bool()> healthy,
                                     MetricsHttpOptions options)
    : metrics_(metrics), healthy_(std::move(healthy)), options_(options) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::StatusOr<int> MetricsHttpServer::Start(const std::string& address) {
  auto host_port = SplitHostPort(address);
  if (!host_port.ok()) return host_port.status();
  const auto& [host, port] = *host_port;

  http_ = std::make_unique<BoundedServer>(options_);
  // httplib's default options add SO_REUSEPORT, which lets a second process
  // bind the same port and silently take half of the scrapes. Keep only
  // SO_REUSEADDR (restarts do not wait for TIME_WAIT).
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Runs after the headers, before any body is read: the port takes no
  // input, so anything but a bodiless GET or HEAD is refused unread.
  http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method != "GET" && req.method != "HEAD") {
      res.status = 405;
      res.set_header("Allow", "GET, HEAD");
      res.set_content("only GET and HEAD are served here\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.has_header("Transfer-Encoding") ||
        (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0")) {
      res.status = 413;
      res.set_content("requests to this port take no body\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
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
  http_->WidenBacklog();
  thread_ = std::thread([server = http_.get()] { server->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs; wait for it so
  // that an early Stop() cannot leave the thread listening forever.
  while (!http_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void MetricsHttpServer::Stop() {
  if (http_ == nullptr) return;
  http_->EndConnections();
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace dikkat::server
