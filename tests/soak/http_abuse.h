// Abusive HTTP clients for dikkat's HTTP ports, the metrics port
// (server/metrics_http.h) and the OpenAI-compatible port
// (server/openai_http.h), written on raw sockets because a well-behaved HTTP
// library cannot send what they send: a request head dribbled a line at a
// time (slowloris), connections that send nothing, bodies, huge or too many
// headers, garbage request lines; and on the OpenAI port also bodies over
// the limit, deeply nested or invalid JSON, a wrong bearer token, and
// streams whose client hangs up mid-stream or never reads.
//
// Each abuse opens its own connection(s), reads the answer's status code and
// closes. The outcome is the status code ("413"), "closed" when the server
// closed (or reset) the connection without an answer, or "no answer" when it
// neither answered nor closed within 5 s (never allowed on the metrics port,
// whose request deadline is 2 s; on the OpenAI port, whose deadline is 30 s,
// slowloris and idle connections, and a TLS hello that never ends its line,
// are given up by the client after 2 s as "held"). Thread-safe: no shared state.
#ifndef DIKKAT_TESTS_SOAK_HTTP_ABUSE_H_
#define DIKKAT_TESTS_SOAK_HTTP_ABUSE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dikkat::soak {

enum class HttpPort {
  kMetrics,  // GET /metrics, /healthz; no body
  kOpenAi,   // POST /v1/completions ...; bodies up to --max_message_bytes
};

enum class HttpAbuse {
  // Both ports.
  kSlowHeaders,  // a header line every 200 ms, never the end of the head
  kIdle,         // 4 connections that send nothing
  kPostBody,     // POST with a 1 GB Content-Length
  kGetBody,      // GET with a small body
  kHugeHeader,   // one 20 KiB header line (the head may have 16 KiB)
  kManyHeaders,  // 150 header lines (metrics: 100 allowed); OpenAI: 2 000 (past 16 KiB)
  kGarbage,      // malformed request lines
  kUnknownPath,  // GET /nope
  // The OpenAI port only (kFirstOpenAiOnly and after).
  kOversizedChat,    // chat/completions whose Content-Length is over the limit
  kDeepJson,         // a body nested 100 levels deep
  kInvalidJson,      // a body that is not JSON
  kWrongToken,       // a wrong bearer token
  kStreamHangUp,     // a stream read for two events, then the connection closed
  kStreamNeverRead,  // a bulky stream on a 2 KiB receive buffer, not read for 2 s
  kNumAbuses
};
inline constexpr int kFirstOpenAiOnly = static_cast<int>(HttpAbuse::kOversizedChat);
inline constexpr const char* kHttpAbuseNames[] = {
    "slow-headers", "idle",      "post-body",     "get-body",     "huge-header",
    "headers",      "garbage",   "unknown-path",  "big-chat",     "deep-json",
    "invalid-json", "bad-token", "stream-hangup", "stream-unread"};
static_assert(sizeof(kHttpAbuseNames) / sizeof(kHttpAbuseNames[0]) ==
              static_cast<size_t>(HttpAbuse::kNumAbuses));

// Where the abuses go: the port's kind and address, and (OpenAI port) the
// bearer token the server wants ("" = none), sent with every abuse but the
// wrong-token one, so that the abuse reaches what it aims at.
struct HttpTarget {
  HttpPort port = HttpPort::kMetrics;
  std::string host;
  int port_number = 0;
  std::string token;
  int64_t max_body_bytes = 1 << 20;  // the server's --max_message_bytes
};

// The outcomes the server may give each abuse on each port
// (docs/security.md, "Ports"). 503 is allowed for every abuse: it is the
// answer when every worker and waiting place is taken (metrics: 32 + 32;
// OpenAI: --openai_max_connections twice), and on the OpenAI port while the
// server drains; 429 on the OpenAI port for the generations when the
// model's queue is full.
bool HttpOutcomeAllowed(HttpPort port, HttpAbuse abuse, const std::string& outcome);

struct HttpAbuseResult {
  std::vector<std::string> outcomes;  // one per connection the abuse opened
  absl::Duration elapsed;             // from the first connect to the last outcome
};

// Runs one abuse against `target`; `variant` picks among the forms of the
// garbage abuse.
HttpAbuseResult RunHttpAbuse(HttpAbuse abuse, const HttpTarget& target, int variant);

}  // namespace dikkat::soak

#endif  // DIKKAT_TESTS_SOAK_HTTP_ABUSE_H_
