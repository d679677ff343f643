// dikkat-soak: keeps a running dikkat-server under load with faults for a
// bounded time, then checks that it lost nothing and that the faults did not
// hurt the clients that behave (docs/soak.md).
//
// --mode=soak (the default), the chaos soak. Phases, in this order:
//   warm-up   the abusive mix alone (allocator pools, gRPC threads), then the
//             "before" reading of the server's resident memory;
//   rounds    --rounds times a *quiet* window then a *chaos* window. All along
//             a probe sends well-behaved greedy Generate calls at a fixed rate
//             (--probe_rate) on its own connection, --good_workers threads
//             send well-behaved greedy / Encode / Attention / Tokenize calls on
//             another, and a /healthz probe polls the metrics port. --workers
//             threads (one call at a time, --think between calls) send the
//             polite mix in the quiet windows (greedy, long streams read to
//             the end, Encode / Attention / Tokenize) and the abusive mix in
//             the chaos windows (greedy streams, streams cancelled by the
//             reader or from another thread, deadlines that expire, clients
//             SIGKILLed mid-stream, slow readers, malformed and oversized
//             requests, wrong or missing bearer tokens, Encode / Attention /
//             Tokenize), where /metrics scrapes and abusive HTTP clients on
//             the metrics port (slowloris, idle connections, bodies, huge or
//             too many headers, garbage) join them, and with --openai the
//             same on the OpenAI port plus its own abuse (a body over the
//             limit, deep or invalid JSON, a wrong token, streams hung up or
//             never read). The probe's latency is
//             compared between the two kinds of window: the abuse must not
//             slow the well-behaved clients down past --max_p99_ratio;
//   overload  the abusive mix plus bursts of --burst_size streams at once that
//             overflow the queue (the probe may then be refused too).
// Checks, each a failure (exit status 1) when broken:
//   * every call ended with a status its kind may produce, all of them codes
//     documented in proto/dikkat/v1/dikkat.proto; well-behaved calls only OK;
//   * every greedy stream that completed produced exactly the tokens and text
//     of the same request run alone before the soak;
//   * every abusive HTTP client got one of its allowed answers (or was cut off
//     within the server's request deadline) and /healthz always answered 200;
//   * afterwards the server reports SERVING, every KV block is free and no
//     request is running or waiting (from /metrics);
//   * resident memory grew by at most --max_rss_growth_mib between the end of
//     the warm-up and the end of the soak;
//   * the probe's p99 in the chaos windows is at most --max_p99_ratio times its
//     p99 in the quiet windows (0 = reported only).
//
// --mode=restart: --workers clients send greedy calls, retrying UNAVAILABLE
//   (the client library's retries, then the caller's own loop with backoff),
//   while soak_test.sh SIGKILLs the server and starts it again on the same
//   port. Checks: only OK and UNAVAILABLE, an outage was seen, every client is
//   served again afterwards, and the new server holds no KV block or request.
// --mode=drain: --workers clients send greedy streams while soak_test.sh sends
//   SIGTERM. Checks: every stream that was running when the drain began
//   finished OK with the right answer, every call after it got UNAVAILABLE,
//   and once the server is gone calls get UNAVAILABLE.
// In both, "load running" is printed (and flushed) once the load is up, for
// the script to act on.
//
//   dikkat-soak --target=HOST:PORT --metrics=HOST:PORT [--openai=HOST:PORT]
//               [--duration=60s] [...]
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <httplib.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "common/sync.h"
#include "http_abuse.h"

ABSL_FLAG(std::string, mode, "soak", "soak, restart or drain (see the top of soak.cc).");
ABSL_FLAG(std::string, target, "127.0.0.1:50051", "gRPC address of the server.");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9090", "host:port of the server's /metrics.");
ABSL_FLAG(std::string, model, "", "Model to load (empty = the server's default).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(60),
          "soak: time in chaos windows, all rounds together; restart / drain: the longest "
          "the mode may take.");
ABSL_FLAG(absl::Duration, quiet, absl::Seconds(30),
          "Time in quiet windows (no abuse), all rounds together.");
ABSL_FLAG(int32_t, rounds, 3, "Quiet + chaos window pairs (alternated, so that a change in "
                              "the machine's background load hits both kinds alike).");
ABSL_FLAG(absl::Duration, overload, absl::Seconds(10),
          "Overload phase after the rounds: the abusive mix plus queue-overflowing bursts.");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(3),
          "Load before the 'before' memory reading (allocator pools, gRPC threads).");
ABSL_FLAG(int32_t, workers, 64,
          "Abusive client threads (soak) or clients (restart, drain), one call in flight each.");
ABSL_FLAG(int32_t, good_workers, 8, "Well-behaved client threads (soak), one call each.");
ABSL_FLAG(absl::Duration, think, absl::Milliseconds(400),
          "soak: mean pause of a worker between its calls (uniform in [0, 2x]). Clients that "
          "call back to back saturate the engine and every latency becomes queueing; the "
          "overload phase's bursts do that on purpose.");
ABSL_FLAG(double, probe_rate, 40, "Well-behaved probe calls per second (soak).");
ABSL_FLAG(int32_t, http_abusers, 6, "Abusive HTTP client threads on the metrics port (soak).");
ABSL_FLAG(std::string, openai, "",
          "host:port of the server's OpenAI-compatible port (--openai_listen); empty: the "
          "OpenAI port is not abused.");
ABSL_FLAG(int32_t, openai_abusers, 3, "Abusive HTTP client threads on the OpenAI port (soak).");
ABSL_FLAG(double, max_p99_ratio, 0,
          "Fail when the probe's chaos p99 exceeds this times its quiet p99; 0 = report only.");
ABSL_FLAG(int32_t, burst_size, 150, "Streams started at once by each overload burst.");
ABSL_FLAG(absl::Duration, burst_every, absl::Seconds(3), "Time between overload bursts.");
ABSL_FLAG(int64_t, max_message_bytes, 1 << 20,
          "The server's --max_message_bytes: oversized requests are made larger than it.");
ABSL_FLAG(int64_t, max_rss_growth_mib, 64, "Allowed resident-memory growth during the soak.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the random mix.");
ABSL_FLAG(std::string, token, "",
          "Bearer token, if the server wants one; with it the mix also sends wrong and "
          "missing tokens.");
ABSL_FLAG(std::string, child_stream, "",
          "Internal: run one endless stream against this target until killed.");

namespace dikkat::soak {
namespace {

using absl::StatusCode;
using client::Client;
using client::ClientOptions;

// The kinds of call; each has the statuses it may end with.
enum class Kind {
  kGreedy,          // greedy stream read to the end; compared with the reference
  kLong,            // a 200-token sampled stream read promptly to the end (quiet windows)
  kReaderCancel,    // the reader stops after a few chunks
  kHandleCancel,    // another thread cancels after a random delay
  kDeadline,        // a deadline of a few milliseconds
  kDisconnect,      // a child process streaming is SIGKILLed
  kInvalid,         // a malformed request
  kUnary,           // Encode / Attention / Tokenize
  kBurst,           // overload burst streams (greedy; compared when they complete)
  kSlowReader,      // a long stream read with pauses between chunks
  kAuth,            // a wrong or missing bearer token
  kOversized,       // a message past the server's limits
  kGood,            // well-behaved background calls on their own connection
  kProbe,           // the latency probe in quiet and chaos windows
  kProbeOverload,   // the latency probe during the overload phase
  kRestart,         // restart mode: calls while the server is killed and restarted
  kDrain,           // drain mode: calls while the server drains
  kSamples,         // n = 3 samples, a beam search, prompt scoring (compared), or an
                    // n = 4 stream cancelled after two messages
  kNumKinds
};
constexpr const char* kKindNames[] = {
    "greedy",     "long",          "reader-cancel", "handle-cancel", "deadline", "disconnect", "invalid",
    "unary",      "burst",         "slow-reader",   "auth",     "oversized",  "good",
    "probe",      "probe-overload", "restart",      "drain",    "samples"};
static_assert(sizeof(kKindNames) / sizeof(kKindNames[0]) == static_cast<int>(Kind::kNumKinds));

bool Allowed(Kind kind, StatusCode code) {
  const bool ok = code == StatusCode::kOk;
  const bool overload = code == StatusCode::kResourceExhausted;
  switch (kind) {
    case Kind::kGreedy:
    case Kind::kLong:
    case Kind::kUnary:
      return ok || overload;
    case Kind::kReaderCancel:
    case Kind::kHandleCancel:
      return ok || code == StatusCode::kCancelled || overload;
    case Kind::kDeadline:
    case Kind::kBurst:
    case Kind::kProbeOverload:
      return ok || code == StatusCode::kDeadlineExceeded || overload;
    case Kind::kDisconnect:
      return true;  // the child's status is never seen
    case Kind::kInvalid:
      return code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound;
    case Kind::kSlowReader:
      // The server cuts a stream whose unread output passes
      // --max_stream_pending_bytes with RST_STREAM: the client sees CANCELLED
      // (the server's metrics record RESOURCE_EXHAUSTED; docs/security.md).
      // The reader itself never cancels.
      return ok || code == StatusCode::kCancelled || overload;
    case Kind::kAuth:
      return code == StatusCode::kUnauthenticated;
    case Kind::kOversized:
      // Past --max_message_bytes gRPC refuses the message (RESOURCE_EXHAUSTED);
      // past --max_text_bytes or --max_batch_entries the service does.
      return code == StatusCode::kInvalidArgument || overload;
    case Kind::kGood:
    case Kind::kProbe:
      return ok;
    case Kind::kRestart:
    case Kind::kDrain:
      return ok || code == StatusCode::kUnavailable;
    case Kind::kSamples:
      return ok || code == StatusCode::kCancelled || overload;
    case Kind::kNumKinds:
      break;
  }
  return false;
}

// What the chaos windows (and the warm-up and overload phases) mix, by weight
// out of 100. The well-behaved load is separate (good workers, probe).
struct MixEntry {
  int weight;
  Kind kind;
};
constexpr MixEntry kChaosMix[] = {
    {12, Kind::kGreedy},     {6, Kind::kSamples},       {10, Kind::kReaderCancel}, {8, Kind::kHandleCancel},
    {8, Kind::kDeadline},    {4, Kind::kDisconnect},    {10, Kind::kInvalid},
    {3, Kind::kOversized},   {10, Kind::kSlowReader},   {10, Kind::kAuth},
    {19, Kind::kUnary}};

// What the same workers do in the quiet windows: the same number of calls
// at a time, each read promptly to its end. Comparing the probe's latency
// under this and under the abusive mix measures what the abuse costs the
// well-behaved clients, not what 64 more clients cost on 2 cores.
constexpr MixEntry kPoliteMix[] = {
    {35, Kind::kGreedy}, {10, Kind::kSamples}, {20, Kind::kLong}, {35, Kind::kUnary}};

// Soak phases; the probe's samples are filed under the phase they started and
// ended in (a sample that spans a change is dropped).
enum class Phase { kWarmup, kQuiet, kChaos, kOverload, kTransition };

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
// The kSamples shapes: 0: n = 3 seeded samples; 1: beam search (3 beams, 2
// hypotheses); 2: prompt scoring only; 3: n = 4 (cancelled mid-stream).
v1::GenerateRequest SamplesRequest(int shape, const std::string& model) {
  v1::GenerateRequest r;
  r.set_model(model);
  r.mutable_input()->set_text(shape == 2 ? "score this text, please" : "Several samples of");
  r.set_max_new_tokens(shape == 2 ? 0 : 12);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.8f);
  r.mutable_sampling()->set_seed(11);
  switch (shape) {
    case 0:
      r.set_n(3);
      break;
    case 1:
      r.set_beam_width(3);
      r.set_n(2);
      break;
    case 2:
      r.set_prompt_logprobs(1);
      break;
    default:
      r.set_n(4);
      r.set_max_new_tokens(200);
      break;
  }
  return r;
}

// Whether a kSamples call of `shape` returned what the same call did alone
// (`ref`). Samples are compared token for token (seeded). Numbers may move
// in their last bits with the batch around them (another kernel route), so
// prompt logprobs are compared within 1e-3, and a beam search, whose choices
// among the tiny model's near-flat proposals such a change can flip, by its
// shape and its best score within 0.05: a corrupted KV block moves it by far
// more.
bool SameSamples(int shape, const client::GenerateResult& got, const client::GenerateResult& ref) {
  if (got.samples.size() != ref.samples.size()) return false;
  for (size_t i = 0; i < got.samples.size(); ++i) {
    const client::GenerateSample& a = got.samples[i];
    const client::GenerateSample& b = ref.samples[i];
    if (a.finish_reason != b.finish_reason || a.token_ids.size() != b.token_ids.size()) return false;
    if (shape == 0 && a.token_ids != b.token_ids) return false;
  }
  if (shape == 1 && std::abs(got.samples[0].beam_score - ref.samples[0].beam_score) > 0.05) {
    return false;
  }
  if (got.prompt_logprobs.size() != ref.prompt_logprobs.size()) return false;
  for (size_t i = 0; i < got.prompt_logprobs.size(); ++i) {
    if (got.prompt_logprobs[i].id() != ref.prompt_logprobs[i].id() ||
        std::abs(got.prompt_logprobs[i].logprob() - ref.prompt_logprobs[i].logprob()) > 1e-3) {
      return false;
    }
  }
  return true;
}

std::string SamplesDigest(const client::GenerateResult& r) {
  std::string out;
  for (const client::GenerateSample& s : r.samples) {
    absl::StrAppend(&out, "[", absl::StrJoin(s.token_ids, ","), "]");
  }
  return out;
}

v1::GenerateRequest LongRequest(const std::string& model) {
  v1::GenerateRequest r;
  r.set_model(model);
  r.mutable_input()->set_text("a long story: ");
  r.set_max_new_tokens(200);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.8f);
  return r;
}

// A stream with a lot of output per token (20 alternatives each), long
// enough to fill the connection's flow-control window when nobody reads.
v1::GenerateRequest BulkyRequest(const std::string& model) {
  v1::GenerateRequest r = LongRequest(model);
  r.set_max_new_tokens(480);  // tiny-lm's context is 512
  r.set_top_logprobs(20);
  return r;
}

// Latency samples in milliseconds. Thread-safe.
class Latencies {
 public:
  void Add(absl::Duration d) {
    dikkat::MutexLock lock(&mu_);
    ms_.push_back(absl::ToDoubleMilliseconds(d));
  }
  size_t size() const {
    dikkat::MutexLock lock(&mu_);
    return ms_.size();
  }
  // Nearest-rank percentile; 0 without samples.
  double Percentile(double p) const {
    dikkat::MutexLock lock(&mu_);
    if (ms_.empty()) return 0;
    std::vector<double> v = ms_;
    std::sort(v.begin(), v.end());
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  }
  std::string Summary() const {
    return absl::StrFormat("n=%d p50=%.1f p99=%.1f max=%.1f ms", size(), Percentile(50),
                           Percentile(99), Percentile(100));
  }

 private:
  mutable dikkat::Mutex mu_;
  std::vector<double> ms_ ABSL_GUARDED_BY(mu_);
};

struct Reference {
  std::vector<int32_t> ids;
  std::string text;
};

// The clients of the soak. Each is its own channel and TCP connection (they
// differ in their service config, and gRPC shares a connection only between
// channels with equal arguments), like separate client processes: the
// well-behaved ones do not queue behind the abusive one's connection.
struct Clients {
  std::unique_ptr<Client> abusive;       // retries off: every status is seen
  // The slow readers' own connection, without the client library: no BDP
  // probing and a 16 KiB stream window, so that what a slow reader leaves
  // unread soon stays on the server, as it does with a real client whose
  // buffers are full (gRPC's BDP probing on loopback would otherwise let the
  // client's transport take in a whole tiny-lm stream unread).
  std::unique_ptr<v1::Dikkat::Stub> slow;
  std::unique_ptr<Client> good;          // well-behaved background load
  std::unique_ptr<Client> probe;         // latency probe
  std::unique_ptr<Client> wrong_token;   // null without --token
  std::unique_ptr<Client> no_token;      // null without --token
};

// host and port of --metrics.
absl::StatusOr<std::pair<std::string, int>> HostPort(const char* flag, const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", address, ": want host:port"));
  }
  return std::make_pair(address.substr(0, colon), port);
}

absl::StatusOr<std::pair<std::string, int>> MetricsAddress() {
  return HostPort("metrics", absl::GetFlag(FLAGS_metrics));
}

// The abusive HTTP clients' target on each port.
absl::StatusOr<HttpTarget> AbuseTarget(HttpPort port) {
  absl::StatusOr<std::pair<std::string, int>> address =
      port == HttpPort::kMetrics ? MetricsAddress()
                                 : HostPort("openai", absl::GetFlag(FLAGS_openai));
  if (!address.ok()) return address.status();
  HttpTarget target;
  target.port = port;
  target.host = address->first;
  target.port_number = address->second;
  if (port == HttpPort::kOpenAi) {
    target.token = absl::GetFlag(FLAGS_token);
    target.max_body_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  }
  return target;
}

class Soak {
 public:
  Soak(Clients clients, std::string model)
      : clients_(std::move(clients)), client_(clients_.abusive.get()), model_(std::move(model)) {}

  absl::Status ComputeReferences() {
    for (size_t p = 0; p < Prompts().size(); ++p) {
      absl::StatusOr<client::GenerateResult> r = client_->Generate(GreedyRequest(p, model_));
      if (!r.ok()) return r.status();
      references_.push_back({r->token_ids, r->text});
    }
    for (int shape = 0; shape < 3; ++shape) {
      absl::StatusOr<client::GenerateResult> r = client_->Generate(SamplesRequest(shape, model_));
      if (!r.ok()) return r.status();
      samples_references_.push_back(*r);
    }
    return absl::OkStatus();
  }

  void SetPhase(Phase phase) {
    phase_changed_ns_.store(absl::ToUnixNanos(absl::Now()));
    phase_.store(phase);
  }

  // Runs --workers threads until `end`, on the polite mix or, with `chaos`,
  // on the abusive one together with the abusive HTTP clients and the
  // /metrics scraper; with `bursts` also the queue-overflowing bursts.
  // Returns once every call has ended.
  void Run(absl::Time end, uint64_t seed, bool chaos, bool bursts) {
    std::vector<std::thread> threads;
    for (int w = 0; w < absl::GetFlag(FLAGS_workers); ++w) {
      threads.emplace_back([this, end, seed, w, chaos] {
        if (chaos) {
          Worker(end, seed * 1000 + w, kChaosMix);
        } else {
          Worker(end, seed * 1000 + w, kPoliteMix);
        }
      });
    }
    if (chaos) {
      for (int a = 0; a < absl::GetFlag(FLAGS_http_abusers); ++a) {
        threads.emplace_back([this, end, seed, a] {
          HttpAbuser(HttpPort::kMetrics, end, seed * 1000 + 500 + a);
        });
      }
      if (!absl::GetFlag(FLAGS_openai).empty()) {
        for (int a = 0; a < absl::GetFlag(FLAGS_openai_abusers); ++a) {
          threads.emplace_back([this, end, seed, a] {
            HttpAbuser(HttpPort::kOpenAi, end, seed * 1000 + 600 + a);
          });
        }
      }
      threads.emplace_back([this, end] { Scraper(end); });
    }
    if (bursts) threads.emplace_back([this, end] { Bursts(end); });
    for (std::thread& t : threads) t.join();
    // Burst calls may still run: wait for them (they all have deadlines).
    while (outstanding_.load() > 0) absl::SleepFor(absl::Milliseconds(20));
  }

  // The well-behaved load that runs through the quiet and chaos windows:
  // --good_workers closed-loop clients, the fixed-rate probe and the
  // /healthz probe. StopGoodWorkers ends the first; StopProbes the others.
  void StartWellBehaved(uint64_t seed) {
    for (int w = 0; w < absl::GetFlag(FLAGS_good_workers); ++w) {
      good_threads_.emplace_back([this, seed, w] { GoodWorker(seed * 1000 + 700 + w); });
    }
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < kProbeThreads; ++i) {
      probe_threads_.emplace_back([this, t0] { Probe(t0); });
    }
    probe_threads_.emplace_back([this] { HealthzProbe(); });
  }
  void StopGoodWorkers() {
    stop_good_ = true;
    for (std::thread& t : good_threads_) t.join();
    good_threads_.clear();
  }
  void StopProbes() {
    stop_probes_ = true;
    for (std::thread& t : probe_threads_) t.join();
    probe_threads_.clear();
  }

  void ResetCounts() {
    dikkat::MutexLock lock(&mu_);
    counts_.clear();
    http_counts_.clear();
    compared_ = 0;
    mismatches_ = 0;
    unexpected_.clear();
    streams_ = 0;
  }

  // Prints the tables; returns false if any status or HTTP outcome was
  // unexpected, any completed greedy answer differed from its reference, or
  // the probe's chaos p99 passed --max_p99_ratio times its quiet p99.
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
      std::string line;
      for (const auto& [key, n] : counts_) {
        if (key.first == static_cast<Kind>(k)) {
          absl::StrAppend(&line, " ", absl::StatusCodeToString(key.second), "=", n);
        }
      }
      if (!line.empty()) absl::PrintF("  %-15s%s\n", kKindNames[k], line);
    }
    for (const HttpPort port : {HttpPort::kMetrics, HttpPort::kOpenAi}) {
      std::string table;
      for (int a = 0; a < static_cast<int>(HttpAbuse::kNumAbuses); ++a) {
        std::string line;
        for (const auto& [key, n] : http_counts_) {
          if (std::get<0>(key) == port && std::get<1>(key) == a) {
            absl::StrAppend(&line, " ", std::get<2>(key), "=", n);
          }
        }
        if (!line.empty()) {
          absl::StrAppend(&table, absl::StrFormat("  %-15s%s\n", kHttpAbuseNames[a], line));
        }
      }
      if (!table.empty()) {
        absl::PrintF("%s port (HTTP), by abuse:\n%s",
                     port == HttpPort::kMetrics ? "metrics" : "OpenAI", table);
      }
    }
    if (!http_counts_.empty()) {
      absl::PrintF("metrics port: slow-headers and idle connections cut after at most %.2f s\n",
                   absl::ToDoubleSeconds(slowest_cut_));
      absl::PrintF("  /metrics scrapes: %d, failed %d\n", scrapes_, failed_scrapes_);
    }
    absl::PrintF("greedy answers compared: %d, different from the reference: %d\n", compared_,
                 mismatches_);
    bool ok = unexpected_.empty() && mismatches_ == 0;
    if (probe_quiet_.size() > 0 || probe_chaos_.size() > 0) ok = ReportLatency() && ok;
    for (const std::string& u : unexpected_) absl::PrintF("UNEXPECTED: %s\n", u);
    return ok;
  }

 private:
  static constexpr int kProbeThreads = 8;

  bool ReportLatency() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::PrintF("well-behaved probe (greedy, %d new tokens, %.0f/s, own connection), "
                 "latency from its scheduled start:\n",
                 GreedyRequest(0, model_).max_new_tokens(), absl::GetFlag(FLAGS_probe_rate));
    absl::PrintF("  quiet     %s\n", probe_quiet_.Summary());
    absl::PrintF("  chaos     %s\n", probe_chaos_.Summary());
    absl::PrintF("  overload  %s\n", probe_overload_.Summary());
    absl::PrintF("  samples dropped at phase changes: %d\n", probe_dropped_.load());
    for (const auto& [name, samples] : {std::make_pair("quiet", in_flight_quiet_),
                                         std::make_pair("chaos", in_flight_chaos_)}) {
      absl::PrintF("client calls in flight (%s, every 100 ms): mean %.1f, max %d\n", name,
                   samples.count > 0 ? static_cast<double>(samples.sum) / samples.count : 0.0,
                   samples.max);
    }
    absl::PrintF("/healthz (every 100 ms):\n  quiet     %s\n  chaos     %s\n",
                 healthz_quiet_.Summary(), healthz_chaos_.Summary());
    const double quiet = probe_quiet_.Percentile(99);
    const double chaos = probe_chaos_.Percentile(99);
    const double ratio = quiet > 0 ? chaos / quiet : 0;
    const double bound = absl::GetFlag(FLAGS_max_p99_ratio);
    absl::PrintF("probe p99 chaos / quiet: %.2f (bound %s)\n", ratio,
                 bound > 0 ? absl::StrFormat("%.2f", bound) : "none, reported only");
    bool ok = true;
    if (probe_quiet_.size() < 50 || probe_chaos_.size() < 50) {
      absl::PrintF("FAIL: too few probe samples to compare\n");
      ok = false;
    }
    if (bound > 0 && ratio > bound) {
      absl::PrintF("FAIL: abuse slowed the well-behaved probe down past the bound\n");
      ok = false;
    }
    return ok;
  }

  void Record(Kind kind, const absl::Status& status) {
    dikkat::MutexLock lock(&mu_);
    ++counts_[{kind, status.code()}];
    if (!Allowed(kind, status.code()) && unexpected_.size() < 20) {
      unexpected_.push_back(absl::StrCat(kKindNames[static_cast<int>(kind)], ": ",
                                         status.ToString()));
    }
  }

  void RecordHttp(HttpPort port, HttpAbuse abuse, const HttpAbuseResult& r) {
    dikkat::MutexLock lock(&mu_);
    for (const std::string& outcome : r.outcomes) {
      ++http_counts_[{port, static_cast<int>(abuse), outcome}];
      if (!HttpOutcomeAllowed(port, abuse, outcome) && unexpected_.size() < 20) {
        unexpected_.push_back(absl::StrCat(
            "HTTP ", port == HttpPort::kMetrics ? "metrics " : "OpenAI ",
            kHttpAbuseNames[static_cast<int>(abuse)], ": ", outcome));
      }
    }
    // The metrics port cuts them at its 2 s deadline; the OpenAI port's
    // clients give up first ("held").
    if (port == HttpPort::kMetrics &&
        (abuse == HttpAbuse::kSlowHeaders || abuse == HttpAbuse::kIdle)) {
      slowest_cut_ = std::max(slowest_cut_, r.elapsed);
    }
  }

  void Unexpected(std::string what) {
    dikkat::MutexLock lock(&mu_);
    if (unexpected_.size() < 20) unexpected_.push_back(std::move(what));
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

  template <size_t N>
  void Worker(absl::Time end, uint64_t seed, const MixEntry (&mix)[N]) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, 99);
    std::uniform_int_distribution<size_t> prompt(0, Prompts().size() - 1);
    const bool with_token = !absl::GetFlag(FLAGS_token).empty();
    const absl::Duration think = absl::GetFlag(FLAGS_think);
    while (absl::Now() < end) {
      Think(think, rng);
      int r = pick(rng);
      Kind kind = Kind::kUnary;
      for (const MixEntry& e : mix) {
        if (r < e.weight) {
          kind = e.kind;
          break;
        }
        r -= e.weight;
      }
      InFlight counted(this);
      switch (kind) {
        case Kind::kGreedy:
          Greedy(prompt(rng));
          break;
        case Kind::kLong:
          Long();
          break;
        case Kind::kSamples:
          Samples(static_cast<int>(rng() % 4));
          break;
        case Kind::kReaderCancel:
          ReaderCancel(1 + static_cast<int>(rng() % 4));
          break;
        case Kind::kHandleCancel:
          HandleCancel(absl::Milliseconds(static_cast<int64_t>(rng() % 120)));
          break;
        case Kind::kDeadline:
          Deadline(absl::Milliseconds(1 + static_cast<int64_t>(rng() % 60)), prompt(rng));
          break;
        case Kind::kDisconnect:
          Disconnect(absl::Milliseconds(50 + static_cast<int64_t>(rng() % 250)));
          break;
        case Kind::kInvalid:
          Invalid(static_cast<int>(rng() % 8));
          break;
        case Kind::kOversized:
          Oversized(static_cast<int>(rng() % 3));
          break;
        case Kind::kSlowReader:
          SlowReader(static_cast<int>(rng() % 4), rng());
          break;
        case Kind::kAuth:
          if (with_token) {
            Auth(static_cast<int>(rng() % 4), prompt(rng));
          } else {
            Unary(static_cast<int>(rng() % 3), client_, Kind::kUnary);
          }
          break;
        default:
          Unary(static_cast<int>(rng() % 3), client_, Kind::kUnary);
          break;
      }
    }
  }

  // Counts a client call in flight (any kind but bursts) while it lives.
  class InFlight {
   public:
    explicit InFlight(Soak* soak) : soak_(soak) { ++soak_->in_flight_; }
    ~InFlight() { --soak_->in_flight_; }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    Soak* const soak_;
  };

  static void Think(absl::Duration mean, std::mt19937_64& rng) {
    if (mean <= absl::ZeroDuration()) return;
    absl::SleepFor(mean * std::uniform_real_distribution<double>(0, 2)(rng));
  }

  void Greedy(size_t prompt) { GreedyOn(client_, Kind::kGreedy, prompt); }

  void GreedyOn(Client* c, Kind kind, size_t prompt) {
    CountStream();
    absl::StatusOr<client::GenerateResult> r =
        c->Generate(GreedyRequest(prompt, model_), Timeout(absl::Seconds(60)));
    Record(kind, r.status());
    if (r.ok()) Compare(prompt, r->token_ids, r->text);
  }

  void Samples(int shape) {
    CountStream();
    if (shape == 3) {  // read two messages of an n = 4 stream, then cancel
      int messages = 0;
      absl::Status s = client_->GenerateStream(
          SamplesRequest(shape, model_),
          [&messages](const v1::GenerateResponse&) { return ++messages < 2; },
          Timeout(absl::Seconds(60)));
      Record(Kind::kSamples, s);
      return;
    }
    absl::StatusOr<client::GenerateResult> r =
        client_->Generate(SamplesRequest(shape, model_), Timeout(absl::Seconds(60)));
    Record(Kind::kSamples, r.status());
    if (!r.ok()) return;
    dikkat::MutexLock lock(&mu_);
    ++compared_;
    if (!SameSamples(shape, *r, samples_references_[shape])) {
      ++mismatches_;
      if (unexpected_.size() < 20) {
        unexpected_.push_back(absl::StrCat("samples shape ", shape, " gave ", SamplesDigest(*r),
                                           ", alone ", SamplesDigest(samples_references_[shape])));
      }
    }
  }

  void Long() {
    CountStream();
    absl::Status s = client_->GenerateStream(
        LongRequest(model_), [](const v1::GenerateResponse&) { return true; },
        Timeout(absl::Seconds(60)));
    Record(Kind::kLong, s);
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

  // A bulky stream (480 tokens with 20 alternatives each, ~120 KB) whose
  // reader pauses between chunks, for at most ~1.5 s in all: 0, a pause at
  // the first chunk; 1-3, 20-200 ms at every chunk. The server keeps what it
  // cannot send, up to --max_stream_pending_bytes, then cuts the stream.
  void SlowReader(int variant, uint64_t r) {
    CountStream();
    absl::Duration budget = absl::Milliseconds(1500);
    std::mt19937_64 rng(r);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    const std::string token = absl::GetFlag(FLAGS_token);
    if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        clients_.slow->Generate(&context, BulkyRequest(model_));
    v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) {
      const absl::Duration pause =
          variant == 0 ? budget
                       : std::min(budget, absl::Milliseconds(20 + static_cast<int64_t>(rng() % 181)));
      absl::SleepFor(pause);
      budget -= pause;
    }
    const grpc::Status s = reader->Finish();
    Record(Kind::kSlowReader,
           absl::Status(static_cast<StatusCode>(s.error_code()), s.error_message()));
  }

  // A wrong or missing bearer token, on Generate or Encode.
  void Auth(int which, size_t prompt) {
    Client* c = which % 2 == 0 ? clients_.wrong_token.get() : clients_.no_token.get();
    absl::Status s;
    if (which < 2) {
      CountStream();
      s = c->Generate(GreedyRequest(prompt, model_), Timeout(absl::Seconds(30))).status();
    } else {
      v1::EncodeRequest e;
      e.set_model(model_);
      e.add_inputs()->set_text("who goes there");
      s = c->Encode(e, Timeout(absl::Seconds(30))).status();
    }
    Record(Kind::kAuth, s);
  }

  // 0: a Generate message past --max_message_bytes (gRPC refuses it);
  // 1: Generate text past --max_text_bytes (refused before tokenizing);
  // 2: an Encode call past --max_batch_entries.
  void Oversized(int which) {
    absl::Status s;
    if (which <= 1) {
      CountStream();
      v1::GenerateRequest g = GreedyRequest(0, model_);
      const int64_t bytes =
          which == 0 ? absl::GetFlag(FLAGS_max_message_bytes) + (64 << 10) : 64 << 10;
      g.mutable_input()->set_text(std::string(static_cast<size_t>(bytes), 'o'));
      s = client_->Generate(g, Timeout(absl::Seconds(30))).status();
    } else {
      v1::EncodeRequest e;
      e.set_model(model_);
      for (int i = 0; i < 65; ++i) e.add_inputs()->set_text("x");
      s = client_->Encode(e, Timeout(absl::Seconds(30))).status();
    }
    Record(Kind::kOversized, s);
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

  void Unary(int which, Client* c, Kind kind) {
    absl::Status s;
    if (which == 0) {
      v1::EncodeRequest e;
      e.set_model(model_);
      e.add_inputs()->set_text("encode me");
      e.add_inputs()->set_text("and me too");
      s = c->Encode(e, Timeout(absl::Seconds(60))).status();
    } else if (which == 1) {
      v1::AttentionRequest a;
      a.set_model(model_);
      a.mutable_input()->set_text("look at this");
      a.set_aggregation(v1::HEAD_AGGREGATION_MEAN);
      s = c->Attention(a, Timeout(absl::Seconds(60))).status();
    } else {
      v1::TokenizeRequest t;
      t.set_model(model_);
      t.set_text("tokenize this text");
      s = c->Tokenize(t, Timeout(absl::Seconds(60))).status();
    }
    Record(kind, s);
  }

  void Bursts(absl::Time end) {
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
    absl::Time next = absl::Now();
    while (next < end) {
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
      next += absl::GetFlag(FLAGS_burst_every);
    }
  }

  // ---- well-behaved load ----

  void GoodWorker(uint64_t seed) {
    std::mt19937_64 rng(seed);
    const absl::Duration think = absl::GetFlag(FLAGS_think);
    while (!stop_good_.load()) {
      Think(think, rng);
      InFlight counted(this);
      const int r = static_cast<int>(rng() % 100);
      if (r < 60) {
        GreedyOn(clients_.good.get(), Kind::kGood, rng() % Prompts().size());
      } else {
        Unary(static_cast<int>(rng() % 3), clients_.good.get(), Kind::kGood);
      }
    }
  }

  // Open loop: call i is due at t0 + i / rate whatever happened to the
  // others, and its latency counts from when it was due, so a probe thread
  // that falls behind shows as latency instead of hiding it.
  void Probe(absl::Time t0) {
    const double rate = absl::GetFlag(FLAGS_probe_rate);
    while (!stop_probes_.load()) {
      const int64_t i = next_probe_++;
      const absl::Time due = t0 + absl::Seconds(static_cast<double>(i) / rate);
      absl::SleepFor(due - absl::Now());
      if (stop_probes_.load()) return;
      const Phase start = phase_.load();
      // Due before the phase began (a probe thread fell behind): the
      // sample belongs to no phase.
      const bool straddles = absl::ToUnixNanos(due) < phase_changed_ns_.load();
      CountStream();
      std::optional<InFlight> counted(this);
      absl::StatusOr<client::GenerateResult> r =
          clients_.probe->Generate(GreedyRequest(0, model_), Timeout(absl::Seconds(10)));
      counted.reset();
      const absl::Duration latency = absl::Now() - due;
      const Phase end = phase_.load();
      Record(start == Phase::kOverload || end == Phase::kOverload ? Kind::kProbeOverload
                                                                   : Kind::kProbe,
             r.status());
      if (r.ok()) Compare(0, r->token_ids, r->text);
      if (start != end || straddles || !r.ok()) {
        ++probe_dropped_;
      } else if (start == Phase::kQuiet) {
        probe_quiet_.Add(latency);
      } else if (start == Phase::kChaos) {
        probe_chaos_.Add(latency);
      } else if (start == Phase::kOverload) {
        probe_overload_.Add(latency);
      }
    }
  }

  // GET /healthz every 100 ms: always 200, and how fast.
  void HealthzProbe() {
    absl::StatusOr<std::pair<std::string, int>> address = MetricsAddress();
    if (!address.ok()) return Unexpected(address.status().ToString());
    while (!stop_probes_.load()) {
      absl::SleepFor(absl::Milliseconds(100));
      const Phase start = phase_.load();
      if (start == Phase::kQuiet || start == Phase::kChaos) {
        const int n = in_flight_.load();
        dikkat::MutexLock lock(&mu_);
        InFlightSamples& samples = start == Phase::kQuiet ? in_flight_quiet_ : in_flight_chaos_;
        samples.sum += n;
        ++samples.count;
        samples.max = std::max(samples.max, n);
      }
      const absl::Time t = absl::Now();
      httplib::Client http(address->first, address->second);
      http.set_connection_timeout(5, 0);
      http.set_read_timeout(5, 0);
      httplib::Result res = http.Get("/healthz");
      const absl::Duration latency = absl::Now() - t;
      if (!res || res->status != 200) {
        Unexpected(absl::StrCat("/healthz: ", res ? absl::StrCat(res->status)
                                                  : httplib::to_string(res.error())));
        continue;
      }
      if (phase_.load() != start) continue;
      if (start == Phase::kQuiet) healthz_quiet_.Add(latency);
      if (start == Phase::kChaos) healthz_chaos_.Add(latency);
    }
  }

  // ---- the metrics port under abuse ----

  // Loops over the port's abuses (the metrics port: the generic ones; the
  // OpenAI port: those and its own) until `end`.
  void HttpAbuser(HttpPort port, absl::Time end, uint64_t seed) {
    absl::StatusOr<HttpTarget> target = AbuseTarget(port);
    if (!target.ok()) return Unexpected(target.status().ToString());
    const int kinds = port == HttpPort::kMetrics ? kFirstOpenAiOnly
                                                 : static_cast<int>(HttpAbuse::kNumAbuses);
    std::mt19937_64 rng(seed);
    while (absl::Now() < end) {
      const auto abuse = static_cast<HttpAbuse>(rng() % kinds);
      RecordHttp(port, abuse, RunHttpAbuse(abuse, *target, static_cast<int>(rng() % 16)));
    }
  }

  // Prometheus, impatient: GET /metrics every 100 ms.
  void Scraper(absl::Time end) {
    absl::StatusOr<std::pair<std::string, int>> address = MetricsAddress();
    if (!address.ok()) return Unexpected(address.status().ToString());
    while (absl::Now() < end) {
      httplib::Client http(address->first, address->second);
      http.set_read_timeout(5, 0);
      httplib::Result res = http.Get("/metrics");
      const bool ok = res && res->status == 200 &&
                      absl::StrContains(res->body, "dikkat_kv_cache_blocks_used");
      {
        dikkat::MutexLock lock(&mu_);
        ++scrapes_;
        if (!ok) ++failed_scrapes_;
      }
      if (!ok) Unexpected("GET /metrics failed during the chaos");
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  Clients clients_;
  Client* const client_;  // clients_.abusive
  const std::string model_;
  std::vector<Reference> references_;  // by prompt; written before the workers start
  std::atomic<int> outstanding_{0};
  std::atomic<Phase> phase_{Phase::kWarmup};
  std::atomic<int64_t> phase_changed_ns_{0};

  std::atomic<int> in_flight_{0};
  struct InFlightSamples {
    int64_t sum = 0;
    int64_t count = 0;
    int max = 0;
  };
  InFlightSamples in_flight_quiet_ ABSL_GUARDED_BY(mu_);
  InFlightSamples in_flight_chaos_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> good_threads_;
  std::vector<std::thread> probe_threads_;
  std::atomic<bool> stop_good_{false};
  std::atomic<bool> stop_probes_{false};
  std::atomic<int64_t> next_probe_{0};
  std::atomic<int64_t> probe_dropped_{0};
  Latencies probe_quiet_, probe_chaos_, probe_overload_;
  Latencies healthz_quiet_, healthz_chaos_;

  dikkat::Mutex mu_;
  std::map<std::pair<Kind, StatusCode>, int64_t> counts_ ABSL_GUARDED_BY(mu_);
  // By port, abuse and outcome.
  std::map<std::tuple<HttpPort, int, std::string>, int64_t> http_counts_ ABSL_GUARDED_BY(mu_);
  absl::Duration slowest_cut_ ABSL_GUARDED_BY(mu_);
  int64_t scrapes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_scrapes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> unexpected_ ABSL_GUARDED_BY(mu_);
  int64_t compared_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  // By SamplesRequest shape 0..2; set before the workers start.
  std::vector<client::GenerateResult> samples_references_;
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
  absl::StatusOr<std::pair<std::string, int>> address = MetricsAddress();
  if (!address.ok()) return address.status();
  httplib::Client http(address->first, address->second);
  http.set_read_timeout(5, 0);
  httplib::Result res = http.Get("/metrics");
  if (!res || res->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("GET http://", absl::GetFlag(FLAGS_metrics), "/metrics failed"));
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

// Waits (up to 10 s: cancellations reach the engine asynchronously) until the
// server holds no KV block and no request; prints what it saw.
bool ServerSettles() {
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
  if (used != 0 || running != 0 || waiting != 0) {
    absl::PrintF("FAIL: the server still holds KV blocks or requests\n");
    return false;
  }
  return true;
}

// The OpenAI port (when abused) still answers: GET /v1/models is 200.
bool OpenAiServing() {
  if (absl::GetFlag(FLAGS_openai).empty()) return true;
  absl::StatusOr<HttpTarget> target = AbuseTarget(HttpPort::kOpenAi);
  if (!target.ok()) return false;
  httplib::Client http(target->host, target->port_number);
  http.set_read_timeout(5, 0);
  httplib::Headers headers;
  if (!target->token.empty()) headers.emplace("Authorization", "Bearer " + target->token);
  httplib::Result res = http.Get("/v1/models", headers);
  absl::PrintF("OpenAI port: GET /v1/models %s\n",
               res ? absl::StrCat(res->status) : httplib::to_string(res.error()));
  return res && res->status == 200;
}

bool Serving(Client& c) {
  absl::StatusOr<client::HealthStatus> health = c.HealthCheck();
  absl::PrintF("health: %s\n",
               health.ok() ? client::HealthStatusName(*health) : health.status().ToString());
  return health.ok() && *health == grpc::health::v1::HealthCheckResponse::SERVING;
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

absl::StatusOr<std::unique_ptr<Client>> MakeClient(std::string token, int max_attempts,
                                                   std::string load_balancing) {
  ClientOptions options;
  options.targets = {absl::GetFlag(FLAGS_target)};
  options.retry.max_attempts = max_attempts;
  options.bearer_token = std::move(token);
  options.load_balancing = std::move(load_balancing);
  options.max_message_bytes = 64 << 20;
  return Client::Create(options);
}

// The drain's requests: GreedyRequest 120 tokens longer, past any end of
// text, so that every client is mid-stream for a while at any moment (with
// GreedyRequest's 8-29 tokens a fast engine had finished every stream before
// the first refusal came back, and the check that the drain met streams in
// flight found none).
v1::GenerateRequest DrainRequest(size_t prompt, const std::string& model) {
  v1::GenerateRequest r = GreedyRequest(prompt, model);
  r.set_max_new_tokens(r.max_new_tokens() + 120);
  r.set_ignore_eos(true);
  return r;
}

absl::StatusOr<std::vector<Reference>> References(
    Client& c, const std::string& model,
    v1::GenerateRequest (*request)(size_t, const std::string&) = GreedyRequest) {
  std::vector<Reference> refs;
  for (size_t p = 0; p < Prompts().size(); ++p) {
    absl::StatusOr<client::GenerateResult> r = c.Generate(request(p, model));
    if (!r.ok()) return r.status();
    refs.push_back({r->token_ids, r->text});
  }
  return refs;
}

void LoadRunning() {
  absl::PrintF("load running\n");
  std::fflush(stdout);
}

// ---- --mode=restart ---------------------------------------------------------------

// Clients that keep calling while the server is SIGKILLed and started again.
// Each logical request is retried on UNAVAILABLE (after the client library's
// own retries) with a backoff of 50 ms doubling to 800 ms, until it is served.
int RestartMain(Client& c, const std::string& model) {
  absl::StatusOr<std::vector<Reference>> refs = References(c, model);
  if (!refs.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: reference run failed: %s\n", refs.status().ToString());
    return 2;
  }
  dikkat::Mutex mu;
  std::map<StatusCode, int64_t> attempts;  // every attempt the caller saw, by status
  int64_t requests = 0, retried = 0, max_tries = 0, mismatches = 0;
  absl::Time first_failure = absl::InfiniteFuture(), last_failure = absl::InfinitePast();
  absl::Time first_recovered = absl::InfiniteFuture();
  std::vector<std::string> unexpected;
  std::atomic<bool> stop{false};
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + absl::GetFlag(FLAGS_duration);

  auto worker = [&](int w) {
    size_t prompt = static_cast<size_t>(w) % Prompts().size();
    while (!stop.load()) {
      absl::Duration backoff = absl::Milliseconds(50);
      for (int tries = 1;; ++tries) {
        client::CallOptions o;
        o.timeout = absl::Seconds(10);
        absl::StatusOr<client::GenerateResult> r = c.Generate(GreedyRequest(prompt, model), o);
        const absl::Time now = absl::Now();
        {
          dikkat::MutexLock lock(&mu);
          ++attempts[r.status().code()];
          if (!Allowed(Kind::kRestart, r.status().code()) && unexpected.size() < 20) {
            unexpected.push_back(r.status().ToString());
          }
          if (r.ok()) {
            ++requests;
            if (tries > 1) ++retried;
            max_tries = std::max<int64_t>(max_tries, tries);
            const Reference& ref = (*refs)[prompt];
            if (r->token_ids != ref.ids || r->text != ref.text) ++mismatches;
            // The first call served after the last failure so far.
            if (first_failure != absl::InfiniteFuture() &&
                first_recovered == absl::InfiniteFuture()) {
              first_recovered = now;
            }
          } else {
            first_failure = std::min(first_failure, now);
            last_failure = std::max(last_failure, now);
            first_recovered = absl::InfiniteFuture();
          }
        }
        if (r.ok() || stop.load()) break;
        absl::SleepFor(backoff);
        backoff = std::min(backoff * 2, absl::Milliseconds(800));
      }
      prompt = (prompt + 1) % Prompts().size();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < absl::GetFlag(FLAGS_workers); ++w) threads.emplace_back(worker, w);
  absl::SleepFor(absl::Seconds(1));
  LoadRunning();
  // Until every client has been served again for 3 s after the last failure.
  bool recovered = false;
  while (absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
    dikkat::MutexLock lock(&mu);
    if (first_failure != absl::InfiniteFuture() && first_recovered != absl::InfiniteFuture() &&
        absl::Now() - last_failure > absl::Seconds(3)) {
      recovered = true;
      break;
    }
  }
  stop = true;
  for (std::thread& t : threads) t.join();

  bool ok = true;
  dikkat::MutexLock lock(&mu);
  absl::PrintF("restart: %d requests served in %.1f s by %d clients\n", requests,
               absl::ToDoubleSeconds(absl::Now() - start), absl::GetFlag(FLAGS_workers));
  absl::PrintF("attempts by code:");
  for (const auto& [code, n] : attempts) absl::PrintF(" %s=%d", absl::StatusCodeToString(code), n);
  absl::PrintF("\n");
  if (first_failure == absl::InfiniteFuture()) {
    absl::PrintF("FAIL: no call failed: the server was not killed during the run\n");
    ok = false;
  } else {
    absl::PrintF("failures from the first to the last: %.2f s; served again %s\n",
                 absl::ToDoubleSeconds(last_failure - first_failure),
                 first_recovered == absl::InfiniteFuture()
                     ? std::string("never")
                     : absl::StrFormat("%.2f s after the first failure",
                                       absl::ToDoubleSeconds(first_recovered - first_failure)));
    absl::PrintF("requests that needed retries by the caller: %d (most attempts for one: %d)\n",
                 retried, max_tries);
  }
  if (!recovered) {
    absl::PrintF("FAIL: the clients were not served again within --duration\n");
    ok = false;
  }
  if (mismatches > 0) {
    absl::PrintF("FAIL: %d answers differed from the reference\n", mismatches);
    ok = false;
  }
  for (const std::string& u : unexpected) {
    absl::PrintF("UNEXPECTED: %s\n", u);
    ok = false;
  }
  ok = ServerSettles() && ok;
  ok = Serving(c) && ok;
  absl::PrintF("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// ---- --mode=drain -----------------------------------------------------------------

// Clients streaming while the server drains after SIGTERM. A client stops
// at its first UNAVAILABLE.
int DrainMain(Client& c, const std::string& model) {
  absl::StatusOr<std::vector<Reference>> refs = References(c, model, DrainRequest);
  if (!refs.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: reference run failed: %s\n", refs.status().ToString());
    return 2;
  }
  struct Call {
    absl::Time start, first_chunk = absl::InfiniteFuture(), end;
    absl::Status status;
    bool right = false;  // the answer equals the reference
  };
  dikkat::Mutex mu;
  std::vector<Call> calls;
  auto worker = [&](int w) {
    size_t prompt = static_cast<size_t>(w) % Prompts().size();
    while (true) {
      Call call;
      call.start = absl::Now();
      std::vector<int32_t> ids;
      std::string text;
      client::CallOptions o;
      o.timeout = absl::Seconds(30);
      call.status = c.GenerateStream(
          DrainRequest(prompt, model),
          [&](const v1::GenerateResponse& m) {
            if (call.first_chunk == absl::InfiniteFuture()) call.first_chunk = absl::Now();
            for (const auto& t : m.tokens()) ids.push_back(t.id());
            text += m.text();
            return true;
          },
          o);
      call.end = absl::Now();
      call.right = ids == (*refs)[prompt].ids && text == (*refs)[prompt].text;
      const bool refused = !call.status.ok();
      {
        dikkat::MutexLock lock(&mu);
        calls.push_back(std::move(call));
      }
      if (refused) return;
      prompt = (prompt + 1) % Prompts().size();
    }
  };
  const absl::Time give_up = absl::Now() + absl::GetFlag(FLAGS_duration);
  std::vector<std::thread> threads;
  for (int w = 0; w < absl::GetFlag(FLAGS_workers); ++w) threads.emplace_back(worker, w);
  absl::SleepFor(absl::Seconds(1));
  LoadRunning();
  for (std::thread& t : threads) t.join();

  bool ok = true;
  // The drain began at the first refusal (the engines refuse new work before
  // anything else happens, server/main.cc).
  absl::Time drain = absl::InfiniteFuture();
  std::map<StatusCode, int64_t> by_code;
  for (const Call& call : calls) {
    ++by_code[call.status.code()];
    if (!call.status.ok()) drain = std::min(drain, call.end);
  }
  int64_t running = 0, finished_after = 0, wrong = 0, cut = 0, late_ok = 0;
  std::vector<std::string> unexpected;
  for (const Call& call : calls) {
    if (!Allowed(Kind::kDrain, call.status.code()) && unexpected.size() < 20) {
      unexpected.push_back(absl::StrFormat(
          "%s (sent %+.1f ms, ended %+.1f ms after the drain began%s)", call.status.ToString(),
          absl::ToDoubleMilliseconds(call.start - drain),
          absl::ToDoubleMilliseconds(call.end - drain),
          call.first_chunk == absl::InfiniteFuture() ? ", nothing streamed" : ""));
    }
    if (call.status.ok() && !call.right) ++wrong;
    if (call.end > drain && call.status.ok()) ++finished_after;
    // Streaming when the drain began: it must finish, and finish OK.
    if (call.first_chunk < drain && call.end > drain) ++running;
    // A stream that had started must never be cut by the drain.
    if (!call.status.ok() && call.first_chunk != absl::InfiniteFuture()) ++cut;
    // Sent after the drain began: it must be refused.
    if (call.start > drain && call.status.ok()) ++late_ok;
  }
  absl::PrintF("drain: %d calls by %d clients; by code:", calls.size(),
               absl::GetFlag(FLAGS_workers));
  for (const auto& [code, n] : by_code) absl::PrintF(" %s=%d", absl::StatusCodeToString(code), n);
  absl::PrintF("\nstreaming when the drain began: %d; streams cut: %d; finished OK after it began: %d; "
               "accepted after it began: %d\n",
               running, cut, finished_after, late_ok);
  if (drain == absl::InfiniteFuture()) {
    absl::PrintF("FAIL: no call was refused: the server did not drain\n");
    ok = false;
  }
  if (cut > 0 || late_ok > 0 || wrong > 0 || !unexpected.empty()) ok = false;
  if (running < absl::GetFlag(FLAGS_workers) / 4) {
    absl::PrintF("FAIL: only %d streams were running when the drain began: not under load\n",
                 running);
    ok = false;
  }
  if (wrong > 0) absl::PrintF("FAIL: %d answers differed from the reference\n", wrong);
  for (const std::string& u : unexpected) absl::PrintF("UNEXPECTED: %s\n", u);
  // Once the server is gone, calls fail with UNAVAILABLE.
  absl::Status after;
  while (absl::Now() < give_up) {
    client::CallOptions o;
    o.timeout = absl::Seconds(5);
    after = c.Generate(GreedyRequest(0, model), o).status();
    if (!c.HealthCheck().ok()) {
      after = c.Generate(GreedyRequest(0, model), o).status();
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  absl::PrintF("a call after the server stopped: %s\n", after.ToString());
  if (after.code() != StatusCode::kUnavailable) ok = false;
  absl::PrintF("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// ---- --mode=soak ------------------------------------------------------------------

int SoakMain() {
  const std::string token = absl::GetFlag(FLAGS_token);
  Clients clients;
  for (auto [client, t, attempts, lb] :
       {std::make_tuple(&clients.abusive, token, 1, ""),
        std::make_tuple(&clients.good, token, 4, ""),
        std::make_tuple(&clients.probe, token, 1, "round_robin")}) {
    absl::StatusOr<std::unique_ptr<Client>> c = MakeClient(t, attempts, lb);
    if (!c.ok()) {
      absl::FPrintF(stderr, "dikkat-soak: %s\n", c.status().ToString());
      return 2;
    }
    *client = std::move(*c);
  }
  {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(64 << 20);
    clients.slow = v1::Dikkat::NewStub(grpc::CreateCustomChannel(
        absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials(), args));
  }
  if (!token.empty()) {
    clients.wrong_token = *MakeClient(std::string(token.size(), 'w'), 1, "");
    clients.no_token = *MakeClient("", 1, "");
  }
  Client* client = clients.abusive.get();
  if (!Serving(*client)) {
    absl::FPrintF(stderr, "dikkat-soak: the server is not SERVING\n");
    return 2;
  }
  Soak soak(std::move(clients), absl::GetFlag(FLAGS_model));
  if (absl::Status s = soak.ComputeReferences(); !s.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: reference run failed: %s\n", s.ToString());
    return 2;
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  soak.Run(absl::Now() + absl::GetFlag(FLAGS_warmup), seed + 7, /*chaos=*/true, /*bursts=*/false);
  soak.ResetCounts();
  absl::StatusOr<double> rss_before = ScrapeValue("process_resident_memory_bytes");
  if (!rss_before.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: %s\n", rss_before.status().ToString());
    return 2;
  }

  const absl::Time start = absl::Now();
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const absl::Duration quiet = absl::GetFlag(FLAGS_quiet) / rounds;
  const absl::Duration chaos = absl::GetFlag(FLAGS_duration) / rounds;
  soak.SetPhase(Phase::kQuiet);
  soak.StartWellBehaved(seed);
  // Slow readers and idle HTTP connections end a little after a window; the
  // engine hears of the last cancellations a moment later still. The next
  // window starts once nothing waits (at most 5 s).
  auto settle = [&soak] {
    soak.SetPhase(Phase::kTransition);
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (absl::Now() < until && ScrapeValue("dikkat_requests_waiting").value_or(0) > 0) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    absl::SleepFor(absl::Milliseconds(300));
  };
  for (int round = 0; round < rounds; ++round) {
    soak.SetPhase(Phase::kQuiet);
    soak.Run(absl::Now() + quiet, seed + 50 + round, /*chaos=*/false, /*bursts=*/false);
    settle();
    soak.SetPhase(Phase::kChaos);
    soak.Run(absl::Now() + chaos, seed + round, /*chaos=*/true, /*bursts=*/false);
    settle();
  }
  soak.StopGoodWorkers();
  soak.SetPhase(Phase::kOverload);
  soak.Run(absl::Now() + absl::GetFlag(FLAGS_overload), seed + 100, /*chaos=*/true,
           /*bursts=*/true);
  soak.SetPhase(Phase::kTransition);
  soak.StopProbes();
  const absl::Duration elapsed = absl::Now() - start;
  bool ok = soak.Report(elapsed);
  ok = ServerSettles() && ok;
  if (absl::StatusOr<std::string> text = Scrape(); text.ok()) {
    absl::PrintF("server counters: preemptions %.0f\n",
                 MetricSum(*text, "dikkat_preemptions_total").value_or(-1));
  }
  ok = Serving(*client) && ok;
  ok = OpenAiServing() && ok;

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

int Main() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "soak") return SoakMain();
  if (mode != "restart" && mode != "drain") {
    absl::FPrintF(stderr, "dikkat-soak: --mode=%s: want soak, restart or drain\n", mode);
    return 2;
  }
  // Restart: the client library's retries (4 attempts, the default) under
  // the caller's loop. Drain: none, so that every refusal is seen.
  absl::StatusOr<std::unique_ptr<Client>> c =
      MakeClient(absl::GetFlag(FLAGS_token), mode == "restart" ? 4 : 1, "");
  if (!c.ok()) {
    absl::FPrintF(stderr, "dikkat-soak: %s\n", c.status().ToString());
    return 2;
  }
  if (!Serving(**c)) {
    absl::FPrintF(stderr, "dikkat-soak: the server is not SERVING\n");
    return 2;
  }
  const std::string model = absl::GetFlag(FLAGS_model);
  return mode == "restart" ? RestartMain(**c, model) : DrainMain(**c, model);
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
