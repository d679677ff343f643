// BoundedSocket (server/bounded_socket.h), the socket under both HTTP ports,
// over a Unix socket pair: the head is read up to its empty line and no
// further than its bound, what ReadHead received is what read() returns
// first, a request's bytes are bounded by its budget and its deadline
// however the client spreads them, and a raised StopSignal ends every wait.
#include "server/bounded_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dikkat::server {
namespace {

class BoundedSocketTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  int server() const { return fds_[0]; }
  void Send(const std::string& bytes) {
    ASSERT_EQ(send(fds_[1], bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  void CloseClient() {
    close(fds_[1]);
    fds_[1] = -1;
  }
  static std::string ReadAll(BoundedSocket& socket) {
    std::string out;
    char buf[7];  // odd sizes, as httplib's one-byte line reads
    while (true) {
      const ssize_t n = socket.read(buf, sizeof(buf));
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }

  int fds_[2] = {-1, -1};
  StopSignal stop_;
};

SocketBounds Small() {
  SocketBounds b;
  b.max_head_bytes = 64;
  b.max_body_bytes = 16;
  b.request_timeout = absl::Milliseconds(300);
  b.write_timeout = absl::Milliseconds(200);
  return b;
}

TEST_F(BoundedSocketTest, TheHeadEndsAtTheFirstEmptyLineAndReadReplaysIt) {
  BoundedSocket socket(server(), stop_, Small());
  Send("POST / HTTP/1.1\r\nA: b\r\n\r\nbody");
  ASSERT_EQ(socket.ReadHead(), BoundedSocket::Head::kComplete);
  EXPECT_EQ(socket.unread(), "POST / HTTP/1.1\r\nA: b\r\n\r\nbody");
  CloseClient();
  EXPECT_EQ(ReadAll(socket), "POST / HTTP/1.1\r\nA: b\r\n\r\nbody");
}

TEST_F(BoundedSocketTest, BareNewlinesEndAHeadToo) {
  BoundedSocket socket(server(), stop_, Small());
  Send("GET / HTTP/1.1\nA: b\n\n");
  EXPECT_EQ(socket.ReadHead(), BoundedSocket::Head::kComplete);
}

TEST_F(BoundedSocketTest, AHeadArrivingInPiecesIsAssembled) {
  BoundedSocket socket(server(), stop_, Small());
  std::thread client([this] {
    for (const char* piece : {"GET / HT", "TP/1.1\r", "\nA: b\r\n", "\r", "\n"}) {
      absl::SleepFor(absl::Milliseconds(20));
      Send(piece);
    }
  });
  EXPECT_EQ(socket.ReadHead(), BoundedSocket::Head::kComplete);
  client.join();
  EXPECT_EQ(socket.unread(), "GET / HTTP/1.1\r\nA: b\r\n\r\n");
}

TEST_F(BoundedSocketTest, AHeadPastItsBoundIsTooLargeAndNotReadFurther) {
  BoundedSocket socket(server(), stop_, Small());
  Send("GET / HTTP/1.1\r\n" + std::string(200, 'h'));
  EXPECT_EQ(socket.ReadHead(), BoundedSocket::Head::kTooLarge);
  EXPECT_EQ(socket.unread().size(), 64u);  // max_head_bytes, not the 216 sent
}

TEST_F(BoundedSocketTest, AHeadTrickledPastTheDeadlineIsMissing) {
  BoundedSocket socket(server(), stop_, Small());
  const absl::Time start = absl::Now();
  std::thread client([this] {
    Send("GET / HTTP/1.1\r\n");
    for (int i = 0; i < 6; ++i) {  // a byte every 100 ms: each wait is short
      absl::SleepFor(absl::Milliseconds(100));
      Send("X");
    }
  });
  EXPECT_EQ(socket.ReadHead(), BoundedSocket::Head::kMissing);
  const absl::Duration took = absl::Now() - start;
  client.join();
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Milliseconds(550));  // the 300 ms deadline, not the client's pace
}

TEST_F(BoundedSocketTest, AClientThatClosesGivesAMissingHead) {
  BoundedSocket socket(server(), stop_, Small());
  Send("GET / HTTP/1.1\r\n");
  CloseClient();
  EXPECT_EQ(socket.ReadHead(), BoundedSocket::Head::kMissing);
}

TEST_F(BoundedSocketTest, ARequestReadsNoMoreThanItsHeadAndBodyBudget) {
  BoundedSocket socket(server(), stop_, Small());
  const std::string head = "POST / HTTP/1.1\r\n\r\n";
  Send(head + std::string(500, 'b'));
  ASSERT_EQ(socket.ReadHead(), BoundedSocket::Head::kComplete);
  // head + body budget: 64 + 16 bytes in all, however many were sent.
  EXPECT_EQ(ReadAll(socket).size(), 80u);
}

TEST_F(BoundedSocketTest, NextRequestRestartsTheBudgetAndKeepsPipelinedBytes) {
  BoundedSocket socket(server(), stop_, Small());
  Send("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
  ASSERT_EQ(socket.ReadHead(), BoundedSocket::Head::kComplete);
  const std::string first_head = "GET /a HTTP/1.1\r\n\r\n";
  std::string first(first_head.size(), '\0');
  ASSERT_EQ(socket.read(first.data(), first.size()), static_cast<ssize_t>(first.size()));
  EXPECT_EQ(first, first_head);  // exactly the first head
  // The second request is already buffered: no wait for its first byte.
  ASSERT_TRUE(socket.NextRequest(absl::ZeroDuration()));
  ASSERT_EQ(socket.ReadHead(), BoundedSocket::Head::kComplete);
  EXPECT_EQ(socket.unread(), "GET /b HTTP/1.1\r\n\r\n");
}

TEST_F(BoundedSocketTest, NextRequestGivesUpOnAnIdleConnection) {
  BoundedSocket socket(server(), stop_, Small());
  const absl::Time start = absl::Now();
  EXPECT_FALSE(socket.NextRequest(absl::Milliseconds(100)));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(400));
}

TEST_F(BoundedSocketTest, ARaisedStopEndsAWaitAtOnce) {
  SocketBounds bounds = Small();
  bounds.request_timeout = absl::Seconds(30);
  BoundedSocket socket(server(), stop_, bounds);
  std::thread stopper([this] {
    absl::SleepFor(absl::Milliseconds(50));
    stop_.Raise();
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(socket.ReadHead(), BoundedSocket::Head::kMissing);
  stopper.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(socket.Stopping());
  EXPECT_FALSE(socket.NextRequest(absl::Seconds(30)));  // and every later one
}

TEST_F(BoundedSocketTest, AWriteToAClientThatDoesNotReadTimesOut) {
  BoundedSocket socket(server(), stop_, Small());
  const std::string chunk(64 << 10, 'x');
  const absl::Time start = absl::Now();
  bool written = true;
  for (int i = 0; i < 1000 && written; ++i) written = socket.WriteAll(chunk);
  EXPECT_FALSE(written);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(BoundedSocketTest, PeerClosedSeesTheClientGo) {
  BoundedSocket socket(server(), stop_, Small());
  EXPECT_FALSE(socket.PeerClosed());
  CloseClient();
  EXPECT_TRUE(socket.PeerClosed());
}

TEST_F(BoundedSocketTest, LingeringCloseDrainsARefusedBodyForAMoment) {
  BoundedSocket socket(server(), stop_, Small());
  Send("POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" + std::string(1000, 'b'));
  ASSERT_EQ(socket.ReadHead(), BoundedSocket::Head::kComplete);
  ASSERT_TRUE(socket.WriteAll("HTTP/1.1 413 Payload Too Large\r\n\r\n"));
  const absl::Time start = absl::Now();
  socket.LingeringClose(absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  // The client kept its side open: the whole linger, then nothing is left
  // unread (closing with unread bytes would reset a TCP connection before
  // the client read the 413).
  EXPECT_GE(took, absl::Milliseconds(150));
  EXPECT_LT(took, absl::Seconds(1));
  char byte;
  EXPECT_LT(recv(server(), &byte, 1, MSG_DONTWAIT), 0);
  char buf[64];
  const ssize_t n = recv(fds_[1], buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "HTTP/1.1 413 Payload Too Large\r\n\r\n");
  EXPECT_EQ(recv(fds_[1], buf, sizeof(buf), 0), 0);  // the server shut its side
}

TEST_F(BoundedSocketTest, LingeringCloseEndsAtOnceWhenTheClientCloses) {
  BoundedSocket socket(server(), stop_, Small());
  CloseClient();
  const absl::Time start = absl::Now();
  socket.LingeringClose(absl::Seconds(5));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

}  // namespace
}  // namespace dikkat::server
