// Abusive HTTP clients for the metrics port (server/metrics_http.h), written
// on raw sockets because a well-behaved HTTP library cannot send what they
// send: a request head dribbled a line at a time (slowloris), connections
// that send nothing, bodies, huge or too many headers, garbage request lines.
//
// Each abuse opens its own connection(s), reads the answer's status code and
// closes. The outcome is the status code ("413"), "closed" when the server
// closed (or reset) the connection without an answer, or "no answer" when it
// neither answered nor closed within 5 s (never allowed: every connection is
// bounded by the server's 2 s request deadline). Thread-safe: no shared state.
#ifndef DIKKAT_TESTS_SOAK_HTTP_ABUSE_H_
#define DIKKAT_TESTS_SOAK_HTTP_ABUSE_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dikkat::soak {

enum class HttpAbuse {
  kSlowHeaders,  // a header line every 200 ms, never the end of the head
  kIdle,         // 4 connections that send nothing
  kPostBody,     // POST with a 1 GB Content-Length
  kGetBody,      // GET with a small body
  kHugeHeader,   // one 20 KiB header line (the head may have 16 KiB)
  kManyHeaders,  // 150 header lines (100 allowed)
  kGarbage,      // malformed request lines
  kUnknownPath,  // GET /nope
  kNumAbuses
};
inline constexpr const char* kHttpAbuseNames[] = {
    "slow-headers", "idle",    "post-body", "get-body",
    "huge-header",  "headers", "garbage",   "unknown-path"};

// The outcomes the server may give each abuse (docs/security.md, "Ports").
// 503 is allowed for every abuse: it is the answer when all 32 workers and
// the 32 waiting places are taken.
bool HttpOutcomeAllowed(HttpAbuse abuse, const std::string& outcome);

struct HttpAbuseResult {
  std::vector<std::string> outcomes;  // one per connection the abuse opened
  absl::Duration elapsed;             // from the first connect to the last outcome
};

// Runs one abuse against host:port; `variant` picks among the forms of the
// garbage abuse.
HttpAbuseResult RunHttpAbuse(HttpAbuse abuse, const std::string& host, int port, int variant);

}  // namespace dikkat::soak

#endif  // DIKKAT_TESTS_SOAK_HTTP_ABUSE_H_
