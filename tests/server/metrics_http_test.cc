// The metrics port's limits (server/metrics_http.h) against real loopback
// sockets: clients that trickle header bytes are cut off at the request
// deadline and cannot starve /healthz, request bodies and methods other than
// GET/HEAD are refused unread, oversized headers are refused, and a full
// house answers 503 at once instead of queueing.
#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics.h"

namespace dikkat::server {
namespace {

// MetricsHttpOptions' default request deadline.
constexpr absl::Duration kRequestTimeout = absl::Seconds(2);

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes the connection or `timeout`
// passes; `closed` says which.
struct Reply {
  std::string text;
  bool closed = false;
  absl::Duration took;
};

Reply ReadReply(int fd, absl::Time start, absl::Duration timeout) {
  Reply r;
  const absl::Time end = absl::Now() + timeout;
  char buf[8192];
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(end - absl::Now());
    if (ms <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {  // EOF or reset
      r.closed = true;
      break;
    }
    r.text.append(buf, static_cast<size_t>(n));
  }
  r.took = absl::Now() - start;
  return r;
}

// Sends `request` (as far as the server takes it) and reads the reply.
Reply Exchange(int port, const std::string& request, absl::Duration timeout = absl::Seconds(3)) {
  const absl::Time start = absl::Now();
  const int fd = Connect(port);
  if (fd < 0) return Reply{"", true, absl::ZeroDuration()};
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  Reply r = ReadReply(fd, start, timeout);
  close(fd);
  return r;
}

Reply Get(int port, const std::string& path) {
  return Exchange(port, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: localhost\r\n\r\n"));
}

// A client that sends a request line and then one header byte every
// `interval`, never finishing its headers, until the server closes the
// connection or Stop(). Records when the server let go.
class SlowClient {
 public:
  SlowClient(int port, absl::Duration interval) {
    fd_ = Connect(port);
    thread_ = std::thread([this, interval] {
      const std::string start = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
      if (fd_ < 0 || send(fd_, start.data(), start.size(), MSG_NOSIGNAL) < 0) return;
      while (!stop_.load()) {
        pollfd p{fd_, POLLIN, 0};
        // The server closing shows as readable (EOF or an error status).
        if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(interval))) > 0) {
          cut_off_at_ = absl::Now();
          return;
        }
        if (send(fd_, "a", 1, MSG_NOSIGNAL) < 0) {
          cut_off_at_ = absl::Now();
          return;
        }
      }
    });
  }
  ~SlowClient() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool connected() const { return fd_ >= 0; }
  // InfiniteFuture while the server keeps the connection. Read after Stop().
  absl::Time cut_off_at() const { return cut_off_at_; }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  absl::Time cut_off_at_ = absl::InfiniteFuture();
  std::thread thread_;
};

class MetricsHttpLimitsTest : public ::testing::Test {
 protected:
  // With the default limits.
  void StartServer() {
    Listen(std::make_unique<MetricsHttpServer>(&metrics_, [] { return true; }));
  }
  void StartServer(const MetricsHttpOptions& options) {
    Listen(std::make_unique<MetricsHttpServer>(&metrics_, [] { return true; }, options));
  }
  void Listen(std::unique_ptr<MetricsHttpServer> http) {
    metrics_.AddModel("tiny");
    http_ = std::move(http);
    absl::StatusOr<int> port = http_->Start("127.0.0.1:0");
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }

  Metrics metrics_{"1"};
  std::unique_ptr<MetricsHttpServer> http_;
  int port_ = 0;
};

TEST_F(MetricsHttpLimitsTest, SlowHeaderClientsDoNotStarveHealthzAndAreCutOff) {
  StartServer();
  // 16 connections that trickle header bytes (httplib's defaults: 8
  // workers, a 5 s read timeout restarted by every byte, so they held every
  // worker for as long as they liked and /healthz waited behind them).
  constexpr int kSlow = 16;
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<SlowClient>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<SlowClient>(port_, absl::Milliseconds(100)));
    ASSERT_TRUE(slow.back()->connected());
  }
  absl::SleepFor(absl::Milliseconds(300));  // they are all being served now

  // /healthz answers at once, several times over, while they trickle.
  for (int i = 0; i < 5; ++i) {
    const Reply r = Get(port_, "/healthz");
    EXPECT_THAT(r.text, StartsWith("HTTP/1.1 200")) << r.text;
    EXPECT_LT(r.took, absl::Milliseconds(500)) << "probe " << i;
  }

  // Each slow client is cut off at the request deadline (2 s), not kept.
  absl::SleepFor(kRequestTimeout + absl::Seconds(2) - (absl::Now() - start));
  for (auto& c : slow) c->Stop();
  for (int i = 0; i < kSlow; ++i) {
    EXPECT_LT(slow[i]->cut_off_at() - start, kRequestTimeout + absl::Milliseconds(1500))
        << "slow client " << i << " was still connected";
  }
}

TEST_F(MetricsHttpLimitsTest, AFullHouseGets503AtOnceAndRecovers) {
  MetricsHttpOptions options;
  options.max_workers = 2;
  options.max_waiting = 1;
  options.request_timeout = absl::Seconds(1);
  StartServer(options);
  // 2 slow clients hold both workers, 1 waits: the next is turned away.
  std::vector<std::unique_ptr<SlowClient>> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(std::make_unique<SlowClient>(port_, absl::Milliseconds(50)));
  }
  absl::SleepFor(absl::Milliseconds(200));
  const Reply busy = Get(port_, "/healthz");
  EXPECT_THAT(busy.text, StartsWith("HTTP/1.1 503")) << busy.text;
  EXPECT_LT(busy.took, absl::Milliseconds(500));
  // Once the deadlines have cut them off, the port serves again.
  absl::SleepFor(absl::Seconds(2) + absl::Milliseconds(500));
  const Reply ok = Get(port_, "/healthz");
  EXPECT_THAT(ok.text, StartsWith("HTTP/1.1 200")) << ok.text;
}

TEST_F(MetricsHttpLimitsTest, BodiesAndOtherMethodsAreRefusedUnread) {
  StartServer();
  // An 800 MiB POST: refused after its headers (405), nothing buffered; the
  // client only gets to send what fits in the socket buffers.
  const std::string post_headers =
      "POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 838860800\r\n\r\n";
  Reply r = Exchange(port_, post_headers + std::string(256 << 10, 'x'));
  EXPECT_THAT(r.text, StartsWith("HTTP/1.1 405")) << r.text;
  EXPECT_THAT(r.text, HasSubstr("Allow: GET, HEAD"));
  EXPECT_TRUE(r.closed);
  EXPECT_LT(r.took, absl::Seconds(1));

  // A GET with a body, by length or chunked: 413.
  r = Exchange(port_, "GET /metrics HTTP/1.1\r\nHost: l\r\nContent-Length: 100000000\r\n\r\n" +
                          std::string(64 << 10, 'x'));
  EXPECT_THAT(r.text, StartsWith("HTTP/1.1 413")) << r.text;
  EXPECT_LT(r.took, absl::Seconds(1));
  r = Exchange(port_,
               "GET /healthz HTTP/1.1\r\nHost: l\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n");
  EXPECT_THAT(r.text, StartsWith("HTTP/1.1 413")) << r.text;

  for (const char* method : {"PUT", "DELETE", "PATCH", "OPTIONS"}) {
    r = Exchange(port_, absl::StrCat(method, " /metrics HTTP/1.1\r\nHost: l\r\n\r\n"));
    EXPECT_THAT(r.text, StartsWith("HTTP/1.1 405")) << method << ": " << r.text;
  }
  r = Exchange(port_, "HEAD /healthz HTTP/1.1\r\nHost: l\r\n\r\n");
  EXPECT_THAT(r.text, StartsWith("HTTP/1.1 200")) << r.text;
  // Still serving normally.
  EXPECT_THAT(Get(port_, "/metrics").text, HasSubstr("dikkat_"));
}

TEST_F(MetricsHttpLimitsTest, OversizedHeadersAreRefused) {
  StartServer();
  // 256 KiB of headers in 4 KiB lines, sent at once: past the 16 KiB
  // request budget the connection is closed without a 200.
  std::string request = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n";
  for (int i = 0; i < 64; ++i) {
    absl::StrAppend(&request, "X-Pad-", i, ": ", std::string(4096, 'p'), "\r\n");
  }
  request += "\r\n";
  const Reply r = Exchange(port_, request);
  EXPECT_THAT(r.text, Not(HasSubstr("200 OK"))) << r.text.substr(0, 200);
  EXPECT_TRUE(r.closed);
  EXPECT_LT(r.took, absl::Seconds(1));
  // A request line longer than the budget, without a newline: the same.
  const Reply line = Exchange(port_, "GET /" + std::string(1 << 20, 'a'));
  EXPECT_THAT(line.text, Not(HasSubstr("200 OK")));
  EXPECT_TRUE(line.closed);
  EXPECT_THAT(Get(port_, "/healthz").text, StartsWith("HTTP/1.1 200"));
}

TEST_F(MetricsHttpLimitsTest, RefusedHeadsGetTheirOwnStatusBeforeHttplibParsesThem) {
  // server/metrics_http_request.h reads the head first.
  StartServer();
  // 17 KiB of headers at once, past the 16 KiB budget: 431.
  std::string big = "GET /healthz HTTP/1.1\r\nHost: l\r\nX-Pad: " + std::string(17 << 10, 'p');
  Reply r = Exchange(port_, big + "\r\n\r\n");
  EXPECT_THAT(r.text, StartsWith("HTTP/1.1 431 Request Header Fields Too Large")) << r.text;
  EXPECT_TRUE(r.closed);
  // 101 header lines: 431; a malformed request line or header line: 400.
  std::string many = "GET /healthz HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) absl::StrAppend(&many, "X-", i, ": y\r\n");
  EXPECT_THAT(Exchange(port_, many + "\r\n").text, StartsWith("HTTP/1.1 431"));
  for (const char* bad : {"GET /healthz HTTP/9.9\r\n\r\n", "GET  /healthz HTTP/1.1\r\n\r\n",
                          "GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n",
                          "GET /healthz HTTP/1.1\r\nHost: l\r\n folded\r\n\r\n"}) {
    r = Exchange(port_, bad);
    EXPECT_THAT(r.text, StartsWith("HTTP/1.1 400 Bad Request")) << bad;
    EXPECT_TRUE(r.closed) << bad;
  }
  // HEAD with a body: 413 without a response body.
  r = Exchange(port_, "HEAD /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_THAT(r.text, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(r.text, Not(HasSubstr("take no body")));
  // A head that arrives in pieces is served as a whole.
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  const std::string part1 = "GET /healthz HTTP/1.1\r\nHo", part2 = "st: l\r\n\r\n";
  ASSERT_EQ(send(fd, part1.data(), part1.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(part1.size()));
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_EQ(send(fd, part2.data(), part2.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(part2.size()));
  r = ReadReply(fd, absl::Now(), absl::Seconds(3));
  close(fd);
  EXPECT_THAT(r.text, StartsWith("HTTP/1.1 200")) << r.text;
  EXPECT_THAT(r.text, HasSubstr("ok"));
}

TEST_F(MetricsHttpLimitsTest, StopEndsConnectionsBeingServed) {
  MetricsHttpOptions options;
  options.request_timeout = absl::Seconds(30);
  StartServer(options);
  SlowClient slow(port_, absl::Milliseconds(50));
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  http_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "Stop() waited for a slow client";
}

}  // namespace
}  // namespace dikkat::server
