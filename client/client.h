// C++ client for the dikkat gRPC service (proto/dikkat/v1/dikkat.proto).
//
// A `Client` owns one gRPC channel (one or several servers behind it) and
// offers three styles of call:
//   * blocking:  Encode(), Generate(), ... return absl::StatusOr<...>;
//   * streaming: GenerateStream() calls back once per streamed chunk;
//   * async:     GenerateAsync(), EncodeAsync(), ... return at once and finish
//                on gRPC's threads (callback API), or hand back a std::future.
// Every call has a deadline (ClientOptions::default_timeout unless the call
// overrides it) and may be cancelled from any thread with a CancelHandle.
// gRPC statuses become absl::Status with the same code and message.
//
// Requests and responses are the proto messages themselves: the wire contract
// is documented there, and wrapping every field again would only let the two
// drift apart. An empty `model` in a request is filled with
// ClientOptions::default_model.
#ifndef DIKKAT_CLIENT_CLIENT_H_
#define DIKKAT_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sync.h"
#include "absl/time/time.h"
#include "dikkat/v1/dikkat.grpc.pb.h"
#include "dikkat/v1/dikkat.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace dikkat::client {

namespace v1 = ::dikkat::v1;
using HealthStatus = ::grpc::health::v1::HealthCheckResponse::ServingStatus;

// Transport security. With `enabled` false the channel is plaintext (and a
// bearer token travels in the clear).
struct TlsOptions {
  bool enabled = false;
  // PEM roots that the server certificate must chain to; empty = gRPC's
  // default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH or the system's).
  std::string root_certs_pem;
  // Client certificate chain and private key for mutual TLS; both or neither.
  std::string client_cert_pem;
  std::string client_key_pem;
  // Verify the server certificate against this name instead of the target's
  // host. Needed when the targets are IP addresses, which is always the case
  // with several targets (see ClientOptions::targets).
  std::string server_name_override;
};

// Retries of calls that fail with UNAVAILABLE, done by gRPC itself from the
// channel's service config (gRFC A6). gRPC only retries an attempt while
// nothing of the response has arrived: a Generate stream that already
// received a chunk is never replayed. All attempts share the call's deadline.
// gRPC keeps at most 256 KiB of a call's request for replaying it (its
// GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE): a larger request (a long Encode or
// Attention input) is sent once, not retried. The backoffs must be finite,
// initial at least 1 ns (Create() says INVALID_ARGUMENT otherwise).
struct RetryOptions {
  // Attempts in total, the first included; 1 turns retries off. gRPC caps
  // the value at 5.
  int max_attempts = 4;
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  double backoff_multiplier = 2.0;
};

struct ClientOptions {
  // One target: any gRPC target string ("host:port", "dns:///host:port",
  // "ipv4:...", "unix:..."). Several "host:port" targets: resolved once, at
  // Create(), into a static address list that the channel balances over
  // (round_robin). Hosts may be names or IP literals; all must resolve to the
  // same address family. A host that does not resolve fails Create()
  // (INVALID_ARGUMENT; UNAVAILABLE when the name server did not answer), and
  // a server that later moves to another address is not followed: for a
  // changing set of replicas give one "dns:///name:port" target that resolves
  // to all of them (a Kubernetes headless Service) and round_robin, which
  // gRPC resolves again as connections fail.
  std::vector<std::string> targets = {"127.0.0.1:50051"};
  // gRPC load-balancing policy; empty = round_robin with several targets,
  // pick_first with one ("dns:///" names that resolve to several addresses
  // are balanced only when this says round_robin).
  std::string load_balancing;
  // Used for requests whose `model` is empty; empty = the server's default.
  std::string default_model;
  // Deadline of every call that does not set CallOptions::timeout.
  // absl::InfiniteDuration() = no deadline.
  absl::Duration default_timeout = absl::Seconds(30);
  RetryOptions retry;
  TlsOptions tls;
  // Sent as `authorization: Bearer <token>` on every call when not empty.
  std::string bearer_token;
  // Largest message sent or received, in bytes (hidden states and attention
  // maps get large).
  int max_message_bytes = 64 << 20;
  // Queue calls while the channel is connecting or in transient failure
  // instead of failing them with UNAVAILABLE at once (still bounded by the
  // deadline).
  bool wait_for_ready = false;
};

// Cancels calls from any thread. A handle may serve several calls at once;
// once cancelled it stays cancelled, and calls started with it later fail
// with CANCELLED right away. Thread-safe.
class CancelHandle {
 public:
  CancelHandle() = default;
  CancelHandle(const CancelHandle&) = delete;
  CancelHandle& operator=(const CancelHandle&) = delete;

  void Cancel();
  bool cancelled() const;

  // Used by the client around a call: the context must stay alive until
  // Detach() returns.
  void Attach(grpc::ClientContext* context);
  void Detach(grpc::ClientContext* context);

 private:
  mutable dikkat::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

// Per-call settings.
struct CallOptions {
  // Overrides ClientOptions::default_timeout for this call.
  std::optional<absl::Duration> timeout;
  // Extra request metadata (keys lowercase, as gRPC requires).
  std::vector<std::pair<std::string, std::string>> metadata;
  // Cancels this call when Cancel() is called on it (any thread).
  std::shared_ptr<CancelHandle> cancel;
};

// Called once per streamed Generate chunk, in order. Return false to cancel
// the call (it then ends with CANCELLED).
using GenerateChunkCallback = std::function<bool(const v1::GenerateResponse&)>;
using DoneCallback = std::function<void(absl::Status)>;
template <typename Response>
using ResponseCallback = std::function<void(absl::StatusOr<Response>)>;

// One sample of a Generate call (request.n > 1 returns several).
struct GenerateSample {
  std::string text;                       // its chunks' text, concatenated
  std::vector<v1::GeneratedToken> tokens; // with log-probabilities when asked
  std::vector<int32_t> token_ids;         // tokens[i].id()
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  double cumulative_logprob = 0.0;        // sent when n > 1, best_of > 1 or beam search
  double beam_score = 0.0;                // beam search: what hypotheses are ranked by
};

// Samples a collected call keeps (the server sends at most 16).
inline constexpr int kMaxSamplesCollected = 64;

// A whole Generate stream, collected.
struct GenerateResult {
  // Sample 0 (the only one when n = 1):
  std::string text;                       // every chunk's text, concatenated
  std::vector<v1::GeneratedToken> tokens; // with log-probabilities when asked
  std::vector<int32_t> token_ids;         // tokens[i].id()
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  // Every sample, by index (best first with best_of > n).
  std::vector<GenerateSample> samples;
  std::vector<int32_t> prompt_token_ids;  // when echo_prompt_tokens was set
  // When prompt_logprobs was set: prompt tokens after the first, scored.
  std::vector<v1::GeneratedToken> prompt_logprobs;
  v1::GenerateStats stats;                // the server's, from the last chunk
  int chunks = 0;
  // Measured here, from the call's start: to the first chunk carrying a token
  // (InfiniteDuration when none did), and to the end of the stream.
  absl::Duration time_to_first_token = absl::InfiniteDuration();
  absl::Duration total_time = absl::ZeroDuration();
};

// Handle of an asynchronous Generate call. Copies share the call; the call
// runs to its end even when every copy is gone. Thread-safe.
class GenerateCall {
 public:
  class Impl;
  GenerateCall() = default;
  explicit GenerateCall(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  // Cancels the call; its status becomes CANCELLED unless it already ended.
  // The callbacks may still be running, and on_done always runs: before
  // freeing what they use, Cancel() and then Wait() (a WaitFor() that timed
  // out has not stopped them either).
  void Cancel();
  // Blocks until the call has ended (after its done callback returned) and
  // returns its status. Must not be called from the call's own callbacks.
  absl::Status Wait();
  // Like Wait() but gives up after `timeout`; nullopt when still running.
  std::optional<absl::Status> WaitFor(absl::Duration timeout);
  bool done() const;

 private:
  std::shared_ptr<Impl> impl_;
};

// Client of one dikkat deployment. Owns the channel and stubs. Thread-safe:
// any number of threads may call any method at once. Async calls keep the
// channel alive, so the Client may be destroyed while they run.
class Client {
 public:
  // Validates `options` and creates the channel (connection is lazy, so this
  // succeeds while the servers are down). INVALID_ARGUMENT names the bad
  // option.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  const ClientOptions& options() const { return options_; }
  // The target string the channel was created with (after resolution of
  // several targets into an "ipv4:"/"ipv6:" address list).
  const std::string& channel_target() const { return channel_target_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // ---- blocking ----
  absl::StatusOr<v1::EncodeResponse> Encode(const v1::EncodeRequest& request,
                                            const CallOptions& call = {});
  absl::StatusOr<v1::AttentionResponse> Attention(const v1::AttentionRequest& request,
                                                  const CallOptions& call = {});
  absl::StatusOr<v1::GetModelInfoResponse> GetModelInfo(
      const v1::GetModelInfoRequest& request = {}, const CallOptions& call = {});
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                                const CallOptions& call = {});
  absl::StatusOr<v1::DetokenizeResponse> Detokenize(const v1::DetokenizeRequest& request,
                                                    const CallOptions& call = {});
  // grpc.health.v1.Health/Check for `service` ("" = the whole server).
  absl::StatusOr<HealthStatus> HealthCheck(std::string_view service = "",
                                           const CallOptions& call = {});
  // Runs a Generate stream to its end and returns everything it produced.
  // A stream that ends without a finish reason is INTERNAL: the server broke
  // the contract.
  absl::StatusOr<GenerateResult> Generate(const v1::GenerateRequest& request,
                                          const CallOptions& call = {});
  // Streams Generate, calling `on_chunk` on this thread for each chunk as it
  // arrives. Returns the call's status; CANCELLED when `on_chunk` returned
  // false or the call's CancelHandle fired.
  absl::Status GenerateStream(const v1::GenerateRequest& request,
                              const GenerateChunkCallback& on_chunk,
                              const CallOptions& call = {});

  // ---- async (gRPC callback API) ----
  // Callbacks run on gRPC's threads: they must not block, and must not wait
  // for another call of this client to finish.
  //
  // `on_chunk` is called for each chunk in order (never concurrently), then
  // `on_done` once with the final status. Either may be empty.
  GenerateCall GenerateAsync(const v1::GenerateRequest& request, GenerateChunkCallback on_chunk,
                             DoneCallback on_done, const CallOptions& call = {});
  void EncodeAsync(const v1::EncodeRequest& request,
                   ResponseCallback<v1::EncodeResponse> on_done, const CallOptions& call = {});
  void AttentionAsync(const v1::AttentionRequest& request,
                      ResponseCallback<v1::AttentionResponse> on_done,
                      const CallOptions& call = {});
  void TokenizeAsync(const v1::TokenizeRequest& request,
                     ResponseCallback<v1::TokenizeResponse> on_done, const CallOptions& call = {});
  void DetokenizeAsync(const v1::DetokenizeRequest& request,
                       ResponseCallback<v1::DetokenizeResponse> on_done,
                       const CallOptions& call = {});
  void GetModelInfoAsync(const v1::GetModelInfoRequest& request,
                         ResponseCallback<v1::GetModelInfoResponse> on_done,
                         const CallOptions& call = {});
  // The same, delivered through a future.
  std::future<absl::StatusOr<v1::EncodeResponse>> EncodeFuture(const v1::EncodeRequest& request,
                                                               const CallOptions& call = {});
  std::future<absl::StatusOr<v1::AttentionResponse>> AttentionFuture(
      const v1::AttentionRequest& request, const CallOptions& call = {});

 private:
  Client(ClientOptions options, std::string channel_target,
         std::shared_ptr<grpc::Channel> channel);

  // Deadline, bearer token, metadata, wait-for-ready.
  void PrepareContext(grpc::ClientContext* context, const CallOptions& call) const;
  template <typename Request>
  const Request& WithDefaultModel(const Request& request, Request* storage) const;
  // Copies the request into a heap call state and lets `start` issue it on
  // the callback API; the completion callback frees the state.
  template <typename Request, typename Response, typename Start>
  void StartUnaryAsync(const Request& request, ResponseCallback<Response> on_done,
                       const CallOptions& call, Start start);

  ClientOptions options_;
  std::string channel_target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<v1::Dikkat::Stub> stub_;
  std::shared_ptr<::grpc::health::v1::Health::Stub> health_stub_;
};

// ---- helpers ----

// grpc::Status -> absl::Status with the same code and message. With a
// context, a `retry-after-ms` trailer (sent with RESOURCE_EXHAUSTED) is kept
// as a payload; read it with RetryAfter().
absl::Status FromGrpcStatus(const grpc::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext& context);
// The server's retry hint carried by `status`, if any.
std::optional<absl::Duration> RetryAfter(const absl::Status& status);

// Builds the channel's service config (load balancing and retry policy) as
// JSON; exposed so tests and tools can show what the channel runs with.
std::string BuildServiceConfigJson(const ClientOptions& options);

// Input builders.
v1::Input TextInput(std::string text);
v1::Input TokenInput(const std::vector<int32_t>& ids);

// Names for printing: "EOS", "LENGTH", ...; "SERVING", ...
std::string FinishReasonName(v1::FinishReason reason);
std::string HealthStatusName(HealthStatus status);

}  // namespace dikkat::client

#endif  // DIKKAT_CLIENT_CLIENT_H_
