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
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace dikkat::soak {
namespace {

constexpr absl::Duration kAnswerWithin = absl::Seconds(5);
// How long a slowloris or idle client waits on the OpenAI port, whose 30 s
// request deadline is past any chaos window: as long as the metrics port's
// deadline, so that the windows last as long as before.
constexpr absl::Duration kOpenAiPatience = absl::Seconds(2);

// A connected TCP socket, closed on destruction; fd() < 0 when connecting failed.
class Connection {
 public:
  // `receive_buffer` > 0: SO_RCVBUF set before connecting (a client whose
  // buffers are small and full).
  Connection(const std::string& host, int port, int receive_buffer = 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &found) != 0) return;
    for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
      fd_ = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ >= 0 && receive_buffer > 0) {
        setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
      }
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
    return StatusOf(got);
  }

  // Reads until `events` SSE "data:" lines have arrived (or the server
  // closed, or `within` passed); the status code as Outcome gives it.
  std::string ReadEvents(int events, absl::Duration within = kAnswerWithin) {
    std::string got;
    const absl::Time end = absl::Now() + within;
    size_t seen = 0;
    while (true) {
      size_t from = 0;
      seen = 0;
      while ((from = got.find("data: ", from)) != std::string::npos) {
        ++seen;
        from += 6;
      }
      if (static_cast<int>(seen) >= events) break;
      const absl::Duration left = end - absl::Now();
      if (left <= absl::ZeroDuration() || !Readable(left)) break;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return StatusOf(got);
  }

  // "HTTP/1.1 413 Payload Too Large" -> "413".
  static std::string StatusOf(absl::string_view got) {
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

std::string OneShot(const HttpTarget& t, absl::string_view request,
                    absl::Duration within = kAnswerWithin) {
  Connection c(t.host, t.port_number);
  if (c.fd() < 0) return "connect failed";
  c.Send(request);  // the server may close before it has all of it
  return c.Outcome(within);
}

bool OpenAi(const HttpTarget& t) { return t.port == HttpPort::kOpenAi; }

// The request line and first headers of a call to `path` (POST with a JSON
// body of `body_bytes` when >= 0), with the target's token unless
// `token` says otherwise.
std::string Head(const HttpTarget& t, const char* method, const char* path, int64_t body_bytes,
                 const std::string* token = nullptr) {
  std::string head = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: soak\r\n");
  const std::string& bearer = token != nullptr ? *token : t.token;
  if (!bearer.empty()) absl::StrAppend(&head, "Authorization: Bearer ", bearer, "\r\n");
  if (body_bytes >= 0) {
    absl::StrAppend(&head, "Content-Type: application/json\r\nContent-Length: ", body_bytes,
                    "\r\n");
  }
  return head;
}

std::string Post(const HttpTarget& t, const char* path, absl::string_view body,
                 const std::string* token = nullptr) {
  return absl::StrCat(Head(t, "POST", path, static_cast<int64_t>(body.size()), token), "\r\n",
                      body);
}

// The path the generic abuses aim at on each port.
const char* Path(const HttpTarget& t) { return OpenAi(t) ? "/v1/completions" : "/metrics"; }
const char* GetPath(const HttpTarget& t) { return OpenAi(t) ? "/v1/models" : "/metrics"; }

}  // namespace

bool HttpOutcomeAllowed(HttpPort port, HttpAbuse abuse, const std::string& outcome) {
  if (outcome == "503") return true;
  if (port == HttpPort::kMetrics) {
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
      default:
        return false;  // not sent to the metrics port
    }
  }
  switch (abuse) {
    case HttpAbuse::kSlowHeaders:
    case HttpAbuse::kIdle:
      // The port's request deadline is 30 s: the client gives up first.
      return outcome == "held" || outcome == "closed" || outcome == "408";
    case HttpAbuse::kPostBody:
    case HttpAbuse::kOversizedChat:
      // Refused from its Content-Length, before the body is read.
      return outcome == "413";
    case HttpAbuse::kGetBody:
      return outcome == "200";  // GET /v1/models; the small body is read and ignored
    case HttpAbuse::kHugeHeader:
    case HttpAbuse::kManyHeaders:
      return outcome == "431";
    case HttpAbuse::kGarbage:
      // What cpp-httplib cannot parse is 400 (or closed); what it takes
      // (two spaces, a control byte in the method, a folded line) meets the
      // bearer token check (401; 200 on a server without one) or the router
      // (404 for an unknown method). A TLS hello without a line end is held.
      return outcome == "400" || outcome == "401" || outcome == "404" || outcome == "200" ||
             outcome == "closed" || outcome == "held";
    case HttpAbuse::kUnknownPath:
      return outcome == "404";
    case HttpAbuse::kDeepJson:
    case HttpAbuse::kInvalidJson:
      return outcome == "400";
    case HttpAbuse::kWrongToken:
      return outcome == "401";
    case HttpAbuse::kStreamHangUp:
      return outcome == "200" || outcome == "429";
    case HttpAbuse::kStreamNeverRead:
      // The headers went out before the client stopped reading.
      return outcome == "200" || outcome == "429" || outcome == "closed";
    case HttpAbuse::kNumAbuses:
      break;
  }
  return false;
}

HttpAbuseResult RunHttpAbuse(HttpAbuse abuse, const HttpTarget& t, int variant) {
  HttpAbuseResult result;
  const absl::Time start = absl::Now();
  // On the OpenAI port a connection that gets no answer within the client's
  // patience is "held" (its deadline is longer); on the metrics port that is
  // a failure ("no answer").
  auto held = [&t](std::string outcome) {
    return OpenAi(t) && outcome == "no answer" ? std::string("held") : outcome;
  };
  const absl::Duration patience = OpenAi(t) ? kOpenAiPatience : kAnswerWithin;
  switch (abuse) {
    case HttpAbuse::kSlowHeaders: {
      Connection c(t.host, t.port_number);
      if (c.fd() < 0) {
        result.outcomes.push_back("connect failed");
        break;
      }
      bool sent = c.Send(absl::StrCat(Head(t, OpenAi(t) ? "POST" : "GET", Path(t), -1)));
      // A line every 200 ms until the server acts; the metrics port must
      // within its 2 s.
      while (sent && !c.Readable(absl::Milliseconds(200)) && absl::Now() - start < patience) {
        sent = c.Send("X-Slow: 1\r\n");
      }
      result.outcomes.push_back(
          held(c.Outcome(OpenAi(t) ? absl::Milliseconds(100) : absl::Seconds(1))));
      break;
    }
    case HttpAbuse::kIdle: {
      std::vector<std::unique_ptr<Connection>> idle;
      for (int i = 0; i < 4; ++i) {
        idle.push_back(std::make_unique<Connection>(t.host, t.port_number));
      }
      for (auto& c : idle) {
        const absl::Duration left = patience - (absl::Now() - start);
        result.outcomes.push_back(c->fd() < 0
                                      ? "connect failed"
                                      : held(c->Outcome(std::max(left, absl::ZeroDuration()))));
      }
      break;
    }
    case HttpAbuse::kPostBody: {
      Connection c(t.host, t.port_number);
      if (c.fd() < 0) {
        result.outcomes.push_back("connect failed");
        break;
      }
      c.Send(absl::StrCat(Head(t, "POST", Path(t), 1000000000), "\r\n"));
      c.Send(std::string(1024, 'x'));
      result.outcomes.push_back(c.Outcome());
      break;
    }
    case HttpAbuse::kGetBody:
      result.outcomes.push_back(
          OneShot(t, absl::StrCat(Head(t, "GET", GetPath(t), 5), "\r\nhello")));
      break;
    case HttpAbuse::kHugeHeader:
      result.outcomes.push_back(OneShot(t, absl::StrCat(Head(t, "GET", GetPath(t), -1), "X-Huge: ",
                                                        std::string(20 << 10, 'h'), "\r\n\r\n")));
      break;
    case HttpAbuse::kManyHeaders: {
      std::string request = Head(t, "GET", GetPath(t), -1);
      // Metrics: past its 100 lines. OpenAI: past its 16 KiB head, which
      // cpp-httplib alone would not bound (it bounds each line only).
      for (int i = 0; i < (OpenAi(t) ? 2000 : 150); ++i) {
        absl::StrAppend(&request, "X-H", i, ": v\r\n");
      }
      request += "\r\n";
      result.outcomes.push_back(OneShot(t, request));
      break;
    }
    case HttpAbuse::kGarbage: {
      const std::string path = GetPath(t);
      const std::string garbage[] = {
          "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  // a TLS hello
          "GET " + path + "\r\n\r\n",                              // no version
          "GET  " + path + " HTTP/1.1\r\n\r\n",                    // two spaces
          "G\x01T " + path + " HTTP/1.1\r\n\r\n",                  // control in the method
          "GET " + path + " HTTP/1.1\r\nno colon here\r\n\r\n",    // header without ':'
          "GET " + path + " HTTP/1.1\r\n folded: header\r\n\r\n",  // obsolete folding
      };
      const size_t n = sizeof(garbage) / sizeof(garbage[0]);
      // The TLS hello has no line end: the metrics port closes it at its 2 s
      // deadline, the OpenAI port holds it (30 s).
      result.outcomes.push_back(
          held(OneShot(t, garbage[static_cast<size_t>(variant) % n], patience)));
      break;
    }
    case HttpAbuse::kUnknownPath:
      result.outcomes.push_back(OneShot(t, absl::StrCat(Head(t, "GET", "/nope", -1), "\r\n")));
      break;
    case HttpAbuse::kOversizedChat: {
      // What a client sends at once: the head and the body's first 16 KiB.
      Connection c(t.host, t.port_number);
      if (c.fd() < 0) {
        result.outcomes.push_back("connect failed");
        break;
      }
      c.Send(absl::StrCat(Head(t, "POST", "/v1/chat/completions", t.max_body_bytes + 1), "\r\n",
                          R"({"messages": [{"role": "user", "content": ")",
                          std::string(16 << 10, 'x')));
      result.outcomes.push_back(c.Outcome());
      break;
    }
    case HttpAbuse::kDeepJson:
      result.outcomes.push_back(
          OneShot(t, Post(t, "/v1/completions",
                          absl::StrCat(R"({"prompt": "x", "stop": )", std::string(100, '['),
                                       std::string(100, ']'), "}"))));
      break;
    case HttpAbuse::kInvalidJson:
      result.outcomes.push_back(
          OneShot(t, Post(t, "/v1/chat/completions", R"({"messages": [{"role": "user", )")));
      break;
    case HttpAbuse::kWrongToken: {
      const std::string wrong(std::max<size_t>(t.token.size(), 32), 'w');
      result.outcomes.push_back(
          OneShot(t, Post(t, "/v1/completions", R"({"prompt": "x", "max_tokens": 4})", &wrong)));
      break;
    }
    case HttpAbuse::kStreamHangUp: {
      Connection c(t.host, t.port_number);
      if (c.fd() < 0) {
        result.outcomes.push_back("connect failed");
        break;
      }
      c.Send(Post(t, "/v1/completions",
                  absl::StrCat(R"({"prompt": "Once upon a time", "max_tokens": 200, )",
                               R"("ignore_eos": true, "temperature": 1.0, "stream": true, )",
                               R"("seed": )", variant, "}")));
      // Two events read, then the connection is closed mid-stream: the
      // server must cancel the generation (the soak's end check: no block
      // held, nothing running).
      result.outcomes.push_back(c.ReadEvents(2));
      break;
    }
    case HttpAbuse::kStreamNeverRead: {
      Connection c(t.host, t.port_number, /*receive_buffer=*/2048);
      if (c.fd() < 0) {
        result.outcomes.push_back("connect failed");
        break;
      }
      // ~200 bytes per token and sample as the server counts them (ChunkBytes,
      // 5 alternatives): ~240 KB in all,
      // past the soak server's --max_stream_pending_bytes (32 KiB) once the
      // socket buffers are full, so the server cancels it.
      c.Send(Post(t, "/v1/completions",
                  R"({"prompt": "x", "max_tokens": 300, "n": 4, "logprobs": 5, )"
                  R"("ignore_eos": true, "temperature": 1.0, "stream": true})"));
      absl::SleepFor(absl::Seconds(2));
      result.outcomes.push_back(c.Outcome());
      break;
    }
    case HttpAbuse::kNumAbuses:
      break;
  }
  result.elapsed = absl::Now() - start;
  return result;
}

}  // namespace dikkat::soak
