#include "client/client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_callback.h"

namespace dikkat::client {
namespace {

namespace health = ::grpc::health::v1;

constexpr char kRetryAfterPayload[] = "dikkat/retry-after-ms";
constexpr char kRetryAfterTrailer[] = "retry-after-ms";

// ---- targets ------------------------------------------------------------------

struct ResolvedAddresses {
  bool ipv6 = false;
  std::vector<std::string> addresses;  // "a.b.c.d:port" or "[v6]:port"
};

// Resolves one "host:port" into addresses of one family (IPv4 preferred).
absl::Status ResolveTarget(const std::string& target, std::vector<std::string>* v4,
                           std::vector<std::string>* v6) {
  std::string host, port;
  if (absl::StartsWith(target, "[")) {
    const size_t close = target.find("]:");
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("target '", target, "': expected [ipv6]:port"));
    }
    host = target.substr(1, close - 1);
    port = target.substr(close + 2);
  } else {
    const size_t colon = target.rfind(':');
    if (colon == std::string::npos || target.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target '", target, "': with several targets each must be host:port or [ipv6]:port"));
    }
    host = target.substr(0, colon);
    port = target.substr(colon + 1);
  }
  int port_number = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (ec != std::errc() || end != port.data() + port.size() || port_number <= 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", target, "': port '", port, "' is not in 1..65535"));
  }
  bool temporary = false;
  for (int family : {AF_INET, AF_INET6}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    if (const int error = getaddrinfo(host.c_str(), nullptr, &hints, &result); error != 0) {
      temporary = temporary || error == EAI_AGAIN;
      continue;
    }
    for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      if (family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, text,
                  sizeof(text));
        v4->push_back(absl::StrCat(text, ":", port_number));
      } else {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, text,
                  sizeof(text));
        v6->push_back(absl::StrCat("[", text, "]:", port_number));
      }
    }
    freeaddrinfo(result);
    return absl::OkStatus();
  }
  // A name server that did not answer is not a wrong option: UNAVAILABLE, so
  // that the caller tries Create() again.
  if (temporary) {
    return absl::UnavailableError(absl::StrCat("target '", target, "': resolving host '", host,
                                               "' failed for now (EAI_AGAIN); try again"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("target '", target, "': cannot resolve host '", host, "'"));
}

// Several targets -> one "ipv4:a:p,b:p" (or "ipv6:") target. gRPC 1.51's
// sockaddr resolvers take a comma-separated address list, which gives the
// load balancer one subchannel per server without a custom resolver.
absl::StatusOr<std::string> MultiAddressTarget(const std::vector<std::string>& targets) {
  std::vector<std::string> v4_all, v6_all;
  bool all_v4 = true, all_v6 = true;
  for (const std::string& target : targets) {
    std::vector<std::string> v4, v6;
    if (absl::Status s = ResolveTarget(target, &v4, &v6); !s.ok()) return s;
    all_v4 = all_v4 && !v4.empty();
    all_v6 = all_v6 && !v6.empty();
    v4_all.insert(v4_all.end(), v4.begin(), v4.end());
    v6_all.insert(v6_all.end(), v6.begin(), v6.end());
  }
  auto unique = [](std::vector<std::string> list) {
    std::vector<std::string> out;
    for (std::string& a : list) {
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(std::move(a));
    }
    return out;
  };
  if (all_v4) return absl::StrCat("ipv4:", absl::StrJoin(unique(v4_all), ","));
  if (all_v6) return absl::StrCat("ipv6:", absl::StrJoin(unique(v6_all), ","));
  return absl::InvalidArgumentError(
      absl::StrCat("targets ", absl::StrJoin(targets, ","),
                   " resolve to both IPv4-only and IPv6-only hosts; one channel needs one family"));
}

std::string DurationJson(absl::Duration d) {
  return absl::StrFormat("\"%.9fs\"", absl::ToDoubleSeconds(d));
}

absl::Status ValidateOptions(const ClientOptions& o) {
  if (o.targets.empty()) return absl::InvalidArgumentError("targets is empty; give host:port");
  for (const std::string& t : o.targets) {
    if (t.empty()) return absl::InvalidArgumentError("targets holds an empty string");
  }
  if (!o.load_balancing.empty() && o.load_balancing != "round_robin" &&
      o.load_balancing != "pick_first") {
    return absl::InvalidArgumentError(absl::StrCat("load_balancing '", o.load_balancing,
                                                   "'; allowed: round_robin, pick_first"));
  }
  if (o.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "default_timeout ", absl::FormatDuration(o.default_timeout), " must be > 0"));
  }
  const RetryOptions& r = o.retry;
  if (r.max_attempts < 1 || r.max_attempts > 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry.max_attempts ", r.max_attempts, "; allowed 1..5 (1 = no retries)"));
  }
  // The service config writes them as seconds with 9 decimals (DurationJson);
  // gRPC refuses a zero or infinite duration there and then fails every call
  // of the channel, so they are checked here.
  if (r.max_attempts > 1 &&
      (r.initial_backoff < absl::Nanoseconds(1) || r.max_backoff < r.initial_backoff ||
       r.max_backoff == absl::InfiniteDuration() || !(r.backoff_multiplier > 0) ||
       !std::isfinite(r.backoff_multiplier))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retry backoff: initial ", absl::FormatDuration(r.initial_backoff), ", max ",
        absl::FormatDuration(r.max_backoff), ", multiplier ", r.backoff_multiplier,
        "; need 1ns <= initial <= max < infinity and a finite multiplier > 0"));
  }
  const TlsOptions& tls = o.tls;
  if (tls.client_cert_pem.empty() != tls.client_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "tls.client_cert_pem and tls.client_key_pem go together (mutual TLS); give both or "
        "neither");
  }
  if (!tls.enabled && (!tls.root_certs_pem.empty() || !tls.client_cert_pem.empty() ||
                       !tls.server_name_override.empty())) {
    return absl::InvalidArgumentError("TLS settings given but tls.enabled is false");
  }
  if (o.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes ", o.max_message_bytes, " must be > 0"));
  }
  return absl::OkStatus();
}

// Async calls keep their channel alive (a Client may be destroyed while they
// run), and their state is freed on the gRPC thread that runs their last
// reaction. If that freed the channel's last reference, the channel would be
// destroyed on one of gRPC's own callback threads: grpc::Channel's
// destructor then releases the process's callback completion queue, which
// on Linux shuts the queue down and joins the threads that poll it, the
// calling one among them, and frees it while that thread still uses it (a
// double free in grpc_cq_internal_unref under ASan, 2 runs in 3 of
// server_process_test, whose clients go out of scope right after Wait()).
// So a call's last hold on the channel is a ChannelKeepalive, its first
// member (destroyed last, after the context and the stub, which hold the
// channel too), and it hands the reference to a thread of its own, which
// drops it.
class ChannelReaper {
 public:
  static void Release(std::shared_ptr<grpc::Channel> channel) {
    static ChannelReaper* const reaper = new ChannelReaper;  // never destroyed
    reaper->Push(std::move(channel));
  }

 private:
  ChannelReaper() {
    std::thread([this] { Run(); }).detach();
  }
  void Push(std::shared_ptr<grpc::Channel> channel) {
    dikkat::MutexLock lock(&mu_);
    queue_.push_back(std::move(channel));
  }
  void Run() {
    while (true) {
      std::vector<std::shared_ptr<grpc::Channel>> batch;
      {
        dikkat::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::vector<std::shared_ptr<grpc::Channel>>* q) { return !q->empty(); },
            &queue_));
        batch.swap(queue_);
      }
      batch.clear();  // outside the lock: may destroy channels
    }
  }

  dikkat::Mutex mu_;
  std::vector<std::shared_ptr<grpc::Channel>> queue_ ABSL_GUARDED_BY(mu_);
};

struct ChannelKeepalive {
  explicit ChannelKeepalive(std::shared_ptr<grpc::Channel> c) : channel(std::move(c)) {}
  ~ChannelKeepalive() {
    if (channel != nullptr) ChannelReaper::Release(std::move(channel));
  }
  ChannelKeepalive(const ChannelKeepalive&) = delete;
  ChannelKeepalive& operator=(const ChannelKeepalive&) = delete;
  std::shared_ptr<grpc::Channel> channel;
};

// Keeps a context registered with a CancelHandle for the life of a call.
class ScopedCancelRegistration {
 public:
  ScopedCancelRegistration(std::shared_ptr<CancelHandle> handle, grpc::ClientContext* context)
      : handle_(std::move(handle)), context_(context) {
    if (handle_) handle_->Attach(context_);
  }
  ~ScopedCancelRegistration() {
    if (handle_) handle_->Detach(context_);
  }
  ScopedCancelRegistration(const ScopedCancelRegistration&) = delete;
  ScopedCancelRegistration& operator=(const ScopedCancelRegistration&) = delete;

 private:
  std::shared_ptr<CancelHandle> handle_;
  grpc::ClientContext* context_;
};

absl::Status CallbackCancelledError() {
  return absl::CancelledError("Generate cancelled: the chunk callback returned false");
}

// One async unary call: everything gRPC reads from or writes to while the
// call runs. Deleted by its completion callback.
template <typename Request, typename Response>
struct UnaryCall {
  explicit UnaryCall(std::shared_ptr<grpc::Channel> channel) : keepalive(std::move(channel)) {}
  ChannelKeepalive keepalive;  // first: destroyed last (ChannelReaper)
  grpc::ClientContext context;
  Request request;
  Response response;
  ResponseCallback<Response> on_done;
  std::shared_ptr<CancelHandle> cancel;
  std::shared_ptr<v1::Dikkat::Stub> stub;

  static void Finish(UnaryCall* raw, const grpc::Status& status) {
    std::unique_ptr<UnaryCall> call(raw);
    if (call->cancel) call->cancel->Detach(&call->context);
    if (!call->on_done) return;
    if (status.ok()) {
      call->on_done(std::move(call->response));
    } else {
      call->on_done(FromGrpcStatus(status, call->context));
    }
  }
};

}  // namespace

// ---- CancelHandle ---------------------------------------------------------------

void CancelHandle::Cancel() {
  dikkat::MutexLock lock(&mu_);
  cancelled_ = true;
  // TryCancel is thread-safe; holding mu_ keeps each context alive (Detach
  // waits for the lock before the call's owner destroys it).
  for (grpc::ClientContext* context : contexts_) context->TryCancel();
}

bool CancelHandle::cancelled() const {
  dikkat::MutexLock lock(&mu_);
  return cancelled_;
}

void CancelHandle::Attach(grpc::ClientContext* context) {
  dikkat::MutexLock lock(&mu_);
  contexts_.push_back(context);
  // Before the call starts, TryCancel marks the context; the call is then
  // cancelled as soon as it is created.
  if (cancelled_) context->TryCancel();
}

void CancelHandle::Detach(grpc::ClientContext* context) {
  dikkat::MutexLock lock(&mu_);
  contexts_.erase(std::remove(contexts_.begin(), contexts_.end(), context), contexts_.end());
}

// ---- GenerateCall -----------------------------------------------------------------

// The reactor of one async Generate stream. It keeps itself alive (self_)
// from Start() until OnDone(); handles share it after that.
class GenerateCall::Impl : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Impl(std::shared_ptr<grpc::Channel> channel, std::shared_ptr<v1::Dikkat::Stub> stub,
       v1::GenerateRequest request, GenerateChunkCallback on_chunk, DoneCallback on_done,
       std::shared_ptr<CancelHandle> cancel)
      : keepalive_(std::move(channel)),
        stub_(std::move(stub)),
        request_(std::move(request)),
        on_chunk_(std::move(on_chunk)),
        on_done_(std::move(on_done)),
        cancel_(std::move(cancel)) {}

  grpc::ClientContext* context() { return &context_; }

  void Start(std::shared_ptr<Impl> self) {
    self_ = std::move(self);
    if (cancel_) cancel_->Attach(&context_);
    stub_->async()->Generate(&context_, &request_, this);
    StartRead(&chunk_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // end of stream or failure: OnDone follows
    if (on_chunk_ && !on_chunk_(chunk_)) {
      stopped_by_callback_ = true;
      context_.TryCancel();
      return;
    }
    StartRead(&chunk_);
  }

  void OnDone(const grpc::Status& grpc_status) override {
    std::shared_ptr<Impl> self = std::move(self_);  // released when this returns
    if (cancel_) cancel_->Detach(&context_);
    absl::Status status =
        stopped_by_callback_ ? CallbackCancelledError() : FromGrpcStatus(grpc_status, context_);
    if (on_done_) on_done_(status);
    dikkat::MutexLock lock(&mu_);
    status_ = std::move(status);
    done_ = true;
  }

  void Cancel() {
    {
      dikkat::MutexLock lock(&mu_);
      if (done_) return;
    }
    // The context owns a reference to the call, so this is safe even if the
    // call completes in between.
    context_.TryCancel();
  }

  absl::Status Wait() {
    dikkat::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }

  std::optional<absl::Status> WaitFor(absl::Duration timeout) {
    dikkat::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) return std::nullopt;
    return status_;
  }

  bool done() const {
    dikkat::MutexLock lock(&mu_);
    return done_;
  }

 private:
  ChannelKeepalive keepalive_;  // first: destroyed last (ChannelReaper)
  grpc::ClientContext context_;
  std::shared_ptr<v1::Dikkat::Stub> stub_;
  v1::GenerateRequest request_;
  v1::GenerateResponse chunk_;
  GenerateChunkCallback on_chunk_;
  DoneCallback on_done_;
  std::shared_ptr<CancelHandle> cancel_;
  std::shared_ptr<Impl> self_;
  bool stopped_by_callback_ = false;  // touched by reactions only, which gRPC serializes

  mutable dikkat::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

void GenerateCall::Cancel() {
  if (impl_) impl_->Cancel();
}

absl::Status GenerateCall::Wait() {
  if (!impl_) return absl::FailedPreconditionError("GenerateCall has no call");
  return impl_->Wait();
}

std::optional<absl::Status> GenerateCall::WaitFor(absl::Duration timeout) {
  if (!impl_) return absl::FailedPreconditionError("GenerateCall has no call");
  return impl_->WaitFor(timeout);
}

bool GenerateCall::done() const { return impl_ == nullptr || impl_->done(); }

// ---- Client -------------------------------------------------------------------------

std::string BuildServiceConfigJson(const ClientOptions& options) {
  std::string policy = options.load_balancing;
  if (policy.empty()) policy = options.targets.size() > 1 ? "round_robin" : "pick_first";
  std::string json = absl::StrCat("{\"loadBalancingConfig\":[{\"", policy, "\":{}}]");
  const RetryOptions& r = options.retry;
  if (r.max_attempts > 1) {
    absl::StrAppend(
        &json,
        ",\"methodConfig\":[{\"name\":[{\"service\":\"dikkat.v1.Dikkat\"},"
        "{\"service\":\"grpc.health.v1.Health\"}],\"retryPolicy\":{\"maxAttempts\":",
        r.max_attempts, ",\"initialBackoff\":", DurationJson(r.initial_backoff),
        ",\"maxBackoff\":", DurationJson(r.max_backoff),
        ",\"backoffMultiplier\":", absl::StrFormat("%g", r.backoff_multiplier),
        ",\"retryableStatusCodes\":[\"UNAVAILABLE\"]}}]");
  }
  json += "}";
  return json;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;

  std::string target = options.targets.front();
  grpc::ChannelArguments args;
  if (options.targets.size() > 1) {
    absl::StatusOr<std::string> multi = MultiAddressTarget(options.targets);
    if (!multi.ok()) return multi.status();
    target = *std::move(multi);
    // The URI path (a comma-separated list) would otherwise become :authority.
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, options.targets.front());
  }
  args.SetServiceConfigJSON(BuildServiceConfigJson(options));
  args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, options.retry.max_attempts > 1 ? 1 : 0);
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);

  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls.enabled) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls.root_certs_pem;
    ssl.pem_private_key = options.tls.client_key_pem;
    ssl.pem_cert_chain = options.tls.client_cert_pem;
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls.server_name_override.empty()) {
      args.SetSslTargetNameOverride(options.tls.server_name_override);
    }
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(target, credentials, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to '", target, "'"));
  }
  return std::unique_ptr<Client>(new Client(std::move(options), target, std::move(channel)));
}

Client::Client(ClientOptions options, std::string channel_target,
               std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_target_(std::move(channel_target)),
      channel_(std::move(channel)),
      stub_(v1::Dikkat::NewStub(channel_)),
      health_stub_(health::Health::NewStub(channel_)) {}

Client::~Client() = default;

void Client::PrepareContext(grpc::ClientContext* context, const CallOptions& call) const {
  const absl::Duration timeout = call.timeout.value_or(options_.default_timeout);
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  if (!options_.bearer_token.empty()) {
    // Per-call metadata rather than call credentials: gRPC refuses to send
    // call credentials on a plaintext channel, and a token on loopback or
    // behind a TLS-terminating proxy is a legitimate setup.
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.bearer_token));
  }
  for (const auto& [key, value] : call.metadata) context->AddMetadata(key, value);
  if (options_.wait_for_ready) context->set_wait_for_ready(true);
}

template <typename Request>
const Request& Client::WithDefaultModel(const Request& request, Request* storage) const {
  if (!request.model().empty() || options_.default_model.empty()) return request;
  *storage = request;
  storage->set_model(options_.default_model);
  return *storage;
}

namespace {

// Runs one blocking unary call. `invoke(context, response)` issues it.
template <typename Response, typename Invoke>
absl::StatusOr<Response> RunUnary(grpc::ClientContext* context, const CallOptions& call,
                                  Invoke invoke) {
  ScopedCancelRegistration registration(call.cancel, context);
  Response response;
  grpc::Status status = invoke(context, &response);
  if (!status.ok()) return FromGrpcStatus(status, *context);
  return response;
}

}  // namespace

absl::StatusOr<v1::EncodeResponse> Client::Encode(const v1::EncodeRequest& request,
                                                  const CallOptions& call) {
  v1::EncodeRequest storage;
  const v1::EncodeRequest& req = WithDefaultModel(request, &storage);
  grpc::ClientContext context;
  PrepareContext(&context, call);
  return RunUnary<v1::EncodeResponse>(&context, call, [&](auto* ctx, auto* resp) {
    return stub_->Encode(ctx, req, resp);
  });
}

absl::StatusOr<v1::AttentionResponse> Client::Attention(const v1::AttentionRequest& request,
                                                        const CallOptions& call) {
  v1::AttentionRequest storage;
  const v1::AttentionRequest& req = WithDefaultModel(request, &storage);
  grpc::ClientContext context;
  PrepareContext(&context, call);
  return RunUnary<v1::AttentionResponse>(&context, call, [&](auto* ctx, auto* resp) {
    return stub_->Attention(ctx, req, resp);
  });
}

absl::StatusOr<v1::GetModelInfoResponse> Client::GetModelInfo(
    const v1::GetModelInfoRequest& request, const CallOptions& call) {
  // No default model here: an empty name asks for every hosted model.
  grpc::ClientContext context;
  PrepareContext(&context, call);
  return RunUnary<v1::GetModelInfoResponse>(&context, call, [&](auto* ctx, auto* resp) {
    return stub_->GetModelInfo(ctx, request, resp);
  });
}

absl::StatusOr<v1::TokenizeResponse> Client::Tokenize(const v1::TokenizeRequest& request,
                                                      const CallOptions& call) {
  v1::TokenizeRequest storage;
  const v1::TokenizeRequest& req = WithDefaultModel(request, &storage);
  grpc::ClientContext context;
  PrepareContext(&context, call);
  return RunUnary<v1::TokenizeResponse>(&context, call, [&](auto* ctx, auto* resp) {
    return stub_->Tokenize(ctx, req, resp);
  });
}

absl::StatusOr<v1::DetokenizeResponse> Client::Detokenize(const v1::DetokenizeRequest& request,
                                                          const CallOptions& call) {
  v1::DetokenizeRequest storage;
  const v1::DetokenizeRequest& req = WithDefaultModel(request, &storage);
  grpc::ClientContext context;
  PrepareContext(&context, call);
  return RunUnary<v1::DetokenizeResponse>(&context, call, [&](auto* ctx, auto* resp) {
    return stub_->Detokenize(ctx, req, resp);
  });
}

absl::StatusOr<HealthStatus> Client::HealthCheck(std::string_view service,
                                                 const CallOptions& call) {
  health::HealthCheckRequest request;
  request.set_service(std::string(service));
  grpc::ClientContext context;
  PrepareContext(&context, call);
  absl::StatusOr<health::HealthCheckResponse> response =
      RunUnary<health::HealthCheckResponse>(&context, call, [&](auto* ctx, auto* resp) {
        return health_stub_->Check(ctx, request, resp);
      });
  if (!response.ok()) return response.status();
  return response->status();
}

absl::Status Client::GenerateStream(const v1::GenerateRequest& request,
                                    const GenerateChunkCallback& on_chunk,
                                    const CallOptions& call) {
  v1::GenerateRequest storage;
  const v1::GenerateRequest& req = WithDefaultModel(request, &storage);
  grpc::ClientContext context;
  PrepareContext(&context, call);
  ScopedCancelRegistration registration(call.cancel, &context);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, req);
  v1::GenerateResponse chunk;
  bool stopped = false;
  while (reader->Read(&chunk)) {
    // After a stop, keep reading so Finish() sees the end of the stream.
    if (!stopped && on_chunk && !on_chunk(chunk)) {
      stopped = true;
      context.TryCancel();
    }
  }
  const grpc::Status status = reader->Finish();
  if (stopped) return CallbackCancelledError();
  return FromGrpcStatus(status, context);
}

absl::StatusOr<GenerateResult> Client::Generate(const v1::GenerateRequest& request,
                                                const CallOptions& call) {
  GenerateResult result;
  const absl::Time start = absl::Now();
  absl::Status status = GenerateStream(
      request,
      [&](const v1::GenerateResponse& chunk) {
        ++result.chunks;
        if (chunk.tokens_size() > 0 && result.time_to_first_token == absl::InfiniteDuration()) {
          result.time_to_first_token = absl::Now() - start;
        }
        if (chunk.index() < 0 || chunk.index() >= kMaxSamplesCollected) return true;  // not ours
        if (static_cast<size_t>(chunk.index()) >= result.samples.size()) {
          result.samples.resize(chunk.index() + 1);
        }
        GenerateSample& sample = result.samples[chunk.index()];
        sample.text += chunk.text();
        for (const v1::GeneratedToken& token : chunk.tokens()) {
          sample.tokens.push_back(token);
          sample.token_ids.push_back(token.id());
        }
        if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
          sample.finish_reason = chunk.finish_reason();
        }
        if (chunk.has_cumulative_logprob()) sample.cumulative_logprob = chunk.cumulative_logprob();
        if (chunk.has_beam_score()) sample.beam_score = chunk.beam_score();
        result.prompt_token_ids.insert(result.prompt_token_ids.end(),
                                       chunk.prompt_token_ids().begin(),
                                       chunk.prompt_token_ids().end());
        result.prompt_logprobs.insert(result.prompt_logprobs.end(),
                                      chunk.prompt_logprobs().begin(),
                                      chunk.prompt_logprobs().end());
        if (chunk.has_stats()) result.stats = chunk.stats();
        return true;
      },
      call);
  result.total_time = absl::Now() - start;
  if (!status.ok()) return status;
  if (result.samples.empty()) result.samples.resize(1);
  for (size_t i = 0; i < result.samples.size(); ++i) {
    if (result.samples[i].finish_reason == v1::FINISH_REASON_UNSPECIFIED) {
      return absl::InternalError(absl::StrCat("Generate stream ended OK after ", result.chunks,
                                              " chunks without a finish_reason for sample ", i));
    }
  }
  const GenerateSample& first = result.samples.front();
  result.text = first.text;
  result.tokens = first.tokens;
  result.token_ids = first.token_ids;
  result.finish_reason = first.finish_reason;
  return result;
}

GenerateCall Client::GenerateAsync(const v1::GenerateRequest& request,
                                   GenerateChunkCallback on_chunk, DoneCallback on_done,
                                   const CallOptions& call) {
  v1::GenerateRequest storage;
  const v1::GenerateRequest& req = WithDefaultModel(request, &storage);
  auto impl = std::make_shared<GenerateCall::Impl>(channel_, stub_, req, std::move(on_chunk),
                                                   std::move(on_done), call.cancel);
  PrepareContext(impl->context(), call);
  impl->Start(impl);
  return GenerateCall(std::move(impl));
}

template <typename Request, typename Response, typename Start>
void Client::StartUnaryAsync(const Request& request, ResponseCallback<Response> on_done,
                             const CallOptions& call, Start start) {
  auto* c = new UnaryCall<Request, Response>(channel_);
  c->request = request;
  // GetModelInfo's empty model asks for every hosted model (as the blocking
  // call sends it); the other requests name the default model.
  if constexpr (!std::is_same_v<Request, v1::GetModelInfoRequest>) {
    if (c->request.model().empty()) c->request.set_model(options_.default_model);
  }
  c->on_done = std::move(on_done);
  c->cancel = call.cancel;
  c->stub = stub_;
  PrepareContext(&c->context, call);
  if (c->cancel) c->cancel->Attach(&c->context);
  start(stub_.get(), c);  // from here on the completion callback owns c
}

void Client::EncodeAsync(const v1::EncodeRequest& request,
                        ResponseCallback<v1::EncodeResponse> on_done, const CallOptions& call) {
  StartUnaryAsync(request, std::move(on_done), call, [](auto* stub, auto* c) {
    stub->async()->Encode(&c->context, &c->request, &c->response,
                    [c](grpc::Status status) { std::decay_t<decltype(*c)>::Finish(c, status); });
  });
}

void Client::AttentionAsync(const v1::AttentionRequest& request,
                           ResponseCallback<v1::AttentionResponse> on_done, const CallOptions& call) {
  StartUnaryAsync(request, std::move(on_done), call, [](auto* stub, auto* c) {
    stub->async()->Attention(&c->context, &c->request, &c->response,
                    [c](grpc::Status status) { std::decay_t<decltype(*c)>::Finish(c, status); });
  });
}

void Client::TokenizeAsync(const v1::TokenizeRequest& request,
                          ResponseCallback<v1::TokenizeResponse> on_done, const CallOptions& call) {
  StartUnaryAsync(request, std::move(on_done), call, [](auto* stub, auto* c) {
    stub->async()->Tokenize(&c->context, &c->request, &c->response,
                    [c](grpc::Status status) { std::decay_t<decltype(*c)>::Finish(c, status); });
  });
}

void Client::DetokenizeAsync(const v1::DetokenizeRequest& request,
                             ResponseCallback<v1::DetokenizeResponse> on_done,
                             const CallOptions& call) {
  StartUnaryAsync(request, std::move(on_done), call, [](auto* stub, auto* c) {
    stub->async()->Detokenize(&c->context, &c->request, &c->response,
                      [c](grpc::Status status) { std::decay_t<decltype(*c)>::Finish(c, status); });
  });
}

void Client::GetModelInfoAsync(const v1::GetModelInfoRequest& request,
                               ResponseCallback<v1::GetModelInfoResponse> on_done,
                               const CallOptions& call) {
  StartUnaryAsync(request, std::move(on_done), call, [](auto* stub, auto* c) {
    stub->async()->GetModelInfo(&c->context, &c->request, &c->response,
                      [c](grpc::Status status) { std::decay_t<decltype(*c)>::Finish(c, status); });
  });
}

std::future<absl::StatusOr<v1::EncodeResponse>> Client::EncodeFuture(
    const v1::EncodeRequest& request, const CallOptions& call) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<v1::EncodeResponse>>>();
  auto future = promise->get_future();
  EncodeAsync(
      request,
      [promise](absl::StatusOr<v1::EncodeResponse> result) {
        promise->set_value(std::move(result));
      },
      call);
  return future;
}

std::future<absl::StatusOr<v1::AttentionResponse>> Client::AttentionFuture(
    const v1::AttentionRequest& request, const CallOptions& call) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<v1::AttentionResponse>>>();
  auto future = promise->get_future();
  AttentionAsync(
      request,
      [promise](absl::StatusOr<v1::AttentionResponse> result) {
        promise->set_value(std::move(result));
      },
      call);
  return future;
}

// ---- helpers ------------------------------------------------------------------------

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // gRPC and Abseil share the canonical code numbering (0..16).
  const int code = static_cast<int>(status.error_code());
  const absl::StatusCode absl_code = (code > 0 && code <= 16) ? static_cast<absl::StatusCode>(code)
                                                              : absl::StatusCode::kUnknown;
  return absl::Status(absl_code, status.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext& context) {
  absl::Status out = FromGrpcStatus(status);
  if (out.ok()) return out;
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kRetryAfterTrailer);
  if (it != trailers.end()) {
    out.SetPayload(kRetryAfterPayload, absl::Cord(std::string(it->second.data(), it->second.size())));
  }
  return out;
}

std::optional<absl::Duration> RetryAfter(const absl::Status& status) {
  auto payload = status.GetPayload(kRetryAfterPayload);  // absl::optional in Debian's Abseil
  if (!payload.has_value()) return std::nullopt;
  const std::string text(absl::StripAsciiWhitespace(std::string(*payload)));
  int64_t ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || end != text.data() + text.size() || ms < 0) return std::nullopt;
  return absl::Milliseconds(ms);
}

v1::Input TextInput(std::string text) {
  v1::Input input;
  input.set_text(std::move(text));
  return input;
}

v1::Input TokenInput(const std::vector<int32_t>& ids) {
  v1::Input input;
  input.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  return input;
}

std::string FinishReasonName(v1::FinishReason reason) {
  std::string name = v1::FinishReason_Name(reason);
  if (name.empty()) return absl::StrCat("FINISH_REASON(", static_cast<int>(reason), ")");
  return std::string(absl::StripPrefix(name, "FINISH_REASON_"));
}

std::string HealthStatusName(HealthStatus status) {
  std::string name = health::HealthCheckResponse::ServingStatus_Name(status);
  if (name.empty()) return absl::StrCat("STATUS(", static_cast<int>(status), ")");
  return name;
}

}  // namespace dikkat::client
