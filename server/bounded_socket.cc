#include "server/bounded_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"

namespace dikkat::server {
namespace {

// Bytes asked of one recv(): a request head of a scrape or an OpenAI call
// usually arrives in one.
constexpr size_t kReceiveChunk = 16 << 10;

void Describe(const sockaddr_storage& addr, std::string& ip, int& port) {
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

}  // namespace

StopSignal::StopSignal() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

StopSignal::~StopSignal() {
  if (fd_ >= 0) close(fd_);
}

void StopSignal::Raise() {
  const uint64_t one = 1;
  if (fd_ >= 0 && ::write(fd_, &one, sizeof(one)) < 0) {
    // Nothing to do: connections still end at their deadlines.
  }
}

bool StopSignal::raised() const {
  pollfd fd = {fd_, POLLIN, 0};
  return poll(&fd, 1, 0) > 0;
}

BoundedSocket::BoundedSocket(int fd, const StopSignal& stop, const SocketBounds& bounds)
    : fd_(fd), stop_(stop), bounds_(bounds), read_deadline_(absl::Now() + bounds.request_timeout) {}

bool BoundedSocket::NextRequest(absl::Duration idle) {
  if (pos_ == buffer_.size() && !Wait(POLLIN, absl::Now() + idle)) return false;
  received_ = 0;
  read_deadline_ = absl::Now() + bounds_.request_timeout;
  write_deadline_ = absl::InfiniteFuture();
  return true;
}

BoundedSocket::Head BoundedSocket::ReadHead() {
  // Lines before line_start have been looked at and were not empty.
  size_t line_start = 0;
  while (true) {
    const std::string_view head = unread();
    for (size_t newline = head.find('\n', line_start); newline != std::string_view::npos;
         newline = head.find('\n', line_start)) {
      const size_t length = newline - line_start;
      if (length == 0 || (length == 1 && head[line_start] == '\r')) return Head::kComplete;
      line_start = newline + 1;
    }
    const int64_t max_head = std::max<int64_t>(bounds_.max_head_bytes, 0);
    if (static_cast<int64_t>(head.size()) >= max_head) return Head::kTooLarge;
    if (Receive(static_cast<size_t>(max_head) - head.size()) <= 0) return Head::kMissing;
  }
}

ssize_t BoundedSocket::Receive(size_t max) {
  const int64_t budget = bounds_.max_head_bytes + bounds_.max_body_bytes - received_;
  if (budget <= 0 || max == 0 || !Wait(POLLIN, read_deadline_)) return -1;
  if (pos_ > 0) {  // keep only the unread bytes
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t want = std::min({max, static_cast<size_t>(budget), kReceiveChunk});
  const size_t old = buffer_.size();
  buffer_.resize(old + want);
  ssize_t n;
  do {
    n = recv(fd_, buffer_.data() + old, want, 0);
  } while (n < 0 && errno == EINTR);
  buffer_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
  if (n > 0) received_ += n;
  return n;
}

bool BoundedSocket::is_readable() const {
  return pos_ < buffer_.size() || Wait(POLLIN, read_deadline_);
}

bool BoundedSocket::is_writable() const { return Wait(POLLOUT, WriteDeadline()); }

ssize_t BoundedSocket::read(char* ptr, size_t size) {
  if (pos_ == buffer_.size()) {
    const ssize_t n = Receive(kReceiveChunk);
    if (n <= 0) return n;
  }
  const size_t n = std::min(size, buffer_.size() - pos_);
  std::memcpy(ptr, buffer_.data() + pos_, n);
  pos_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t BoundedSocket::write(const char* ptr, size_t size) {
  if (!Wait(POLLOUT, WriteDeadline())) return -1;
  const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
  return n < 0 && errno == EINTR ? 0 : n;
}

bool BoundedSocket::WriteAll(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(data.data(), data.size());
    if (n < 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void BoundedSocket::LingeringClose(absl::Duration linger, int64_t max_bytes) {
  shutdown(fd_, SHUT_WR);
  const absl::Time end = absl::Now() + linger;
  char sink[4096];
  for (int64_t drained = 0; drained < max_bytes;) {
    if (!Wait(POLLIN, end)) return;
    ssize_t n;
    do {
      n = recv(fd_, sink, static_cast<size_t>(std::min<int64_t>(sizeof(sink), max_bytes - drained)),
               0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return;
    drained += n;
  }
}

bool BoundedSocket::PeerClosed() const {
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

void BoundedSocket::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) Describe(addr, ip, port);
}

void BoundedSocket::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) Describe(addr, ip, port);
}

absl::Time BoundedSocket::WriteDeadline() const {
  if (!bounds_.write_timeout_per_response) return absl::Now() + bounds_.write_timeout;
  // The response's deadline starts with its first write.
  if (write_deadline_ == absl::InfiniteFuture()) {
    write_deadline_ = absl::Now() + bounds_.write_timeout;
  }
  return write_deadline_;
}

bool BoundedSocket::Wait(short events, absl::Time deadline) const {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd fds[2] = {{fd_, events, 0}, {stop_.fd(), POLLIN, 0}};
    const int ms = static_cast<int>(std::min<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 60 * 1000));
    const int ready = poll(fds, 2, ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || (fds[1].revents & POLLIN) != 0) return false;
    if (fds[0].revents != 0) return (fds[0].revents & POLLNVAL) == 0;
  }
}

}  // namespace dikkat::server
