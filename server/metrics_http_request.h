// The metrics port's own check of a request head (server/metrics_http.h):
// the request line and header lines, up to the empty line that ends them,
// read before cpp-httplib parses anything. A pure function over the bytes
// received so far, so that the connection loop can refuse what the port
// never serves (other methods, bodies, oversized or malformed heads) with a
// status of its own, and so that it can be fuzzed
// (fuzz/metrics_http_request_fuzzer.cc).
#ifndef DIKKAT_SERVER_METRICS_HTTP_REQUEST_H_
#define DIKKAT_SERVER_METRICS_HTTP_REQUEST_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace dikkat::server {

// At most this many header lines (Prometheus and the kubelet send < 10).
inline constexpr int kMaxRequestHeaderLines = 100;

struct RequestHeadCheck {
  enum class Verdict {
    kIncomplete,  // no empty line yet, and fewer than max_bytes received
    kServe,       // a well-formed, bodiless GET or HEAD: hand it to httplib
    kRefuse,      // answer `status` and close
  };
  Verdict verdict = Verdict::kIncomplete;
  // kRefuse: 400 (malformed request line or header line), 405 (a method
  // other than GET and HEAD), 413 (a body: Transfer-Encoding, or a
  // Content-Length other than 0), 431 (past max_bytes without the empty
  // line, or more than kMaxRequestHeaderLines header lines).
  int status = 0;
  std::string reason;  // kRefuse: why, for the response body
  // kServe, and kRefuse once the head is complete: its bytes, the empty
  // line included (what follows belongs to a body or a next request).
  size_t head_bytes = 0;
  std::string method;  // once the request line is complete and well-formed
  std::string target;
};

// Checks the head at the start of `received` (the bytes a connection has
// sent so far). Lines end with "\n", optionally preceded by "\r". The
// request line is METHOD SP TARGET SP HTTP/1.0 or HTTP/1.1, the method a
// token, the target without controls or spaces; header lines are
// `name: value` with a token name and a value without controls other than
// tab; a line starting with a space or tab (obsolete folding) is refused.
// Checks run in this order: request line (400), header lines (400, 431),
// method (405), body (413). Only bytes up to the first empty line are
// looked at; while there is none, the result is kIncomplete, or 431 once
// `received` holds max_bytes or more.
RequestHeadCheck CheckRequestHead(std::string_view received, size_t max_bytes);

// The reason phrase of the statuses above ("Bad Request", ...).
const char* RequestHeadStatusText(int status);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_METRICS_HTTP_REQUEST_H_
