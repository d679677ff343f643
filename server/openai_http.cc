#include "server/openai_http.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/sync.h"
#include "server/bounded_socket.h"
#include "server/chat_prompt.h"
#include "server/convert.h"
#include "server/http_worker_pool.h"
#include "server/metrics_http.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/prompt_fan_out.h"
#include "server/status_util.h"

namespace dikkat::server {
namespace {

using openai::Api;
using openai::Json;

constexpr int kListenBacklog = 128;
// How often a waiting HTTP thread looks at its client and the server's stop.
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);
// A stream with nothing to say for this long sends an SSE comment, so that a
// client that went away is noticed by the failed write.
constexpr absl::Duration kKeepAliveComment = absl::Seconds(5);
// A stream's events are written once this many bytes of them are ready,
// whatever is left to take.
constexpr size_t kStreamWriteBytes = size_t{1} << 20;

// Set by the handlers when the connection must not serve another request
// (a refused request whose body was never read).
thread_local bool t_close_connection = false;

// The connection the current worker serves (handlers run on it), and when
// its current request's first byte arrived.
thread_local const BoundedSocket* t_connection = nullptr;
thread_local absl::Time t_request_start;

// The endpoint label of a path: a fixed set, never the request's own text.
const char* EndpointLabel(const std::string& path) {
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/chat/completions") return "chat_completions";
  if (path == "/v1/embeddings") return "embeddings";
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) return "models";
  return "other";
}

// The endpoint label of a head refused before httplib parsed it (431): from
// its request line's target when that line has arrived, else "other".
const char* EndpointLabelOfHead(std::string_view head) {
  const size_t line_end = head.find('\n');
  if (line_end == std::string_view::npos) return "other";
  const std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return "other";
  std::string_view target = line.substr(sp1 + 1);
  target = target.substr(0, std::min(target.find(' '), target.find('?')));
  return EndpointLabel(std::string(target));
}

// One Generate call's output (its engine requests, one per prompt, merged by
// openai::PromptFanOut) between the engine thread (OnChunk/OnFinish, which
// only append under a short lock) and the HTTP thread (Take). Past
// `max_pending_bytes` of output not yet taken (a client that does not read
// while the HTTP thread waits in a write) the call is cut: its output is
// dropped, the engine thread cancels its requests at once (as the gRPC
// reactor does), and the HTTP thread ends the response.
class GenerateOutput final : public GenerateObserver {
 public:
  GenerateOutput(Engine* engine, int64_t max_pending_bytes)
      : engine_(engine), max_pending_bytes_(max_pending_bytes) {}

  // Each id SubmitGenerateAll returned; a cut before it is cancelled here.
  void AddId(RequestId id) {
    bool cancel = false;
    {
      dikkat::MutexLock lock(&mu_);
      ids_.push_back(id);
      cancel = cut_ || cancelled_;
    }
    if (cancel) engine_->Cancel(id);
  }

  // Cancels every request submitted, and those submitted after (each ends
  // with OnFinish(kCancelled)).
  void CancelAll() {
    std::vector<RequestId> ids;
    {
      dikkat::MutexLock lock(&mu_);
      cancelled_ = true;
      ids = ids_;
    }
    for (RequestId id : ids) engine_->Cancel(id);
  }

  void OnChunk(GeneratedChunk chunk) override {
    const int64_t bytes = ChunkBytes(chunk);
    {
      dikkat::MutexLock lock(&mu_);
      if (cut_) return;
      pending_bytes_ += bytes;
      // Held output (GeneratedChunk::held) comes in one burst at the end and
      // is no sign of a slow reader.
      if (chunk.held || max_pending_bytes_ <= 0 || pending_bytes_ <= max_pending_bytes_) {
        chunks_.push_back(std::move(chunk));
        return;
      }
      cut_ = true;
      chunks_.clear();
    }
    CancelAll();  // OnFinish(kCancelled) follows
  }

  void OnFinish(GenerateSummary summary) override {
    dikkat::MutexLock lock(&mu_);
    summary_ = std::move(summary);
  }

  struct Taken {
    std::vector<GeneratedChunk> chunks;
    std::optional<GenerateSummary> summary;  // set once, with the last chunks
    bool cut = false;
  };

  // Waits up to `timeout` for output, then takes all of it.
  Taken Take(absl::Duration timeout) {
    dikkat::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !chunks_.empty() || (summary_.has_value() && !summary_taken_) || cut_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    Taken taken;
    taken.cut = cut_;
    taken.chunks.assign(std::make_move_iterator(chunks_.begin()),
                        std::make_move_iterator(chunks_.end()));
    chunks_.clear();
    pending_bytes_ = 0;
    if (summary_.has_value() && !summary_taken_) {
      summary_taken_ = true;
      taken.summary = summary_;
    }
    return taken;
  }

  bool finished() const {
    dikkat::MutexLock lock(&mu_);
    return summary_.has_value();
  }

 private:
  Engine* const engine_;
  const int64_t max_pending_bytes_;
  mutable dikkat::Mutex mu_;
  std::vector<RequestId> ids_ ABSL_GUARDED_BY(mu_);
  std::deque<GeneratedChunk> chunks_ ABSL_GUARDED_BY(mu_);
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // CancelAll was called
  std::optional<GenerateSummary> summary_ ABSL_GUARDED_BY(mu_);
  bool summary_taken_ ABSL_GUARDED_BY(mu_) = false;
};

void SetError(httplib::Response& res, int http_status, absl::string_view message,
              absl::string_view code = "") {
  res.status = http_status;
  res.set_content(openai::ErrorBody(http_status, message, code), "application/json");
}

void SetStatusError(httplib::Response& res, const absl::Status& status) {
  const int http = openai::HttpStatusOf(status);
  SetError(res, http, status.message(),
           status.code() == absl::StatusCode::kNotFound ? "model_not_found" : "");
  if (http == 429) {
    // Whole seconds, rounded up (HTTP's Retry-After has no fractions).
    res.set_header("Retry-After", std::to_string((RetryAfterMs(status) + 999) / 1000));
  }
}

std::string SseEvent(const Json& event) {
  return absl::StrCat("data: ", event.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
}

}  // namespace

// The route handlers; state shared by every worker is read-only after Start.
class OpenAiHttpServer::Handlers {
 public:
  Handlers(const ModelRegistry* registry, const BearerTokenAuthenticator* auth, Metrics* metrics,
           std::function<bool()> serving, const OpenAiHttpOptions& options)
      : registry_(registry),
        auth_(auth),
        metrics_(metrics),
        serving_(std::move(serving)),
        options_(options),
        body_limits_(MakeBodyLimits(*registry, options)) {}

  absl::Status LoadChatTemplates() {
    for (const ModelRegistry::Entry& e : registry_->entries()) {
      absl::StatusOr<ChatPrompt> prompt = ChatPrompt::Load(e.engine->description().path);
      if (!prompt.ok()) return prompt.status();
      chat_.emplace(e.name, std::move(*prompt));
    }
    return absl::OkStatus();
  }

  void Install(httplib::Server& http) {
    // Called once the response is written (a stream's last byte included).
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (metrics_ != nullptr) {
        metrics_->RecordHttp("openai", EndpointLabel(req.path), res.status,
                             absl::Now() - t_request_start);
      }
    });
    http.set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return PreRoute(req, res); });
    // "Expect: 100-continue" (curl sends it for bodies over 1 MB): the same
    // checks answer before the client sends the body; httplib would invite
    // it first and only then run them.
    http.set_expect_100_continue_handler([this](const httplib::Request& req,
                                                httplib::Response& res) {
      return PreRoute(req, res) == httplib::Server::HandlerResponse::Handled ? res.status : 100;
    });
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
          if (res.status == 413) t_close_connection = true;
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          const std::string message =
              res.status == 404   ? "no such endpoint: see GET /v1/models, POST /v1/completions, "
                                    "/v1/chat/completions, /v1/embeddings"
              : res.status == 413 ? "the request body is larger than the server accepts"
                                  : absl::StrCat("HTTP status ", res.status);
          SetError(res, res.status, message);
          return httplib::Server::HandlerResponse::Handled;
        }));
    // A bug, not the caller's input (which never throws): a 500 in OpenAI's
    // shape instead of httplib's default, which copies what() into a header.
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          SetError(res, 500, "internal error while serving this request");
        });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      Json data = Json::array();
      for (const ModelRegistry::Entry& e : registry_->entries()) {
        data.push_back(openai::ModelObject(e.name, created_));
      }
      res.set_content(Json{{"object", "list"}, {"data", std::move(data)}}.dump(),
                      "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1];
      for (const ModelRegistry::Entry& e : registry_->entries()) {
        if (e.name == name) {
          res.set_content(openai::ModelObject(e.name, created_).dump(), "application/json");
          return;
        }
      }
      SetError(res, 404, absl::StrCat("model '", name, "' is not served here"), "model_not_found");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Api::kCompletions, req, res);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Api::kChat, req, res);
    });
    http.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
      Embeddings(req, res);
    });
  }

  void set_stopping() { stopping_ = true; }

 private:
  // Runs after the head, before any body is read: callers without a valid
  // token and calls while the server is not serving are refused unread.
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res) {
    if (auth_ != nullptr) {
      absl::Status auth = auth_->CheckAuthorization(req.get_header_value("Authorization"));
      if (!auth.ok()) {
        t_close_connection = true;
        SetError(res, 401, auth.message(), "invalid_api_key");
        res.set_header("WWW-Authenticate", "Bearer");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (req.method == "POST" && (serving_ != nullptr && !serving_())) {
      t_close_connection = true;
      SetError(res, 503, "the server is starting or draining; retry on another replica or later");
      res.set_header("Retry-After", "1");
      return httplib::Server::HandlerResponse::Handled;
    }
    // A body over the limit is refused from its Content-Length, unread:
    // httplib 0.11.4's own check reads (skips) the whole body first, so a
    // client that sent only its start waited for the request deadline.
    const uint64_t max_body = static_cast<uint64_t>(std::max<int64_t>(options_.max_body_bytes, 0));
    if (req.has_header("Content-Length") &&
        req.get_header_value<uint64_t>("Content-Length") > max_body) {
      t_close_connection = true;
      SetError(
          res, 413,
          absl::StrCat("the request body (Content-Length ", req.get_header_value("Content-Length"),
                       ") is larger than the server accepts (", max_body, " bytes)"));
      return httplib::Server::HandlerResponse::Handled;
    }
    // httplib inflates a compressed body with no bound on what it inflates
    // to (gzip: ~1000x), past max_body_bytes; none is accepted.
    if (req.has_header("Content-Encoding")) {
      const std::string encoding = req.get_header_value("Content-Encoding");
      if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(encoding), "identity")) {
        t_close_connection = true;
        SetError(res, 415,
                 absl::StrCat("Content-Encoding '", encoding,
                              "' is not accepted: send the request body uncompressed"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Without either header httplib reads the body until the client closes
    // (the client waited for the request deadline); say what is missing.
    if (req.method == "POST" && !req.has_header("Content-Length") &&
        !req.has_header("Transfer-Encoding")) {
      t_close_connection = true;
      SetError(res, 411, "a POST needs a Content-Length (or a chunked Transfer-Encoding)");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  struct Target {
    Engine* engine = nullptr;
    std::string name;
    ModelLimits limits;
  };

  // The model the body names, and its limits.
  absl::StatusOr<Target> FindModel(const Json& body) const {
    absl::StatusOr<std::string> name = openai::ModelName(body);
    if (!name.ok()) return name.status();
    absl::StatusOr<Engine*> engine = registry_->Find(*name);
    if (!engine.ok()) return engine.status();
    Target t;
    t.engine = *engine;
    t.name = std::string(registry_->ResolveName(*name));
    t.limits.config = &t.engine->description().config;
    t.limits.tokenizer = &t.engine->tokenizer();
    t.limits.options = &t.engine->options();
    t.limits.max_response_bytes = options_.max_response_bytes;
    t.limits.max_text_bytes = options_.max_text_bytes;
    return t;
  }

  // The body bounds of every endpoint: numbers enough for the largest call
  // of any model served (none when one has no max_positions).
  static openai::BodyLimits MakeBodyLimits(const ModelRegistry& registry,
                                           const OpenAiHttpOptions& options) {
    openai::BodyLimits limits;
    limits.max_json_depth = options.max_json_depth;
    limits.max_chat_messages = options.max_chat_messages;
    limits.max_numbers = 0;
    for (const ModelRegistry::Entry& e : registry.entries()) {
      const int64_t numbers =
          openai::MaxBodyNumbers(limits, e.engine->options(), e.engine->description().config);
      if (numbers <= 0) {
        limits.max_numbers = 0;
        break;
      }
      limits.max_numbers = std::max(limits.max_numbers, numbers);
    }
    return limits;
  }

  const openai::BodyLimits& body_limits() const { return body_limits_; }

  // Whether the HTTP thread should stop waiting: client gone or server stopping.
  bool Abandoned() const {
    return stopping_ ||
           (t_connection != nullptr && (t_connection->PeerClosed() || t_connection->Stopping()));
  }

  void Generate(Api api, const httplib::Request& req, httplib::Response& res) {
    openai::BodyValues used;
    absl::StatusOr<Json> body = openai::ParseBody(req.body, body_limits(), &used);
    if (!body.ok()) return SetStatusError(res, body.status());
    absl::StatusOr<Target> target = FindModel(*body);
    if (!target.ok()) return SetStatusError(res, target.status());
    absl::StatusOr<openai::GenerateCall> call;
    if (api == Api::kChat) {
      // The tool calls' arguments are parsed within what the body left.
      call = openai::ParseChatRequest(*body, chat_.at(target->name),
                                      openai::LeftAfter(body_limits(), used), target->limits);
      if (call.ok()) call->parse_reasoning = options_.parse_reasoning;
    } else {
      call = openai::ParseCompletionRequest(*body, body_limits(), target->limits);
    }
    if (!call.ok()) return SetStatusError(res, call.status());
    auto shared_call = std::make_shared<openai::GenerateCall>(std::move(*call));
    // A non-streamed call's output is all kept until it ends anyway, bounded
    // by --max_response_bytes as it is taken (Collect): its pending bound is
    // that one, so that the thread taking it less often than the engine makes
    // it (every kPollInterval) does not cut it. A stream's waits on its client.
    int64_t max_pending = options_.max_stream_pending_bytes;
    if (!shared_call->stream && max_pending > 0 && options_.max_response_bytes > 0) {
      max_pending = std::max(max_pending, options_.max_response_bytes);
    }
    auto output = std::make_shared<GenerateOutput>(target->engine, max_pending);
    // One engine request per prompt, queued together or not at all; what
    // they hold with best_of > n is bounded as one call's.
    const int32_t prompts = static_cast<int32_t>(shared_call->prompts.size());
    // One prompt failed: the call fails, so its siblings are cancelled.
    auto fan_out = openai::PromptFanOut::Create(prompts, shared_call->n, output,
                                                [output] { output->CancelAll(); });
    std::vector<GenerateRequest> requests;
    std::vector<std::shared_ptr<GenerateObserver>> observers;
    for (int32_t p = 0; p < prompts; ++p) {
      requests.push_back(shared_call->prompts[p].request);
      observers.push_back(fan_out->ObserverFor(p));
    }
    absl::StatusOr<std::vector<RequestId>> ids =
        target->engine->SubmitGenerateAll(std::move(requests), std::move(observers));
    if (!ids.ok()) {
      // The engine's own check of each prompt: in the caller's terms.
      return SetStatusError(
          res, openai::InOpenAiTerms(ids.status(), api, shared_call->max_tokens_field));
    }
    for (RequestId id : *ids) output->AddId(id);
    auto builder = std::make_shared<openai::ChoiceBuilder>(
        openai::NewResponseMeta(api, target->name), *shared_call, target->engine->tokenizer());
    if (shared_call->stream) {
      Stream(std::move(shared_call), std::move(output), std::move(builder), res);
    } else {
      Collect(*output, *builder, res);
    }
  }

  // Non-streaming: waits for the whole output (cancelling it if the client
  // goes away) and answers one JSON object.
  void Collect(GenerateOutput& output, openai::ChoiceBuilder& builder, httplib::Response& res) {
    bool cancelled = false;
    bool cut = false;
    bool too_big = false;  // past --max_response_bytes: cancelled, the rest not kept
    while (true) {
      GenerateOutput::Taken taken = output.Take(kPollInterval);
      // Checked chunk by chunk: one take can hold a best_of > n call's
      // whole held output.
      for (const GeneratedChunk& chunk : taken.chunks) {
        if (too_big) break;
        builder.Add(chunk);
        too_big = options_.max_response_bytes > 0 &&
                  builder.approx_bytes() > options_.max_response_bytes;
      }
      cut = cut || taken.cut;
      if (taken.summary.has_value()) {
        const GenerateSummary& summary = *taken.summary;
        if (too_big) {
          return SetError(res, 400,
                          absl::StrCat("the response passed the server's bound of ",
                                       options_.max_response_bytes,
                                       " bytes per response (--max_response_bytes) and the "
                                       "generation was stopped; ask for fewer choices, prompts, "
                                       "tokens or logprobs, or stream the response"));
        }
        // Output was dropped: never a 200 with part of the choices, even
        // when the generation had already finished.
        if (cut) {
          return SetError(res, 503,
                          "the output outgrew the server's bound on output not yet sent "
                          "(--max_stream_pending_bytes) and was dropped; retry, or ask for "
                          "fewer tokens or choices");
        }
        if (summary.reason == FinishReason::kError) return SetStatusError(res, summary.status);
        if (summary.reason == FinishReason::kCancelled) {
          return SetError(res, 503, "the generation was cancelled (the server is stopping)");
        }
        res.set_content(
            builder.Response(summary).dump(-1, ' ', false, Json::error_handler_t::replace),
            "application/json");
        return;
      }
      if (!cancelled && (taken.cut || too_big || Abandoned())) {
        cancelled = true;
        output.CancelAll();  // OnFinish(kCancelled) follows
      }
    }
  }

  // Streaming: server-sent events written by the HTTP thread as the engine
  // produces them. A failed write (client gone, or not reading within the
  // write timeout), a cut buffer or a stop ends the response; the releaser
  // then cancels a generation that has not finished.
  void Stream(std::shared_ptr<openai::GenerateCall> call, std::shared_ptr<GenerateOutput> output,
              std::shared_ptr<openai::ChoiceBuilder> builder, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto started = std::make_shared<bool>(false);
    auto last_write = std::make_shared<absl::Time>(absl::Now());
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, output, builder, started, last_write](size_t, httplib::DataSink& sink) {
          // httplib's exception handler does not cover the content provider:
          // a throw here (an allocation) would end the process. The response
          // ends instead, and the releaser cancels the generation.
          try {
            std::string out;
            if (!*started) {
              *started = true;
              for (const Json& e : builder->StartEvents()) out += SseEvent(e);
            }
            GenerateOutput::Taken taken =
                output->Take(out.empty() ? kPollInterval : absl::ZeroDuration());
            if (taken.cut || Abandoned()) return false;
            for (const GeneratedChunk& chunk : taken.chunks) {
              for (const Json& e : builder->ChunkEvents(chunk)) out += SseEvent(e);
              // Written as it grows: the events of many choices (each
              // echoing its prompt) are not all held at once.
              if (out.size() >= kStreamWriteBytes) {
                if (!sink.write(out.data(), out.size())) return false;
                *last_write = absl::Now();
                out.clear();
              }
            }
            bool done = false;
            if (taken.summary.has_value()) {
              const GenerateSummary& summary = *taken.summary;
              if (summary.reason == FinishReason::kError ||
                  summary.reason == FinishReason::kCancelled) {
                const absl::Status status =
                    summary.reason == FinishReason::kError
                        ? summary.status
                        : absl::UnavailableError("the generation was cancelled");
                out += SseEvent(
                    Json::parse(openai::ErrorBody(openai::HttpStatusOf(status), status.message())));
              } else {
                for (const Json& e : builder->FinishEvents(summary)) out += SseEvent(e);
                out += "data: [DONE]\n\n";
              }
              done = true;
            }
            if (out.empty() && absl::Now() - *last_write > kKeepAliveComment) out = ": ping\n\n";
            if (!out.empty()) {
              if (!sink.write(out.data(), out.size())) return false;
              *last_write = absl::Now();
            }
            if (done) sink.done();
            return true;
          } catch (const std::exception& e) {
            absl::FPrintF(stderr, "dikkat-server: OpenAI stream ended by an error: %s\n", e.what());
            return false;
          }
        },
        [output, call](bool) {
          if (!output->finished()) output->CancelAll();
        });
  }

  void Embeddings(const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<Json> body = openai::ParseBody(req.body, body_limits());
    if (!body.ok()) return SetStatusError(res, body.status());
    absl::StatusOr<Target> target = FindModel(*body);
    if (!target.ok()) return SetStatusError(res, target.status());
    absl::StatusOr<openai::EmbeddingsCall> call =
        openai::ParseEmbeddingsRequest(*body, target->limits);
    if (!call.ok()) return SetStatusError(res, call.status());
    struct Done {
      dikkat::Mutex mu;
      std::optional<absl::StatusOr<EncodeResult>> result ABSL_GUARDED_BY(mu);
    };
    auto done = std::make_shared<Done>();
    absl::StatusOr<RequestId> id = target->engine->SubmitEncode(
        std::move(call->request), [done](absl::StatusOr<EncodeResult> result) {
          dikkat::MutexLock lock(&done->mu);
          done->result = std::move(result);
        });
    if (!id.ok()) return SetStatusError(res, id.status());
    bool cancelled = false;
    dikkat::MutexLock lock(&done->mu);
    auto ready = [&done]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(done->mu) { return done->result.has_value(); };
    while (!done->mu.AwaitWithTimeout(absl::Condition(&ready), kPollInterval)) {
      if (!cancelled && Abandoned()) {
        cancelled = true;
        target->engine->Cancel(*id);
      }
    }
    if (!done->result->ok()) return SetStatusError(res, done->result->status());
    res.set_content(openai::EmbeddingsResponse(**done->result, call->base64, target->name).dump(),
                    "application/json");
  }

  const ModelRegistry* registry_;
  const BearerTokenAuthenticator* auth_;
  Metrics* metrics_;
  std::function<bool()> serving_;
  const OpenAiHttpOptions& options_;
  const openai::BodyLimits body_limits_;
  std::map<std::string, ChatPrompt> chat_;  // by model name; filled before serving
  const int64_t created_ = absl::ToUnixSeconds(absl::Now());
  std::atomic<bool> stopping_{false};
};

// httplib::Server whose connections are served by an HttpWorkerPool through
// a BoundedSocket, in dikkat's own keep-alive loop (httplib's
// process_and_close_socket is private and virtual; process_request parses
// one request, routes it and writes the response).
class OpenAiHttpServer::BoundedServer final : public httplib::Server {
 public:
  BoundedServer(const OpenAiHttpOptions& options, Metrics* metrics)
      : options_(options), metrics_(metrics) {
    new_task_queue = [this] {
      return new HttpWorkerPool(options_.max_workers, options_.max_waiting);
    };
    set_payload_max_length(static_cast<size_t>(std::max<int64_t>(options.max_body_bytes, 0)));
    set_read_timeout(absl::ToChronoSeconds(absl::Ceil(options.request_timeout, absl::Seconds(1))));
    set_write_timeout(absl::ToChronoSeconds(absl::Ceil(options.write_timeout, absl::Seconds(1))));
    // What the Keep-Alive response header announces; the loop below enforces it.
    set_keep_alive_max_count(static_cast<size_t>(std::max(options.max_requests_per_connection, 1)));
    set_keep_alive_timeout(
        absl::ToInt64Seconds(absl::Ceil(options.idle_timeout, absl::Seconds(1))));
  }
  void WidenBacklog() {
    if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, kListenBacklog);
  }

  void EndConnections() { stop_.Raise(); }

 private:
  bool process_and_close_socket(socket_t sock) override {
    bool served = false;
    if (HttpWorkerPool::RefusingConnection()) {
      const std::string body = openai::ErrorBody(503, "the server is busy; retry later");
      const std::string response = absl::StrCat(
          "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
          "Content-Type: application/json\r\nContent-Length: ",
          body.size(), "\r\n\r\n", body);
      if (send(sock, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        // The client is gone or its buffer is full: closing says enough.
      }
      // What of the request has already arrived (up to 16 KiB, without
      // waiting) is read, so that closing with it unread does not reset the
      // connection under the 503 on its way; and the 503 is counted as the
      // 431s are, under the endpoint of its request line, else "other".
      char head[16 << 10];
      size_t got = 0;
      for (ssize_t n; got < sizeof(head) &&
                      (n = recv(sock, head + got, sizeof(head) - got, MSG_DONTWAIT)) > 0;) {
        got += static_cast<size_t>(n);
      }
      if (metrics_ != nullptr) {
        metrics_->RecordHttp("openai", EndpointLabelOfHead(std::string_view(head, got)), 503,
                             absl::ZeroDuration());
      }
    } else {
      // Server-sent events are small writes, one per token: without
      // TCP_NODELAY, Nagle holds each behind the client's delayed ACK of the
      // one before, which put ~40 ms before the first token of every request
      // after the first on a kept-alive connection.
      int one = 1;
      setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      BoundedSocket socket(sock, stop_, Bounds());
      t_connection = &socket;
      for (int i = 0; i < options_.max_requests_per_connection; ++i) {
        if (!socket.NextRequest(i == 0 ? options_.request_timeout : options_.idle_timeout)) break;
        t_request_start = absl::Now();
        // The head is read (and bounded) before httplib parses it: httplib
        // bounds each header line but not their number.
        const BoundedSocket::Head head = socket.ReadHead();
        if (head == BoundedSocket::Head::kTooLarge) {
          WriteHeadTooLarge(socket);
          // Counted as httplib's logger counts the requests it answers (413
          // included): httplib never sees this one.
          if (metrics_ != nullptr) {
            metrics_->RecordHttp("openai", EndpointLabelOfHead(socket.unread()), 431,
                                 absl::Now() - t_request_start);
          }
          break;
        }
        if (head != BoundedSocket::Head::kComplete) break;  // deadline, closed or stopping
        t_close_connection = false;
        const bool last = i + 1 == options_.max_requests_per_connection;
        bool connection_closed = false;
        served = process_request(socket, last, connection_closed, nullptr);
        if (!served || connection_closed || t_close_connection) break;
      }
      t_connection = nullptr;
      // A body refused unread (413, 401) may still be arriving: drain it for
      // 200 ms (up to the body limit), or closing with unread bytes resets
      // the connection, and a client still writing its body sees the reset
      // (EPIPE / ECONNRESET on its write) instead of reading the answer.
      socket.LingeringClose(absl::Milliseconds(200),
                            std::max<int64_t>(64 << 10, options_.max_body_bytes));
    }
    shutdown(sock, SHUT_RDWR);
    close(sock);
    return served;
  }

  SocketBounds Bounds() const {
    SocketBounds bounds;
    bounds.max_head_bytes = options_.max_head_bytes;
    bounds.max_body_bytes = options_.max_body_bytes;
    bounds.request_timeout = options_.request_timeout;
    bounds.write_timeout = options_.write_timeout;  // each write: streams last
    return bounds;
  }

  // 431 in OpenAI's error shape; the connection closes after it.
  void WriteHeadTooLarge(BoundedSocket& socket) const {
    const std::string body = openai::ErrorBody(
        431, absl::StrCat("the request line and headers exceed ", options_.max_head_bytes,
                          " bytes"));
    socket.WriteAll(absl::StrCat(
        "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body));
  }

  const OpenAiHttpOptions options_;
  Metrics* const metrics_;  // not owned; may be null
  StopSignal stop_;
};

OpenAiHttpServer::OpenAiHttpServer(const ModelRegistry* registry,
                                   const BearerTokenAuthenticator* auth, Metrics* metrics,
                                   std::function<bool()> serving, OpenAiHttpOptions options)
    : registry_(registry),
      auth_(auth),
      metrics_(metrics),
      serving_(std::move(serving)),
      options_(options) {}

OpenAiHttpServer::~OpenAiHttpServer() { Stop(); }

absl::StatusOr<int> OpenAiHttpServer::Start(const std::string& address) {
  auto host_port = SplitHostPort(address);
  if (!host_port.ok()) return host_port.status();
  const auto& [host, port] = *host_port;
  handlers_ = std::make_unique<Handlers>(registry_, auth_, metrics_, serving_, options_);
  if (absl::Status loaded = handlers_->LoadChatTemplates(); !loaded.ok()) {
    handlers_.reset();
    return loaded;
  }
  http_ = std::make_unique<BoundedServer>(options_, metrics_);
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second
  // process bind the same port and take half of the calls.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  handlers_->Install(*http_);
  int bound = port;
  if (port == 0) {
    bound = http_->bind_to_any_port(host);
    if (bound < 0) bound = 0;
  } else if (!http_->bind_to_port(host, port)) {
    bound = 0;
  }
  if (bound <= 0) {
    http_.reset();
    handlers_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot bind the OpenAI HTTP address ", address, " (in use or not local?)"));
  }
  http_->WidenBacklog();
  thread_ = std::thread([server = http_.get()] { server->listen_after_bind(); });
  while (!http_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void OpenAiHttpServer::Stop() {
  if (http_ == nullptr) return;
  handlers_->set_stopping();
  http_->EndConnections();
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
  handlers_.reset();
}

}  // namespace dikkat::server
