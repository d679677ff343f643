// FakeEngine: a TEST DOUBLE of server::Engine for the service and metrics
// tests. It runs no model: Generate plays a scripted token stream on its own
// thread (like the real engine thread, it calls the observer from there),
// Encode/Attention answer with scripted tensors. It records what it was
// asked (requests, cancellations) so tests can check the service's side of
// the contract: submit, cancel on client cancel/deadline, error mapping.
// Like the real engine (server/engine_submit.cc), Submit* run the request
// check (server/request_checks.h) first: the service leaves it to the engine.
#ifndef DIKKAT_TESTS_SERVER_FAKE_ENGINE_H_
#define DIKKAT_TESTS_SERVER_FAKE_ENGINE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/sync.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/tokenizer.h"
#include "server/engine.h"
#include "server/request_checks.h"

namespace dikkat::server::testing {

// True on the threads a FakeEngine calls back from (its "engine threads").
inline thread_local bool tls_on_fake_engine_thread = false;

// The byte tokenizer, counting the token-text look-ups made on a FakeEngine
// thread. The service labels tokens with their text while it builds
// responses, which must happen on gRPC threads, not on the engine's.
class ThreadNotingTokenizer final : public model::Tokenizer {
 public:
  ThreadNotingTokenizer() : inner_(model::MakeByteTokenizer()) {}
  std::string kind() const override { return inner_->kind(); }
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  const model::SpecialTokens& special_tokens() const override { return inner_->special_tokens(); }
  absl::StatusOr<model::Encoding> Encode(std::string_view text,
                                         bool add_special_tokens) const override {
    ++encode_calls_;
    return inner_->Encode(text, add_special_tokens);
  }
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override {
    return inner_->Decode(ids, skip_special_tokens);
  }
  std::string TokenText(int32_t id) const override {
    ++token_text_calls_;
    if (tls_on_fake_engine_thread) ++token_text_calls_on_engine_thread_;
    return inner_->TokenText(id);
  }
  bool IsSpecial(int32_t id) const override { return inner_->IsSpecial(id); }
  AddedTokens SpecialTokensAround() const override { return inner_->SpecialTokensAround(); }

  int64_t token_text_calls() const { return token_text_calls_.load(); }
  int64_t encode_calls() const { return encode_calls_.load(); }
  int64_t token_text_calls_on_engine_thread() const {
    return token_text_calls_on_engine_thread_.load();
  }

 private:
  std::unique_ptr<model::Tokenizer> inner_;
  mutable std::atomic<int64_t> token_text_calls_{0};
  mutable std::atomic<int64_t> encode_calls_{0};
  mutable std::atomic<int64_t> token_text_calls_on_engine_thread_{0};
};

inline model::ModelConfig FakeConfig(model::Architecture arch, int64_t vocab_size) {
  model::ModelConfig c;
  c.architecture = arch;
  c.name = "fake";
  c.vocab_size = vocab_size;
  c.d_model = 8;
  c.n_heads = 2;
  c.ffn_dim = 16;
  if (arch == model::Architecture::kEncoderDecoder) {
    c.n_encoder_layers = 2;
    c.n_decoder_layers = 3;
    c.decoder_start_token_id = 0;
  } else {
    c.n_layers = 2;
  }
  c.max_positions = 32;
  return c;
}

class FakeEngine final : public Engine {
 public:
  struct GenerateScript {
    std::vector<GeneratedChunk> chunks;
    absl::Duration interval = absl::Milliseconds(1);  // before each chunk
    FinishReason reason = FinishReason::kEos;
    absl::Status error;  // with kError
  };

  FakeEngine(std::string name, model::Architecture arch)
      : tokenizer_(std::make_unique<ThreadNotingTokenizer>()) {
    description_.name = std::move(name);
    description_.path = "/fake/" + description_.name;
    description_.config = FakeConfig(arch, tokenizer_->vocab_size());
    description_.config.name = description_.name;
    description_.dtype = "float32";
    description_.kv_cache_dtype = "float32";
    description_.device = "cpu";
    description_.tokenizer_kind = tokenizer_->kind();
    description_.weights_bytes = 1234;
    description_.load_time = absl::Milliseconds(250);
    options_.max_new_tokens_cap = 100;
    options_.default_max_new_tokens = 7;
    options_.max_batch_size = 4;
  }

  ~FakeEngine() override { Shutdown(absl::ZeroDuration()); }

  // ---- scripting ----
  void set_script(GenerateScript script) {
    dikkat::MutexLock lock(&mu_);
    script_ = std::move(script);
  }
  void set_submit_error(absl::Status status) {
    dikkat::MutexLock lock(&mu_);
    submit_error_ = std::move(status);
  }
  // Makes Generate ignore GenerateRequest::deadline, so that only a Cancel
  // from the service can stop it.
  void set_ignore_deadlines(bool ignore) {
    dikkat::MutexLock lock(&mu_);
    ignore_deadlines_ = ignore;
  }
  void set_stats(EngineStats stats) {
    dikkat::MutexLock lock(&mu_);
    stats_ = stats;
  }

  // ---- observations ----
  int submits() const {
    dikkat::MutexLock lock(&mu_);
    return submits_;
  }
  std::optional<GenerateRequest> last_generate() const {
    dikkat::MutexLock lock(&mu_);
    return last_generate_;
  }
  std::optional<EncodeRequest> last_encode() const {
    dikkat::MutexLock lock(&mu_);
    return last_encode_;
  }
  // Waits up to `timeout` for Cancel(id).
  bool WaitCancelled(RequestId id, absl::Duration timeout) const {
    dikkat::MutexLock lock(&mu_);
    auto cancelled = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_.count(id) > 0;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cancelled), timeout);
  }
  // Waits up to `timeout` until every generate thread has called OnFinish.
  bool WaitIdle(absl::Duration timeout) const {
    dikkat::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }
  RequestId last_id() const {
    dikkat::MutexLock lock(&mu_);
    return next_id_ - 1;
  }

  // ---- Engine ----
  const ModelDescription& description() const override { return description_; }
  const model::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const ThreadNotingTokenizer& noting_tokenizer() const { return *tokenizer_; }
  const EngineOptions& options() const override { return options_; }
  absl::Status Warmup() override { return absl::OkStatus(); }

  absl::StatusOr<RequestId> SubmitGenerate(GenerateRequest request,
                                           std::shared_ptr<GenerateObserver> observer) override {
    if (absl::Status s = CheckGenerateRequest(request, description_.config, options_); !s.ok()) {
      return s;
    }
    dikkat::MutexLock lock(&mu_);
    ++submits_;
    if (!submit_error_.ok()) return submit_error_;
    const RequestId id = next_id_++;
    last_generate_ = request;
    ++active_;
    const absl::Time deadline = ignore_deadlines_ ? absl::InfiniteFuture() : request.deadline;
    threads_.emplace_back([this, id, deadline, script = script_,
                           observer = std::move(observer)] {
      tls_on_fake_engine_thread = true;
      Play(id, deadline, script, *observer);
    });
    return id;
  }

  absl::StatusOr<RequestId> SubmitEncode(EncodeRequest request, EncodeCallback done) override {
    if (absl::Status s = CheckEncodeRequest(request, description_.config, options_); !s.ok()) {
      return s;
    }
    dikkat::MutexLock lock(&mu_);
    ++submits_;
    if (!submit_error_.ok()) return submit_error_;
    const RequestId id = next_id_++;
    last_encode_ = request;
    threads_.emplace_back([request = std::move(request), done = std::move(done)] {
      tls_on_fake_engine_thread = true;
      EncodeResult result;
      for (const auto& ids : request.inputs) {
        // Embedding i = [first id, length, 0.1, ...]: easy to check per input.
        DenseTensor e{{8}, std::vector<float>(8, 0.1f)};
        e.values[0] = static_cast<float>(ids.front());
        e.values[1] = static_cast<float>(ids.size());
        result.embeddings.push_back(e);
        if (request.return_hidden_states) {
          result.hidden_states.push_back(
              DenseTensor{{static_cast<int64_t>(ids.size()), 8},
                          std::vector<float>(ids.size() * 8, 0.5f)});
        }
        result.prompt_tokens += static_cast<int32_t>(ids.size());
      }
      done(std::move(result));
    });
    return id;
  }

  absl::StatusOr<RequestId> SubmitAttention(AttentionRequest request,
                                            AttentionCallback done) override {
    if (absl::Status s = CheckAttentionRequest(request, description_.config, options_); !s.ok()) {
      return s;
    }
    dikkat::MutexLock lock(&mu_);
    ++submits_;
    if (!submit_error_.ok()) return submit_error_;
    const RequestId id = next_id_++;
    threads_.emplace_back([request = std::move(request), done = std::move(done)] {
      tls_on_fake_engine_thread = true;
      const auto n = static_cast<int64_t>(request.input.size());
      AttentionResult result;
      result.q_len = result.k_len = static_cast<int32_t>(n);
      for (int32_t layer : request.layers) {
        AttentionMap map;
        map.layer = layer;
        map.head = -1;
        map.kind = request.kind;
        map.weights = DenseTensor{{n, n}, std::vector<float>(n * n, 1.0f / n)};
        result.maps.push_back(std::move(map));
      }
      done(std::move(result));
    });
    return id;
  }

  void Cancel(RequestId id) override {
    dikkat::MutexLock lock(&mu_);
    cancelled_.insert(id);
  }

  EngineStats stats() const override {
    dikkat::MutexLock lock(&mu_);
    return stats_;
  }

  void Shutdown(absl::Duration) override {
    std::vector<std::thread> threads;
    {
      dikkat::MutexLock lock(&mu_);
      shutting_down_ = true;
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  void Play(RequestId id, absl::Time deadline, const GenerateScript& script,
            GenerateObserver& observer) {
    GenerateSummary summary;
    summary.seed = 42;
    summary.prompt_tokens = 3;
    summary.reason = script.reason;
    summary.status = script.error;
    for (const GeneratedChunk& chunk : script.chunks) {
      bool cancelled = false;
      {
        dikkat::MutexLock lock(&mu_);
        auto stop = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return cancelled_.count(id) > 0 || shutting_down_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&stop), script.interval);
        cancelled = cancelled_.count(id) > 0 || shutting_down_;
      }
      if (cancelled) {
        summary.reason = FinishReason::kCancelled;
        summary.status = absl::OkStatus();
        break;
      }
      if (absl::Now() >= deadline) {
        summary.reason = FinishReason::kDeadline;
        summary.status = absl::OkStatus();
        break;
      }
      observer.OnChunk(chunk);
      summary.generated_tokens += static_cast<int32_t>(chunk.tokens.size());
    }
    observer.OnFinish(summary);
    dikkat::MutexLock lock(&mu_);
    --active_;
  }

  std::unique_ptr<ThreadNotingTokenizer> tokenizer_;
  ModelDescription description_;
  EngineOptions options_;

  mutable dikkat::Mutex mu_;
  GenerateScript script_ ABSL_GUARDED_BY(mu_);
  absl::Status submit_error_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  int submits_ ABSL_GUARDED_BY(mu_) = 0;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<RequestId> cancelled_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool ignore_deadlines_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<GenerateRequest> last_generate_ ABSL_GUARDED_BY(mu_);
  std::optional<EncodeRequest> last_encode_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

// A chunk of byte-tokenizer tokens spelling `text`.
inline GeneratedChunk TextChunk(const std::string& text) {
  GeneratedChunk chunk;
  for (unsigned char c : text) {
    GeneratedToken t;
    t.token_id = c;
    t.logprob = -0.5f;
    t.top = {{c, -0.5f}, {'?', -2.0f}};
    chunk.tokens.push_back(t);
  }
  chunk.text = text;
  return chunk;
}

}  // namespace dikkat::server::testing

#endif  // DIKKAT_TESTS_SERVER_FAKE_ENGINE_H_
