// In-process engine throughput: N concurrent greedy Generate streams of M
// tokens submitted straight to server::Engine (no gRPC). bench/run.sh runs the
// same workload through the server with `dikkat bench` and reports the ratio.
//
// usage: engine_throughput --model=DIR --concurrency=N --requests=R --max_tokens=M
//        [--prompt_tokens=P] [--dtype=float32] [--threads=2]
// Prints one JSON line: {"concurrency":N,"tokens_per_s":...,"requests_per_s":...}.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "server/engine.h"
#include "server/runtime.h"

ABSL_FLAG(std::string, model, "build/bench/gpt2-small", "model folder");
ABSL_FLAG(int, concurrency, 8, "requests in flight at once");
ABSL_FLAG(int, requests, 32, "requests in total");
ABSL_FLAG(int, max_tokens, 32, "tokens generated per request");
ABSL_FLAG(int, prompt_tokens, 16, "prompt length in tokens");
ABSL_FLAG(std::string, dtype, "float32", "float32 or bfloat16");
ABSL_FLAG(int, threads, 2, "compute threads");

namespace dikkat::server {
namespace {

// Keeps `concurrency` requests in flight until `total` have finished.
class Driver {
 public:
  Driver(Engine* engine, int concurrency, int total, int max_tokens, int prompt_tokens)
      : engine_(engine), total_(total), max_tokens_(max_tokens), prompt_tokens_(prompt_tokens) {
    for (int i = 0; i < concurrency && i < total; ++i) Start();
  }

  void Wait() {
    dikkat::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](Driver* d) { return d->finished_ == d->total_; }, this));
  }
  int64_t tokens() {
    dikkat::MutexLock lock(&mu_);
    return tokens_;
  }

 private:
  class Observer : public GenerateObserver {
   public:
    explicit Observer(Driver* d) : d_(d) {}
    void OnChunk(GeneratedChunk chunk) override { count_ += chunk.tokens.size(); }
    void OnFinish(GenerateSummary) override { d_->Done(count_); }

   private:
    Driver* d_;
    int64_t count_ = 0;
  };

  void Start() {
    int index;
    {
      dikkat::MutexLock lock(&mu_);
      if (started_ == total_) return;
      index = started_++;
    }
    GenerateRequest r;
    for (int i = 0; i < prompt_tokens_; ++i) r.prompt.push_back((index * 131 + i * 7) % 250 + 1);
    r.sampling.temperature = 0;
    r.max_new_tokens = max_tokens_;
    r.ignore_eos = true;
    auto status = engine_->SubmitGenerate(r, std::make_shared<Observer>(this));
    if (!status.ok()) {
      fprintf(stderr, "submit failed: %s\n", std::string(status.status().message()).c_str());
      Done(0);
    }
  }

  void Done(int64_t tokens) {
    {
      dikkat::MutexLock lock(&mu_);
      tokens_ += tokens;
      ++finished_;
    }
    Start();
  }

  Engine* engine_;
  const int total_, max_tokens_, prompt_tokens_;
  dikkat::Mutex mu_;
  int started_ = 0, finished_ = 0;
  int64_t tokens_ = 0;
};

int Main() {
  SetComputeThreads(absl::GetFlag(FLAGS_threads));
  EngineOptions options;
  options.dtype = absl::GetFlag(FLAGS_dtype);
  options.kv_cache_bytes = 512ll << 20;
  auto engine = Engine::Create("bench", absl::GetFlag(FLAGS_model), options);
  if (!engine.ok()) {
    fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  if (auto s = (*engine)->Warmup(); !s.ok()) return 1;
  const int n = absl::GetFlag(FLAGS_concurrency), total = absl::GetFlag(FLAGS_requests);
  const absl::Time start = absl::Now();
  Driver driver(engine->get(), n, total, absl::GetFlag(FLAGS_max_tokens),
                absl::GetFlag(FLAGS_prompt_tokens));
  driver.Wait();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  printf("{\"concurrency\": %d, \"tokens_per_s\": %.3f, \"requests_per_s\": %.3f}\n", n,
         driver.tokens() / seconds, total / seconds);
  (*engine)->Shutdown(absl::Seconds(1));
  return 0;
}

}  // namespace
}  // namespace dikkat::server

int main(int argc, char** argv) {
  dikkat::server::SelectBlasKernels(argc, argv);
  dikkat::server::TuneAllocator();
  absl::ParseCommandLine(argc, argv);
  return dikkat::server::Main();
}
