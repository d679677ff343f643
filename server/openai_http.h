// OpenAiHttpServer: the OpenAI-compatible HTTP/1.1 front door (docs/api.md,
// "OpenAI-compatible HTTP"), beside gRPC over the same engines, limits,
// queue and bearer tokens:
//   GET  /v1/models, /v1/models/{id}
//   POST /v1/completions, /v1/chat/completions (JSON or server-sent events)
//   POST /v1/embeddings
// Errors are OpenAI's {"error": {...}} with the HTTP status of the cause
// (server/openai_response.h); 429 carries Retry-After.
//
// Every connection is bounded (OpenAiHttpOptions, through
// server/bounded_socket.h, shared with the metrics port): a bounded set of
// workers with a short waiting line (past it, 503 at once), each request's
// head (read before httplib parses it; past max_head_bytes, 431) and body
// within a byte budget and a deadline, the body refused (413) before it
// is read when its Content-Length is over the limit, a bounded JSON nesting,
// a write timeout (a client that does not read is cut), a bounded number of
// requests per keep-alive connection. A stream's output waits between the
// engine thread and the HTTP thread in a bounded buffer: the engine never
// blocks, and a stream whose client falls max_stream_pending_bytes behind is
// cancelled and closed. A client that disconnects has its generation
// cancelled (as a gRPC cancel).
//
// Owns its accept thread and workers; the registry, authenticator and
// metrics are not owned and must outlive it. Start and Stop are not
// thread-safe with each other.
#ifndef DIKKAT_SERVER_OPENAI_HTTP_H_
#define DIKKAT_SERVER_OPENAI_HTTP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/security.h"

namespace dikkat::server {

struct OpenAiHttpOptions {
  // Connections served at once (one worker each; a stream holds its worker
  // for its whole length), and connections waiting for a worker before
  // new ones are answered 503.
  int max_workers = 64;
  int max_waiting = 64;
  // A request's line and headers, at most max_head_bytes, and its body, at
  // most max_body_bytes, must arrive within request_timeout of the first
  // byte; a keep-alive connection may wait idle_timeout for its next request
  // and serves at most max_requests_per_connection.
  int64_t max_head_bytes = 16 << 10;
  int64_t max_body_bytes = 8 << 20;
  absl::Duration request_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::Seconds(5);
  int max_requests_per_connection = 100;
  // Time one write of a response may wait for the client to read.
  absl::Duration write_timeout = absl::Seconds(10);
  int max_json_depth = 32;
  int max_chat_messages = 1024;
  // Chat answers' <think>...</think> reasoning is answered apart from the
  // content (reasoning_content), as vLLM's --reasoning-parser does.
  bool parse_reasoning = false;
  // Generated output held for one stream (0 = no limit).
  int64_t max_stream_pending_bytes = 4 << 20;
  // As for gRPC (server/convert.h, ModelLimits).
  int64_t max_text_bytes = 0;
  int64_t max_response_bytes = 64ll << 20;
};

class OpenAiHttpServer {
 public:
  // `auth` may be null (every caller accepted). `serving` false: every
  // request but GET /v1/models is answered 503 (starting or draining).
  OpenAiHttpServer(const ModelRegistry* registry, const BearerTokenAuthenticator* auth,
                   Metrics* metrics, std::function<bool()> serving, OpenAiHttpOptions options);
  ~OpenAiHttpServer();  // Stop()
  OpenAiHttpServer(const OpenAiHttpServer&) = delete;
  OpenAiHttpServer& operator=(const OpenAiHttpServer&) = delete;

  // Loads each model's chat template (an unreadable one is an error naming
  // the file), binds "host:port" (port 0 picks one) and serves on a thread.
  // Returns the bound port.
  absl::StatusOr<int> Start(const std::string& address);

  // Ends every connection (streams still running are cancelled) and joins
  // the threads. Idempotent.
  void Stop();

 private:
  class Handlers;
  class BoundedServer;

  const ModelRegistry* registry_;
  const BearerTokenAuthenticator* auth_;
  Metrics* metrics_;
  std::function<bool()> serving_;
  const OpenAiHttpOptions options_;
  std::unique_ptr<Handlers> handlers_;
  std::unique_ptr<BoundedServer> http_;
  std::thread thread_;
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_OPENAI_HTTP_H_
