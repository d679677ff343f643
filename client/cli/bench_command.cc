// `dikkat bench`: an end-to-end load generator over Generate streams.
//
// It keeps --concurrency streams in flight with the async API: each finished
// stream starts the next request from its completion callback, so there is
// no thread per stream and no gap between requests.
//
// With --openai=http://HOST:PORT the same load goes through the server's
// OpenAI-compatible port instead (streamed /v1/completions or, with
// --openai-chat, /v1/chat/completions with the prompt as one user message):
// a thread per stream, each reading the server-sent events as they come,
// so that the two front doors can be measured side by side.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "client/cli/commands.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace dikkat::client::cli {
namespace {

// Nearest-rank percentile of sorted `values` (p in (0, 100]).
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return NAN;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return NAN;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / values.size();
}

// What both runs (gRPC, OpenAI port) report, in one format: counts, the
// lines describing failures, throughput over `seconds` and the latencies.
struct RunReport {
  int ok = 0, failed = 0;
  int64_t tokens = 0;
  std::vector<std::string> error_lines;
  std::vector<double> ttft_ms, inter_token_ms, request_ms;
  // The server's own time to first token (GenerateStats, from its engine
  // taking the request to the token's sampling): what the client's figure
  // adds on top of it is transport and delivery. gRPC only.
  std::vector<double> server_ttft_ms;
};

void PrintRow(std::ostream& out, const char* name, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  out << absl::StrFormat("%-22s %9.2f %9.2f %9.2f %9.2f\n", name, Percentile(values, 50),
                         Percentile(values, 90), Percentile(values, 99), Mean(values));
}

void PrintReport(std::ostream& out, const RunReport& r, double seconds) {
  out << absl::StrFormat("completed: %d ok, %d failed in %.2f s\n", r.ok, r.failed, seconds);
  for (const std::string& line : r.error_lines) out << "  " << line << "\n";
  out << absl::StrFormat("throughput: %.1f generated tokens/s, %.2f requests/s\n",
                         r.tokens / seconds, r.ok / seconds);
  out << absl::StrFormat("%-22s %9s %9s %9s %9s\n", "latency (ms)", "p50", "p90", "p99", "mean");
  PrintRow(out, "time to first token", r.ttft_ms);
  if (!r.server_ttft_ms.empty()) PrintRow(out, "  of it in the server", r.server_ttft_ms);
  PrintRow(out, "inter-token", r.inter_token_ms);
  PrintRow(out, "request", r.request_ms);
  if (r.ok > 0) {
    out << absl::StrFormat("tokens per request: %.1f\n", static_cast<double>(r.tokens) / r.ok);
  }
}

// Measurements of one stream, touched only by its own (serialized) callbacks.
struct StreamTiming {
  absl::Time start;
  absl::Time last_token;
  bool has_token = false;
  int tokens = 0;
  double ttft_ms = 0;
  double server_ttft_ms = -1;  // from the last message's stats
  std::vector<double> inter_token_ms;
};

// Shared with the calls' callbacks, which may run after Run() returned.
class BenchRun : public std::enable_shared_from_this<BenchRun> {
 public:
  // With `unique_suffix` > 0, request i's text is the prompt followed by a
  // suffix of that many bytes that no other request has.
  BenchRun(Client* client, v1::GenerateRequest request, CallOptions call, int total,
           int unique_suffix = 0)
      : client_(client), request_(std::move(request)), call_(std::move(call)), total_(total),
        unique_suffix_(unique_suffix) {}

  // Runs every request with `concurrency` in flight; blocks until all ended.
  void Run(int concurrency) {
    start_ = absl::Now();
    for (int i = 0; i < concurrency; ++i) StartNext();
    dikkat::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](BenchRun* run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run->mu_) {
          return run->finished_ == run->started_ && (run->started_ == run->total_ || run->stop_);
        },
        this));
    wall_ = absl::Now() - start_;
  }

  void Report(std::ostream& out) const {
    dikkat::MutexLock lock(&mu_);
    RunReport r;
    r.ok = ok_;
    r.failed = finished_ - ok_;
    r.tokens = total_tokens_;
    for (const auto& [code, count] : errors_) {
      r.error_lines.push_back(absl::StrFormat("%d x %s (first: %s)", count,
                                              absl::StatusCodeToString(code),
                                              first_error_.at(code)));
    }
    r.ttft_ms = ttft_ms_;
    r.server_ttft_ms = server_ttft_ms_;
    r.inter_token_ms = inter_token_ms_;
    r.request_ms = request_ms_;
    PrintReport(out, r, absl::ToDoubleSeconds(wall_));
  }

  bool all_ok() const {
    dikkat::MutexLock lock(&mu_);
    return ok_ == total_;
  }

 private:
  static std::string Suffix(int index, int bytes) {
    std::string s;
    while (static_cast<int>(s.size()) < bytes) s += absl::StrFormat(" #%d.", index);
    s.resize(static_cast<size_t>(bytes));
    return s;
  }

  void StartNext() {
    int index;
    {
      dikkat::MutexLock lock(&mu_);
      if (started_ == total_ || stop_ || (call_.cancel && call_.cancel->cancelled())) return;
      index = started_++;
    }
    v1::GenerateRequest request = request_;
    if (unique_suffix_ > 0) {
      *request.mutable_input()->mutable_text() += Suffix(index, unique_suffix_);
    }
    // Not under mu_: starting a call may run reactions on this thread.
    auto timing = std::make_shared<StreamTiming>();
    timing->start = absl::Now();
    client_->GenerateAsync(
        request,
        [timing](const v1::GenerateResponse& chunk) {
          if (chunk.has_stats() && chunk.stats().time_to_first_token_seconds() > 0) {
            timing->server_ttft_ms = chunk.stats().time_to_first_token_seconds() * 1e3;
          }
          if (chunk.tokens_size() == 0) return true;
          const absl::Time now = absl::Now();
          if (!timing->has_token) {
            timing->ttft_ms = absl::ToDoubleMilliseconds(now - timing->start);
            timing->has_token = true;
            // Tokens after the first in the same chunk arrived with it.
            for (int i = 1; i < chunk.tokens_size(); ++i) timing->inter_token_ms.push_back(0);
          } else {
            // A chunk of n tokens took the gap for all n: spread it evenly.
            const double per_token =
                absl::ToDoubleMilliseconds(now - timing->last_token) / chunk.tokens_size();
            for (int i = 0; i < chunk.tokens_size(); ++i) {
              timing->inter_token_ms.push_back(per_token);
            }
          }
          timing->last_token = now;
          timing->tokens += chunk.tokens_size();
          return true;
        },
        [self = shared_from_this(), timing](absl::Status status) {
          // Start the next one first: Run() waits for finished == started.
          self->StartNext();
          self->Finish(*timing, status);
        },
        call_);
  }

  void Finish(const StreamTiming& timing, const absl::Status& status) {
    dikkat::MutexLock lock(&mu_);
    ++finished_;
    if (!status.ok()) {
      ++errors_[status.code()];
      first_error_.emplace(status.code(), std::string(status.message()));
      if (status.code() == absl::StatusCode::kCancelled) stop_ = true;
      return;
    }
    ++ok_;
    total_tokens_ += timing.tokens;
    if (timing.has_token) ttft_ms_.push_back(timing.ttft_ms);
    if (timing.has_token && timing.server_ttft_ms >= 0) {
      server_ttft_ms_.push_back(timing.server_ttft_ms);
    }
    inter_token_ms_.insert(inter_token_ms_.end(), timing.inter_token_ms.begin(),
                           timing.inter_token_ms.end());
    request_ms_.push_back(absl::ToDoubleMilliseconds(absl::Now() - timing.start));
  }

  Client* const client_;
  const v1::GenerateRequest request_;
  const CallOptions call_;
  const int total_;
  const int unique_suffix_;
  absl::Time start_;

  mutable dikkat::Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  int ok_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t total_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> ttft_ms_ ABSL_GUARDED_BY(mu_);
  std::vector<double> server_ttft_ms_ ABSL_GUARDED_BY(mu_);
  std::vector<double> inter_token_ms_ ABSL_GUARDED_BY(mu_);
  std::vector<double> request_ms_ ABSL_GUARDED_BY(mu_);
  std::map<absl::StatusCode, int> errors_ ABSL_GUARDED_BY(mu_);
  std::map<absl::StatusCode, std::string> first_error_ ABSL_GUARDED_BY(mu_);
  absl::Duration wall_ ABSL_GUARDED_BY(mu_);
};

// The same load through the OpenAI-compatible port: --concurrency threads,
// each sending streamed requests one after another until --requests are
// sent. Time to first token: from sending the request to the first event
// that carries text (or, with --logprobs, names a token). Tokens: the usage the last event reports
// (stream_options.include_usage); an event's gap is spread evenly over the
// request's tokens per event, as BenchRun spreads a chunk's.
class HttpBenchRun {
 public:
  HttpBenchRun(std::string host, int port, std::string path, std::string body,
               std::string bearer, bool chat)
      : host_(std::move(host)), port_(port), path_(std::move(path)), body_(std::move(body)),
        bearer_(std::move(bearer)), chat_(chat) {}

  // One request; its figures, or an error message.
  struct One {
    std::string error;
    int64_t tokens = 0;
    double ttft_ms = -1, request_ms = 0;
    std::vector<double> event_ms;  // arrival of each text event after the first, from the previous
  };

  // A client per stream, kept alive from request to request as a gRPC
  // channel is (no connect in the time to first token).
  std::unique_ptr<httplib::Client> NewClient() const {
    auto http = std::make_unique<httplib::Client>(host_, port_);
    http->set_read_timeout(300, 0);
    http->set_connection_timeout(10, 0);
    http->set_keep_alive(true);
    http->set_tcp_nodelay(true);
    return http;
  }

  One Send(httplib::Client& http) const {
    One one;
    httplib::Request req;
    req.method = "POST";
    req.path = path_;
    req.body = body_;
    req.set_header("Content-Type", "application/json");
    if (!bearer_.empty()) req.set_header("Authorization", "Bearer " + bearer_);
    const absl::Time start = absl::Now();
    absl::Time last;
    std::string pending;
    bool done = false;
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      pending.append(data, size);
      for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        absl::string_view payload = event;
        if (!absl::ConsumePrefix(&payload, "data: ")) continue;
        if (payload == "[DONE]") {
          done = true;
          continue;
        }
        nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) {
          one.error = "an event that is not JSON";
          return false;
        }
        if (j.contains("error")) {
          one.error = j["error"].value("message", "error event");
          return false;
        }
        if (j.contains("usage") && j["usage"].is_object()) {
          one.tokens = j["usage"].value("completion_tokens", int64_t{0});
        }
        bool text = false;
        if (j.contains("choices") && j["choices"].is_array()) {
          for (const auto& c : j["choices"]) {
            const nlohmann::json* t = nullptr;
            if (chat_ && c.contains("delta") && c["delta"].contains("content")) {
              t = &c["delta"]["content"];
            } else if (!chat_ && c.contains("text")) {
              t = &c["text"];
            }
            if (t != nullptr && t->is_string() && !t->get_ref<const std::string&>().empty()) {
              text = true;
            }
            // With --logprobs an event names its tokens even where their
            // text is held back (bytes of an unfinished UTF-8 character).
            if (c.contains("logprobs") && c["logprobs"].is_object()) {
              const nlohmann::json& lp = c["logprobs"];
              const char* list = chat_ ? "content" : "tokens";
              if (lp.contains(list) && lp[list].is_array() && !lp[list].empty()) text = true;
            }
          }
        }
        if (!text) continue;
        const absl::Time now = absl::Now();
        if (one.ttft_ms < 0) {
          one.ttft_ms = absl::ToDoubleMilliseconds(now - start);
        } else {
          one.event_ms.push_back(absl::ToDoubleMilliseconds(now - last));
        }
        last = now;
      }
      return true;
    };
    httplib::Result res = http.send(req);
    one.request_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (!one.error.empty()) return one;
    if (!res) {
      one.error = "HTTP: " + httplib::to_string(res.error());
    } else if (res->status != 200) {
      one.error = absl::StrFormat("HTTP %d", res->status);
    } else if (!done) {
      one.error = "the stream ended without data: [DONE]";
    } else if (one.tokens <= 0) {
      one.error = "no usage in the stream";
    }
    return one;
  }

  void Run(int concurrency, int total) {
    std::atomic<int> next{0};
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrency; ++t) {
      threads.emplace_back([&] {
        std::unique_ptr<httplib::Client> http = NewClient();
        while (next.fetch_add(1) < total) {
          One one = Send(*http);
          dikkat::MutexLock lock(&mu_);
          Add(one);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    wall_ = absl::Now() - start;
  }

  void Add(const One& one) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!one.error.empty()) {
      ++totals_.failed;
      ++errors_[one.error];
      return;
    }
    ++totals_.ok;
    totals_.tokens += one.tokens;
    if (one.ttft_ms >= 0) totals_.ttft_ms.push_back(one.ttft_ms);
    const double per_event = static_cast<double>(one.tokens) / (one.event_ms.size() + 1);
    for (double gap : one.event_ms) {
      for (int k = 0; k < static_cast<int>(std::lround(per_event)); ++k) {
        totals_.inter_token_ms.push_back(gap / per_event);
      }
    }
    totals_.request_ms.push_back(one.request_ms);
  }

  void Report(std::ostream& out) const {
    dikkat::MutexLock lock(&mu_);
    RunReport r = totals_;
    for (const auto& [message, count] : errors_) {
      r.error_lines.push_back(absl::StrFormat("%d x %s", count, message));
    }
    PrintReport(out, r, absl::ToDoubleSeconds(wall_));
  }

  bool all_ok() const {
    dikkat::MutexLock lock(&mu_);
    return totals_.failed == 0;
  }

 private:
  const std::string host_;
  const int port_;
  const std::string path_, body_, bearer_;
  const bool chat_;
  mutable dikkat::Mutex mu_;
  RunReport totals_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> errors_ ABSL_GUARDED_BY(mu_);  // message -> count
  absl::Duration wall_;
};

// "http://host:port" -> host and port.
bool ParseHttpUrl(absl::string_view url, std::string* host, int* port) {
  if (!absl::ConsumePrefix(&url, "http://")) return false;
  absl::ConsumeSuffix(&url, "/");
  const size_t colon = url.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  *host = std::string(url.substr(0, colon));
  if (absl::StartsWith(*host, "[") && absl::EndsWith(*host, "]")) {
    *host = host->substr(1, host->size() - 2);
  }
  return absl::SimpleAtoi(url.substr(colon + 1), port) && *port > 0 && *port < 65536;
}

class BenchCommand : public Command {
 public:
  std::string name() const override { return "bench"; }
  std::string summary() const override {
    return "load test: concurrent Generate streams, tokens/s and latency percentiles";
  }
  std::string description() const override {
    return "usage: dikkat bench [flags]\n\n"
           "Sends --requests Generate calls, keeping --concurrency streams in flight, and\n"
           "reports aggregate generated tokens/s and requests/s over the wall time, plus\n"
           "p50/p90/p99/mean of the time to first token, the inter-token latency (the gap\n"
           "between chunks divided by the tokens they carry) and the request latency, all\n"
           "measured at the client; over gRPC also the server's own time to first token\n"
           "(from its engine taking the request; the rest is transport and delivery).\n"
           "--warmup requests run first, one at a time, and are not counted. Exits 1 if any\n"
           "request failed.\n\n"
           "With --openai=http://HOST:PORT the requests go to the server's OpenAI-compatible\n"
           "port instead: streamed /v1/completions, or /v1/chat/completions with the prompt as\n"
           "one user message (--openai-chat); tokens are counted from the usage the stream\n"
           "reports. --token, if set, is sent as the bearer token.";
  }
  void RegisterFlags(FlagSet* f) override {
    f->Int("concurrency", &concurrency_, "streams in flight at once");
    f->Int("requests", &requests_, "requests in total");
    f->String("prompt", &prompt_, "prompt of every request");
    f->Int("max-tokens", &max_tokens_, "tokens to generate per request");
    f->OptionalDouble("temperature", &temperature_, "sampling temperature (default: server's)");
    f->OptionalUint64("seed", &seed_, "random seed of every request");
    f->Bool("ignore-eos", &ignore_eos_,
            "generate --max-tokens every time, past EOS (--no-ignore-eos to stop at EOS)");
    f->Int("warmup", &warmup_, "requests run before measuring");
    f->OptionalInt("logprobs", &logprobs_,
                   "ask for each token's log-probability and this many alternatives (gRPC "
                   "top_logprobs; OpenAI logprobs)");
    f->String("openai", &openai_,
              "http://HOST:PORT: send the load to the OpenAI-compatible port instead of gRPC");
    f->Bool("openai-chat", &openai_chat_,
            "with --openai: /v1/chat/completions (prompt as one user message) instead of "
            "/v1/completions");
    f->Int("unique-suffix", &unique_suffix_,
           "append to each request's prompt a suffix of this many bytes that no other request "
           "has (a shared prefix with distinct endings, as with one system prompt)");
  }

  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    if (!args.empty()) return UsageError(name(), "takes no arguments; use --prompt");
    if (concurrency_ < 1) return UsageError(name(), "--concurrency must be >= 1");
    if (requests_ < 1) return UsageError(name(), "--requests must be >= 1");
    if (max_tokens_ < 1) return UsageError(name(), "--max-tokens must be >= 1");
    if (unique_suffix_ < 0) return UsageError(name(), "--unique-suffix must be >= 0");
    if (!openai_.empty()) return RunOpenAi(context);
    v1::GenerateRequest request;
    *request.mutable_input() = TextInput(prompt_);
    request.set_max_new_tokens(max_tokens_);
    request.set_ignore_eos(ignore_eos_);
    if (temperature_) request.mutable_sampling()->set_temperature(*temperature_);
    if (seed_) request.mutable_sampling()->set_seed(*seed_);
    if (logprobs_) request.set_top_logprobs(*logprobs_);

    for (int i = 0; i < warmup_; ++i) {
      absl::StatusOr<GenerateResult> result = context.client->Generate(request, context.Call());
      if (!result.ok()) return ReportError(result.status(), context);
    }
    std::cout << absl::StrFormat(
        "bench: %d requests, concurrency %d, max tokens %d, prompt %d bytes, target %s\n",
        requests_, concurrency_, max_tokens_, prompt_.size(), context.client->channel_target());
    auto run = std::make_shared<BenchRun>(context.client, request, context.Call(), requests_,
                                          unique_suffix_);
    run->Run(concurrency_);
    run->Report(std::cout);
    if (context.interrupt->cancelled()) return kExitInterrupted;
    return run->all_ok() ? kExitOk : kExitFailure;
  }

 private:
  int RunOpenAi(const CommandContext& context) {
    std::string host;
    int port = 0;
    if (!ParseHttpUrl(openai_, &host, &port)) {
      return UsageError(name(), "--openai must be http://HOST:PORT");
    }
    if (unique_suffix_ > 0) return UsageError(name(), "--unique-suffix is gRPC only");
    nlohmann::json body = {{"max_tokens", max_tokens_},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}},
                           {"ignore_eos", ignore_eos_}};
    if (!context.globals->model.empty()) body["model"] = context.globals->model;
    if (openai_chat_) {
      body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt_}}});
    } else {
      body["prompt"] = prompt_;
    }
    if (temperature_) body["temperature"] = *temperature_;
    if (seed_) body["seed"] = *seed_;
    if (logprobs_ && openai_chat_) {
      body["logprobs"] = true;
      body["top_logprobs"] = *logprobs_;
    } else if (logprobs_) {
      body["logprobs"] = *logprobs_;
    }
    HttpBenchRun run(host, port, openai_chat_ ? "/v1/chat/completions" : "/v1/completions",
                     body.dump(), context.globals->token, openai_chat_);
    for (int i = 0; i < warmup_; ++i) {
      HttpBenchRun::One one = run.Send(*run.NewClient());
      if (!one.error.empty()) {
        std::cerr << "error: " << one.error << "\n";
        return kExitFailure;
      }
    }
    std::cout << absl::StrFormat(
        "bench: %d requests, concurrency %d, max tokens %d, prompt %d bytes, target %s%s\n",
        requests_, concurrency_, max_tokens_, prompt_.size(), openai_,
        openai_chat_ ? "/v1/chat/completions" : "/v1/completions");
    run.Run(concurrency_, requests_);
    run.Report(std::cout);
    return run.all_ok() ? kExitOk : kExitFailure;
  }

  int concurrency_ = 4;
  int requests_ = 32;
  std::string prompt_ = "The quick brown fox";
  int max_tokens_ = 64;
  std::optional<double> temperature_;
  std::optional<uint64_t> seed_;
  bool ignore_eos_ = true;
  int warmup_ = 1;
  int unique_suffix_ = 0;
  std::optional<int> logprobs_;
  std::string openai_;
  bool openai_chat_ = false;
};

}  // namespace

std::unique_ptr<Command> NewBenchCommand() { return std::make_unique<BenchCommand>(); }

}  // namespace dikkat::client::cli
