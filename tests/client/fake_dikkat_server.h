// A small in-process dikkat server for testing the client library and CLI.
// It implements the wire contract with canned behaviour (no model) and
// records what it saw, so tests can check what the client put on the wire.
//
// Behaviour, steered by the request or by `x-fake-*` request metadata:
//   Encode       embedding [0.5, -1, 2, n] (n = inputs), float32 or the
//                requested output_dtype; text "sleep" sleeps 3 s (deadlines)
//   Tokenize     text "status:N" fails with gRPC code N (and for
//                RESOURCE_EXHAUSTED a `retry-after-ms: 250` trailer);
//                otherwise one id per byte
//   Detokenize   ids as bytes
//   GetModelInfo fails with UNAVAILABLE while `fail_next_model_info` > 0;
//                server_version = the server's name
//   Attention    one map per (layer, head) requested, [n, n], rows uniform
//                over the causal prefix
//   Generate     max_new_tokens chunks (default 5), token i = id i, text
//                "t<i> ", finish LENGTH with stats; `x-fake-delay-ms`
//                sleeps between chunks; `x-fake-no-finish` ends without a
//                finish reason. Watches for cancellation after every chunk.
#ifndef DIKKAT_TESTS_CLIENT_FAKE_DIKKAT_SERVER_H_
#define DIKKAT_TESTS_CLIENT_FAKE_DIKKAT_SERVER_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/sync.h"
#include "client/tensor.h"
#include "dikkat/v1/dikkat.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"

namespace dikkat::testing {

namespace v1 = ::dikkat::v1;

class FakeDikkatService final : public v1::Dikkat::Service {
 public:
  explicit FakeDikkatService(std::string name) : name_(std::move(name)) {}

  // What the last call carried.
  struct Seen {
    std::string method;
    std::string model;
    std::string authorization;
    std::multimap<std::string, std::string> metadata;
    double deadline_seconds = 0;  // remaining when the call arrived
    v1::GenerateRequest generate;  // the last Generate's request
  };
  Seen last() {
    dikkat::MutexLock lock(&mu_);
    return last_;
  }

  std::atomic<int> calls{0};
  std::atomic<int> model_info_calls{0};
  std::atomic<int> fail_next_model_info{0};
  std::atomic<int> generate_chunks_written{0};
  dikkat::Notification generate_cancel_observed;

  grpc::Status Encode(grpc::ServerContext* context, const v1::EncodeRequest* request,
                      v1::EncodeResponse* response) override {
    Record(context, "Encode", request->model());
    if (request->inputs_size() > 0 && request->inputs(0).text() == "sleep") {
      for (int i = 0; i < 300 && !context->IsCancelled(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return grpc::Status(grpc::StatusCode::INTERNAL, "slept through the deadline");
    }
    response->set_model(request->model().empty() ? "default-model" : request->model());
    const v1::DType dtype =
        request->output_dtype() == v1::DTYPE_UNSPECIFIED ? v1::DTYPE_FLOAT32
                                                         : request->output_dtype();
    for (int i = 0; i < request->inputs_size(); ++i) {
      const float values[] = {0.5f, -1.0f, 2.0f, static_cast<float>(request->inputs_size())};
      auto tensor = client::EncodeTensor(values, {4}, dtype);
      if (!tensor.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "encode tensor");
      v1::EncodeResult* result = response->add_results();
      *result->mutable_embedding() = *tensor;
      result->add_token_ids(i);
    }
    response->set_prompt_tokens(request->inputs_size());
    return grpc::Status::OK;
  }

  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override {
    Record(context, "Tokenize", request->model());
    int code = 0;
    if (absl::SimpleAtoi(absl::StripPrefix(request->text(), "status:"), &code) &&
        request->text().rfind("status:", 0) == 0) {
      if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        context->AddTrailingMetadata("retry-after-ms", "250");
      }
      return grpc::Status(static_cast<grpc::StatusCode>(code), absl::StrCat("fake code ", code));
    }
    for (unsigned char c : request->text()) {
      response->add_ids(c);
      response->add_tokens(std::string(1, static_cast<char>(c)));
    }
    return grpc::Status::OK;
  }

  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override {
    Record(context, "Detokenize", request->model());
    std::string text;
    for (int id : request->ids()) text += static_cast<char>(id);
    response->set_text(text);
    return grpc::Status::OK;
  }

  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::GetModelInfoResponse* response) override {
    Record(context, "GetModelInfo", request->model());
    ++model_info_calls;
    if (fail_next_model_info.load() > 0) {
      --fail_next_model_info;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake is starting");
    }
    response->set_server_version(name_);
    v1::ModelInfo* info = response->add_models();
    info->set_name("tiny");
    info->set_is_default(true);
    info->set_architecture("decoder-only");
    info->set_vocab_size(256);
    info->set_d_model(4);
    info->set_n_layers(2);
    info->set_n_heads(2);
    info->add_capabilities("generate");
    return grpc::Status::OK;
  }

  grpc::Status Attention(grpc::ServerContext* context, const v1::AttentionRequest* request,
                         v1::AttentionResponse* response) override {
    Record(context, "Attention", request->model());
    std::vector<std::string> tokens;
    for (unsigned char c : request->input().text()) tokens.push_back(std::string(1, c));
    const int n = static_cast<int>(tokens.size());
    for (const std::string& t : tokens) {
      response->add_query_tokens(t);
      response->add_key_tokens(t);
    }
    std::vector<int> layers(request->layers().begin(), request->layers().end());
    std::vector<int> heads(request->heads().begin(), request->heads().end());
    if (layers.empty()) layers = {0, 1};
    if (heads.empty()) heads = {0, 1};
    if (request->aggregation() != v1::HEAD_AGGREGATION_NONE) heads = {-1};
    for (int layer : layers) {
      for (int head : heads) {
        std::vector<float> weights(static_cast<size_t>(n) * n, 0.0f);
        for (int q = 0; q < n; ++q) {
          for (int k = 0; k <= q; ++k) weights[q * n + k] = 1.0f / (q + 1);
        }
        v1::AttentionMap* map = response->add_maps();
        map->set_layer(layer);
        map->set_head(head);
        *map->mutable_weights() = *client::EncodeTensor(weights, {n, n}, v1::DTYPE_FLOAT32);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    Record(context, "Generate", request->model());
    {
      dikkat::MutexLock lock(&mu_);
      last_.generate = *request;
    }
    const int n = request->has_max_new_tokens() ? request->max_new_tokens() : 5;
    const int delay_ms = IntMetadata(context, "x-fake-delay-ms");
    const bool no_finish = IntMetadata(context, "x-fake-no-finish") != 0;
    for (int i = 0; i < n; ++i) {
      if (context->IsCancelled()) {
        generate_cancel_observed.Notify();
        return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
      }
      v1::GenerateResponse chunk;
      v1::GeneratedToken* token = chunk.add_tokens();
      token->set_id(i);
      token->set_logprob(-0.5f * i);
      chunk.set_text(absl::StrCat("t", i, " "));
      if (i == 0 && request->echo_prompt_tokens()) {
        for (unsigned char c : request->input().text()) chunk.add_prompt_token_ids(c);
      }
      if (i == n - 1 && !no_finish) {
        chunk.set_finish_reason(v1::FINISH_REASON_LENGTH);
        chunk.mutable_stats()->set_prompt_tokens(3);
        chunk.mutable_stats()->set_generated_tokens(n);
        chunk.mutable_stats()->set_seed(42);
        chunk.mutable_stats()->set_time_to_first_token_seconds(0.00125);
      }
      if (!writer->Write(chunk)) {
        if (context->IsCancelled()) generate_cancel_observed.Notify();
        return grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
      }
      ++generate_chunks_written;
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
    return grpc::Status::OK;
  }

 private:
  static int IntMetadata(grpc::ServerContext* context, const std::string& key) {
    auto it = context->client_metadata().find(key);
    int value = 0;
    if (it != context->client_metadata().end()) {
      (void)absl::SimpleAtoi(std::string(it->second.data(), it->second.size()), &value);
    }
    return value;
  }

  void Record(grpc::ServerContext* context, const std::string& method, const std::string& model) {
    ++calls;
    Seen seen;
    seen.method = method;
    seen.model = model;
    for (const auto& [key, value] : context->client_metadata()) {
      seen.metadata.emplace(std::string(key.data(), key.size()),
                            std::string(value.data(), value.size()));
    }
    auto auth = seen.metadata.find("authorization");
    if (auth != seen.metadata.end()) seen.authorization = auth->second;
    seen.deadline_seconds =
        std::chrono::duration<double>(context->deadline() - std::chrono::system_clock::now())
            .count();
    dikkat::MutexLock lock(&mu_);
    last_ = std::move(seen);
  }

  const std::string name_;
  dikkat::Mutex mu_;
  Seen last_ ABSL_GUARDED_BY(mu_);
};

// The fake service on 127.0.0.1:<ephemeral port>, with gRPC's own
// grpc.health.v1 implementation beside it.
class FakeDikkatServer {
 public:
  explicit FakeDikkatServer(std::string name = "fake") : service_(std::move(name)) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeDikkatServer() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  FakeDikkatService& service() { return service_; }
  grpc::Server* server() { return server_.get(); }

 private:
  FakeDikkatService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace dikkat::testing

#endif  // DIKKAT_TESTS_CLIENT_FAKE_DIKKAT_SERVER_H_
