// `dikkat bench`: an end-to-end load generator over Generate streams.
//
// It keeps --concurrency streams in flight with the async API: each finished
// stream starts the next request from its completion callback, so there is
// no thread per stream and no gap between requests.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>

#include "absl/strings/str_format.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "client/cli/commands.h"

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

// Measurements of one stream, touched only by its own (serialized) callbacks.
struct StreamTiming {
  absl::Time start;
  absl::Time last_token;
  bool has_token = false;
  int tokens = 0;
  double ttft_ms = 0;
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
    const double seconds = absl::ToDoubleSeconds(wall_);
    out << absl::StrFormat("completed: %d ok, %d failed in %.2f s\n", ok_, finished_ - ok_,
                           seconds);
    for (const auto& [code, count] : errors_) {
      out << absl::StrFormat("  %d x %s (first: %s)\n", count, absl::StatusCodeToString(code),
                             first_error_.at(code));
    }
    out << absl::StrFormat("throughput: %.1f generated tokens/s, %.2f requests/s\n",
                           total_tokens_ / seconds, ok_ / seconds);
    out << absl::StrFormat("%-22s %9s %9s %9s %9s\n", "latency (ms)", "p50", "p90", "p99",
                           "mean");
    PrintRow(out, "time to first token", ttft_ms_);
    PrintRow(out, "inter-token", inter_token_ms_);
    PrintRow(out, "request", request_ms_);
    if (ok_ > 0) {
      out << absl::StrFormat("tokens per request: %.1f\n",
                             static_cast<double>(total_tokens_) / ok_);
    }
  }

  bool all_ok() const {
    dikkat::MutexLock lock(&mu_);
    return ok_ == total_;
  }

 private:
  static void PrintRow(std::ostream& out, const char* name, std::vector<double> values) {
    std::sort(values.begin(), values.end());
    out << absl::StrFormat("%-22s %9.2f %9.2f %9.2f %9.2f\n", name, Percentile(values, 50),
                           Percentile(values, 90), Percentile(values, 99), Mean(values));
  }

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
  std::vector<double> inter_token_ms_ ABSL_GUARDED_BY(mu_);
  std::vector<double> request_ms_ ABSL_GUARDED_BY(mu_);
  std::map<absl::StatusCode, int> errors_ ABSL_GUARDED_BY(mu_);
  std::map<absl::StatusCode, std::string> first_error_ ABSL_GUARDED_BY(mu_);
  absl::Duration wall_ ABSL_GUARDED_BY(mu_);
};

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
           "measured at the client. --warmup requests run first, one at a time, and are\n"
           "not counted. Exits 1 if any request failed.";
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
    v1::GenerateRequest request;
    *request.mutable_input() = TextInput(prompt_);
    request.set_max_new_tokens(max_tokens_);
    request.set_ignore_eos(ignore_eos_);
    if (temperature_) request.mutable_sampling()->set_temperature(*temperature_);
    if (seed_) request.mutable_sampling()->set_seed(*seed_);

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
  int concurrency_ = 4;
  int requests_ = 32;
  std::string prompt_ = "The quick brown fox";
  int max_tokens_ = 64;
  std::optional<double> temperature_;
  std::optional<uint64_t> seed_;
  bool ignore_eos_ = true;
  int warmup_ = 1;
  int unique_suffix_ = 0;
};

}  // namespace

std::unique_ptr<Command> NewBenchCommand() { return std::make_unique<BenchCommand>(); }

}  // namespace dikkat::client::cli
