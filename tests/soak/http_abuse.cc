#include "http_abuse.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace dikkat::soak {
namespace {

constexpr absl::Duration kAnswerWithin = absl::Seconds(5);

// A connected TCP socket, closed on destruction; fd() < 0 when connecting failed.
class Connection {
 public:
  Connection(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &found) != 0) return;
    for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
      fd_ = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ >= 0 && connect(fd_, a->ai_addr, a->ai_addrlen) != 0) {
        close(fd_);
        fd_ = -1;
      }
    }
    freeaddrinfo(found);
  }
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return fd_; }

  // Sends everything; false once the peer has closed or reset.
  bool Send(absl::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Whether the server has answered or closed within `timeout`.
  bool Readable(absl::Duration timeout) {
    pollfd p{fd_, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    return n > 0;
  }

  // The status code of the answer ("413"), "closed" (EOF or reset before a
  // status line) or "no answer" (nothing within `within`).
  std::string Outcome(absl::Duration within = kAnswerWithin) {
    std::string got;
    const absl::Time end = absl::Now() + within;
    while (got.find("\r\n") == std::string::npos) {
      const absl::Duration left = end - absl::Now();
      if (left <= absl::ZeroDuration() || !Readable(left)) return "no answer";
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // EOF or reset
      got.append(buf, static_cast<size_t>(n));
    }
    // "HTTP/1.1 413 Payload Too Large"
    absl::string_view line(got);
    if (absl::ConsumePrefix(&line, "HTTP/1.") && line.size() >= 5) {
      int code = 0;
      if (absl::SimpleAtoi(line.substr(2, 3), &code)) return absl::StrCat(code);
    }
    return got.empty() ? "closed" : "malformed answer";
  }

 private:
  int fd_ = -1;
};

std::string OneShot(const std::string& host, int port, absl::string_view request) {
  Connection c(host, port);
  if (c.fd() < 0) return "connect failed";
  c.Send(request);  // the server may close before it has all of it
  return c.Outcome();
}

}  // namespace

bool HttpOutcomeAllowed(HttpAbuse abuse, const std::string& outcome) {
  if (outcome == "503") return true;
  switch (abuse) {
    case HttpAbuse::kSlowHeaders:
    case HttpAbuse::kIdle:
      return outcome == "closed" || outcome == "408";
    case HttpAbuse::kPostBody:
      // The method is checked before the body (server/metrics_http_request.h).
      return outcome == "405" || outcome == "413" || outcome == "closed";
    case HttpAbuse::kGetBody:
      return outcome == "413" || outcome == "closed";
    case HttpAbuse::kHugeHeader:
    case HttpAbuse::kManyHeaders:
      return outcome == "431" || outcome == "closed";
    case HttpAbuse::kGarbage:
      return outcome == "400" || outcome == "closed";
    case HttpAbuse::kUnknownPath:
      return outcome == "404";
    case HttpAbuse::kNumAbuses:
      break;
  }
  return false;
}

HttpAbuseResult RunHttpAbuse(HttpAbuse abuse, const std::string& host, int port, int variant) {
  HttpAbuseResult result;
  const absl::Time start = absl::Now();
  switch (abuse) {
    case HttpAbuse::kSlowHeaders: {
      Connection c(host, port);
      if (c.fd() < 0) {
        result.outcomes.push_back("connect failed");
        break;
      }
      bool sent = c.Send("GET /metrics HTTP/1.1\r\nHost: soak\r\n");
      // A line every 200 ms until the server acts; it must within its 2 s.
      while (sent && !c.Readable(absl::Milliseconds(200)) &&
             absl::Now() - start < kAnswerWithin) {
        sent = c.Send("X-Slow: 1\r\n");
      }
      result.outcomes.push_back(c.Outcome(absl::Seconds(1)));
      break;
    }
    case HttpAbuse::kIdle: {
      std::vector<std::unique_ptr<Connection>> idle;
      for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<Connection>(host, port));
      for (auto& c : idle) {
        const absl::Duration left = kAnswerWithin - (absl::Now() - start);
        result.outcomes.push_back(c->fd() < 0 ? "connect failed"
                                              : c->Outcome(std::max(left, absl::ZeroDuration())));
      }
      break;
    }
    case HttpAbuse::kPostBody: {
      Connection c(host, port);
      if (c.fd() < 0) {
        result.outcomes.push_back("connect failed");
        break;
      }
      c.Send("POST /metrics HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000000000\r\n\r\n");
      c.Send(std::string(1024, 'x'));
      result.outcomes.push_back(c.Outcome());
      break;
    }
    case HttpAbuse::kGetBody:
      result.outcomes.push_back(OneShot(
          host, port, "GET /metrics HTTP/1.1\r\nHost: soak\r\nContent-Length: 5\r\n\r\nhello"));
      break;
    case HttpAbuse::kHugeHeader:
      result.outcomes.push_back(OneShot(
          host, port,
          absl::StrCat("GET /metrics HTTP/1.1\r\nHost: soak\r\nX-Huge: ",
                       std::string(20 << 10, 'h'), "\r\n\r\n")));
      break;
    case HttpAbuse::kManyHeaders: {
      std::string request = "GET /metrics HTTP/1.1\r\nHost: soak\r\n";
      for (int i = 0; i < 150; ++i) absl::StrAppend(&request, "X-H", i, ": v\r\n");
      request += "\r\n";
      result.outcomes.push_back(OneShot(host, port, request));
      break;
    }
    case HttpAbuse::kGarbage: {
      static const char* const kGarbage[] = {
          "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  // a TLS hello
          "GET /metrics\r\n\r\n",                                  // no version
          "GET  /metrics HTTP/1.1\r\n\r\n",                        // two spaces
          "G\x01T /metrics HTTP/1.1\r\n\r\n",                      // control in the method
          "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",       // header without ':'
          "GET /metrics HTTP/1.1\r\n folded: header\r\n\r\n",     // obsolete folding
      };
      const size_t n = sizeof(kGarbage) / sizeof(kGarbage[0]);
      result.outcomes.push_back(OneShot(host, port, kGarbage[static_cast<size_t>(variant) % n]));
      break;
    }
    case HttpAbuse::kUnknownPath:
      result.outcomes.push_back(OneShot(host, port, "GET /nope HTTP/1.1\r\nHost: soak\r\n\r\n"));
      break;
    case HttpAbuse::kNumAbuses:
      break;
  }
  result.elapsed = absl::Now() - start;
  return result;
}

}  // namespace dikkat::soak
