// DikkatService: the gRPC callback service (dikkat.v1.Dikkat).
//
// Reactions only validate, convert (server/convert.h) and hand work to the
// model's Engine; they never run LibTorch and never block. Generate streams
// through a GenerateReactor (one write in flight, queued chunks merged while
// a write is pending); Encode and Attention finish when the engine's callback
// fires; GetModelInfo, Tokenize and Detokenize answer inline.
//
// Cancellation: a call that is cancelled (client cancel, disconnect or its
// deadline passing) cancels its engine request, which frees the KV cache at
// once. A call is only finished after the engine is done with it, so engine
// threads never touch a finished call.
//
// Does not own the registry or the metrics; both must outlive the gRPC server
// this service is registered with. Thread-safe.
#ifndef DIKKAT_SERVER_SERVICE_H_
#define DIKKAT_SERVER_SERVICE_H_

#include <string>

#include <grpcpp/grpcpp.h>

#include "dikkat/v1/dikkat.grpc.pb.h"
#include "server/metrics.h"
#include "server/model_registry.h"

namespace dikkat::server {

class DikkatService final : public v1::Dikkat::CallbackService {
 public:
  // `metrics` may be null (no metrics recorded).
  DikkatService(const ModelRegistry* registry, Metrics* metrics, std::string server_version);

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
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_SERVICE_H_
