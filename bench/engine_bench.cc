// Engine microbenchmarks on a real model folder (by default the GPT-2-small
// shaped random model that bench/run.sh writes): prefill of a 512-token
// prompt, one decode step at batch 1/8/32 and context 128/1023 (the longest GPT-2 allows before its last position), and the
// attention core alone; float32, bfloat16 and int8 weights.
//
// Environment: DIKKAT_BENCH_MODEL (folder), DIKKAT_BENCH_THREADS (default 2).
// Every figure is tokens/s (items_per_second). Timings on these machines are
// noisy: compare within one run (bench/run.sh puts PyTorch beside it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "model/aten_threads.h"
#include "model/attention.h"
#include "model/cpu_elementwise.h"
#include "model/cpu_isa.h"
#include "model/cpu_kernels.h"
#include "model/cpu_kernels_isa.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/memory_pages.h"
#include "server/runtime.h"
#include "model/model_loader.h"
#include "model/transformer.h"
#include "model/work_team.h"

namespace dikkat::model {
namespace {

std::string ModelDir() {
  const char* env = std::getenv("DIKKAT_BENCH_MODEL");
  return env != nullptr ? env : "build/bench/gpt2-small";
}

// Models are loaded once per dtype (and page size: LoadOptions::huge_pages,
// as the server's default unless a benchmark compares) and kept for the
// whole run.
LoadedModel& Model(c10::ScalarType dtype, bool huge_pages = true) {
  static auto* models = new std::map<std::pair<c10::ScalarType, bool>, LoadedModel>();
  auto it = models->find({dtype, huge_pages});
  if (it != models->end()) return it->second;
  LoadOptions options;
  options.dtype = dtype;
  options.huge_pages = huge_pages;
  absl::StatusOr<LoadedModel> loaded = LoadModelFolder(ModelDir(), options);
  if (!loaded.ok()) {
    fprintf(stderr, "cannot load %s: %s\n", ModelDir().c_str(),
            std::string(loaded.status().message()).c_str());
    std::exit(1);
  }
  return models->emplace(std::make_pair(dtype, huge_pages), std::move(*loaded)).first->second;
}

// The `dtype` argument of every benchmark: 0 float32, 1 bfloat16, 2 float16,
// 3 int8 (weight-only, --dtype int8).
c10::ScalarType DType(int64_t code) {
  switch (code) {
    case 1: return at::kBFloat16;
    case 2: return at::kHalf;
    case 3: return at::kChar;
    default: return at::kFloat;
  }
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> out(n);
  for (auto& t : out) t = dist(gen);
  return out;
}

// A prefill of `n` random tokens through the benchmark model of `dtype`, into
// a cache of its own (each run rewrites the same positions).
class Prefill {
 public:
  Prefill(c10::ScalarType dtype, int64_t n, bool huge_pages = true)
      : m_(Model(dtype, huge_pages)), tokens_(RandomTokens(n, m_.config.vocab_size, 1)) {
    const c10::ScalarType cache_dtype = CacheDType(dtype);
    cache_ = std::make_unique<KvCache>(*KvCache::Create(
        m_.config, 2 * KvCache::BytesPerToken(m_.config, cache_dtype) * m_.config.max_positions,
        16, cache_dtype, at::kCPU, huge_pages));
    cache_->allocator().EnsureCapacity(&table_, n);
    chunk_.tokens = absl::MakeConstSpan(tokens_);
    chunk_.block_table = &table_;
  }

  void Run() {
    ForwardResult r = m_.transformer->Decode({chunk_}, &*cache_, ForwardOptions());
    benchmark::DoNotOptimize(r.logits.data_ptr());
  }

 private:
  LoadedModel& m_;
  std::vector<int32_t> tokens_, table_;
  std::unique_ptr<KvCache> cache_;
  SequenceChunk chunk_;
};

// Args: {dtype, prompt tokens}
void BM_Prefill(benchmark::State& state) {
  Prefill prefill(DType(state.range(0)), state.range(1));
  for (auto _ : state) prefill.Run();
  state.SetItemsProcessed(state.iterations() * state.range(1));
}

// One decode step of `batch` sequences that each hold `context` cached tokens
// (the step rewrites the same position, so the context stays fixed).
class DecodeSteps {
 public:
  // cache: the KV cache's dtype (Undefined: CacheDType(dtype), the server's
  // "auto").
  DecodeSteps(LoadedModel& m, c10::ScalarType dtype, int64_t batch, int64_t context,
              bool huge_pages = true, c10::ScalarType cache = c10::ScalarType::Undefined)
      : m_(m) {
    const c10::ScalarType cache_dtype = cache == c10::ScalarType::Undefined ? CacheDType(dtype)
                                                                            : cache;
    const int64_t per_seq = context + 1;
    cache_ = std::make_unique<KvCache>(*KvCache::Create(m.config,
                             KvCache::BytesPerToken(m.config, cache_dtype) *
                                 std::max<int64_t>(batch * (per_seq + 16), m.config.max_positions + 16),
                             16, cache_dtype, at::kCPU, huge_pages));
    tokens_.resize(batch);
    tables_.resize(batch);
    for (int64_t b = 0; b < batch; ++b) {
      tokens_[b] = RandomTokens(per_seq, m.config.vocab_size, static_cast<uint32_t>(b + 7));
      cache_->allocator().EnsureCapacity(&tables_[b], per_seq);
      SequenceChunk prefill;  // fill the context once
      prefill.tokens = absl::MakeConstSpan(tokens_[b]).subspan(0, context);
      prefill.block_table = &tables_[b];
      m.transformer->Decode({prefill}, &*cache_, ForwardOptions());
    }
    step_.resize(batch);
    for (int64_t b = 0; b < batch; ++b) {
      step_[b].tokens = absl::MakeConstSpan(tokens_[b]).subspan(context, 1);
      step_[b].start_pos = context;
      step_[b].block_table = &tables_[b];
    }
  }

  void Run() {
    ForwardResult r = m_.transformer->Decode(step_, &*cache_, ForwardOptions());
    benchmark::DoNotOptimize(r.logits.data_ptr());
  }

 private:
  LoadedModel& m_;
  std::unique_ptr<KvCache> cache_;
  std::vector<std::vector<int32_t>> tokens_, tables_;
  std::vector<SequenceChunk> step_;
};

// A decode step of `rows` sequences at context 128, or (prefill) a prefill
// of `rows` tokens.
class StepOrPrefill {
 public:
  StepOrPrefill(c10::ScalarType dtype, int64_t rows, bool prefill) {
    if (prefill) {
      prefill_ = std::make_unique<Prefill>(dtype, rows);
    } else {
      steps_ = std::make_unique<DecodeSteps>(Model(dtype), dtype, rows, 128);
    }
  }
  void Run() { prefill_ ? prefill_->Run() : steps_->Run(); }

 private:
  std::unique_ptr<DecodeSteps> steps_;
  std::unique_ptr<Prefill> prefill_;
};

// Args: {dtype, batch, context}. Each iteration is one decode step.
void BM_DecodeStep(benchmark::State& state) {
  DecodeSteps steps(Model(DType(state.range(0))), DType(state.range(0)), state.range(1),
                    state.range(2));
  for (auto _ : state) steps.Run();
  state.SetItemsProcessed(state.iterations() * state.range(1));
}

// Seconds that f() takes.
template <typename F>
double Seconds(const F& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs a() then b() in every iteration, so that both see the same moments of
// a noisy machine, and reports ms per run of each (counters a_ms and b_ms)
// and ratio = a's time / b's time.
template <typename A, typename B>
void RunPaired(benchmark::State& state, const A& a, const B& b, const char* a_ms,
               const char* b_ms, const char* ratio) {
  double ta = 0, tb = 0;
  for (auto _ : state) {
    ta += Seconds(a);
    tb += Seconds(b);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters[a_ms] = 1e3 * ta / n;
  state.counters[b_ms] = 1e3 * tb / n;
  state.counters[ratio] = ta / tb;
}

// Args: {batch, context, cache dtype (1 bf16, 2 fp16)}. float32 weights;
// decode steps with a float32 KV cache against a 16-bit one (--kv_cache_dtype),
// alternating step by step. Counters: ms per step of each (f32_cache_ms,
// half_cache_ms) and half_speedup = float32-cache time / 16-bit-cache time.
void BM_KvCacheDTypePaired(benchmark::State& state) {
  const int64_t batch = state.range(0), context = state.range(1);
  LoadedModel& m = Model(at::kFloat);
  DecodeSteps f32(m, at::kFloat, batch, context);
  DecodeSteps half(m, at::kFloat, batch, context, true, DType(state.range(2)));
  RunPaired(
      state, [&] { f32.Run(); }, [&] { half.Run(); }, "f32_cache_ms", "half_cache_ms",
      "half_speedup");
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, batch, context}. Row blocks against the routing before them
// (SetSmallBatchLinearRowBlocks), side by side: each iteration runs one
// decode step with linears of 9 rows and more in LibTorch's GEMM and one in
// SmallBatchLinear's row blocks up to the dtype's limit (cpu_kernels.h), so
// that both see the same moments of a noisy machine. Counters: tokens/s of each (gemm_tok_s, blocks_tok_s) and
// blocks_speedup = GEMM time / row-block time.
void BM_DecodeRowBlocksPaired(benchmark::State& state) {
  const int64_t batch = state.range(1);
  DecodeSteps steps(Model(DType(state.range(0))), DType(state.range(0)), batch, state.range(2));
  double gemm = 0, blocks = 0;
  for (auto _ : state) {
    SetSmallBatchLinearRowBlocks(false);
    gemm += Seconds([&] { steps.Run(); });
    SetSmallBatchLinearRowBlocks(true);
    blocks += Seconds([&] { steps.Run(); });
  }
  const double n = static_cast<double>(state.iterations() * batch);
  state.counters["gemm_tok_s"] = n / gemm;
  state.counters["blocks_tok_s"] = n / blocks;
  state.counters["blocks_speedup"] = gemm / blocks;
}

// Args: {batch, prompt}. int8 weights: x as int16 (the AVX2 kernel; one row
// on Intel's AVX-512 and, in the VNNI form, Zen 4's, SetInt8OneRowInt16X)
// against x as float32 (each weight
// widened; SetInt8Int16Activations), side by
// side: each iteration runs one decode step of `batch` sequences at context
// 128 with each, or with prompt > 0 a prefill of that many tokens (batch
// ignored). Counters: ms of each (float_x_ms, int16_x_ms) and int16_speedup =
// float32-x time / int16-x time. On an ISA without the int16 kernel both are
// the float32 one (speedup ~1).
void BM_Int8ActivationsPaired(benchmark::State& state) {
  const int64_t batch = state.range(0), prompt = state.range(1);
  StepOrPrefill work(at::kChar, prompt > 0 ? prompt : batch, prompt > 0);
  const std::function<void()> run = [&] { work.Run(); };
  RunPaired(
      state,
      [&] {
        SetInt8Int16Activations(false);
        run();
      },
      [&] {
        SetInt8Int16Activations(true);
        run();
      },
      "float_x_ms", "int16_x_ms", "int16_speedup");
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, batch, prompt}. The active ISA's kernel table against
// AVX2's, side by side in one process (SetActiveIsa between passes): each
// iteration runs one decode step of `batch` sequences at context 128, or
// with prompt > 0 a prefill of that many tokens, once with each. On a CPU
// without AVX-512 both sides are AVX2. Counters: ms of each (avx2_ms,
// active_ms) and active_speedup = AVX2 time / the active ISA's. What it
// answers: whether a machine's AVX-512 kernels beat its AVX2 ones (on a
// Zen 4 EPYC, whose 512-bit operations are double-pumped, not always).
void BM_IsaTablesPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t batch = state.range(1), prompt = state.range(2);
  StepOrPrefill work(dtype, prompt > 0 ? prompt : batch, prompt > 0);
  const std::function<void()> run = [&] { work.Run(); };
  const CpuIsa active = ActiveIsa();
  RunPaired(
      state,
      [&] {
        SetActiveIsa(CpuIsa::kAvx2);
        run();
      },
      [&] {
        SetActiveIsa(active);
        run();
      },
      "avx2_ms", "active_ms", "active_speedup");
  SetActiveIsa(active);
  state.SetLabel(std::string(IsaName(active)));
}

// Args: {dtype, batch}. The LibTorch operators a decode step of `batch`
// sequences (context 128) still calls: a RecordFunction callback counts and
// times every top-level operator (its own cost adds ~0.2 us a call). Prints
// one line per operator to stderr, most time first; the step time includes
// the callback. For finding fixed costs, not for ratios.
struct AtenOpStat {
  int64_t calls = 0;
  double us = 0;
};
std::unordered_map<std::string, AtenOpStat>* aten_op_stats = nullptr;
thread_local std::vector<std::chrono::steady_clock::time_point> aten_op_starts;

void BM_AtenOpsPerStep(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  DecodeSteps steps(Model(dtype), dtype, state.range(1), 128);
  std::unordered_map<std::string, AtenOpStat> stats;
  aten_op_stats = &stats;
  const at::CallbackHandle handle = at::addGlobalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
            aten_op_starts.push_back(std::chrono::steady_clock::now());
            return nullptr;
          },
          [](const at::RecordFunction& fn, at::ObserverContext*) {
            const auto start = aten_op_starts.back();
            aten_op_starts.pop_back();
            if (!aten_op_starts.empty()) return;  // inside another operator
            AtenOpStat& s = (*aten_op_stats)[fn.name()];
            ++s.calls;
            s.us +=
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count();
          })
          .scopes({at::RecordScope::FUNCTION}));
  int64_t n = 0;
  for (auto _ : state) {
    steps.Run();
    ++n;
  }
  at::removeCallback(handle);
  aten_op_stats = nullptr;
  std::vector<std::pair<std::string, AtenOpStat>> sorted(stats.begin(), stats.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  double calls = 0, us = 0;
  for (const auto& [name, s] : sorted) {
    std::fprintf(stderr, "%-32s %7.1f calls/step %8.1f us/step\n", name.c_str(),
                 static_cast<double>(s.calls) / n, s.us / n);
    calls += s.calls;
    us += s.us;
  }
  state.counters["ops_per_step"] = calls / n;
  state.counters["op_us_per_step"] = us / n;
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, spread}. A batch-1 decode step (context 128) with the AVX-512
// (or AVX2) kernels running one input row as a stream of output rows (with
// spread > 0: as that many far-apart streams, SetOneRowSpread; 0: the CPU's
// default) against interleaved output rows (SetOneRowStreams 1 / 0), side by side; bfloat16
// with the AVX512_BF16 dot products off (they take one row where on). Same
// sums either way. Counters: ms of each (blocks_ms, streams_ms) and
// streams_speedup = blocks / streams. float32 streams in the AVX2 table too;
// elsewhere (generic) both are the same code.
void BM_OneRowStreamsPaired(benchmark::State& state) {
  SetSpreadTiles(0);  // the kernels this compares, not the CPU's far-apart tiles
  const c10::ScalarType dtype = DType(state.range(0));
  DecodeSteps steps(Model(dtype), dtype, 1, 128);
  SetBf16DotProducts(0);
  SetOneRowSpread(static_cast<int>(state.range(1)));
  RunPaired(
      state,
      [&] {
        SetOneRowStreams(0);
        steps.Run();
      },
      [&] {
        SetOneRowStreams(1);
        steps.Run();
      },
      "blocks_ms", "streams_ms", "streams_speedup");
  SetOneRowStreams(-1);
  SetOneRowSpread(0);
  SetBf16DotProducts(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())) + (Avx512InHalves() ? " (512-bit in halves)" : ""));
  SetSpreadTiles(-1);
}

// Args: {dtype, streams, batch}. A decode step (context 128) of `batch`
// sequences with each task reading its slice of W as `streams` far-apart
// streams at once against SetOneRowSpread(1) (batch 1: one stream; batch
// 2-3: the row blocks; int8 at 3 rows: 4 streams whenever above 1), side
// by side, where one input row streams
// (OneRowStreams). Same sums. Counters: ms of each (one_ms, spread_ms) and
// spread_speedup = one / spread.
void BM_OneRowSpreadPaired(benchmark::State& state) {
  SetSpreadTiles(0);  // the kernels this compares, not the CPU's far-apart tiles
  const c10::ScalarType dtype = DType(state.range(0));
  const int streams = static_cast<int>(state.range(1));
  DecodeSteps steps(Model(dtype), dtype, state.range(2), 128);
  RunPaired(
      state,
      [&] {
        SetOneRowSpread(1);
        steps.Run();
      },
      [&] {
        SetOneRowSpread(streams);
        steps.Run();
      },
      "one_ms", "spread_ms", "spread_speedup");
  SetOneRowSpread(0);
  state.SetLabel(std::string(IsaName(ActiveIsa())) +
                 (kernels::OneRowStreams() ? " (one-row streams)" : ""));
  SetSpreadTiles(-1);
}

// Args: {dtype, rows, prefill}. The weights and the KV cache in ordinary
// allocations (4 KiB pages where THP is "madvise") against the same model
// loaded into HugePageArena's 2 MiB pages (LoadOptions::huge_pages), side
// by side: each iteration runs a decode step of `rows` sequences at context
// 128 (or with prefill = 1 a prefill of `rows` tokens) on each. The same
// sums. Counters: ms of each (small_ms, huge_ms) and huge_speedup = small /
// huge. The label gives the THP mode and the process's memory in huge pages;
// under "always" both copies may get huge pages (compare nothing then).
void BM_HugePagesPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t rows = state.range(1);
  const bool prefill = state.range(2) != 0;
  std::unique_ptr<Prefill> prefill_small, prefill_huge;
  std::unique_ptr<DecodeSteps> steps_small, steps_huge;
  if (prefill) {
    prefill_small = std::make_unique<Prefill>(dtype, rows, false);
    prefill_huge = std::make_unique<Prefill>(dtype, rows, true);
  } else {
    steps_small = std::make_unique<DecodeSteps>(Model(dtype, false), dtype, rows, 128, false);
    steps_huge = std::make_unique<DecodeSteps>(Model(dtype, true), dtype, rows, 128, true);
  }
  RunPaired(
      state, [&] { prefill ? prefill_small->Run() : steps_small->Run(); },
      [&] { prefill ? prefill_huge->Run() : steps_huge->Run(); }, "small_ms", "huge_ms",
      "huge_speedup");
  state.SetLabel(absl::StrFormat("%s; THP %s; %.0f MiB in huge pages", IsaName(ActiveIsa()),
                                 TransparentHugePagesMode(),
                                 static_cast<double>(ProcessHugePageBytes()) / (1 << 20)));
}

// Args: {dtype}. A batch-1 int8 decode step (context 128) with the AVX-512
// one-row float32-x stream (SetInt8OneRowInt16X(0): not the int16-x kernels
// Intel and Zen 4 take by default) broadcasting each output row's scale once
// per vector against once per group of 32 (SetInt8OneRowScalePerGroup 0 /
// 1), side by side. Same sums. Counters: ms of each and per_group_speedup.
// Elsewhere than AVX-512 (and where OneRowStreams is false) both are the
// same code.
void BM_Int8OneRowScalesPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  DecodeSteps steps(Model(dtype), dtype, 1, 128);
  SetInt8OneRowInt16X(0);
  RunPaired(
      state,
      [&] {
        SetInt8OneRowScalePerGroup(0);
        steps.Run();
      },
      [&] {
        SetInt8OneRowScalePerGroup(1);
        steps.Run();
      },
      "per_vector_ms", "per_group_ms", "per_group_speedup");
  SetInt8OneRowScalePerGroup(-1);
  SetInt8OneRowInt16X(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())) +
                 (kernels::OneRowStreams() ? " (one-row streams)" : ""));
}

// The work of the one-row int8 benchmarks below: `work` 0 a batch-1 int8
// decode step (context 128), 1 the 48 GPT-2-small linears of one input row
// (int8, streamed from memory).
class OneRowInt8Work {
 public:
  explicit OneRowInt8Work(int64_t work) {
    at::manual_seed(1);
    if (work == 0) {
      steps_ = std::make_unique<DecodeSteps>(Model(at::kChar), at::kChar, 1, 128);
      return;
    }
    const int64_t shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    for (int layer = 0; layer < 12; ++layer) {
      for (const auto& s : shapes) {
        weights_.push_back(QuantizeInt8(at::randn({s[1], s[0]}) * 0.02));
        biases_.push_back(at::randn({s[1]}) * 0.02);
      }
    }
  }
  void Run() {
    if (steps_ != nullptr) return steps_->Run();
    for (size_t j = 0; j < weights_.size(); ++j) {
      const at::Tensor& x = weights_[j].in_features() == 768 ? x768_ : x3072_;
      benchmark::DoNotOptimize(Int8Linear(x, weights_[j], biases_[j]).data_ptr());
    }
  }

 private:
  std::unique_ptr<DecodeSteps> steps_;
  std::vector<LinearWeight> weights_;
  std::vector<at::Tensor> biases_;
  at::Tensor x768_ = at::randn({1, 768}), x3072_ = at::randn({1, 3072});
};

// Args: {work} (OneRowInt8Work). One-row int8 linears through the float32-x
// kernels against x as int16 with 512-bit integer multiply-adds
// (SetInt8OneRowInt16X 0 / 1, SetInt8OneRowVnni(0): not the VNNI form Zen 4
// takes by default), side by side. Counters: ms of each and int16_speedup.
// Where AVX-512 is not active both are the float32-x kernels (the label
// says so).
void BM_Int8OneRowInt16XPaired(benchmark::State& state) {
  OneRowInt8Work work(state.range(0));
  SetInt8OneRowVnni(0);
  SetInt8OneRowInt16X(1);
  const bool int16 = Int8OneRowInt16XActive();
  RunPaired(
      state,
      [&] {
        SetInt8OneRowInt16X(0);
        work.Run();
      },
      [&] {
        SetInt8OneRowInt16X(1);
        work.Run();
      },
      "float_x_ms", "int16_x_ms", "int16_speedup");
  SetInt8OneRowInt16X(-1);
  SetInt8OneRowVnni(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())) + (int16 ? "" : " (not AVX-512: same code)"));
}

// Args: {work, base}. One-row int8 linears through the AVX512_VNNI form of
// the int16-x kernel (SetInt8OneRowVnni(1)) against `base`: 0 the float32-x
// stream (SetInt8OneRowInt16X(0), Zen 4's kernel before it), 1 the int16-x
// kernel's 512-bit multiply-adds (SetInt8OneRowVnni(0)); on `work`
// (OneRowInt8Work), alternating (RunPaired). Counters: ms of each and the
// speedup base / VNNI. The label says where the VNNI form cannot run.
void BM_Int8OneRowVnniPaired(benchmark::State& state) {
  OneRowInt8Work work(state.range(0));
  const bool float_base = state.range(1) == 0;
  SetInt8OneRowInt16X(1);
  SetInt8OneRowVnni(1);
  const bool vnni = Int8OneRowVnniActive();
  RunPaired(
      state,
      [&] {
        if (float_base) {
          SetInt8OneRowInt16X(0);
        } else {
          SetInt8OneRowVnni(0);
        }
        work.Run();
      },
      [&] {
        SetInt8OneRowInt16X(1);
        SetInt8OneRowVnni(1);
        work.Run();
      },
      float_base ? "float_x_ms" : "madd_ms", "vnni_ms", "vnni_speedup");
  SetInt8OneRowInt16X(-1);
  SetInt8OneRowVnni(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())) +
                 (vnni ? "" : " (the VNNI form not active: AVX-512 off or no AVX512_VNNI)"));
}

// Args: {rows, threads}. GeluTanh (layers.h: x * sigmoid(2u) in five
// vectorized operators) against LibTorch's at::gelu(x, "tanh") on [rows,
// 3072] (GPT-2 small's feed-forward width) with LibTorch on that many
// threads, side by side. Counters: ms of each (aten_ms, ours_ms) and
// speedup = LibTorch's time / ours.
void BM_GeluTanhPaired(benchmark::State& state) {
  const at::Tensor x = at::randn({state.range(0), 3072});
  const int threads = at::get_num_threads();
  at::set_num_threads(static_cast<int>(state.range(1)));
  RunPaired(
      state, [&] { benchmark::DoNotOptimize(at::gelu(x, "tanh").data_ptr()); },
      [&] { benchmark::DoNotOptimize(GeluTanh(x).data_ptr()); }, "aten_ms", "ours_ms", "speedup");
  at::set_num_threads(threads);
}

// Args: {dtype, batch, prompt}. A decode step of `batch` sequences at
// context 128, or with prompt > 0 a prefill of that many tokens (batch
// ignored), with a switch off and on, alternating (RunPaired). Counters: ms
// of each (off_ms, on_ms names) and the speedup = off / on. The switch is
// left on (every switch here is on by default).
void SwitchPaired(benchmark::State& state, void (*set)(bool), const char* off_ms,
                  const char* on_ms, const char* speedup) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t batch = state.range(1), prompt = state.range(2);
  StepOrPrefill work(dtype, prompt > 0 ? prompt : batch, prompt > 0);
  RunPaired(
      state,
      [&] {
        set(false);
        work.Run();
      },
      [&] {
        set(true);
        work.Run();
      },
      off_ms, on_ms, speedup);
  set(true);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// LibTorch's operators on small tensors (norms, activations, a short
// prompt's attention scores) on the engine thread alone (SerialAtenOps,
// aten_threads.h) against on LibTorch's whole OpenMP team (SwitchPaired).
void BM_SerialAtenOpsPaired(benchmark::State& state) {
  SwitchPaired(state, SetSerialAtenOps, "team_ms", "serial_ms", "serial_speedup");
}

// The forward's LibTorch operators under autograd's dispatch as before and
// under inference mode (SetForwardInferenceMode, transformer.h; SwitchPaired).
void BM_InferenceModePaired(benchmark::State& state) {
  SwitchPaired(state, SetForwardInferenceMode, "autograd_ms", "inference_ms", "inference_speedup");
}

// The norms and activations on LibTorch's operators against the vector
// kernels (SetCpuElementwise, cpu_elementwise.h; SwitchPaired).
void BM_CpuElementwisePaired(benchmark::State& state) {
  SwitchPaired(state, SetCpuElementwise, "aten_ms", "kernels_ms", "kernels_speedup");
}

// Args: {M, in, out}. The float32 row kernel's compute roof on one core:
// the ISA table's linear_f32 called directly (no tensors, no threads) on a
// W of out x in and M rows of x small enough to stay in the L1/L2 cache,
// again and again (out 2400: W of 7 MiB from the L3 cache; 24000: 70 MiB
// from memory or a large L3 cache, one core's stream; 200000: 614 MB, from
// memory on the machines we have had, at 1, 6, 8, 12 and 16 rows: whether
// the stream hides the FMAs). items_per_second = FLOP/s.
void BM_LinearKernelResident(benchmark::State& state) {
  const int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  // 64-byte aligned, as LibTorch's tensors are.
  at::Tensor xt = at::randn({rows, in}), wt = at::randn({out, in}), yt = at::empty({rows, out});
  const float *x = xt.data_ptr<float>(), *w = wt.data_ptr<float>();
  float* y = yt.data_ptr<float>();
  const kernels::KernelTable& k = kernels::Kernels();
  for (auto _ : state) {
    k.linear_f32(x, nullptr, w, nullptr, y, rows, in, out, 0, out);
    benchmark::DoNotOptimize(y);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 2 * rows * in * out);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {batch, context, cache dtype (0 fp32, 1 bf16)}. The decode attention
// of one step over 12 layers (GPT-2-small heads, a cache of its own per
// layer, blocks of 16 positions in shuffled order) through
// PagedDecodeAttention as before whole cache rows (SetPagedDecodeAttention-
// AsBefore: a task per sequence and head, no prefetch) and as now,
// alternating pass by pass. Counters: ms per pass of each (before_ms, now_ms),
// now_speedup = before / now, and same_bits (1 if both gave the same bits).
void BM_PagedAttentionPaired(benchmark::State& state) {
  const int64_t batch = state.range(0), context = state.range(1);
  const c10::ScalarType dtype = state.range(2) == 0 ? at::kFloat : at::kBFloat16;
  constexpr int64_t kHeads = 12, kHeadDim = 64, kBlock = 16, kLayers = 12;
  const int64_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int64_t blocks = batch * blocks_per_seq;
  at::manual_seed(5);
  std::vector<at::Tensor> keys, values;
  for (int64_t l = 0; l < kLayers; ++l) {
    keys.push_back(at::randn({blocks * kBlock, kHeads, kHeadDim}).to(dtype));
    values.push_back(at::randn({blocks * kBlock, kHeads, kHeadDim}).to(dtype));
  }
  std::vector<int32_t> order(blocks);
  for (int64_t i = 0; i < blocks; ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  std::vector<std::vector<int32_t>> tables(batch);
  std::vector<const std::vector<int32_t>*> table_ptrs;
  for (int64_t b = 0; b < batch; ++b) {
    tables[b].assign(order.begin() + b * blocks_per_seq, order.begin() + (b + 1) * blocks_per_seq);
    table_ptrs.push_back(&tables[b]);
  }
  const std::vector<int64_t> lens(batch, context);
  at::Tensor q = at::randn({batch, kHeads, kHeadDim});
  auto run = [&](int64_t layer) {
    return PagedDecodeAttention(q, keys[layer], values[layer], table_ptrs, lens, kBlock, 0);
  };
  auto pass = [&] {
    for (int64_t l = 0; l < kLayers; ++l) benchmark::DoNotOptimize(run(l).data_ptr());
  };
  SetPagedDecodeAttentionAsBefore(true);
  at::Tensor before = run(0);
  SetPagedDecodeAttentionAsBefore(false);
  state.counters["same_bits"] = before.equal(run(0)) ? 1 : 0;
  RunPaired(
      state,
      [&] {
        SetPagedDecodeAttentionAsBefore(true);
        pass();
      },
      [&] {
        SetPagedDecodeAttentionAsBefore(false);
        pass();
      },
      "before_ms", "now_ms", "now_speedup");
  SetPagedDecodeAttentionAsBefore(false);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {context}. The attention core of one decode token, GPT-2-small heads.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t context = state.range(0);
  at::Tensor q = at::randn({12, 1, 64});
  at::Tensor k = at::randn({12, context, 64});
  at::Tensor v = at::randn({12, context, 64});
  for (auto _ : state) {
    at::Tensor out = ScaledDotProductAttention(q, k, v, at::Tensor());
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.SetItemsProcessed(state.iterations());
}

// The four linear layers of all 12 GPT-2-small layers (qkv 768->2304, out
// 768->768, up 768->3072, down 3072->768: 85 M weights, 340 MB in fp32, so
// they stream from memory as in a decode step), for M rows of input.
// Args: {dtype (0 fp32, 1 bf16, 2 fp16, 3 int8), M, impl (0 SmallBatchLinear (any M),
// or Int8Linear for int8 at any M; 1 LibTorch: at::matmul on fp32 weights
// (OpenBLAS), oneDNN's bf16 linear, fp32 weights for fp16 (LibTorch 1.13 has no CPU fp16 product); 2 at::addmv,
// OpenBLAS's GEMV, M = 1 fp32 only), layers (12: weights stream from memory;
// 1: 7 M weights, held in the L3 cache: the kernel's compute speed; 0: the
// tied output head alone, 50257 x 768, 154 MB in fp32)}.
// items_per_second = input rows x weights, i.e. FLOP/s / 2.
void BM_SmallBatchLinear(benchmark::State& state) {
  const int64_t code = state.range(0), rows = state.range(1);
  const bool ours = state.range(2) == 0, gemv = state.range(2) == 2;
  const c10::ScalarType dtype = DType(code);
  struct Shape { int64_t in, out; };
  const Shape shapes[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  const Shape head[] = {{768, 50257}};  // layers 0: the tied output head alone
  const bool head_only = state.range(3) == 0;
  std::vector<LinearWeight> weights;
  std::vector<at::Tensor> biases;
  int64_t weight_count = 0;
  at::manual_seed(1);
  for (int layer = 0; layer < std::max<int64_t>(state.range(3), 1); ++layer) {
    const absl::Span<const Shape> list = head_only ? absl::Span<const Shape>(head)
                                                   : absl::Span<const Shape>(shapes);
    for (const Shape& s : list) {
      at::Tensor w = at::randn({s.out, s.in}) * 0.02;
      if (dtype == at::kChar) {
        weights.push_back(QuantizeInt8(w));
      } else {
        weights.push_back(ours || code == 1 ? w.to(dtype).contiguous() : w);
      }
      biases.push_back(at::randn({s.out}) * 0.02);
      weight_count += s.out * s.in;
    }
  }
  at::Tensor x768 = at::randn({rows, 768}), x3072 = at::randn({rows, 3072});
  for (auto _ : state) {
    for (size_t j = 0; j < weights.size(); ++j) {
      const at::Tensor& x = weights[j].in_features() == 768 ? x768 : x3072;
      const at::Tensor& w = weights[j].w;
      at::Tensor y;
      if (dtype == at::kChar) {
        y = Int8Linear(x, weights[j], biases[j]);
      } else if (ours) {
        y = SmallBatchLinear(x, w, biases[j]);
      } else if (gemv) {
        y = at::addmv(biases[j], w, x.select(0, 0)).unsqueeze(0);
      } else if (code == 1) {
        y = at::linear(x.to(at::kBFloat16), w).to(at::kFloat) + biases[j];
      } else {
        y = at::matmul(x, w.t()) + biases[j];
      }
      benchmark::DoNotOptimize(y.data_ptr());
    }
  }
  state.SetItemsProcessed(state.iterations() * rows * weight_count);
}

// The 48 linear layers of GPT-2 small (12 x qkv 768->2304, out 768->768, up
// 768->3072, down 3072->768) with random weights in `dtype` and float32 biases.
void Gpt2SmallLinears(c10::ScalarType dtype, std::vector<at::Tensor>* weights,
                      std::vector<at::Tensor>* biases) {
  struct Shape { int64_t in, out; };
  const Shape shapes[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  at::manual_seed(1);
  for (int layer = 0; layer < 12; ++layer) {
    for (const Shape& s : shapes) {
      weights->push_back((at::randn({s.out, s.in}) * 0.02).to(dtype).contiguous());
      biases->push_back(at::randn({s.out}) * 0.02);
    }
  }
}

// Args: {dtype, batch, units}. A decode step at context 128 with the
// small-batch linears in tasks of at most `units` x 24 output rows against
// the default (kDefaultDecodeTaskUnits; 3 units before 2026-11-26),
// alternating (SetDecodeTaskUnits).
// Counters: default_ms, units_ms, units_speedup = default / units.
void BM_DecodeTaskUnitsPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  DecodeSteps steps(Model(dtype), dtype, state.range(1), 128);
  const int64_t units = state.range(2);
  RunPaired(
      state,
      [&] {
        SetDecodeTaskUnits(0);
        steps.Run();
      },
      [&] {
        SetDecodeTaskUnits(units);
        steps.Run();
      },
      "default_ms", "units_ms", "units_speedup");
  SetDecodeTaskUnits(0);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, rows, block rows, prompt}. Row blocks of `block rows` input
// rows (SetRowBlockRows) against the ISA's own, alternating: a decode step
// of `rows` sequences at context 128, or with prompt 1 a prefill of `rows`
// tokens. Counters: own_ms, set_ms, set_speedup = own / set. Float rows
// where the far-apart tiles take them (SpreadTiles: Intel and AVX2-only CPUs,
// 1-16 rows) stay in those, in blocks of 4 or 8 rows (at 9-16 rows in the
// 24-row tasks of SetTiledRowBlocks(0), not the longer ones of the default);
// elsewhere block after block (SetTiledRowBlocks(0)).
void BM_RowBlockRowsPaired(benchmark::State& state) {
  const int64_t block = state.range(2);
  StepOrPrefill work(DType(state.range(0)), state.range(1), state.range(3) == 1);
  const std::function<void()> run = [&] { work.Run(); };
  SetTiledRowBlocks(0);  // the order SetRowBlockRows sets blocks for
  RunPaired(
      state,
      [&] {
        SetRowBlockRows(0);
        run();
      },
      [&] {
        SetRowBlockRows(block);
        run();
      },
      "own_ms", "set_ms", "set_speedup");
  SetRowBlockRows(0);
  SetTiledRowBlocks(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, rows, prompt}, rows <= 8. The default routing (on AVX-512
// 7-8 rows as tiles of 6 + 1-2 rows, LinearRowsTiled) against one register
// block of all `rows` rows reading W once (SetTiledRowBlocks(0) with
// SetRowBlockRows(rows): LinearRowsM<rows>), alternating: a decode step of
// `rows` sequences at context 128, or with prompt 1 a prefill of `rows`
// tokens. Counters: own_ms, one_ms, one_speedup = own / one.
void BM_OneRowBlockPaired(benchmark::State& state) {
  StepOrPrefill work(DType(state.range(0)), state.range(1), state.range(2) == 1);
  RunPaired(
      state,
      [&] {
        SetTiledRowBlocks(-1);
        SetRowBlockRows(0);
        work.Run();
      },
      [&] {
        SetTiledRowBlocks(0);
        SetRowBlockRows(state.range(1));
        work.Run();
      },
      "own_ms", "one_ms", "one_speedup");
  SetRowBlockRows(0);
  SetTiledRowBlocks(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, rows, prompt}: a decode step of `rows` sequences at context
// 128, or with prompt 1 a prefill of `rows` tokens, run with a kernel
// override off (set(0)) and on (set(1)), alternating (RunPaired); then the
// default again (set(-1)). Counters: off_ms, on_ms and ratio = off / on.
void RunOverridePaired(benchmark::State& state, void (*set)(int), const char* off_ms,
                       const char* on_ms, const char* ratio) {
  StepOrPrefill work(DType(state.range(0)), state.range(1), state.range(2) == 1);
  RunPaired(
      state,
      [&] {
        set(0);
        work.Run();
      },
      [&] {
        set(1);
        work.Run();
      },
      off_ms, on_ms, ratio);
  set(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// The float kernels' (and AVX-512's int8) row blocks tile by tile of W
// against block after block over each task's slice of W (SetTiledRowBlocks).
void BM_TiledRowBlocksPaired(benchmark::State& state) {
  SetSpreadTiles(0);  // the kernels this compares, not the CPU's far-apart tiles
  RunOverridePaired(state, SetTiledRowBlocks, "blocks_ms", "tiled_ms", "tiled_speedup");
  SetSpreadTiles(-1);
}

// Float W's rows (float32, bfloat16 widened, float16) through the far-apart
// tiles with a prefetch a fixed distance ahead (LinearRowsSpreadTiled)
// against the routing without them (SetSpreadTiles 1 / 0): decode steps of
// `rows` sequences or prefills of `rows` tokens. Same sums (but bfloat16's
// 1-4 rows, whose pairs or AVX2 stream sum in another order).
void BM_SpreadTilesPaired(benchmark::State& state) {
  RunOverridePaired(state, SetSpreadTiles, "tiles_ms", "spread_ms", "spread_speedup");
}

// Args: {dtype (float dtypes only: 0 fp32, 1 bf16, 2 fp16), rows}. What
// `rows` sequences cost against one, side by side, alternating in every
// iteration: a decode step of 1 and of `rows` sequences at context 128
// (step1_ms, stepn_ms); the 48 GPT-2-small linears plus the tied output
// head alone at 1 and `rows` rows (lin1_ms, linn_ms); one layer's four
// linears 12 times at 1 and `rows` rows (res1_ms, resn_ms: 27 MiB of
// float32, in part from the L3 cache); and a 16-token prefill
// (prefill16_ms).
void BM_RowsCostPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t rows = state.range(1);
  DecodeSteps one(Model(dtype), dtype, 1, 128), many(Model(dtype), dtype, rows, 128);
  Prefill prefill(dtype, 16);
  std::vector<at::Tensor> weights, biases;
  Gpt2SmallLinears(dtype, &weights, &biases);
  weights.push_back((at::randn({50257, 768}) * 0.02).to(dtype).contiguous());
  biases.push_back(at::Tensor());
  const at::Tensor x768[2] = {at::randn({1, 768}), at::randn({rows, 768})};
  const at::Tensor x3072[2] = {at::randn({1, 3072}), at::randn({rows, 3072})};
  // The first `count` linears, `reps` times, at 1 row (k 0) or `rows` (k 1).
  auto run = [&](int k, size_t count, int reps) {
    for (int rep = 0; rep < reps; ++rep) {
      for (size_t j = 0; j < count; ++j) {
        const at::Tensor& x = weights[j].size(1) == 768 ? x768[k] : x3072[k];
        at::Tensor y = SmallBatchLinear(x, weights[j], biases[j]);
        benchmark::DoNotOptimize(y.data_ptr());
      }
    }
  };
  // All 49 once; one layer's four (27 MiB of float32: in part the L3 cache) 12 times.
  auto linears = [&](int k) { run(k, weights.size(), 1); };
  auto resident = [&](int k) { run(k, 4, 12); };
  double t[7] = {0, 0, 0, 0, 0, 0, 0};
  for (auto _ : state) {
    t[5] += Seconds([&] { resident(0); });
    t[6] += Seconds([&] { resident(1); });
    t[4] += Seconds([&] { prefill.Run(); });
    t[0] += Seconds([&] { one.Run(); });
    t[1] += Seconds([&] { many.Run(); });
    t[2] += Seconds([&] { linears(0); });
    t[3] += Seconds([&] { linears(1); });
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["step1_ms"] = 1e3 * t[0] / n;
  state.counters["stepn_ms"] = 1e3 * t[1] / n;
  state.counters["lin1_ms"] = 1e3 * t[2] / n;
  state.counters["linn_ms"] = 1e3 * t[3] / n;
  state.counters["prefill16_ms"] = 1e3 * t[4] / n;
  state.counters["res1_ms"] = 1e3 * t[5] / n;
  state.counters["resn_ms"] = 1e3 * t[6] / n;
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, rows, prefill, bytes, l2}. The far-apart tiles' prefetch
// (SetSpreadTilePrefetch) as the ISA sets it (Ops::kSpreadTilePrefetchBytes,
// nearer for a tile of one row block) against `bytes` ahead (0: the ISA's
// distance) into L2 only (l2 1) or L1 (0): decode steps of `rows` sequences
// or prefills of `rows` tokens, alternating, with the tiles on whatever the
// CPU's choice (SetSpreadTiles). Counters: default_ms, set_ms,
// set_speedup = default / set.
void BM_SpreadTilePrefetchPaired(benchmark::State& state) {
  SetSpreadTiles(1);  // the tiles whatever the CPU's choice (SpreadTiles)
  StepOrPrefill work(DType(state.range(0)), state.range(1), state.range(2) == 1);
  RunPaired(
      state,
      [&] {
        SetSpreadTilePrefetch(0, -1);
        work.Run();
      },
      [&] {
        SetSpreadTilePrefetch(state.range(3), static_cast<int>(state.range(4)));
        work.Run();
      },
      "default_ms", "set_ms", "set_speedup");
  SetSpreadTilePrefetch(0, -1);
  SetSpreadTiles(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype, rows, prefill, values}. The far-apart tiles of several row
// blocks over all of the input at once against parts of `values` input
// values (SetSpreadTileInputPart; float32 on AVX2, elsewhere both sides run
// the same): decode steps of `rows` sequences or prefills of `rows` tokens,
// alternating, with the tiles on, whatever the CPU's choice
// (SetSpreadTiles). Counters: whole_ms, parts_ms, parts_speedup = whole /
// parts.
void BM_SpreadTileInputPartPaired(benchmark::State& state) {
  SetSpreadTiles(1);  // the tiles whatever the CPU's choice (SpreadTiles)
  StepOrPrefill work(DType(state.range(0)), state.range(1), state.range(2) == 1);
  RunPaired(
      state,
      [&] {
        SetSpreadTileInputPart(0);
        work.Run();
      },
      [&] {
        SetSpreadTileInputPart(state.range(3));
        work.Run();
      },
      "whole_ms", "parts_ms", "parts_speedup");
  SetSpreadTileInputPart(-1);
  SetSpreadTiles(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// The tiled row blocks (LinearRowsTiled) with each block prefetching all of
// the next tile's rows of W, as before, and with the blocks sharing them in
// proportion to their rows (SetTilePrefetchShares).
void BM_TilePrefetchSharesPaired(benchmark::State& state) {
  SetSpreadTiles(0);  // the kernels this compares, not the CPU's far-apart tiles
  RunOverridePaired(state, SetTilePrefetchShares, "all_ms", "shared_ms", "shared_speedup");
  SetSpreadTiles(-1);
}

// The kernels' software prefetches of the weights into L1 (_MM_HINT_T0) and
// into L2 only (_MM_HINT_T1) whatever the rows (SetPrefetchToL2).
void BM_PrefetchToL2Paired(benchmark::State& state) {
  SetSpreadTiles(0);  // the kernels this compares, not the CPU's far-apart tiles
  RunOverridePaired(state, SetPrefetchToL2, "l1_ms", "l2_ms", "l2_speedup");
  SetSpreadTiles(-1);
}

// Args: {batch, linears (1: the linears alone, 0: decode steps)}. bfloat16
// weights with AVX512_BF16 dot products (x in two bfloat16 parts,
// cpu_kernels_avx512_bf16.cc) against the float32 kernels that widen each
// weight (SetBf16DotProducts), alternating: a decode step of `batch`
// sequences at context 128, or with linears:1 the 48 GPT-2-small linears
// alone at `batch` rows. Counters: ms of each (widen_ms, dot_ms) and
// dot_speedup. On a CPU without AVX512_BF16 both sides are the same code.
void BM_Bf16DotPaired(benchmark::State& state) {
  const int64_t batch = state.range(0);
  std::function<void()> run;
  std::unique_ptr<DecodeSteps> steps;
  std::vector<at::Tensor> weights, biases;
  at::Tensor x768, x3072;
  if (state.range(1) == 1) {
    Gpt2SmallLinears(at::kBFloat16, &weights, &biases);
    x768 = at::randn({batch, 768});
    x3072 = at::randn({batch, 3072});
    run = [&] {
      for (size_t j = 0; j < weights.size(); ++j) {
        const at::Tensor& x = weights[j].size(1) == 768 ? x768 : x3072;
        benchmark::DoNotOptimize(SmallBatchLinear(x, weights[j], biases[j]).data_ptr());
      }
    };
  } else {
    steps = std::make_unique<DecodeSteps>(Model(at::kBFloat16), at::kBFloat16, batch, 128);
    run = [&] { steps->Run(); };
  }
  RunPaired(
      state,
      [&] {
        SetBf16DotProducts(0);
        run();
      },
      [&] {
        SetBf16DotProducts(1);
        run();
      },
      "widen_ms", "dot_ms", "dot_speedup");
  SetBf16DotProducts(1);
  const bool has_dot = Bf16DotProductsActive();
  SetBf16DotProducts(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())) +
                 (has_dot ? " avx512_bf16" : " (no avx512_bf16: same code)") +
                 (has_dot && !Bf16DotProductsActive() ? " (off by default here)" : ""));
}

// Args: {dtype, prompt, rows}. A causal prompt's attention in blocks of
// `rows` (0: kCausalQueryBlockRows) query rows against the whole prompt at once
// (SetCausalQueryBlockRows(0)), alternating prefill by prefill. Counters: ms
// of each (whole_ms, blocks_ms) and blocks_speedup = whole / blocks.
void BM_CausalBlocksPaired(benchmark::State& state) {
  Prefill prefill(DType(state.range(0)), state.range(1));
  const int64_t rows = state.range(2) > 0 ? state.range(2) : kCausalQueryBlockRows;
  RunPaired(
      state,
      [&] {
        SetCausalQueryBlockRows(0);
        prefill.Run();
      },
      [&] {
        SetCausalQueryBlockRows(rows);
        prefill.Run();
      },
      "whole_ms", "blocks_ms", "blocks_speedup");
  SetCausalQueryBlockRows(kCausalQueryBlockRows);
}

// Args: {dtype, prompt}. A prefill of `prompt` tokens with its attention
// through LibTorch's operators (matmul, mask, softmax, matmul: as before)
// and through PromptAttention's register blocks (SetPromptAttention),
// alternating prefill by prefill. Counters: ms of each (aten_ms, kernel_ms)
// and kernel_speedup = aten / kernel.
void BM_PromptAttentionPaired(benchmark::State& state) {
  Prefill prefill(DType(state.range(0)), state.range(1));
  RunPaired(
      state,
      [&] {
        SetPromptAttention(false);
        prefill.Run();
      },
      [&] {
        SetPromptAttention(true);
        prefill.Run();
      },
      "aten_ms", "kernel_ms", "kernel_speedup");
  SetPromptAttention(true);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {prompt, whole}. PromptAttention's tasks as before (block of query
// rows after block, the heads inside, the values read in place from the rows)
// and head after head over the values copied per KV head, at every length
// (SetPromptHeadsOuterAfter: the default takes the second once the keys
// and values of every head outgrow one core's L2 cache),
// alternating pass by pass. whole 0: the attention alone of 12 layers' causal
// prompts, GPT-2-small's shape (12 heads of 64; q, k and v in one [prompt,
// 2304] row per position, another tensor per layer); whole 1: a float32
// prefill of `prompt` tokens through the benchmark model. Counters: ms per
// pass of each (before_ms, heads_ms) and heads_speedup = before / heads.
void BM_PromptAttentionOrderPaired(benchmark::State& state) {
  const int64_t prompt = state.range(0);
  std::function<void()> pass;
  std::vector<at::Tensor> qkv;
  std::unique_ptr<Prefill> prefill;
  if (state.range(1) == 0) {
    at::manual_seed(0);
    for (int layer = 0; layer < 12; ++layer) qkv.push_back(at::randn({prompt, 3 * 768}));
    pass = [&] {
      for (const at::Tensor& t : qkv) {
        at::Tensor out = PromptAttention(t.narrow(1, 0, 768).view({prompt, 12, 64}),
                                         t.narrow(1, 768, 768).view({prompt, 12, 64}),
                                         t.narrow(1, 1536, 768).view({prompt, 12, 64}), 0,
                                         /*causal=*/true, 0);
        benchmark::DoNotOptimize(out.data_ptr());
      }
    };
  } else {
    prefill = std::make_unique<Prefill>(at::kFloat, prompt);
    pass = [&] { prefill->Run(); };
  }
  RunPaired(
      state,
      [&] {
        SetPromptHeadsOuterAfter(std::numeric_limits<int64_t>::max());
        pass();
      },
      [&] {
        SetPromptHeadsOuterAfter(0);
        pass();
      },
      "before_ms", "heads_ms", "heads_speedup");
  SetPromptHeadsOuterAfter(-1);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype (0 fp32, 1 bf16), M, engine}. Tasks of up to 4 units of 24
// output rows for the tiled row-block kernels against one unit per task
// (SetSmallBatchLinearLongTiledTasks), alternating pass by pass. engine 0:
// the 48 GPT-2-small linears with M rows (random weights streamed from
// memory); engine 1: a prefill of M tokens through the benchmark model.
// Counters: ms per pass of each (one_unit_ms, long_ms) and long_speedup =
// one-unit time / long-task time. On an ISA without tiled kernels (AVX-512)
// both are the same.
void BM_LinearTaskSizePaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t rows = state.range(1);
  std::function<void()> pass;
  std::vector<at::Tensor> weights, biases;
  at::Tensor x768, x3072;
  std::unique_ptr<Prefill> prefill;
  if (state.range(2) == 0) {
    Gpt2SmallLinears(dtype, &weights, &biases);
    x768 = at::randn({rows, 768});
    x3072 = at::randn({rows, 3072});
    pass = [&] {
      for (size_t j = 0; j < weights.size(); ++j) {
        const at::Tensor& x = weights[j].size(1) == 768 ? x768 : x3072;
        at::Tensor y = SmallBatchLinear(x, weights[j], biases[j]);
        benchmark::DoNotOptimize(y.data_ptr());
      }
    };
  } else {
    prefill = std::make_unique<Prefill>(dtype, rows);
    pass = [&] { prefill->Run(); };
  }
  RunPaired(
      state,
      [&] {
        SetSmallBatchLinearLongTiledTasks(false);
        pass();
      },
      [&] {
        SetSmallBatchLinearLongTiledTasks(true);
        pass();
      },
      "one_unit_ms", "long_ms", "long_speedup");
  SetSmallBatchLinearLongTiledTasks(true);
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype (0 fp32, 1 bf16), M}. The 48 GPT-2-small linears (as
// BM_SmallBatchLinear, streamed from memory) for M rows through
// SmallBatchLinear's row blocks and through Linear with the routing before
// them (fp32: OpenBLAS's GEMM; bf16: oneDNN's with x rounded to bf16),
// alternating pass by pass. Counters: ms per pass of each (blocks_ms,
// library_ms) and blocks_speedup = library time / row-block time.
void BM_LinearRowBlocksPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t rows = state.range(1);
  std::vector<at::Tensor> weights, biases;
  Gpt2SmallLinears(dtype, &weights, &biases);
  at::Tensor x768 = at::randn({rows, 768}), x3072 = at::randn({rows, 3072});
  auto pass = [&](bool blocks) {
    for (size_t j = 0; j < weights.size(); ++j) {
      const at::Tensor& x = weights[j].size(1) == 768 ? x768 : x3072;
      at::Tensor y = blocks ? SmallBatchLinear(x, weights[j], biases[j])
                            : Linear(x, weights[j], biases[j]);
      benchmark::DoNotOptimize(y.data_ptr());
    }
  };
  SetSmallBatchLinearRowBlocks(false);
  RunPaired(state, [&] { pass(false); }, [&] { pass(true); }, "library_ms", "blocks_ms",
            "blocks_speedup");
  SetSmallBatchLinearRowBlocks(true);
}

// Args: {dtype (0 fp32, 1 bf16, 2 fp16, 3 int8), M}. The routing question of
// cpu_kernels.h, per ISA: the 48 GPT-2-small linears (streamed from memory)
// for M rows through our kernels (SmallBatchLinear, the ISA of the process:
// DIKKAT_ISA) and through the library route Linear takes without them
// (fp32: OpenBLAS's GEMV at one row, GEMM above; bf16: oneDNN; fp16: W
// widened to fp32, then GEMM; int8: tiles of W dequantized for the GEMM
// against Int8Linear's row kernels), alternating pass by pass. Counters: ms per
// pass of each (ours_ms, library_ms) and ours_speedup = library / ours.
void BM_LinearRoutesPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t rows = state.range(1);
  std::vector<at::Tensor> weights, biases;
  Gpt2SmallLinears(dtype == at::kChar ? at::kFloat : dtype, &weights, &biases);
  at::Tensor x768 = at::randn({rows, 768}), x3072 = at::randn({rows, 3072});
  if (dtype == at::kChar) {
    // int8: the row kernels against tiles dequantized for the GEMM.
    std::vector<LinearWeight> int8;
    for (const at::Tensor& w : weights) int8.push_back(QuantizeInt8(w));
    auto pass = [&](bool ours) {
      SetInt8GemmMinRows(ours ? std::numeric_limits<int32_t>::max() : 1);
      for (size_t j = 0; j < int8.size(); ++j) {
        const at::Tensor& x = int8[j].in_features() == 768 ? x768 : x3072;
        benchmark::DoNotOptimize(Int8Linear(x, int8[j], biases[j]).data_ptr());
      }
    };
    RunPaired(state, [&] { pass(false); }, [&] { pass(true); }, "library_ms", "ours_ms",
              "ours_speedup");
    SetInt8GemmMinRows(0);
    state.SetLabel(std::string(IsaName(ActiveIsa())));
    return;
  }
  auto library = [&](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    if (dtype == at::kHalf) return at::linear(x, w.to(at::kFloat), b);
    // What Linear (model/attention.cc) does outside our kernel: oneDNN's
    // bfloat16 GEMM where it is fast, else W widened to fp32 every call.
    if (dtype == at::kBFloat16) {
      return FastBFloat16Gemm() ? at::linear(x.to(dtype), w).to(at::kFloat) + b
                                : at::linear(x, w.to(at::kFloat), b);
    }
    if (rows == 1) return at::addmv(b, w, x.select(0, 0)).unsqueeze(0);
    return at::linear(x, w, b);
  };
  auto pass = [&](bool ours) {
    for (size_t j = 0; j < weights.size(); ++j) {
      const at::Tensor& x = weights[j].size(1) == 768 ? x768 : x3072;
      at::Tensor y = ours ? SmallBatchLinear(x, weights[j], biases[j])
                          : library(x, weights[j], biases[j]);
      benchmark::DoNotOptimize(y.data_ptr());
    }
  };
  RunPaired(state, [&] { pass(false); }, [&] { pass(true); }, "library_ms", "ours_ms",
            "ours_speedup");
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// Args: {dtype (0 fp32, 1 bf16, 3 int8), M}. How close the small-batch
// kernels come to the memory roof: the 48 GPT-2-small linears (streamed from
// memory) for M rows through SmallBatchLinear / Int8Linear, and a pass that
// only reads the same weight bytes (2 x 32-byte loads per cache line, the
// same threads and 24-row tasks), alternating pass by pass. Counters: ms per
// pass of each (ours_ms, read_ms) and of_read = read / ours (1.0: the kernel
// streams W as fast as a bare read does; batch-1 decode is bound by this).
void BM_LinearVsReadPaired(benchmark::State& state) {
  const c10::ScalarType dtype = DType(state.range(0));
  const int64_t rows = state.range(1);
  std::vector<at::Tensor> weights, biases;
  Gpt2SmallLinears(at::kFloat, &weights, &biases);
  std::vector<LinearWeight> int8;
  for (at::Tensor& w : weights) {
    if (dtype == at::kChar) {
      int8.push_back(QuantizeInt8(w));
      w = at::Tensor();
    } else {
      w = w.to(dtype).contiguous();
    }
  }
  at::Tensor x768 = at::randn({rows, 768}), x3072 = at::randn({rows, 3072});
  auto ours = [&] {
    for (size_t j = 0; j < biases.size(); ++j) {
      const int64_t in = dtype == at::kChar ? int8[j].in_features() : weights[j].size(1);
      const at::Tensor& x = in == 768 ? x768 : x3072;
      at::Tensor y = dtype == at::kChar ? Int8Linear(x, int8[j], biases[j])
                                        : SmallBatchLinear(x, weights[j], biases[j]);
      benchmark::DoNotOptimize(y.data_ptr());
    }
  };
  std::atomic<uint64_t> sink{0};
  auto read = [&] {
    for (size_t j = 0; j < biases.size(); ++j) {
      const at::Tensor& w = dtype == at::kChar ? int8[j].w : weights[j];
      const int64_t row_bytes = w.size(1) * w.element_size(), units = (w.size(0) + 23) / 24;
      const auto* p = static_cast<const uint64_t*>(w.data_ptr());
      TeamParallelFor(units, rows <= kSmallBatchMaxRows ? 3 : 1, [&](int64_t u0, int64_t u1) {
        const int64_t b = u0 * 24 * row_bytes / 8;
        const int64_t e = std::min(w.size(0), u1 * 24) * row_bytes / 8;
        uint64_t a0 = 0, a1 = 0;
        for (int64_t i = b; i + 8 <= e; i += 8) {  // one 64-byte line per step
          a0 ^= p[i];
          a1 ^= p[i + 4];
        }
        sink.fetch_xor(a0 ^ a1, std::memory_order_relaxed);
      });
    }
  };
  RunPaired(state, read, ours, "read_ms", "ours_ms", "of_read");
  state.SetLabel(std::string(IsaName(ActiveIsa())));
}

// The machine's limits, measured in the same run as everything else.
// STREAM-like triad a = b + s*c on 3 x 64 MiB arrays: bytes moved per second.
void BM_MemoryTriad(benchmark::State& state) {
  const int64_t n = 16 << 20;  // floats per array
  at::Tensor a = at::empty({n}), b = at::rand({n}), c = at::rand({n});
  for (auto _ : state) {
    at::add_out(a, b, c, 1.5);
    benchmark::DoNotOptimize(a.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * 4);
}

// Large fp32 GEMM (2048^3): FLOP/s in items_per_second.
void BM_Gemm(benchmark::State& state) {
  const int64_t n = 2048;
  at::Tensor a = at::rand({n, n}), b = at::rand({n, n});
  for (auto _ : state) {
    at::Tensor c = at::mm(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * 2 * n * n * n);
}

void Setup() {
  dikkat::server::TuneAllocator();  // as dikkat-server does
  const char* env = std::getenv("DIKKAT_BENCH_THREADS");
  at::set_num_threads(env != nullptr ? std::atoi(env) : 2);
}


BENCHMARK(BM_MemoryTriad)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();
BENCHMARK(BM_Gemm)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();
// 16 tokens: the prompt of the time-to-first-token target (issue "Fast on
// every CPU": at most 1.5x one decode step, BM_DecodeStep batch 1).
BENCHMARK(BM_Prefill)->ArgNames({"dtype", "tokens"})->Args({0, 512})->Args({1, 512})->Args({3, 512})
    ->Args({0, 16})->Args({1, 16})->Args({3, 16})
    ->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK(BM_DecodeStep)
    ->ArgNames({"dtype", "batch", "context"})
    ->ArgsProduct({{0, 1, 3}, {1, 8, 32}, {128, 1023}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_DecodeRowBlocksPaired)
    ->ArgNames({"dtype", "batch", "context"})
    ->ArgsProduct({{0, 1}, {16, 32, 48}, {128}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
// Step time against context length (batch 1, fp32): should grow linearly.
BENCHMARK(BM_DecodeStep)
    ->Name("BM_DecodeContextCurve")
    ->ArgNames({"dtype", "batch", "context"})
    ->ArgsProduct({{0}, {1}, {16, 64, 128, 256, 512, 768, 1023}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(BM_LinearRoutesPaired)
    ->ArgNames({"dtype", "M"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2, 4, 8, 16, 32, 48, 63, 64, 96, 128, 256, 512, 1024}})
    ->Args({0, 112})->Args({3, 80})  // near the AVX2 limits (Zen 3)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(BM_LinearVsReadPaired)
    ->ArgNames({"dtype", "M"})
    ->ArgsProduct({{0, 1, 3}, {1}})
    ->Args({3, 4})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_SmallBatchLinear)
    ->ArgNames({"dtype", "M", "torch", "layers"})
    ->ArgsProduct({{0, 1}, {1, 2, 3, 4, 5, 6, 7, 8}, {0, 1}, {12}})
    ->Args({0, 1, 2, 12})->Args({2, 1, 0, 12})->Args({2, 8, 0, 12})
    ->ArgsProduct({{0, 1}, {1, 4, 8}, {0, 1}, {1}})
    ->ArgsProduct({{0, 1, 3}, {1, 8}, {0}, {0}})  // the output head alone
    ->ArgsProduct({{3}, {1, 4, 8, 32, 512}, {0}, {12, 1}})
    ->Args({0, 512, 1, 12})
    // float32 / bfloat16 row blocks (9..63 rows) against OpenBLAS / oneDNN
    ->ArgsProduct({{0, 1}, {16, 32, 48, 63, 64}, {0, 1}, {12}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5)
    ->UseRealTime();
BENCHMARK(BM_LinearRowBlocksPaired)
    ->ArgNames({"dtype", "M"})
    ->ArgsProduct({{0, 1}, {8, 16, 24, 32, 48, 63}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(BM_PromptAttentionPaired)
    ->ArgNames({"dtype", "prompt"})
    ->ArgsProduct({{0}, {16, 128, 512, 1024}})
    ->Args({3, 16})->Args({3, 512})->Args({1, 512})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_PromptAttentionOrderPaired)
    ->ArgNames({"prompt", "whole"})
    ->ArgsProduct({{16, 64, 96, 128, 256, 512, 1024, 2048}, {0}})
    ->Args({128, 1})->Args({512, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_CausalBlocksPaired)
    ->ArgNames({"dtype", "prompt", "rows"})
    ->Args({0, 256, 0})->Args({0, 512, 0})->Args({0, 1024, 0})->Args({1, 512, 0})
    ->Args({0, 512, 64})->Args({0, 512, 256})->Args({0, 1024, 64})->Args({0, 1024, 256})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(4.0)
    ->UseRealTime();
BENCHMARK(BM_LinearTaskSizePaired)
    ->ArgNames({"dtype", "M", "engine"})
    ->ArgsProduct({{0, 1}, {16, 24, 32, 48, 63}, {0}})
    ->ArgsProduct({{0, 1}, {16, 32}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_DecodeTaskUnitsPaired)
    ->ArgNames({"dtype", "batch", "units"})
    ->ArgsProduct({{0, 1, 3}, {1}, {3, 4, 16}})
    ->ArgsProduct({{0, 3}, {8}, {3, 16}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_RowBlockRowsPaired)
    ->ArgNames({"dtype", "rows", "block", "prompt"})
    ->ArgsProduct({{0, 3}, {4, 8}, {4, 6, 8}, {0}})
    ->ArgsProduct({{0, 3}, {16}, {4, 6}, {1}})
    ->Args({1, 8, 6, 0})->Args({1, 8, 4, 0})
    ->ArgsProduct({{0, 3}, {32}, {8}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_OneRowBlockPaired)
    ->ArgNames({"dtype", "rows", "prompt"})
    ->ArgsProduct({{0, 1, 3}, {7, 8}, {0}})
    ->Args({0, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_TiledRowBlocksPaired)
    ->ArgNames({"dtype", "rows", "prompt"})
    ->ArgsProduct({{0, 1, 2, 3}, {8, 16, 32}, {0, 1}})
    ->Args({0, 128, 1})->Args({0, 512, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_TilePrefetchSharesPaired)
    ->ArgNames({"dtype", "rows", "prompt"})
    ->ArgsProduct({{0, 1, 2}, {5, 6, 7, 8, 10, 12, 16, 32}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_RowsCostPaired)
    ->ArgNames({"dtype", "rows"})
    ->Args({0, 8})->Args({0, 16})->Args({1, 8})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();
BENCHMARK(BM_SpreadTileInputPartPaired)
    ->ArgNames({"dtype", "rows", "prefill", "values"})
    ->ArgsProduct({{0}, {8, 12, 16}, {0}, {512, 768, 1024}})
    ->ArgsProduct({{0}, {16}, {1}, {512, 768, 1024}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_SpreadTilePrefetchPaired)
    ->ArgNames({"dtype", "rows", "prefill", "bytes", "l2"})
    ->ArgsProduct({{0}, {1}, {0}, {256, 512, 768, 1024, 1536, 2048, 4096, 8192}, {0}})
    ->ArgsProduct({{0}, {2, 3, 4, 6, 8, 12}, {0}, {512, 1024, 2048}, {0}})
    ->ArgsProduct({{0}, {8}, {0}, {4096, 8192}, {0}})
    ->ArgsProduct({{1, 2}, {1, 4, 8}, {0}, {512, 2048}, {0}})
    ->ArgsProduct({{0}, {16}, {1}, {512, 1024, 2048, 4096, 8192}, {0}})
    ->ArgsProduct({{0}, {1, 8}, {0}, {0, 4096, 16384, 65536}, {1}})
    ->ArgsProduct({{0}, {16}, {1}, {0, 4096, 16384, 65536}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_SpreadTilesPaired)
    ->ArgNames({"dtype", "rows", "prompt"})
    ->ArgsProduct({{0}, {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32}, {0}})
    ->ArgsProduct({{0}, {8, 16, 32, 64}, {1}})
    ->ArgsProduct({{1, 2}, {1, 2, 3, 4, 5, 8, 16, 32}, {0}})
    ->ArgsProduct({{1, 2}, {16}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_PrefetchToL2Paired)
    ->ArgNames({"dtype", "rows", "prompt"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2, 3, 4, 6, 8, 16, 32}, {0}})
    ->ArgsProduct({{0, 1, 2, 3}, {16}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_Bf16DotPaired)
    ->ArgNames({"batch", "linears"})
    ->Args({1, 1})->Args({4, 1})->Args({1, 0})->Args({2, 0})->Args({4, 0})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_Int8ActivationsPaired)
    ->ArgNames({"batch", "prompt"})
    ->Args({1, 0})->Args({4, 0})->Args({8, 0})->Args({32, 0})->Args({0, 16})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_SerialAtenOpsPaired)
    ->ArgNames({"dtype", "batch", "prompt"})
    ->Args({0, 1, 0})->Args({3, 1, 0})->Args({0, 8, 0})->Args({0, 32, 0})->Args({0, 0, 16})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_InferenceModePaired)
    ->ArgNames({"dtype", "batch", "prompt"})
    ->ArgsProduct({{0, 1, 3}, {1, 8, 32}, {0}})
    ->ArgsProduct({{0, 3}, {0}, {16, 512}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_CpuElementwisePaired)
    ->ArgNames({"dtype", "batch", "prompt"})
    ->Args({0, 1, 0})->Args({1, 1, 0})->Args({3, 1, 0})->Args({0, 8, 0})->Args({3, 8, 0})
    ->Args({0, 32, 0})->Args({0, 0, 16})->Args({0, 0, 512})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_AtenOpsPerStep)
    ->ArgNames({"dtype", "batch"})
    ->Args({3, 1})->Args({0, 8})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(BM_IsaTablesPaired)
    ->ArgNames({"dtype", "batch", "prompt"})
    ->ArgsProduct({{0, 1, 3}, {1, 8, 32}, {0}})
    ->ArgsProduct({{0, 1, 3}, {1}, {16}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_OneRowSpreadPaired)
    ->ArgNames({"dtype", "streams", "batch"})
    ->ArgsProduct({{0, 1, 3}, {2, 4, 8}, {1}})
    ->ArgsProduct({{0, 1}, {2, 4, 8}, {2, 3}})
    ->Args({3, 4, 3})  // int8 spreads at 3 rows only, always in 4 streams
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_OneRowStreamsPaired)
    ->ArgNames({"dtype", "spread"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({3, 0})
    ->ArgsProduct({{0, 1, 3}, {4, 8}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_HugePagesPaired)
    ->ArgNames({"dtype", "rows", "prefill"})
    ->Args({0, 1, 0})->Args({0, 8, 0})->Args({0, 32, 0})->Args({0, 16, 1})->Args({1, 1, 0})
    ->Args({3, 1, 0})->Args({3, 8, 0})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_Int8OneRowScalesPaired)
    ->ArgNames({"dtype"})
    ->Arg(3)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();
BENCHMARK(BM_Int8OneRowInt16XPaired)
    ->ArgNames({"work"})
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();
BENCHMARK(BM_Int8OneRowVnniPaired)
    ->ArgNames({"work", "base"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();
BENCHMARK(BM_GeluTanhPaired)
    ->ArgNames({"rows", "threads"})
    ->ArgsProduct({{1, 8, 32, 512}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.5)
    ->UseRealTime();
BENCHMARK(BM_LinearKernelResident)
    ->ArgNames({"M", "in", "out"})
    ->Args({16, 128, 24})->Args({16, 768, 24})->Args({16, 768, 240})->Args({4, 768, 24})
    ->Args({1, 768, 24})->Args({16, 3072, 24})->Args({16, 768, 2400})->Args({16, 768, 24000})
    ->Args({1, 768, 200000})->Args({6, 768, 200000})->Args({8, 768, 200000})
    ->Args({12, 768, 200000})->Args({16, 768, 200000})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.5);
BENCHMARK(BM_PagedAttentionPaired)
    ->ArgNames({"batch", "context", "dtype"})
    ->ArgsProduct({{1, 2, 8, 32}, {128, 1024}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->UseRealTime();
BENCHMARK(BM_KvCacheDTypePaired)
    ->ArgNames({"batch", "context", "cache"})
    ->ArgsProduct({{1, 8, 32}, {128, 512}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();
BENCHMARK(BM_AttentionDecode)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace dikkat::model

int main(int argc, char** argv) {
  // As dikkat-server starts (may re-exec): OpenBLAS's kernels for this CPU and
  // OpenMP's passive waiting. Without it libgomp's threads spin after every
  // LibTorch loop and take the cores from the work team's threads: 28% of a
  // 16-token prefill's cycles went to that spinning on an AVX2 EPYC, and
  // every figure here read 1.3-1.5x slower than the server's own steps.
  dikkat::server::SelectBlasKernels(argc, argv);
  dikkat::model::Setup();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
