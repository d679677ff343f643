#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sync.h"
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

// One connection's socket as httplib reads and writes it, with the limits
// httplib 0.11.4 lacks: the request must arrive within one deadline and one
// byte budget (its own read timeout restarts at every byte, and it bounds
// neither the number of header lines nor a line's length), and the response
// must be written within the write timeout. Every wait also ends when
// `stop_fd` becomes readable (the server is stopping).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, int stop_fd, const MetricsHttpOptions& options)
      : fd_(fd),
        stop_fd_(stop_fd),
        options_(options),
        read_deadline_(absl::Now() + options.request_timeout) {}

  bool is_readable() const override {
    return head_pos_ < head_.size() || pos_ < len_ || Wait(POLLIN, read_deadline_);
  }

  // Reads until CheckRequestHead decides on what has arrived, or the
  // deadline passes, the budget is spent, the client is gone or the server
  // stops (then kIncomplete). What it read is what read() returns first, so
  // httplib parses the same bytes.
  RequestHeadCheck ReadHead() {
    while (true) {
      RequestHeadCheck check =
          CheckRequestHead(head_, static_cast<size_t>(std::max<int64_t>(
                                      options_.max_request_bytes, 0)));
      if (check.verdict != RequestHeadCheck::Verdict::kIncomplete) return check;
      const int64_t budget = options_.max_request_bytes - received_;
      if (budget <= 0 || !Wait(POLLIN, read_deadline_)) return check;
      ssize_t n;
      do {
        n = recv(fd_, buffer_, std::min<size_t>(sizeof(buffer_), static_cast<size_t>(budget)), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return check;
      received_ += n;
      head_.append(buffer_, static_cast<size_t>(n));
    }
  }

  bool is_writable() const override { return Wait(POLLOUT, WriteDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (head_pos_ < head_.size()) {
      const size_t n = std::min(size, head_.size() - head_pos_);
      std::memcpy(ptr, head_.data() + head_pos_, n);
      head_pos_ += n;
      return static_cast<ssize_t>(n);
    }
    if (pos_ == len_) {
      const int64_t budget = options_.max_request_bytes - received_;
      if (budget <= 0 || !Wait(POLLIN, read_deadline_)) return -1;
      ssize_t n;
      do {
        n = recv(fd_, buffer_, std::min<size_t>(sizeof(buffer_), static_cast<size_t>(budget)), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      received_ += n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buffer_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!Wait(POLLOUT, WriteDeadline())) return -1;
    const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
    return n < 0 && errno == EINTR ? 0 : n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) Describe(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) Describe(addr, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  static void Describe(const sockaddr_storage& addr, std::string& ip, int& port) {
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      port = ntohs(in->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      port = ntohs(in6->sin6_port);
    }
    ip = text;
  }

  // The response's deadline starts with its first write.
  absl::Time WriteDeadline() const {
    if (write_deadline_ == absl::InfiniteFuture()) {
      write_deadline_ = absl::Now() + options_.write_timeout;
    }
    return write_deadline_;
  }

  // Whether `fd_` is ready for `events` before `deadline` (false on
  // timeout, on a stop and on errors other than the peer hanging up, which
  // read/write then report).
  bool Wait(short events, absl::Time deadline) const {
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
      const int ms = static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
                            60 * 1000));
      const int ready = poll(fds, 2, ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0 || (fds[1].revents & POLLIN) != 0) return false;
      if (fds[0].revents != 0) return (fds[0].revents & POLLNVAL) == 0;
    }
  }

  const int fd_;
  const int stop_fd_;
  const MetricsHttpOptions& options_;
  const absl::Time read_deadline_;
  mutable absl::Time write_deadline_ = absl::InfiniteFuture();
  int64_t received_ = 0;
  std::string head_;  // what ReadHead() received, for read() to return first
  size_t head_pos_ = 0;
  char buffer_[4096];
  size_t pos_ = 0;
  size_t len_ = 0;
};

}  // namespace

// httplib::Server whose connections are served one request each through a
// ConnectionStream by an HttpWorkerPool. process_and_close_socket is httplib's
// (private, virtual) per-connection entry point, called by its accept loop
// through the task queue; process_request (protected) parses the request,
// routes it and writes the response.
class MetricsHttpServer::BoundedServer final : public httplib::Server {
 public:
  explicit BoundedServer(const MetricsHttpOptions& options)
      : options_(options), stop_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
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
  ~BoundedServer() override {
    if (stop_fd_ >= 0) close(stop_fd_);
  }

  // httplib 0.11.4 listens with a backlog of 5: a burst of connections
  // (scrapes, probes, or clients holding connections open) beyond it waits
  // for the clients' SYN retransmission, a second or more. Linux takes a
  // second listen() on a listening socket as a new backlog.
  void WidenBacklog() {
    if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, kListenBacklog);
  }

  // Ends every wait of every connection, now and later: eventfd stays
  // readable once written.
  void EndConnections() {
    const uint64_t one = 1;
    if (stop_fd_ >= 0 && ::write(stop_fd_, &one, sizeof(one)) < 0) {
      // Nothing to do: connections still end at their deadlines.
    }
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    bool served = false;
    if (HttpWorkerPool::RefusingConnection()) {
      if (send(sock, kBusyResponse, sizeof(kBusyResponse) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        // The client is gone or its buffer is full: closing says enough.
      }
    } else {
      ConnectionStream stream(sock, stop_fd_, options_);
      // dikkat's own check of the request head first (bounded by the
      // request deadline and bytes): what the port never serves is refused
      // with a status of its own, before httplib parses anything. A head
      // that never completes is closed without an answer.
      const RequestHeadCheck head = stream.ReadHead();
      if (head.verdict == RequestHeadCheck::Verdict::kServe) {
        bool connection_closed = false;
        served = process_request(stream, /*close_connection=*/true, connection_closed, nullptr);
      } else if (head.verdict == RequestHeadCheck::Verdict::kRefuse) {
        WriteRefusal(stream, head);
      }
      LingeringClose(sock);
    }
    shutdown(sock, SHUT_RDWR);
    close(sock);
    return served;
  }

  // The answer to a refused head: its status, why, and Connection: close
  // (405 says which methods are served). No body for HEAD.
  static void WriteRefusal(ConnectionStream& stream, const RequestHeadCheck& head) {
    const std::string body = head.reason + "\n";
    std::string response = absl::StrCat(
        "HTTP/1.1 ", head.status, " ", RequestHeadStatusText(head.status),
        "\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ", body.size(),
        "\r\n", head.status == 405 ? "Allow: GET, HEAD\r\n" : "", "\r\n");
    if (head.method != "HEAD") response += body;
    size_t sent = 0;
    while (sent < response.size()) {
      const ssize_t n = stream.write(response.data() + sent, response.size() - sent);
      if (n < 0) return;
      sent += static_cast<size_t>(n);
    }
  }

  // After the response: stop sending, then read what the client still
  // sends (a refused body) for a moment, so that closing does not reset the
  // connection before the client has read the answer.
  void LingeringClose(socket_t sock) const {
    shutdown(sock, SHUT_WR);
    MetricsHttpOptions drain = options_;
    drain.request_timeout = absl::Milliseconds(200);
    drain.max_request_bytes = 64 << 10;
    ConnectionStream rest(sock, stop_fd_, drain);
    char sink[4096];
    while (rest.read(sink, sizeof(sink)) > 0) {
    }
  }

  const MetricsHttpOptions options_;
  const int stop_fd_;
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
