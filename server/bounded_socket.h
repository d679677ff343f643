// BoundedSocket: one accepted connection of dikkat's HTTP ports (the
// metrics port, server/metrics_http.h, and the OpenAI-compatible port,
// server/openai_http.h) as cpp-httplib reads and writes it, with the bounds
// httplib 0.11.4 lacks. httplib's own read timeout restarts at every byte
// and it bounds neither the number of header lines nor the head's total
// size, so a client that trickles bytes or sends megabytes of headers
// would hold a worker, and memory, for as long as it likes. Here:
//   - each request (line, headers and body) must arrive within one deadline
//     (request_timeout) and one byte budget (max_head_bytes +
//     max_body_bytes), however the client spreads its bytes;
//   - ReadHead() reads the request line and headers before httplib parses
//     anything, and stops at max_head_bytes without the empty line that ends
//     them (the port answers 431); what it read is what read() returns
//     first, so httplib parses the same bytes;
//   - a write may wait write_timeout for the client to read, counted per
//     write (streams) or for the whole response (one-shot answers);
//   - every wait also ends when the server's StopSignal is raised.
//
// A connection is served by one worker thread: not thread-safe, except
// PeerClosed() and Stopping(), which any thread may call.
#ifndef DIKKAT_SERVER_BOUNDED_SOCKET_H_
#define DIKKAT_SERVER_BOUNDED_SOCKET_H_

#include <httplib.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace dikkat::server {

// An eventfd that ends every BoundedSocket wait on it once raised (it stays
// readable). Owned by the HTTP server; thread-safe.
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  void Raise();
  bool raised() const;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

struct SocketBounds {
  // A request's line and headers, and its body (0: the port takes none).
  int64_t max_head_bytes = 16 << 10;
  int64_t max_body_bytes = 0;
  // The whole request must arrive within this time of its start
  // (construction for the first request, the first byte for the next ones:
  // NextRequest).
  absl::Duration request_timeout = absl::Seconds(2);
  // Time the client has to read what the server writes: for each write
  // (a stream may last long, each write may not), or, with
  // write_timeout_per_response, for all writes of the request's response.
  absl::Duration write_timeout = absl::Seconds(5);
  bool write_timeout_per_response = false;
};

class BoundedSocket final : public httplib::Stream {
 public:
  // `fd` stays owned by the caller (closed after LingeringClose); `stop`
  // must outlive the socket. The first request's deadline starts now.
  BoundedSocket(int fd, const StopSignal& stop, const SocketBounds& bounds);

  // Waits up to `idle` for the next request's first byte (a keep-alive
  // connection), then starts its byte budget and deadline. False when none
  // came, the client closed or the server stops.
  bool NextRequest(absl::Duration idle);

  enum class Head {
    kComplete,  // the empty line that ends the head has arrived
    kTooLarge,  // max_head_bytes arrived without it (answer 431)
    kMissing,   // the deadline passed, the client closed, or the server stops
  };
  // Reads until the bytes not yet returned by read() hold a whole head:
  // lines ending in "\n" (optionally "\r\n") up to the first empty one.
  Head ReadHead();
  // The bytes received and not yet returned by read() (after ReadHead: the
  // head, and whatever followed it in the same packets).
  std::string_view unread() const { return std::string_view(buffer_).substr(pos_); }

  // Writes all of `data` (each write within the write timeout). False when
  // the client is gone, does not read, or the server stops.
  bool WriteAll(std::string_view data);

  // After the last response: stop sending, then read and drop what the
  // client still sends (a refused body) for at most `linger` and
  // `max_bytes`, so that closing does not reset the connection before the
  // client has read the answer. The caller then closes the fd.
  void LingeringClose(absl::Duration linger = absl::Milliseconds(200),
                      int64_t max_bytes = 64 << 10);

  // The client closed its side or reset (checked without blocking).
  bool PeerClosed() const;
  bool Stopping() const { return stop_.raised(); }

  // httplib::Stream.
  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  // Receives at most `max` bytes (within the request's budget and deadline)
  // after the unread ones. >0 bytes received; 0 the client closed; -1 on a
  // timeout, a stop, an error or a spent budget.
  ssize_t Receive(size_t max);
  absl::Time WriteDeadline() const;
  // Whether fd_ is ready for `events` before `deadline` (false on timeout,
  // on a stop and on errors other than a hang-up, which read/write report).
  bool Wait(short events, absl::Time deadline) const;

  const int fd_;
  const StopSignal& stop_;
  const SocketBounds bounds_;
  absl::Time read_deadline_;
  mutable absl::Time write_deadline_ = absl::InfiniteFuture();
  int64_t received_ = 0;  // bytes of the current request's budget spent
  std::string buffer_;    // received; [pos_, end) not yet returned by read()
  size_t pos_ = 0;
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_BOUNDED_SOCKET_H_
