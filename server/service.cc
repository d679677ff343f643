#include "server/service.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <chrono>
#include <functional>

#include <grpc/support/time.h>
#include <grpcpp/alarm.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/convert.h"
#include "server/status_util.h"

namespace dikkat::server {
namespace {

absl::Time DeadlineOf(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// A call the transport cancelled because its deadline passed is reported
// (and counted) as DEADLINE_EXCEEDED, which is what the caller sees too.
absl::Status CancelledByDeadline(absl::Status status, absl::Time deadline) {
  // gRPC's deadline timer may fire a little before our clock reaches the
  // deadline; a cancel within 5 ms of it is the deadline's.
  if (status.code() == absl::StatusCode::kCancelled &&
      absl::Now() + absl::Milliseconds(5) >= deadline) {
    return absl::DeadlineExceededError("the call's deadline passed");
  }
  return status;
}

// Runs `f` soon on one of gRPC's own threads: an already-due grpc::Alarm
// calls back on gRPC's executor. The engine thread hands its results over
// with it, so that responses are built and serialized off the engine thread.
// The deadline is the infinite past: gRPC rounds a deadline of "now" up to
// its next millisecond, and such an alarm waits for the timer thread (1.2 ms
// median, ~4 ms at p90, up to 8 ms, on a 2-core Zen 4); one already past
// runs at once (0.10-0.14 ms median).
void RunOnGrpcThread(std::function<void()> f) {
  auto* alarm = new grpc::Alarm();
  alarm->Set(gpr_inf_past(GPR_CLOCK_MONOTONIC), [alarm, f = std::move(f)](bool /*fired*/) {
    f();
    delete alarm;  // gRPC keeps the alarm's state (and this callback) until it returns
  });
}

ModelLimits LimitsOf(const Engine& engine, const ServiceOptions& options) {
  return ModelLimits{&engine.description().config, &engine.tokenizer(), &engine.options(),
                     options.max_response_bytes, options.max_text_bytes};
}

// The estimates in convert.h refuse oversized answers before any work; this
// catches what they leave out (framing, labels) with the same clear message
// instead of gRPC's generic one when the message is sent.
absl::Status CheckFilledResponse(google::protobuf::Message* response, int64_t limit,
                                 absl::string_view what) {
  const int64_t bytes = static_cast<int64_t>(response->ByteSizeLong());
  absl::Status status = CheckResponseBytes(bytes, limit, what, "ask for less in one call");
  if (!status.ok()) response->Clear();
  return status;
}

// Records one RPC's outcome in the metrics when the call finishes.
class CallRecord {
 public:
  CallRecord(Metrics* metrics, std::string model, Rpc rpc)
      : metrics_(metrics), model_(std::move(model)), rpc_(rpc), start_(absl::Now()) {}

  void Finished(const grpc::Status& status) const {
    if (metrics_ == nullptr) return;
    metrics_->RecordRpc(model_, rpc_, static_cast<absl::StatusCode>(status.error_code()),
                        absl::Now() - start_);
  }
  void AddPromptTokens(int64_t n) const {
    if (metrics_ != nullptr) metrics_->AddPromptTokens(model_, n);
  }

 private:
  Metrics* const metrics_;
  const std::string model_;
  const Rpc rpc_;
  const absl::Time start_;
};

// Detokenize's ids, checked before the whole text is built: each in the
// vocabulary, and the text no larger than `limit` bytes (0: no limit). A
// message of ids can decode to far more bytes than it holds (up to the
// longest token's length each), so the text is first decoded in pieces of
// kDetokenizePiece ids, one at a time, their sizes summed: past the limit
// the call is refused after at most that much text. A piece boundary can
// change the text by a few bytes (a UTF-8 character split in two decodes to
// replacement characters, a first token's leading space): the sum is allowed
// kPieceBoundaryBytes per piece beyond the limit, and the exact check is
// CheckFilledResponse's on the built message.
constexpr int64_t kDetokenizePiece = 4096;
constexpr int64_t kPieceBoundaryBytes = 16;

absl::Status CheckDetokenizeBytes(const model::Tokenizer& tokenizer,
                                  absl::Span<const int32_t> ids, int64_t vocab,
                                  bool skip_special_tokens, int64_t limit) {
  const int64_t n = static_cast<int64_t>(ids.size());
  DIKKAT_RETURN_IF_ERROR(ValidateTokenIds(ids, "ids", vocab));
  if (limit <= 0 || n <= kDetokenizePiece) return absl::OkStatus();
  int64_t bytes = 0, pieces = 0;
  for (int64_t i = 0; i < n; i += kDetokenizePiece) {
    bytes += static_cast<int64_t>(
        tokenizer.Decode(ids.subspan(i, kDetokenizePiece), skip_special_tokens).size());
    ++pieces;
    if (bytes > limit + kPieceBoundaryBytes * pieces) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the Detokenize response would be larger than ", limit, " bytes (the first ",
          std::min(n, i + kDetokenizePiece), " of ", n,
          " ids already decode to ~", bytes, " bytes); the server sends at most ", limit,
          " bytes per message (--max_response_bytes): send the ids in several calls"));
    }
  }
  return absl::OkStatus();
}

// ---- Generate -----------------------------------------------------------------

class GenerateReactor;

// The engine's handle on one Generate call. The engine may keep its
// shared_ptr after OnFinish; the reactor it points to stays alive until
// OnFinish has returned (the engine holds one of the reactor's two owner
// shares, see GenerateReactor::Release), so the pointer is valid for every
// call the engine is allowed to make. `done_` guards against calls past that
// point.
class GenerateSink final : public GenerateObserver {
 public:
  explicit GenerateSink(GenerateReactor* reactor) : reactor_(reactor) {}
  void OnChunk(GeneratedChunk chunk) override;
  void OnFinish(GenerateSummary summary) override;

 private:
  GenerateReactor* const reactor_;
  std::atomic<bool> done_{false};
};

class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, const ModelRegistry* registry,
                  Metrics* metrics, const ServiceOptions& options,
                  const v1::GenerateRequest& request, const absl::Status& authenticated,
                  std::atomic<int64_t>* all_pending)
      : context_(context),
        record_(metrics, std::string(registry->ResolveName(request.model())), Rpc::kGenerate),
        max_stream_pending_(options.max_stream_pending_bytes),
        max_all_pending_(options.max_pending_bytes),
        all_pending_(all_pending) {
    if (!authenticated.ok()) {
      FinishNow(ToGrpcStatus(authenticated));
      return;
    }
    Start(registry, options, request);
  }

  // Engine thread: keep the chunk; a gRPC thread puts it in a message (the
  // first message: this thread, see below). A
  // client that does not read makes the kept output grow (one write is in
  // flight at a time): past the stream's or the server's bound the stream is
  // cut instead of holding more.
  void OnEngineChunk(GeneratedChunk chunk) {
    bool hop = false;
    bool cut = false;
    bool write_here = false;
    const int64_t bytes = ChunkBytes(chunk);
    {
      dikkat::MutexLock lock(&mu_);
      if (slow_reader_) return;  // being cut; the engine stops soon
      const int64_t all = all_pending_->fetch_add(bytes, std::memory_order_relaxed) + bytes;
      pending_bytes_ += bytes;
      // Held output (GeneratedChunk::held) comes in one burst at the end and
      // is no sign of a slow reader: the stream's own bound does not apply
      // to it, the server's does (a client that asks for it and never reads
      // must not crowd out the streams that do).
      if ((!chunk.held && max_stream_pending_ > 0 && pending_bytes_ > max_stream_pending_) ||
          (max_all_pending_ > 0 && all > max_all_pending_)) {
        slow_reader_ = true;
        cut = true;
      } else {
        chunks_.push_back(std::move(chunk));
        write_here = !first_message_started_ && !write_in_flight_ && !finish_called_ &&
                     !hop_pending_ && !want_logprobs_ && echo_ids_.empty();
        if (!write_here) hop = NeedsHopLocked();
      }
      if (cut) {
        all_pending_->fetch_sub(bytes, std::memory_order_relaxed);
        pending_bytes_ -= bytes;
      }
    }
    if (cut) {
      CancelEngineRequest();
      context_->TryCancel();  // fails the write in flight: OnWriteDone(false), OnCancel
      return;
    }
    // The call's first message, when it is only tokens and their text (no
    // logprobs, no echoed prompt: a few bytes to build), is started here on
    // the engine thread, before the next step: handed to a gRPC thread it
    // waits for a core while the step's compute threads hold them all
    // (2-core machines). With client and server on a 2-core Zen 5 EPYC,
    // alternating two servers: the time to first token 1.8 ms shorter (3.7
    // -> 1.9 ms over the server's own), decode steps the same. Every other
    // message hops: building it is no work of the engine thread's (large
    // ones would stall the batch), and a later message's delay does not add
    // up (the next one carries what came meanwhile). The engine's share
    // keeps the reactor alive through Pump().
    if (write_here) return Pump();
    if (hop) PumpOnGrpcThread();
  }

  // Engine thread: decide the call's status; a gRPC thread writes what is
  // left and finishes.
  void OnEngineFinish(GenerateSummary summary) {
    bool hop = false;
    {
      dikkat::MutexLock lock(&mu_);
      std::optional<grpc::Status> status;
      bool final_message = true;
      switch (summary.reason) {
        case FinishReason::kError: {
          absl::Status s = summary.status.ok()
                               ? absl::InternalError("the engine failed without a status")
                               : summary.status;
          status = ToGrpcStatus(s, context_);
          final_message = false;
          break;
        }
        case FinishReason::kCancelled:
          if (slow_reader_) {
            status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                  "the client did not read its stream: the output held for it "
                                  "passed the server's bound");
            final_message = false;  // nobody is reading
          } else if (cancel_requested_) {
            status = ToGrpcStatus(CancelledByDeadline(absl::CancelledError("the call was cancelled"),
                                                      deadline_));
            final_message = false;  // nobody is listening
          } else {
            // Not the caller's doing: the engine dropped it while shutting down.
            status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                  "the server is shutting down; generation was stopped");
          }
          break;
        case FinishReason::kDeadline:
          status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                "the call's deadline passed during generation");
          break;
        default:
          status = grpc::Status::OK;
          break;
      }
      if (final_message) summary_ = std::move(summary);
      final_status_ = std::move(status);
      hop = NeedsHopLocked();
    }
    if (hop) PumpOnGrpcThread();
  }

 private:
  void Start(const ModelRegistry* registry, const ServiceOptions& options,
             const v1::GenerateRequest& request) {
    absl::StatusOr<Engine*> engine = registry->Find(request.model());
    if (!engine.ok()) return FinishNow(ToGrpcStatus(engine.status()));
    engine_ = *engine;
    absl::StatusOr<GenerateConversion> converted =
        ToGenerateRequest(request, LimitsOf(*engine_, options));
    if (!converted.ok()) return FinishNow(ToGrpcStatus(converted.status()));
    deadline_ = DeadlineOf(context_);
    converted->request.deadline = deadline_;
    want_logprobs_ = converted->want_logprobs;
    if (request.echo_prompt_tokens()) echo_ids_ = std::move(converted->input_ids);

    absl::StatusOr<RequestId> id =
        engine_->SubmitGenerate(std::move(converted->request), std::make_shared<GenerateSink>(this));
    if (!id.ok()) return FinishNow(ToGrpcStatus(id.status(), context_));
    bool cancel = false;
    {
      dikkat::MutexLock lock(&mu_);
      id_ = *id;
      submitted_ = true;
      cancel = cancel_requested_;
    }
    if (cancel) engine_->Cancel(*id);
  }

  // Only when the engine never got (or already let go of) the request.
  void FinishNow(const grpc::Status& status) {
    {
      dikkat::MutexLock lock(&mu_);
      finish_called_ = true;
    }
    record_.Finished(status);
    // The engine will never call back: give up its share now. (gRPC's share
    // keeps the reactor alive: OnDone cannot run before this constructor's
    // handler has returned.)
    Release();
    Finish(status);
  }

  // Whether the engine thread must hand the next write to a gRPC thread:
  // nothing is being written (a write in flight pumps when it completes) and
  // no hand-over is pending already. Takes the hand-over's owner share.
  bool NeedsHopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (write_in_flight_ || finish_called_ || hop_pending_) return false;
    hop_pending_ = true;
    owners_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  void PumpOnGrpcThread() {
    RunOnGrpcThread([this] {
      {
        dikkat::MutexLock lock(&mu_);
        hop_pending_ = false;
      }
      Pump();
      Release();  // the hand-over's share
    });
  }

  // Starts the next write (everything the engine produced since the last
  // one, merged into one message, so a slow reader does not queue one
  // message per token), or finishes the call once the engine is done and
  // everything is written. At most one write is in flight. gRPC threads, and
  // the engine thread for the call's first message (OnEngineChunk): the
  // message is built here, outside mu_, by the one caller that reserved the
  // write.
  void Pump() {
    std::vector<GeneratedChunk> chunks;
    std::optional<GenerateSummary> summary;
    std::vector<int32_t> echo_ids;
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      dikkat::MutexLock lock(&mu_);
      if (write_in_flight_ || finish_called_) return;
      if (write_failed_) {  // the stream is dead; drop what is left
        chunks_.clear();
        summary_.reset();
      }
      write = !chunks_.empty() || summary_.has_value();
      if (!write && !final_status_.has_value()) return;  // nothing to send yet
      TakeOneSampleLocked(&chunks);
      if (chunks_.empty()) summary.swap(summary_);
      if (write) echo_ids.swap(echo_ids_);
      if (write) first_message_started_ = true;
      if (final_status_.has_value() && chunks_.empty()) {  // this is the last operation
        finish = final_status_;
        finish_called_ = true;
      } else {
        write_in_flight_ = true;
      }
    }
    if (write) {
      response_.Clear();
      response_.mutable_prompt_token_ids()->Add(echo_ids.begin(), echo_ids.end());
      for (const GeneratedChunk& chunk : chunks) {
        AppendChunk(chunk, want_logprobs_, engine_->tokenizer(), &response_);
      }
      if (summary.has_value()) FillFinish(*summary, &response_);
    }
    // Once a finish is started the reactor may be deleted at any moment:
    // nothing here touches a member after it.
    if (finish.has_value()) record_.Finished(*finish);
    if (write && finish.has_value()) {
      StartWriteAndFinish(&response_, grpc::WriteOptions(), *finish);
    } else if (write) {
      StartWrite(&response_);
    } else {
      Finish(*finish);
    }
  }

  // Moves into `out` the pending chunks of the first pending chunk's sample
  // (a message holds one sample's tokens; with n = 1 that is all of them),
  // and their bytes from pending to in flight: held until the write
  // completes (OnWriteDone) or the call ends.
  void TakeOneSampleLocked(std::vector<GeneratedChunk>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t bytes = 0;
    if (!chunks_.empty()) {
      const int32_t index = chunks_.front().index;
      std::vector<GeneratedChunk> rest;
      for (GeneratedChunk& chunk : chunks_) {
        if (chunk.index != index) {
          rest.push_back(std::move(chunk));
          continue;
        }
        bytes += ChunkBytes(chunk);
        out->push_back(std::move(chunk));
      }
      chunks_.swap(rest);
    }
    if (chunks_.empty()) bytes = pending_bytes_;  // estimates: settle exactly
    in_flight_bytes_ = bytes;
    pending_bytes_ -= bytes;
  }

  void CancelEngineRequest() {
    RequestId id = 0;
    bool submitted = false;
    {
      dikkat::MutexLock lock(&mu_);
      cancel_requested_ = true;
      id = id_;
      submitted = submitted_;
    }
    if (submitted) engine_->Cancel(id);  // the engine answers with OnFinish(kCancelled)
  }

  void OnWriteDone(bool ok) override {
    {
      dikkat::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok) write_failed_ = true;
      all_pending_->fetch_sub(in_flight_bytes_, std::memory_order_relaxed);
      in_flight_bytes_ = 0;
    }
    if (!ok) CancelEngineRequest();
    Pump();
  }

  // Client cancel, disconnect, or the deadline passing.
  void OnCancel() override { CancelEngineRequest(); }

  void OnDone() override {
    {
      dikkat::MutexLock lock(&mu_);
      // Whatever is still held: a finished call writes nothing more.
      all_pending_->fetch_sub(pending_bytes_ + in_flight_bytes_, std::memory_order_relaxed);
      pending_bytes_ = in_flight_bytes_ = 0;
    }
    Release();
  }

 public:
  // The reactor has two owners: gRPC (until OnDone) and the engine (until
  // OnEngineFinish has returned; never if the request was not submitted),
  // plus one for a pending hand-over to a gRPC thread (PumpOnGrpcThread).
  // The last to let go deletes it. gRPC alone is not enough: a write that
  // completes on a gRPC thread may finish the call while the engine thread is
  // still inside OnEngineFinish (e.g. in mu_.Unlock()), and OnDone would then
  // free the reactor under it (ASan, under tests/soak).
  void Release() {
    if (owners_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  std::atomic<int> owners_{2};
  grpc::CallbackServerContext* const context_;
  const CallRecord record_;
  Engine* engine_ = nullptr;  // not owned; set before submitting
  bool want_logprobs_ = false;
  absl::Time deadline_ = absl::InfiniteFuture();
  const int64_t max_stream_pending_;   // 0 = no limit
  const int64_t max_all_pending_;      // 0 = no limit
  std::atomic<int64_t>* const all_pending_;  // the service's; outlives every reactor

  // The message being written: built by the one Pump() that reserved the
  // write (write_in_flight_ or finish_called_), untouched until OnWriteDone.
  v1::GenerateResponse response_;

  dikkat::Mutex mu_;
  std::vector<int32_t> echo_ids_ ABSL_GUARDED_BY(mu_);  // prompt ids for the first message
  // What the engine handed over and no message holds yet.
  std::vector<GeneratedChunk> chunks_ ABSL_GUARDED_BY(mu_);
  std::optional<GenerateSummary> summary_ ABSL_GUARDED_BY(mu_);  // for the last message
  bool hop_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool first_message_started_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);  // set once the engine is done
  bool submitted_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool slow_reader_ ABSL_GUARDED_BY(mu_) = false;  // cut for not reading
  // Output bytes held (estimates, ChunkBytes): in chunks_, and in the message
  // being written. Counted in *all_pending_ too.
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  RequestId id_ ABSL_GUARDED_BY(mu_) = 0;
};

void GenerateSink::OnChunk(GeneratedChunk chunk) {
  if (done_.load(std::memory_order_acquire)) return;
  reactor_->OnEngineChunk(std::move(chunk));
}

void GenerateSink::OnFinish(GenerateSummary summary) {
  if (done_.exchange(true, std::memory_order_acq_rel)) return;
  reactor_->OnEngineFinish(std::move(summary));
  reactor_->Release();  // the engine's share: its last touch of the reactor
}

// ---- Encode / Attention ----------------------------------------------------------

// A unary call answered by the engine's callback. Finish is called only from
// that callback (or before submitting), so the reactor outlives every engine
// call; OnCancel cancels the engine request.
class EngineUnaryReactor : public grpc::ServerUnaryReactor {
 protected:
  EngineUnaryReactor(grpc::CallbackServerContext* context, CallRecord record)
      : context_(context), record_(std::move(record)), deadline_(DeadlineOf(context)) {}

  void Complete(const absl::Status& status) {
    grpc::Status s = ToGrpcStatus(CancelledByDeadline(status, deadline_), context_);
    record_.Finished(s);
    Finish(s);
  }

  // Checks the caller, finds the model, then `submit` converts the request
  // and hands it to the engine; any error on the way completes the call.
  template <typename Submit>
  void Start(const absl::Status& authenticated, const ModelRegistry* registry,
             const std::string& model, Submit submit) {
    if (!authenticated.ok()) return Complete(authenticated);
    absl::StatusOr<Engine*> engine = registry->Find(model);
    if (!engine.ok()) return Complete(engine.status());
    absl::StatusOr<RequestId> id = submit(*engine);
    if (!id.ok()) return Complete(id.status());
    Submitted(*engine, *id);
  }

  void Submitted(Engine* engine, RequestId id) {
    bool cancel = false;
    {
      dikkat::MutexLock lock(&mu_);
      engine_ = engine;
      id_ = id;
      submitted_ = true;
      cancel = cancel_requested_;
    }
    if (cancel) engine->Cancel(id);
  }

  grpc::CallbackServerContext* const context_;
  const CallRecord record_;
  const absl::Time deadline_;

 private:
  void OnCancel() override {
    Engine* engine = nullptr;
    RequestId id = 0;
    {
      dikkat::MutexLock lock(&mu_);
      cancel_requested_ = true;
      if (!submitted_) return;
      engine = engine_;
      id = id_;
    }
    engine->Cancel(id);
  }

  void OnDone() override { delete this; }

  dikkat::Mutex mu_;
  Engine* engine_ ABSL_GUARDED_BY(mu_) = nullptr;
  RequestId id_ ABSL_GUARDED_BY(mu_) = 0;
  bool submitted_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
};

class EncodeReactor final : public EngineUnaryReactor {
 public:
  EncodeReactor(grpc::CallbackServerContext* context, const ModelRegistry* registry,
                Metrics* metrics, const ServiceOptions& options, const v1::EncodeRequest* request,
                v1::EncodeResponse* response, const absl::Status& authenticated)
      : EngineUnaryReactor(context, CallRecord(metrics,
                                               std::string(registry->ResolveName(request->model())),
                                               Rpc::kEncode)),
        response_(response),
        max_response_bytes_(options.max_response_bytes) {
    Start(authenticated, registry, request->model(),
          [&](Engine* engine) -> absl::StatusOr<RequestId> {
            absl::StatusOr<EncodeRequest> converted =
                ToEncodeRequest(*request, LimitsOf(*engine, options));
            if (!converted.ok()) return converted.status();
            converted->deadline = deadline_;
            engine_request_ = *converted;  // kept to echo the token ids
            dtype_ = request->output_dtype();
            response_->set_model(engine->description().name);
            return engine->SubmitEncode(
                std::move(*converted), [this](absl::StatusOr<EncodeResult> result) {
                  // Engine thread: hand the result over. The reactor lives
                  // until Finish, which only Done calls from here on.
                  auto shared = std::make_shared<absl::StatusOr<EncodeResult>>(std::move(result));
                  RunOnGrpcThread([this, shared] { Done(*shared); });
                });
          });
  }

 private:
  // A gRPC thread: builds the response and finishes the call.
  void Done(const absl::StatusOr<EncodeResult>& result) {
    if (!result.ok()) return Complete(result.status());
    record_.AddPromptTokens(result->prompt_tokens);
    absl::Status filled = FillEncodeResponse(engine_request_, *result, dtype_, response_);
    if (filled.ok()) {
      filled = CheckFilledResponse(response_, max_response_bytes_, "the Encode response");
    }
    Complete(filled);
  }

  v1::EncodeResponse* const response_;
  const int64_t max_response_bytes_;
  EncodeRequest engine_request_;
  v1::DType dtype_ = v1::DTYPE_FLOAT32;
};

class AttentionReactor final : public EngineUnaryReactor {
 public:
  AttentionReactor(grpc::CallbackServerContext* context, const ModelRegistry* registry,
                   Metrics* metrics, const ServiceOptions& options,
                   const v1::AttentionRequest* request, v1::AttentionResponse* response,
                   const absl::Status& authenticated)
      : EngineUnaryReactor(context, CallRecord(metrics,
                                               std::string(registry->ResolveName(request->model())),
                                               Rpc::kAttention)),
        response_(response),
        max_response_bytes_(options.max_response_bytes) {
    Start(authenticated, registry, request->model(),
          [&](Engine* engine) -> absl::StatusOr<RequestId> {
            engine_ = engine;
            absl::StatusOr<AttentionRequest> converted =
                ToAttentionRequest(*request, LimitsOf(*engine, options));
            if (!converted.ok()) return converted.status();
            converted->deadline = deadline_;
            engine_request_ = *converted;  // kept for the axis labels
            dtype_ = request->output_dtype();
            response_->set_model(engine->description().name);
            return engine->SubmitAttention(
                std::move(*converted), [this](absl::StatusOr<AttentionResult> result) {
                  // Engine thread: as for Encode, hand the result over.
                  auto shared =
                      std::make_shared<absl::StatusOr<AttentionResult>>(std::move(result));
                  RunOnGrpcThread([this, shared] { Done(*shared); });
                });
          });
  }

 private:
  // A gRPC thread: builds the response and finishes the call.
  void Done(const absl::StatusOr<AttentionResult>& result) {
    if (!result.ok()) return Complete(result.status());
    record_.AddPromptTokens(
        static_cast<int64_t>(engine_request_.input.size() + engine_request_.target.size()));
    absl::Status filled =
        FillAttentionResponse(engine_request_, *result, dtype_, engine_->tokenizer(), response_);
    if (filled.ok()) {
      filled = CheckFilledResponse(response_, max_response_bytes_, "the Attention response");
    }
    Complete(filled);
  }

  v1::AttentionResponse* const response_;
  const int64_t max_response_bytes_;
  Engine* engine_ = nullptr;
  AttentionRequest engine_request_;
  v1::DType dtype_ = v1::DTYPE_FLOAT32;
};

// Finishes an inline-answered call.
grpc::ServerUnaryReactor* FinishInline(grpc::CallbackServerContext* context,
                                       const CallRecord& record, const absl::Status& status) {
  grpc::Status s = ToGrpcStatus(status, context);
  record.Finished(s);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

// The one authentication check of every DikkatService RPC.
absl::Status Authenticate(const ServiceOptions& options,
                          const grpc::CallbackServerContext* context) {
  if (options.auth == nullptr) return absl::OkStatus();
  return options.auth->Check(context->client_metadata());
}

}  // namespace

DikkatService::DikkatService(const ModelRegistry* registry, Metrics* metrics,
                             std::string server_version, ServiceOptions options)
    : registry_(registry),
      metrics_(metrics),
      server_version_(std::move(server_version)),
      options_(options) {}

grpc::ServerUnaryReactor* DikkatService::Encode(grpc::CallbackServerContext* context,
                                                const v1::EncodeRequest* request,
                                                v1::EncodeResponse* response) {
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  return new EncodeReactor(context, registry_, metrics_, options_, request, response,
                           Authenticate(options_, context));
}

grpc::ServerWriteReactor<v1::GenerateResponse>* DikkatService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  return new GenerateReactor(context, registry_, metrics_, options_, *request,
                             Authenticate(options_, context), &pending_bytes_);
}

grpc::ServerUnaryReactor* DikkatService::Attention(grpc::CallbackServerContext* context,
                                                   const v1::AttentionRequest* request,
                                                   v1::AttentionResponse* response) {
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  return new AttentionReactor(context, registry_, metrics_, options_, request, response,
                              Authenticate(options_, context));
}

grpc::ServerUnaryReactor* DikkatService::GetModelInfo(grpc::CallbackServerContext* context,
                                                      const v1::GetModelInfoRequest* request,
                                                      v1::GetModelInfoResponse* response) {
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  CallRecord record(metrics_, std::string(registry_->ResolveName(request->model())),
                    Rpc::kGetModelInfo);
  if (absl::Status auth = Authenticate(options_, context); !auth.ok()) {
    return FinishInline(context, record, auth);
  }
  response->set_server_version(server_version_);
  if (!request->model().empty()) {
    absl::StatusOr<Engine*> engine = registry_->Find(request->model());
    if (!engine.ok()) return FinishInline(context, record, engine.status());
  }
  const auto& entries = registry_->entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!request->model().empty() && entries[i].name != request->model()) continue;
    const Engine& engine = *entries[i].engine;
    FillModelInfo(engine.description(), engine.stats(), engine.tokenizer(), i == 0,
                  response->add_models());
    // The registry name is what requests use; the description may predate it.
    response->mutable_models(response->models_size() - 1)->set_name(entries[i].name);
  }
  return FinishInline(context, record, absl::OkStatus());
}

grpc::ServerUnaryReactor* DikkatService::Tokenize(grpc::CallbackServerContext* context,
                                                  const v1::TokenizeRequest* request,
                                                  v1::TokenizeResponse* response) {
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  CallRecord record(metrics_, std::string(registry_->ResolveName(request->model())),
                    Rpc::kTokenize);
  if (absl::Status auth = Authenticate(options_, context); !auth.ok()) {
    return FinishInline(context, record, auth);
  }
  absl::StatusOr<Engine*> engine = registry_->Find(request->model());
  if (!engine.ok()) return FinishInline(context, record, engine.status());
  // Bound the work before doing it: the tokenizer runs on this gRPC thread.
  if (absl::Status size = CheckTextBytes(request->text().size(), "text",
                                         LimitsOf(**engine, options_));
      !size.ok()) {
    return FinishInline(context, record, size);
  }
  const model::Tokenizer& tokenizer = (*engine)->tokenizer();
  absl::StatusOr<model::Encoding> encoding =
      request->parse_special_tokens()
          ? model::EncodeParsingSpecialTokens(tokenizer, request->text(),
                                              request->add_special_tokens())
          : tokenizer.Encode(request->text(), request->add_special_tokens());
  if (!encoding.ok()) {
    return FinishInline(context, record,
                        absl::Status(encoding.status().code(),
                                     absl::StrCat("text: ", encoding.status().message())));
  }
  for (int32_t id : encoding->ids) {
    response->add_ids(id);
    response->add_tokens(tokenizer.TokenText(id));
  }
  response->mutable_type_ids()->Add(encoding->type_ids.begin(), encoding->type_ids.end());
  return FinishInline(context, record,
                      CheckFilledResponse(response, options_.max_response_bytes,
                                          "the Tokenize response"));
}

grpc::ServerUnaryReactor* DikkatService::Detokenize(grpc::CallbackServerContext* context,
                                                    const v1::DetokenizeRequest* request,
                                                    v1::DetokenizeResponse* response) {
  calls_started_.fetch_add(1, std::memory_order_relaxed);
  CallRecord record(metrics_, std::string(registry_->ResolveName(request->model())),
                    Rpc::kDetokenize);
  if (absl::Status auth = Authenticate(options_, context); !auth.ok()) {
    return FinishInline(context, record, auth);
  }
  absl::StatusOr<Engine*> engine = registry_->Find(request->model());
  if (!engine.ok()) return FinishInline(context, record, engine.status());
  const model::Tokenizer& tokenizer = (*engine)->tokenizer();
  // Generated ids may come from embedding rows past the tokenizer's
  // vocabulary (padded tables); those decode to nothing rather than fail.
  const int64_t vocab = std::max<int64_t>(tokenizer.vocab_size(),
                                          (*engine)->description().config.vocab_size);
  // The request's ids where they are: no copy.
  const absl::Span<const int32_t> ids(request->ids().data(), request->ids().size());
  absl::Status bounded = CheckDetokenizeBytes(tokenizer, ids, vocab,
                                              request->skip_special_tokens(),
                                              options_.max_response_bytes);
  if (!bounded.ok()) return FinishInline(context, record, bounded);
  response->set_text(tokenizer.Decode(ids, request->skip_special_tokens()));
  return FinishInline(context, record,
                      CheckFilledResponse(response, options_.max_response_bytes,
                                          "the Detokenize response"));
}

}  // namespace dikkat::server
