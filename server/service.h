// DikkatService: the gRPC callback service (dikkat.v1.Dikkat).
//
// Reactions only validate, convert (server/convert.h) and hand work to the
// model's Engine; they never run LibTorch and never block. The engine hands
// its results back as structs (server/engine.h); the protobuf responses are
// built and serialized on gRPC threads, never on the engine thread (an
// already-due grpc::Alarm carries a result over when no write is in flight to
// pick it up). Generate streams through a GenerateReactor (one write in
// flight; chunks that arrive while a write is pending are merged into the
// next message); Encode and Attention finish after the engine's callback has
// handed the result over; GetModelInfo, Tokenize and Detokenize answer inline.
//
// Cancellation: a call that is cancelled (client cancel, disconnect or its
// deadline passing) cancels its engine request, which frees the KV cache at
// once. A call is only finished after the engine is done with it, so engine
// threads never touch a finished call.
//
// Authentication: with ServiceOptions::auth set, every RPC of this service
// first checks the caller's bearer token (UNAUTHENTICATED otherwise); the
// health and reflection services are separate and stay open (see
// server/security.h for why the check lives here).
//
// Does not own the registry, the metrics or the authenticator; all must
// outlive the gRPC server this service is registered with. Thread-safe.
#ifndef DIKKAT_SERVER_SERVICE_H_
#define DIKKAT_SERVER_SERVICE_H_

#include <string>

#include <grpcpp/grpcpp.h>

#include "dikkat/v1/dikkat.grpc.pb.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/security.h"

namespace dikkat::server {

struct ServiceOptions {
  // Checks every call's bearer token; null = no authentication. Not owned.
  const BearerTokenAuthenticator* auth = nullptr;
  // Largest response message; Encode and Attention calls whose answer would
  // be larger fail with INVALID_ARGUMENT before any work. 0 = no limit.
  int64_t max_response_bytes = 0;
  // Largest text per request field, refused before tokenizing; 0 = per
  // model (ModelLimits::max_text_bytes).
  int64_t max_text_bytes = 0;
  // Generate output the server holds for streams whose client is not reading
  // (merged into the next message while one write is in flight): per stream
  // and over all streams. A stream that would pass either is cut: its
  // generation is cancelled and its call ended (the client sees CANCELLED;
  // metrics and logs record RESOURCE_EXHAUSTED). 0 = no limit.
  int64_t max_stream_pending_bytes = 4 << 20;
  int64_t max_pending_bytes = int64_t{256} << 20;
};

class DikkatService final : public v1::Dikkat::CallbackService {
 public:
  // `metrics` may be null (no metrics recorded).
  DikkatService(const ModelRegistry* registry, Metrics* metrics, std::string server_version,
                ServiceOptions options = {});

  grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* context,
                                   const v1::EncodeRequest* request,
                                   v1::EncodeResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Attention(grpc::CallbackServerContext* context,
                                      const v1::AttentionRequest* request,
                                      v1::AttentionResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;

 private:
  const ModelRegistry* registry_;  // not owned
  Metrics* metrics_;               // not owned; may be null
  std::string server_version_;
  ServiceOptions options_;
  // Bytes of Generate output held for all streams (ServiceOptions).
  std::atomic<int64_t> pending_bytes_{0};
  std::atomic<int64_t> calls_started_{0};

 public:
  int64_t pending_bytes() const { return pending_bytes_.load(std::memory_order_relaxed); }
  // Calls that reached a handler so far, refused ones included (main.cc
  // watches it during a drain to see when callers have stopped sending).
  int64_t calls_started() const { return calls_started_.load(std::memory_order_relaxed); }
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_SERVICE_H_
