// dikkat-soak: keeps a running dikkat-server under load with faults for a
// bounded time, then checks that it lost nothing.
//
// Load: --workers client threads, each looping over a random mix of greedy
// Generate streams run to the end, streams cancelled mid-way (by the reader
// or from another thread), calls with deadlines that expire, clients killed
// mid-stream (a child process is SIGKILLed, so its TCP connection drops
// without a goodbye), invalid requests, and Encode / Attention / Tokenize
// calls; a burst thread fires --burst_size streams at once every
// --burst_every to overflow the queue.
//
// Checks, each a failure (exit status 1) when broken:
//   * every call ended with a status its kind may produce (e.g. an invalid
//     request only INVALID_ARGUMENT / NOT_FOUND; a stream cancelled by its
//     reader only CANCELLED or OK), all of them codes documented in
//     proto/dikkat/v1/dikkat.proto;
//   * every greedy stream that completed produced exactly the tokens and text
//     of the same request run alone before the soak;
//   * afterwards the server reports SERVING, every KV block is free and no
//     request is running or waiting (from /metrics);
//   * resident memory grew by at most --max_rss_growth_mib between the end of
//     a warm-up phase (same mix, --warmup) and the end of the soak.
//
//   dikkat-soak --target=HOST:PORT --metrics=HOST:PORT [--duration=60s] [...]
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "gRPC address of the server.");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9090", "host:port of the server's /metrics.");
ABSL_FLAG(std::string, model, "", "Model to load (empty = the server's default).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(60), "How long the soak runs.");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(3),
          "Load before the 'before' memory reading (allocator pools, gRPC threads).");
ABSL_FLAG(int32_t, workers, 24, "Client threads, each with one call in flight at a time.");
ABSL_FLAG(int32_t, burst_size, 150, "Streams started at once by each overload burst.");
ABSL_FLAG(absl::Duration, burst_every, absl::Seconds(5), "Time between overload bursts.");
ABSL_FLAG(int64_t, max_rss_growth_mib, 64, "Allowed resident-memory growth during the soak.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the random mix.");
ABSL_FLAG(std::string, token, "", "Bearer token, if the server wants one.");
ABSL_FLAG(std::string, child_stream, "",
          "Internal: run one endless stream against this target until killed.");

namespace dikkat::soak {
namespace {

using absl::StatusCode;
using client::Client;
using client::ClientOptions;

// The kinds of call the workers make; each has the statuses it may end with.
enum class Kind {
  kGreedy,          // greedy stream read to the end; compared with the reference
  kReaderCancel,    // the reader stops after a few chunks
  kHandleCancel,    // another thread cancels after a random delay
  kDeadline,        // a deadline of a few milliseconds
  kDisconnect,      // a child process streaming is SIGKILLed
  kInvalid,         // a malformed request
  kUnary,           // Encode / Attention / Tokenize
  kBurst,           // overload burst streams (greedy; compared when they complete)
  kNumKinds
};
constexpr const char* kKindNames[] = {"greedy",  "reader-cancel", "handle-cancel",
                                      "deadline", "disconnect",    "invalid",
                                      "unary",   "burst"};

bool Allowed(Kind kind, StatusCode code) {
  const bool overload = code == StatusCode::kResourceExhausted;
  switch (kind) {
    case Kind::kGreedy:
    case Kind::kUnary:
      return code == StatusCode::kOk || overload;
    case Kind::kReaderCancel:
    case Kind::kHandleCancel:
      return code == StatusCode::kOk || code == StatusCode::kCancelled || overload;
    case Kind::kDeadline:
    case Kind::kBurst:
      return code == StatusCode::kOk || code == StatusCode::kDeadlineExceeded || overload;
    case Kind::kDisconnect:
      return true;  // the child's status is never seen
    case Kind::kInvalid:
      return code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound;
    case Kind::kNumKinds:
      break;
  }
  return false;
}

const std::vector<std::string>& Prompts() {
  static const auto* prompts = new std::vector<std::string>{
      "The quick brown fox", "Once upon a time", "In the beginning", "0123456789",
      "hello world, hello", "A B C D E F G", "Lorem ipsum dolor sit amet", "zzz"};
  return *prompts;
}

v1::GenerateRequest GreedyRequest(size_t prompt, const std::string& model) {
  v1::GenerateRequest r;
  r.set_model(model);
  r.mutable_input()->set_text(Prompts()[prompt]);
  r.set_max_new_tokens(8 + static_cast<int>(prompt) * 3);
  r.mutable_sampling()->set_temperature(0.0f);
  return r;
}

// Long enough to be interrupted.
v1::GenerateRequest LongRequest(const std::string& model) {
  v1::GenerateRequest r;
  r.set_model(model);
  r.mutable_input()->set_text("a long story: ");
  r.set_max_new_tokens(200);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.8f);
  return r;
}

struct Reference {
  std::vector<int32_t> ids;
  std::string text;
};

class Soak {
 public:
  Soak(std::unique_ptr<Client> client, std::string model)
      : client_(std::move(client)), model_(std::move(model)) {}

  absl::Status ComputeReferences() {
    for (size_t p = 0; p < Prompts().size(); ++p) {
      absl::StatusOr<client::GenerateResult> r = client_->Generate(GreedyRequest(p, model_));
      if (!r.ok()) return r.status();
      references_.push_back({r->token_ids, r->text});
    }
    return absl::OkStatus();
  }

  // Runs the mix until `end`. Counts go to the current phase's tables.
  void Run(absl::Time end, uint64_t seed, bool bursts) {
    std::vector<std::thread> threads;
    for (int w = 0; w < absl::GetFlag(FLAGS_workers); ++w) {
      threads.emplace_back([this, end, seed, w] { Worker(end, seed * 1000 + w); });
    }
    if (bursts) threads.emplace_back([this, end] { Bursts(end); });
    for (std::thread& t : threads) t.join();
    // Burst calls may still run: wait for them (they all have deadlines).
    while (outstanding_.load() > 0) absl::SleepFor(absl::Milliseconds(20));
  }

  void ResetCounts() {
    dikkat::MutexLock lock(&mu_);
    counts_.clear();
    mismatches_ = 0;
    unexpected_.clear();
    streams_ = 0;
  }

  // Prints the tables; returns false if any status was unexpected or any
  // completed greedy answer differed from its reference.
  bool Report(absl::Duration elapsed) {
    dikkat::MutexLock lock(&mu_);
    std::map<StatusCode, int64_t> by_code;
    int64_t total = 0;
    for (const auto& [key, n] : counts_) {
      by_code[key.second] += n;
      total += n;
    }
    absl::PrintF("calls: %d in %.1f s (%.1f/s); Generate streams: %d\n", total,
                 absl::ToDoubleSeconds(elapsed), total / absl::ToDoubleSeconds(elapsed),
                 streams_);
    absl::PrintF("by code:");
    for (const auto& [code, n] : by_code) {
      absl::PrintF(" %s=%d", absl::StatusCodeToString(code), n);
    }
    absl::PrintF("\nby kind:\n");
    for (int k = 0; k < static_cast<int>(Kind::kNumKinds); ++k) {
      absl::PrintF("  %-14s", kKindNames[k]);
      for (const auto& [key, n] : counts_) {
        if (key.first == static_cast<Kind>(k)) {
          absl::PrintF(" %s=%d", absl::StatusCodeToString(key.second), n);
        }
      }
      absl::PrintF("\n");
    }
    absl::PrintF("greedy answers compared: %d, different from the reference: %d\n", compared_,
                 mismatches_);
    for (const std::string& u : unexpected_) absl::PrintF("UNEXPECTED: %s\n", u);
    return unexpected_.empty() && mismatches_ == 0;
  }

 private:
  void Record(Kind kind, const absl::Status& status) {
    dikkat::MutexLock lock(&mu_);
    ++counts_[{kind, status.code()}];
    if (!Allowed(kind, status.code()) && unexpected_.size() < 20) {
      unexpected_.push_back(absl::StrCat(kKindNames[static_cast<int>(kind)], ": ",
                                         status.ToString()));
    }
  }

  void Compare(size_t prompt, const std::vector<int32_t>& ids, const std::string& text) {
    dikkat::MutexLock lock(&mu_);
    ++compared_;
    const Reference& ref = references_[prompt];
    if (ids != ref.ids || text != ref.text) {
      ++mismatches_;
      if (unexpected_.size() < 20) {
        unexpected_.push_back(absl::StrCat("prompt ", prompt, " gave '", text, "', alone '",
                                           ref.text, "'"));
      }
    }
  }

  void CountStream() {
    dikkat::MutexLock lock(&mu_);
    ++streams_;
  }

  client::CallOptions Timeout(absl::Duration d) {
    client::CallOptions o;
    o.timeout = d;
    return o;
  }

  void Worker(absl::Time end, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, 99);
    std::uniform_int_distribution<size_t> prompt(0, Prompts().size() - 1);
    while (absl::Now() < end) {
      const int r = pick(rng);
      if (r < 35) {
        Greedy(prompt(rng));
      } else if (r < 48) {
        ReaderCancel(1 + static_cast<int>(rng() % 4));
      } else if (r < 58) {
        HandleCancel(absl::Milliseconds(static_cast<int64_t>(rng() % 120)));
      } else if (r < 68) {
        Deadline(absl::Milliseconds(1 + static_cast<int64_t>(rng() % 60)), prompt(rng));
      } else if (r < 72) {
        Disconnect(absl::Milliseconds(50 + static_cast<int64_t>(rng() % 250)));
      } else if (r < 86) {
        Invalid(static_cast<int>(rng() % 8));
      } else {
        Unary(static_cast<int>(rng() % 3));
      }
    }
  }

  void Greedy(size_t prompt) {
    CountStream();
    absl::StatusOr<client::GenerateResult> r =
        client_->Generate(GreedyRequest(prompt, model_), Timeout(absl::Seconds(60)));
    Record(Kind::kGreedy, r.status());
    if (r.ok()) Compare(prompt, r->token_ids, r->text);
  }

  void ReaderCancel(int chunks) {
    CountStream();
    int seen = 0;
    absl::Status s = client_->GenerateStream(
        LongRequest(model_), [&](const v1::GenerateResponse&) { return ++seen < chunks; },
        Timeout(absl::Seconds(60)));
    Record(Kind::kReaderCancel, s);
  }

  void HandleCancel(absl::Duration after) {
    CountStream();
    client::CallOptions options = Timeout(absl::Seconds(60));
    options.cancel = std::make_shared<client::CancelHandle>();
    client::GenerateCall call = client_->GenerateAsync(LongRequest(model_), nullptr, nullptr,
                                                       options);
    absl::SleepFor(after);
    options.cancel->Cancel();
    Record(Kind::kHandleCancel, call.Wait());
  }

  void Deadline(absl::Duration timeout, size_t prompt) {
    CountStream();
    absl::StatusOr<client::GenerateResult> r =
        client_->Generate(GreedyRequest(prompt, model_), Timeout(timeout));
    Record(Kind::kDeadline, r.status());
    if (r.ok()) Compare(prompt, r->token_ids, r->text);
  }

  // A child process streams until SIGKILL: the server sees the connection
  // drop mid-stream, not a cancellation.
  void Disconnect(absl::Duration after) {
    CountStream();
    std::string self = "/proc/self/exe";
    std::string flag = absl::StrCat("--child_stream=", absl::GetFlag(FLAGS_target));
    std::string model = absl::StrCat("--model=", model_);
    std::string token = absl::StrCat("--token=", absl::GetFlag(FLAGS_token));
    char* argv[] = {self.data(), flag.data(), model.data(), token.data(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ) != 0) {
      Record(Kind::kDisconnect, absl::InternalError("posix_spawn failed"));
      return;
    }
    absl::SleepFor(after);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    Record(Kind::kDisconnect, absl::OkStatus());
  }

  void Invalid(int which) {
    absl::Status s;
    v1::GenerateRequest g = GreedyRequest(0, model_);
    switch (which) {
      case 0:
        g.clear_input();
        break;
      case 1:
        g.mutable_input()->mutable_tokens()->add_ids(1 << 30);
        break;
      case 2:
        g.set_max_new_tokens(1 << 30);
        break;
      case 3:
        g.mutable_sampling()->set_top_p(7.0f);
        break;
      case 4:
        g.set_model("no-such-model");
        break;
      case 5:
        g.add_stop("");
        break;
      case 6: {
        v1::EncodeRequest e;
        e.set_model(model_);
        s = client_->Encode(e, Timeout(absl::Seconds(30))).status();  // no inputs
        break;
      }
      default: {
        v1::AttentionRequest a;
        a.set_model(model_);
        a.mutable_input()->set_text("abc");
        a.add_layers(999);
        s = client_->Attention(a, Timeout(absl::Seconds(30))).status();
        break;
      }
    }
    if (which <= 5) {
      CountStream();
      s = client_->Generate(g, Timeout(absl::Seconds(30))).status();
    }
    Record(Kind::kInvalid, s);
  }

  void Unary(int which) {
    absl::Status s;
    if (which == 0) {
      v1::EncodeRequest e;
      e.set_model(model_);
      e.add_inputs()->set_text("encode me");
      e.add_inputs()->set_text("and me too");
      s = client_->Encode(e, Timeout(absl::Seconds(60))).status();
    } else if (which == 1) {
      v1::AttentionRequest a;
      a.set_model(model_);
      a.mutable_input()->set_text("look at this");
      a.set_aggregation(v1::HEAD_AGGREGATION_MEAN);
      s = client_->Attention(a, Timeout(absl::Seconds(60))).status();
    } else {
      v1::TokenizeRequest t;
      t.set_model(model_);
      t.set_text("tokenize this text");
      s = client_->Tokenize(t, Timeout(absl::Seconds(60))).status();
    }
    Record(Kind::kUnary, s);
  }

  void Bursts(absl::Time end) {
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
    while (true) {
      const absl::Time next = absl::Now() + absl::GetFlag(FLAGS_burst_every);
      if (next >= end) return;
      absl::SleepFor(next - absl::Now());
      for (int i = 0; i < absl::GetFlag(FLAGS_burst_size); ++i) {
        const size_t p = rng() % Prompts().size();
        CountStream();
        ++outstanding_;
        auto result = std::make_shared<client::GenerateResult>();
        client_->GenerateAsync(
            GreedyRequest(p, model_),
            [result](const v1::GenerateResponse& m) {
              for (const auto& t : m.tokens()) result->token_ids.push_back(t.id());
              result->text += m.text();
              return true;
            },
            [this, result, p](absl::Status s) {
              Record(Kind::kBurst, s);
              if (s.ok()) Compare(p, result->token_ids, result->text);
              --outstanding_;
            },
            Timeout(absl::Seconds(10)));
      }
    }
  }

  std::unique_ptr<Client> client_;
  const std::string model_;
  std::vector<Reference> references_;  // by prompt; written before the workers start
  std::atomic<int> outstanding_{0};

  dikkat::Mutex mu_;
  std::map<std::pair<Kind, StatusCode>, int64_t> counts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unexpected_ ABSL_GUARDED_BY(mu_);
  int64_t compared_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t streams_ ABSL_GUARDED_BY(mu_) = 0;
};

// ---- /metrics -------------------------------------------------------------------

// Sum of every series of `name` (any labels); nullopt if absent.
std::optional<double> MetricSum(const std::string& text, absl::string_view name) {
  std::optional<double> sum;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name)) continue;
    if (line.empty() || (line[0] != ' ' && line[0] != '{')) continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &v)) continue;
    sum = sum.value_or(0) + v;
  }
  return sum;
}

absl::StatusOr<std::string> Scrape() {
  const std::string address = absl::GetFlag(FLAGS_metrics);
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics=", address, ": want host:port"));
  }
  httplib::Client http(address.substr(0, colon), port);
  http.set_read_timeout(5, 0);
  httplib::Result res = http.Get("/metrics");
  if (!res || res->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET http://", address, "/metrics failed"));
  }
  return res->body;
}

absl::StatusOr<double> ScrapeValue(absl::string_view name) {
  absl::StatusOr<std::string> text = Scrape();
  if (!text.ok()) return text.status();
  std::optional<double> v = MetricSum(*text, name);
  if (!v.has_value()) return absl::NotFoundError(absl::StrCat("no ", name, " in /metrics"));
  return *v;
}

int ChildStream(const std::string& target) {
  ClientOptions options;
  options.targets = {target};
  options.bearer_token = absl::GetFlag(FLAGS_token);
  options.default_timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(options);
  if (!c.ok()) return 1;
  v1::GenerateRequest r = LongRequest(absl::GetFlag(FLAGS_model));
  r.set_max_new_tokens(4000);
  (void)(*c)->GenerateStream(r, [](const v1::GenerateResponse&) { return true; });
  return 0;
}

int Main() {
  ClientOptions options;
  options.targets = {absl::GetFlag(FLAGS_target)};
  options.retry.max_attempts = 1;  // see every status the server sends
  options.bearer_token = absl::GetFlag(FLAGS_token);
  options.max_message_bytes = 64 << 20;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(options);
  if (!c.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: %s\n", c.status().ToString());
    return 2;
  }
  Client* client = c->get();
  absl::StatusOr<client::HealthStatus> health = client->HealthCheck();
  if (!health.ok() || *health != grpc::health::v1::HealthCheckResponse::SERVING) {
    absl::FPrintF(stderr, "dikkat-soak: the server is not SERVING: %s\n",
                  health.ok() ? client::HealthStatusName(*health) : health.status().ToString());
    return 2;
  }
  Soak soak(std::move(*c), absl::GetFlag(FLAGS_model));
  if (absl::Status s = soak.ComputeReferences(); !s.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: reference run failed: %s\n", s.ToString());
    return 2;
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  soak.Run(absl::Now() + absl::GetFlag(FLAGS_warmup), seed + 7, false);
  soak.ResetCounts();
  absl::StatusOr<double> rss_before = ScrapeValue("process_resident_memory_bytes");
  if (!rss_before.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: %s\n", rss_before.status().ToString());
    return 2;
  }

  const absl::Time start = absl::Now();
  soak.Run(start + absl::GetFlag(FLAGS_duration), seed, true);
  const absl::Duration elapsed = absl::Now() - start;
  bool ok = soak.Report(elapsed);

  // Cancellations reach the engine asynchronously: give it a moment.
  double used = -1, running = -1, waiting = -1;
  const absl::Time settle = absl::Now() + absl::Seconds(10);
  while (absl::Now() < settle) {
    absl::StatusOr<std::string> text = Scrape();
    if (text.ok()) {
      used = MetricSum(*text, "dikkat_kv_cache_blocks_used").value_or(-1);
      running = MetricSum(*text, "dikkat_requests_running").value_or(-1);
      waiting = MetricSum(*text, "dikkat_requests_waiting").value_or(-1);
      if (used == 0 && running == 0 && waiting == 0) break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  absl::PrintF("after: kv blocks used %.0f, running %.0f, waiting %.0f\n", used, running, waiting);
  if (absl::StatusOr<std::string> text = Scrape(); text.ok()) {
    absl::PrintF("server counters: preemptions %.0f\n",
                 MetricSum(*text, "dikkat_preemptions_total").value_or(-1));
  }
  if (used != 0 || running != 0 || waiting != 0) {
    absl::PrintF("FAIL: the server still holds KV blocks or requests\n");
    ok = false;
  }
  health = client->HealthCheck();
  absl::PrintF("health: %s\n",
               health.ok() ? client::HealthStatusName(*health) : health.status().ToString());
  if (!health.ok() || *health != grpc::health::v1::HealthCheckResponse::SERVING) ok = false;

  absl::StatusOr<double> rss_after = ScrapeValue("process_resident_memory_bytes");
  if (!rss_after.ok()) {
    absl::PrintF("FAIL: %s\n", rss_after.status().ToString());
    return 1;
  }
  const double growth_mib = (*rss_after - *rss_before) / (1 << 20);
  absl::PrintF("resident memory: %.1f MiB before, %.1f MiB after (%+.1f MiB; bound %d MiB)\n",
               *rss_before / (1 << 20), *rss_after / (1 << 20), growth_mib,
               absl::GetFlag(FLAGS_max_rss_growth_mib));
  if (growth_mib > absl::GetFlag(FLAGS_max_rss_growth_mib)) ok = false;
  absl::PrintF("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace dikkat::soak

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_child_stream).empty()) {
    return dikkat::soak::ChildStream(absl::GetFlag(FLAGS_child_stream));
  }
  return dikkat::soak::Main();
}
