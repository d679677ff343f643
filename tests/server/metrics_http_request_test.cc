// The metrics port's request-head check (server/metrics_http_request.h):
// what is served, what is refused with which status, and that nothing is
// decided before the head ends.
#include "server/metrics_http_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dikkat::server {
namespace {

using Verdict = RequestHeadCheck::Verdict;
constexpr size_t kBudget = 16 << 10;

TEST(CheckRequestHeadTest, ServesBodilessGetAndHead) {
  const std::string scrape =
      "GET /metrics HTTP/1.1\r\nHost: 10.0.0.7:9090\r\nUser-Agent: Prometheus/2.45.0\r\n"
      "Accept-Encoding: gzip\r\nContent-Length: 0\r\n\r\n";
  RequestHeadCheck check = CheckRequestHead(scrape + "trailing bytes", kBudget);
  EXPECT_EQ(check.verdict, Verdict::kServe);
  EXPECT_EQ(check.head_bytes, scrape.size());
  EXPECT_EQ(check.method, "GET");
  EXPECT_EQ(check.target, "/metrics");
  check = CheckRequestHead("HEAD /healthz HTTP/1.0\n\n", kBudget);
  EXPECT_EQ(check.verdict, Verdict::kServe);
  EXPECT_EQ(check.head_bytes, 24u);
}

TEST(CheckRequestHeadTest, NothingIsDecidedBeforeTheHeadEnds) {
  const std::string head = "POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t n = 0; n < head.size(); ++n) {
    EXPECT_EQ(CheckRequestHead(head.substr(0, n), kBudget).verdict, Verdict::kIncomplete) << n;
  }
  EXPECT_EQ(CheckRequestHead(head, kBudget).status, 405);
}

TEST(CheckRequestHeadTest, RefusalsInOrder) {
  struct Case {
    std::string head;
    int status;
  };
  const Case cases[] = {
      {"\r\n", 400},
      {"GET /metrics\r\n\r\n", 400},
      {"GET /a b HTTP/1.1\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 400},
      {"GET /\x01 HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: l\r\n continued\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n: no name\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\x01" "b\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},  // malformed before the method
      {"POST /metrics HTTP/1.1\r\nContent-Length: 838860800\r\n\r\n", 405},
      {"get /metrics HTTP/1.1\r\n\r\n", 405},
      {"GET / HTTP/1.1\r\ncontent-length: 1\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nContent-Length:  0 \r\nContent-Length: 00\r\n\r\n", 413},
  };
  for (const Case& c : cases) {
    const RequestHeadCheck check = CheckRequestHead(c.head, kBudget);
    EXPECT_EQ(check.verdict, Verdict::kRefuse) << c.head;
    EXPECT_EQ(check.status, c.status) << c.head;
    EXPECT_FALSE(check.reason.empty());
  }
  EXPECT_EQ(CheckRequestHead("GET / HTTP/1.1\r\nX-Tab:\ta\tb\r\n\r\n", kBudget).verdict,
            Verdict::kServe);
}

TEST(CheckRequestHeadTest, SizeAndLineLimits) {
  // No empty line within the budget: 431 once the budget is reached.
  const std::string line = "GET /" + std::string(100, 'a') + " HTTP/1.1\r\n";
  EXPECT_EQ(CheckRequestHead(line, line.size() + 1).verdict, Verdict::kIncomplete);
  RequestHeadCheck check = CheckRequestHead(line, line.size());
  EXPECT_EQ(check.status, 431);
  EXPECT_EQ(check.head_bytes, 0u);
  // A complete head longer than the budget: 431 as well.
  EXPECT_EQ(CheckRequestHead(line + "\r\n", line.size()).status, 431);
  std::string head = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < kMaxRequestHeaderLines; ++i) head += "X: y\r\n";
  EXPECT_EQ(CheckRequestHead(head + "\r\n", kBudget).verdict, Verdict::kServe);
  EXPECT_EQ(CheckRequestHead(head + "X: y\r\n\r\n", kBudget).status, 431);
}

TEST(CheckRequestHeadTest, StatusTexts) {
  EXPECT_STREQ(RequestHeadStatusText(400), "Bad Request");
  EXPECT_STREQ(RequestHeadStatusText(405), "Method Not Allowed");
  EXPECT_STREQ(RequestHeadStatusText(413), "Payload Too Large");
  EXPECT_STREQ(RequestHeadStatusText(431), "Request Header Fields Too Large");
}

}  // namespace
}  // namespace dikkat::server
