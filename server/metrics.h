// Metrics: dikkat's Prometheus metrics (prometheus-cpp registry, text format).
//
// Families are built once in the constructor and per-model label handles are
// cached by AddModel, so recording is a few atomic adds with no lookup by
// label. Names follow Prometheus conventions: base units (seconds, bytes),
// `_total` counters, histograms rather than summaries, and only the
// low-cardinality labels model, rpc, code, reason, finish_reason, phase.
// docs/metrics.md lists every family.
//
// Thread-safety: every method may be called from any thread concurrently
// (models are added while /metrics may already be scraped). The per-model EngineListener it hands out is called on
// that model's engine thread and never blocks.
#ifndef DIKKAT_SERVER_METRICS_H_
#define DIKKAT_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/engine.h"

namespace dikkat::server {

enum class Rpc { kEncode, kGenerate, kAttention, kGetModelInfo, kTokenize, kDetokenize };
inline constexpr int kNumRpcs = 6;
const char* RpcName(Rpc rpc);

// Label of dikkat_request_failures_total for a non-OK code:
// invalid | overloaded | cancelled | deadline | internal ("" for OK).
const char* FailureReason(absl::StatusCode code);

class Metrics {
 public:
  // `server_version` goes into dikkat_model_info{version}.
  explicit Metrics(std::string server_version);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Registers a model (idempotent) and returns the listener to pass to
  // Engine::Create for it. The listener is owned by Metrics.
  EngineListener* AddModel(const std::string& model);

  // Once the model is loaded: sets dikkat_model_info and
  // dikkat_model_load_seconds, and lets Scrape read `engine`'s stats (the
  // engine must outlive every later Scrape, or be detached with nullptr).
  void SetModelLoaded(const std::string& model, const ModelDescription& description,
                      const Engine* engine);

  // While a model's warm-up runs (Engine::Warmup), its engine events (steps,
  // tokens, queue times) are dropped, so that the token counters count only
  // callers' requests: dikkat_generated_tokens_total then equals what clients
  // received. Requests that arrive during warm-up (health is NOT_SERVING
  // then) are counted by RecordRpc but not by the engine-event metrics.
  void SetWarmingUp(const std::string& model, bool warming_up);

  // One finished RPC. `model` is a hosted model's name; anything else is
  // recorded as model="unknown" (request-controlled strings never become
  // label values).
  void RecordRpc(absl::string_view model, Rpc rpc, absl::StatusCode code, absl::Duration latency);

  // One finished request of an HTTP API (api "openai"): dikkat_http_requests_total
  // {api, endpoint, code} and dikkat_http_request_duration_seconds{api, endpoint}.
  // `api` and `endpoint` must come from a fixed set (never from the request);
  // `http_status` is the response's status.
  void RecordHttp(absl::string_view api, absl::string_view endpoint, int http_status,
                  absl::Duration latency);

  // Prompt tokens of prefill-only work (Encode, Attention); Generate's are
  // counted from the engine's summaries.
  void AddPromptTokens(absl::string_view model, int64_t tokens);

  // Refreshes the gauges read at scrape time (engine stats, resident memory)
  // and returns the whole registry in the Prometheus text format 0.0.4.
  std::string Scrape();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_METRICS_H_
