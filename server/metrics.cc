#include "server/metrics.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/status/status.h"
#include "common/sync.h"
#include "model/cpu_isa.h"

namespace dikkat::server {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

constexpr int kNumCodes = 17;  // canonical status codes 0..16
constexpr char kUnknownModel[] = "unknown";
constexpr int kNumFinishReasons = static_cast<int>(FinishReason::kError) + 1;

const Histogram::BucketBoundaries& RequestSecondsBuckets() {
  static const Histogram::BucketBoundaries b = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                1,     2.5,  5,     10,   30,  60,   120};
  return b;
}
const Histogram::BucketBoundaries& WaitSecondsBuckets() {
  static const Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1,     2.5,  5,     10,   30};
  return b;
}
const Histogram::BucketBoundaries& TokenLatencyBuckets() {
  static const Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04,
                                                0.08,  0.16,   0.32,  0.64, 1.28};
  return b;
}
const Histogram::BucketBoundaries& StepSecondsBuckets() {
  static const Histogram::BucketBoundaries b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,   0.1,   0.25,   0.5,   1,    2.5};
  return b;
}
const Histogram::BucketBoundaries& BatchSizeBuckets() {
  static const Histogram::BucketBoundaries b = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  return b;
}
const Histogram::BucketBoundaries& TokenCountBuckets() {
  static const Histogram::BucketBoundaries b = {1, 4, 16, 64, 256, 1024, 4096, 16384};
  return b;
}

// Process CPU time (user + system) and start time from /proc/self/stat, in
// seconds; false if it cannot be read.
bool ReadProcessTimes(double* cpu_seconds, double* start_time_seconds) {
  std::FILE* f = std::fopen("/proc/self/stat", "r");
  if (f == nullptr) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Field 2 (comm) may contain spaces and parentheses: parse after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  // Fields 3.. : state ppid pgrp session tty_nr tpgid flags minflt cminflt
  // majflt cmajflt utime(14) stime(15) cutime cstime priority nice
  // num_threads itrealvalue starttime(22), the times in clock ticks.
  unsigned long utime = 0, stime = 0;
  unsigned long long starttime = 0;
  if (std::sscanf(p + 2,
                  "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d "
                  "%*d %llu",
                  &utime, &stime, &starttime) != 3) {
    return false;
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  *cpu_seconds = static_cast<double>(utime + stime) / ticks;
  // starttime counts from boot; btime in /proc/stat is the boot time (epoch).
  std::FILE* stat = std::fopen("/proc/stat", "r");
  if (stat == nullptr) return false;
  unsigned long long btime = 0;
  char line[256];
  bool found = false;
  while (std::fgets(line, sizeof(line), stat) != nullptr) {
    if (std::sscanf(line, "btime %llu", &btime) == 1) {
      found = true;
      break;
    }
  }
  std::fclose(stat);
  if (!found) return false;
  *start_time_seconds = static_cast<double>(btime) + static_cast<double>(starttime) / ticks;
  return true;
}

double ResidentBytes() {
  // statm: size resident shared text lib data dt, in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kEncode:
      return "Encode";
    case Rpc::kGenerate:
      return "Generate";
    case Rpc::kAttention:
      return "Attention";
    case Rpc::kGetModelInfo:
      return "GetModelInfo";
    case Rpc::kTokenize:
      return "Tokenize";
    case Rpc::kDetokenize:
      return "Detokenize";
  }
  return "unknown";
}

const char* FailureReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return "";
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return "invalid";
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:  // draining: the client should go elsewhere
      return "overloaded";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline";
    default:
      return "internal";
  }
}

// All families of the registry, created once.
struct Families {
  explicit Families(prometheus::Registry& r)
      : requests(prometheus::BuildCounter()
                     .Name("dikkat_requests_total")
                     .Help("Finished RPCs by model, method and gRPC status code.")
                     .Register(r)),
        failures(prometheus::BuildCounter()
                     .Name("dikkat_request_failures_total")
                     .Help("Failed RPCs by reason: invalid, overloaded, cancelled, deadline, "
                           "internal.")
                     .Register(r)),
        request_duration(prometheus::BuildHistogram()
                             .Name("dikkat_request_duration_seconds")
                             .Help("RPC latency, from arrival to the final status.")
                             .Register(r)),
        queue_time(prometheus::BuildHistogram()
                       .Name("dikkat_queue_time_seconds")
                       .Help("Generate: time from submit to first scheduled.")
                       .Register(r)),
        time_to_first_token(prometheus::BuildHistogram()
                                .Name("dikkat_time_to_first_token_seconds")
                                .Help("Generate: time from submit to the first generated token.")
                                .Register(r)),
        inter_token(prometheus::BuildHistogram()
                        .Name("dikkat_inter_token_latency_seconds")
                        .Help("Generate: time between consecutive tokens of one request.")
                        .Register(r)),
        step_duration(prometheus::BuildHistogram()
                          .Name("dikkat_step_duration_seconds")
                          .Help("Engine step time (one batched forward plus sampling), by phase.")
                          .Register(r)),
        step_batch_size(prometheus::BuildHistogram()
                            .Name("dikkat_step_batch_size")
                            .Help("Sequences per engine step, by phase.")
                            .Register(r)),
        prompt_tokens(prometheus::BuildCounter()
                          .Name("dikkat_prompt_tokens_total")
                          .Help("Prompt (input) tokens processed.")
                          .Register(r)),
        generated_tokens(prometheus::BuildCounter()
                             .Name("dikkat_generated_tokens_total")
                             .Help("Tokens generated.")
                             .Register(r)),
        request_prompt_tokens(prometheus::BuildHistogram()
                                  .Name("dikkat_request_prompt_tokens")
                                  .Help("Generate: prompt tokens per request.")
                                  .Register(r)),
        generate_finished(prometheus::BuildCounter()
                              .Name("dikkat_generate_finished_total")
                              .Help("Generate requests the engine finished, by finish_reason: "
                                    "eos, length, stop, cancelled, deadline, error.")
                              .Register(r)),
        request_generated_tokens(prometheus::BuildHistogram()
                                     .Name("dikkat_request_generated_tokens")
                                     .Help("Generate: generated tokens per request.")
                                     .Register(r)),
        running(prometheus::BuildGauge()
                    .Name("dikkat_requests_running")
                    .Help("Sequences in the engine's running batch.")
                    .Register(r)),
        waiting(prometheus::BuildGauge()
                    .Name("dikkat_requests_waiting")
                    .Help("Requests queued, not yet admitted.")
                    .Register(r)),
        waiting_by_priority(prometheus::BuildGauge()
                                .Name("dikkat_requests_waiting_by_priority")
                                .Help("Generate requests queued or preempted, not running, by "
                                      "request priority (-100..100).")
                                .Register(r)),
        kv_usage(prometheus::BuildGauge()
                     .Name("dikkat_kv_cache_usage_ratio")
                     .Help("Fraction of KV cache blocks in use (0..1).")
                     .Register(r)),
        kv_used(prometheus::BuildGauge()
                    .Name("dikkat_kv_cache_blocks_used")
                    .Help("KV cache blocks in use.")
                    .Register(r)),
        kv_total(prometheus::BuildGauge()
                     .Name("dikkat_kv_cache_blocks_total")
                     .Help("KV cache blocks allocated at start.")
                     .Register(r)),
        kv_cached(prometheus::BuildGauge()
                      .Name("dikkat_kv_cache_blocks_cached")
                      .Help("KV cache blocks no request holds, kept for prefix reuse "
                            "(evicted, least recently used first, when blocks run out).")
                      .Register(r)),
        held_output(prometheus::BuildGauge()
                        .Name("dikkat_held_output_bytes")
                        .Help("Generate output the engine holds until the call ends (best_of > "
                              "n), in bytes; bounded by --max_held_output_bytes.")
                        .Register(r)),
        prefix_query_tokens(prometheus::BuildCounter()
                                .Name("dikkat_prefix_cache_query_tokens_total")
                                .Help("Generate prompt tokens looked up in the prefix cache "
                                      "(each request once, at its first admission).")
                                .Register(r)),
        prefix_hit_tokens(prometheus::BuildCounter()
                              .Name("dikkat_prefix_cache_hit_tokens_total")
                              .Help("Generate prompt tokens whose K/V came from the prefix "
                                    "cache; the hit ratio is this over the query tokens.")
                              .Register(r)),
        preemptions(prometheus::BuildCounter()
                        .Name("dikkat_preemptions_total")
                        .Help("Sequences preempted (KV blocks freed, recomputed later).")
                        .Register(r)),
        load_seconds(prometheus::BuildGauge()
                         .Name("dikkat_model_load_seconds")
                         .Help("Time it took to load the model at start.")
                         .Register(r)),
        model_info(prometheus::BuildGauge()
                       .Name("dikkat_model_info")
                       .Help("Hosted model; the value is always 1.")
                       .Register(r)),
        cpu_kernels(prometheus::BuildGauge()
                        .Name("dikkat_cpu_kernels_info")
                        .Help("Instruction set of the CPU kernels (isa: avx512, avx2, generic; "
                              "detected: the best the CPU has; DIKKAT_ISA forces a lower one). "
                              "The value is always 1.")
                        .Register(r)
                        .Add({{"isa", std::string(model::IsaName(model::ActiveIsa()))},
                              {"detected", std::string(model::IsaName(model::DetectedIsa()))}})),
        resident_memory(prometheus::BuildGauge()
                            .Name("process_resident_memory_bytes")
                            .Help("Resident memory size in bytes.")
                            .Register(r)
                            .Add({})),
        cpu_seconds(prometheus::BuildCounter()
                        .Name("process_cpu_seconds_total")
                        .Help("Total user and system CPU time spent in seconds.")
                        .Register(r)
                        .Add({})),
        start_time(prometheus::BuildGauge()
                       .Name("process_start_time_seconds")
                       .Help("Start time of the process since unix epoch in seconds.")
                       .Register(r)
                       .Add({})),
        http_requests(prometheus::BuildCounter()
                          .Name("dikkat_http_requests_total")
                          .Help("Finished HTTP API requests by api, endpoint and HTTP status.")
                          .Register(r)),
        http_duration(prometheus::BuildHistogram()
                          .Name("dikkat_http_request_duration_seconds")
                          .Help("HTTP API latency, from the request's first byte to the end of "
                                "its response (for streams, the whole stream).")
                          .Register(r)) {
    cpu_kernels.Set(1);
  }

  Family<Counter>& requests;
  Family<Counter>& failures;
  Family<Histogram>& request_duration;
  Family<Histogram>& queue_time;
  Family<Histogram>& time_to_first_token;
  Family<Histogram>& inter_token;
  Family<Histogram>& step_duration;
  Family<Histogram>& step_batch_size;
  Family<Counter>& prompt_tokens;
  Family<Counter>& generated_tokens;
  Family<Histogram>& request_prompt_tokens;
  Family<Counter>& generate_finished;
  Family<Histogram>& request_generated_tokens;
  Family<Gauge>& running;
  Family<Gauge>& waiting;
  Family<Gauge>& waiting_by_priority;
  Family<Gauge>& kv_usage;
  Family<Gauge>& kv_used;
  Family<Gauge>& kv_total;
  Family<Gauge>& kv_cached;
  Family<Gauge>& held_output;
  Family<Counter>& prefix_query_tokens;
  Family<Counter>& prefix_hit_tokens;
  Family<Counter>& preemptions;
  Family<Gauge>& load_seconds;
  Family<Gauge>& model_info;
  Gauge& cpu_kernels;
  Gauge& resident_memory;
  Counter& cpu_seconds;  // advanced to /proc's value at each scrape
  Gauge& start_time;
  Family<Counter>& http_requests;
  Family<Histogram>& http_duration;
};

// The cached handles of one model; also its engine listener.
class ModelMetrics final : public EngineListener {
 public:
  ModelMetrics(Families& f, const std::string& model)
      : families_(f),
        model_(model),
        queue_time_(f.queue_time.Add({{"model", model}}, WaitSecondsBuckets())),
        time_to_first_token_(f.time_to_first_token.Add({{"model", model}}, WaitSecondsBuckets())),
        inter_token_(f.inter_token.Add({{"model", model}}, TokenLatencyBuckets())),
        prefill_duration_(
            f.step_duration.Add({{"model", model}, {"phase", "prefill"}}, StepSecondsBuckets())),
        decode_duration_(
            f.step_duration.Add({{"model", model}, {"phase", "decode"}}, StepSecondsBuckets())),
        prefill_batch_(
            f.step_batch_size.Add({{"model", model}, {"phase", "prefill"}}, BatchSizeBuckets())),
        decode_batch_(
            f.step_batch_size.Add({{"model", model}, {"phase", "decode"}}, BatchSizeBuckets())),
        prompt_tokens_(f.prompt_tokens.Add({{"model", model}})),
        generated_tokens_(f.generated_tokens.Add({{"model", model}})),
        request_prompt_tokens_(
            f.request_prompt_tokens.Add({{"model", model}}, TokenCountBuckets())),
        request_generated_tokens_(
            f.request_generated_tokens.Add({{"model", model}}, TokenCountBuckets())),
        running_(f.running.Add({{"model", model}})),
        waiting_(f.waiting.Add({{"model", model}})),
        kv_usage_(f.kv_usage.Add({{"model", model}})),
        kv_used_(f.kv_used.Add({{"model", model}})),
        kv_total_(f.kv_total.Add({{"model", model}})),
        kv_cached_(f.kv_cached.Add({{"model", model}})),
        held_output_(f.held_output.Add({{"model", model}})),
        prefix_query_tokens_(f.prefix_query_tokens.Add({{"model", model}})),
        prefix_hit_tokens_(f.prefix_hit_tokens.Add({{"model", model}})),
        preemptions_(f.preemptions.Add({{"model", model}})),
        load_seconds_(f.load_seconds.Add({{"model", model}})) {
    for (int r = 0; r < kNumRpcs; ++r) {
      const char* rpc = RpcName(static_cast<Rpc>(r));
      duration_[r] = &f.request_duration.Add({{"model", model}, {"rpc", rpc}}, RequestSecondsBuckets());
      for (auto& c : requests_[r]) c.store(nullptr, std::memory_order_relaxed);
      // The OK series exists from the start so that rate() sees its first
      // increment; error codes appear when they first happen.
      requests_[r][0].store(
          &f.requests.Add({{"model", model}, {"rpc", rpc}, {"code", "OK"}}),
          std::memory_order_relaxed);
    }
    for (const char* reason : {"invalid", "overloaded", "cancelled", "deadline", "internal"}) {
      failures_[reason] = &f.failures.Add({{"model", model}, {"reason", reason}});
    }
    for (int i = 0; i < kNumFinishReasons; ++i) {
      finished_[i] = &f.generate_finished.Add(
          {{"model", model}, {"finish_reason", FinishReasonName(static_cast<FinishReason>(i))}});
    }
  }

  void SetWarmingUp(bool warming_up) {
    warming_up_.store(warming_up, std::memory_order_release);
  }

  // ---- EngineListener (engine thread) ----
  // The engine calls the listener before it notifies the request's observer,
  // so every warm-up event happens before Warmup() returns and the flag is
  // cleared.
  void OnStep(const StepTiming& step) override {
    if (warming_up()) return;
    const double seconds = absl::ToDoubleSeconds(step.duration);
    (step.prefill ? prefill_duration_ : decode_duration_).Observe(seconds);
    (step.prefill ? prefill_batch_ : decode_batch_).Observe(step.sequences);
  }
  void OnGenerateFinished(const GenerateSummary& s) override {
    if (warming_up()) return;
    const int reason = static_cast<int>(s.reason);
    if (reason >= 0 && reason < kNumFinishReasons) finished_[reason]->Increment();
    queue_time_.Observe(absl::ToDoubleSeconds(s.queue_time));
    if (s.generated_tokens > 0) {
      time_to_first_token_.Observe(absl::ToDoubleSeconds(s.time_to_first_token));
    }
    prompt_tokens_.Increment(s.prompt_tokens);
    generated_tokens_.Increment(s.generated_tokens);
    request_prompt_tokens_.Observe(s.prompt_tokens);
    request_generated_tokens_.Observe(s.generated_tokens);
  }
  void OnTokenEmitted(absl::Duration since_previous) override {
    if (warming_up()) return;
    inter_token_.Observe(absl::ToDoubleSeconds(since_previous));
  }
  void OnPreemption() override {
    if (!warming_up()) preemptions_.Increment();
  }
  void OnPrefixLookup(int64_t prompt_tokens, int64_t cached_tokens) override {
    if (warming_up()) return;
    prefix_query_tokens_.Increment(static_cast<double>(prompt_tokens));
    prefix_hit_tokens_.Increment(static_cast<double>(cached_tokens));
  }

  // ---- service / scrape ----
  void RecordRpc(Rpc rpc, absl::StatusCode code, absl::Duration latency) {
    const int r = static_cast<int>(rpc);
    int c = static_cast<int>(code);
    if (c < 0 || c >= kNumCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
    Counter* counter = requests_[r][c].load(std::memory_order_acquire);
    if (counter == nullptr) {
      // Family::Add returns the existing series for equal labels, so racing
      // threads end up with the same pointer.
      counter = &families_.requests.Add(
          {{"model", model_}, {"rpc", RpcName(rpc)},
           {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}});
      requests_[r][c].store(counter, std::memory_order_release);
    }
    counter->Increment();
    duration_[r]->Observe(absl::ToDoubleSeconds(latency));
    const char* reason = FailureReason(static_cast<absl::StatusCode>(c));
    if (*reason != '\0') failures_.at(reason)->Increment();
  }

  void AddPromptTokens(int64_t n) { prompt_tokens_.Increment(static_cast<double>(n)); }

  void SetLoaded(const ModelDescription& d, const Engine* engine, const std::string& version) {
    load_seconds_.Set(absl::ToDoubleSeconds(d.load_time));
    families_.model_info
        .Add({{"model", model_},
              {"architecture", model::ArchitectureName(d.config.architecture)},
              {"dtype", d.dtype},
              {"kv_cache_dtype", d.kv_cache_dtype},
              {"device", d.device},
              {"version", version}})
        .Set(1);
    engine_.store(engine, std::memory_order_release);
  }

  void Refresh() {
    const Engine* engine = engine_.load(std::memory_order_acquire);
    if (engine == nullptr) return;
    const EngineStats s = engine->stats();
    running_.Set(s.running);
    waiting_.Set(s.waiting);
    kv_used_.Set(s.kv_blocks_used);
    kv_total_.Set(s.kv_blocks_total);
    kv_cached_.Set(s.kv_blocks_cached);
    held_output_.Set(static_cast<double>(s.held_output_bytes));
    // Series of priorities seen before stay, at 0, so rate() and alerts see the drop.
    dikkat::MutexLock lock(&priority_mu_);  // scrapes run on several threads
    for (auto& [priority, gauge] : waiting_by_priority_) gauge->Set(0);
    for (const auto& [priority, count] : s.waiting_by_priority) {
      Gauge*& gauge = waiting_by_priority_[priority];
      if (gauge == nullptr) {
        gauge = &families_.waiting_by_priority.Add(
            {{"model", model_}, {"priority", std::to_string(priority)}});
      }
      gauge->Set(count);
    }
    kv_usage_.Set(s.kv_blocks_total > 0
                      ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total
                      : 0.0);
  }

 private:
  bool warming_up() const { return warming_up_.load(std::memory_order_acquire); }

  Families& families_;
  const std::string model_;
  Histogram& queue_time_;
  Histogram& time_to_first_token_;
  Histogram& inter_token_;
  Histogram& prefill_duration_;
  Histogram& decode_duration_;
  Histogram& prefill_batch_;
  Histogram& decode_batch_;
  Counter& prompt_tokens_;
  Counter& generated_tokens_;
  Histogram& request_prompt_tokens_;
  Histogram& request_generated_tokens_;
  Gauge& running_;
  Gauge& waiting_;
  Gauge& kv_usage_;
  Gauge& kv_used_;
  Gauge& kv_total_;
  Gauge& kv_cached_;
  Gauge& held_output_;
  dikkat::Mutex priority_mu_;
  std::map<int32_t, Gauge*> waiting_by_priority_ ABSL_GUARDED_BY(priority_mu_);
  Counter& prefix_query_tokens_;
  Counter& prefix_hit_tokens_;
  Counter& preemptions_;
  Gauge& load_seconds_;
  std::array<Histogram*, kNumRpcs> duration_{};
  std::array<std::array<std::atomic<Counter*>, kNumCodes>, kNumRpcs> requests_;
  std::map<std::string, Counter*> failures_;  // filled in the constructor, read-only after
  std::array<Counter*, kNumFinishReasons> finished_{};  // by FinishReason
  std::atomic<bool> warming_up_{false};
  std::atomic<const Engine*> engine_{nullptr};
};

struct Metrics::Impl {
  explicit Impl(std::string v)
      : version(std::move(v)), registry(std::make_shared<prometheus::Registry>()),
        families(*registry) {}

  ModelMetrics* Find(absl::string_view model) {
    {
      dikkat::ReaderMutexLock lock(&mu);
      auto it = models.find(model);
      if (it != models.end()) return it->second.get();
    }
    // Created on first use so that a server nobody misaddresses exports no
    // model="unknown" series.
    std::call_once(unknown_once, [this] {
      unknown = std::make_unique<ModelMetrics>(families, kUnknownModel);
    });
    return unknown.get();
  }

  const std::string version;
  std::shared_ptr<prometheus::Registry> registry;
  Families families;
  // Models are added during start-up while /metrics may already be scraped.
  // Entries are never removed, so a ModelMetrics* stays valid without the lock.
  dikkat::Mutex mu;
  std::map<std::string, std::unique_ptr<ModelMetrics>, std::less<>> models ABSL_GUARDED_BY(mu);
  // Counters only move by increments: advance process_cpu_seconds_total by
  // what /proc reports beyond the value already exported.
  void RefreshProcessTimes() {
    double cpu = 0, start = 0;
    if (!ReadProcessTimes(&cpu, &start)) return;
    dikkat::MutexLock lock(&cpu_mu);
    if (cpu > cpu_exported) {
      families.cpu_seconds.Increment(cpu - cpu_exported);
      cpu_exported = cpu;
    }
    families.start_time.Set(start);
  }

  dikkat::Mutex cpu_mu;
  double cpu_exported ABSL_GUARDED_BY(cpu_mu) = 0;
  std::once_flag unknown_once;
  std::unique_ptr<ModelMetrics> unknown;  // requests naming a model we do not host
};

Metrics::Metrics(std::string server_version)
    : impl_(std::make_unique<Impl>(std::move(server_version))) {}

Metrics::~Metrics() = default;

EngineListener* Metrics::AddModel(const std::string& model) {
  dikkat::MutexLock lock(&impl_->mu);
  auto& slot = impl_->models[model];
  if (slot == nullptr) slot = std::make_unique<ModelMetrics>(impl_->families, model);
  return slot.get();
}

void Metrics::SetModelLoaded(const std::string& model, const ModelDescription& description,
                             const Engine* engine) {
  static_cast<ModelMetrics*>(AddModel(model))->SetLoaded(description, engine, impl_->version);
}

void Metrics::SetWarmingUp(const std::string& model, bool warming_up) {
  static_cast<ModelMetrics*>(AddModel(model))->SetWarmingUp(warming_up);
}

void Metrics::RecordRpc(absl::string_view model, Rpc rpc, absl::StatusCode code,
                        absl::Duration latency) {
  impl_->Find(model)->RecordRpc(rpc, code, latency);
}

void Metrics::RecordHttp(absl::string_view api, absl::string_view endpoint, int http_status,
                         absl::Duration latency) {
  const std::map<std::string, std::string> labels = {{"api", std::string(api)},
                                                     {"endpoint", std::string(endpoint)}};
  std::map<std::string, std::string> with_code = labels;
  with_code["code"] = std::to_string(http_status);
  impl_->families.http_requests.Add(with_code).Increment();
  impl_->families.http_duration.Add(labels, RequestSecondsBuckets())
      .Observe(absl::ToDoubleSeconds(latency));
}

void Metrics::AddPromptTokens(absl::string_view model, int64_t tokens) {
  impl_->Find(model)->AddPromptTokens(tokens);
}

std::string Metrics::Scrape() {
  {
    dikkat::ReaderMutexLock lock(&impl_->mu);
    for (auto& [name, m] : impl_->models) m->Refresh();
  }
  impl_->families.resident_memory.Set(ResidentBytes());
  impl_->RefreshProcessTimes();
  return prometheus::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace dikkat::server
