// overlap_probe: on this CPU, does the memory stream of the weights overlap
// the FMAs of a few input rows, and what keeps it from doing so?
//
// Standalone on purpose (no dikkat code, no LibTorch), so that what it shows
// is the machine's and not the kernels': the 48 GPT-2-small linear shapes (12
// layers of 768->2304, 768->768, 768->3072, 3072->768; 85 M float32 weights,
// 340 MB, in memory advised for 2 MiB pages), two threads each taking half of
// every linear's output rows, read as 4 far-apart streams tile by tile as the
// far-apart tiles read them (model/cpu_kernels_body.inc, LinearRowsSpreadTiled),
// in 512-bit vectors. Each mode runs the 48 linears `passes` times; the
// median pass is printed:
//   stream     one input row: the weights' stream (4 FMAs a vector), each tile
//              prefetching 2 KiB ahead in each stream, as the tiles do
//   compute    `rows` input rows, every tile reading the first tile's weights
//              again: the FMAs and the loads of x with W from the cache
//   tiles      `rows` input rows in blocks of 6 through every tile, the stream
//              from memory (the tiles' order and prefetch shares); `tiles-x6`
//              the same with every block reading the first block's 6 rows of
//              x (wrong sums, the same FMAs and W stream): x then stays in L1
//              for the 768-wide linears (18 KiB), not for the 3072-wide one
//              (72 KiB)
//   registers  the stream (one row) plus the FMAs of rows - 1 more rows on
//              registers only, the next tile's weights prefetched evenly
//              through them; `registers-streampf` the same FMAs with only the
//              stream's own prefetch (2 KiB ahead, as `stream`)
// It prints timings to compare, not causes: if `tiles` takes about `stream`
// + `compute`, the FMAs did not overlap the stream (`stream` also holds one
// row's FMAs, ~1/rows of `compute`, counted twice in that sum); `registers`
// against `registers-streampf` shows whether they can when the FMAs load
// nothing. docs/performance.md, session 31, has the Intel Xeon's figures.
// Needs AVX-512F; prints why and exits 0 without it. Run it on an idle
// machine: both threads spin between linears.
//
// Usage: overlap_probe [rows (2-16, default 16)] [passes (default 30)]

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

// GCC 12's _mm512_reduce_add_ps reads an undefined vector (its own header).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

#define PROBE_TARGET __attribute__((target("avx512f,avx2,fma")))
#define PROBE_INLINE __attribute__((target("avx512f,avx2,fma"), always_inline)) inline

constexpr int kStreams = 4;       // far-apart parts of a task's output rows
constexpr int kBlockRows = 6;     // input rows a register block (4 x 6 accumulators)
constexpr int64_t kAhead = 512;   // floats prefetched ahead in each stream (2 KiB)

// A matrix in its own 2 MiB-aligned mapping advised for huge pages.
float* AllocWeights(int64_t n) {
  const size_t bytes = ((n * sizeof(float) + (2 << 20) - 1) / (2 << 20)) * (2 << 20);
  void* p = std::aligned_alloc(2 << 20, bytes);
  if (p == nullptr) {
    std::fprintf(stderr, "overlap_probe: out of memory\n");
    std::exit(1);
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  float* f = static_cast<float*>(p);
  for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>((i * 7919) % 1000) * 1e-4f;
  return f;
}

// y[m, o + r * part] = x[m, :] . W[o + r * part, :] for m < M, r < 4: W's 4
// rows ldw apart. With share_rows > 0 the block prefetches its share of the
// stream kAhead ahead: M / share_rows of a row from row offset m0 / share_rows.
template <int M>
PROBE_INLINE void Block(const float* x, int64_t in, const float* wo, int64_t ldw, float* y,
                        int64_t ldy, int64_t o, int64_t part, int64_t m0, int64_t share_rows) {
  __m512 acc[kStreams][M];
#pragma GCC unroll 8
  for (int r = 0; r < kStreams; ++r) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  }
  int64_t pf = (share_rows > 0 ? m0 * in / share_rows : 0) / 16 * 16 + kAhead, pf_acc = 0;
  for (int64_t i = 0; i < in; i += 16) {
    if (share_rows > 0) {
      pf_acc += M * 16;
      if (pf_acc >= share_rows * 16) {
        pf_acc -= share_rows * 16;
#pragma GCC unroll 4
        for (int r = 0; r < kStreams; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(wo + r * ldw + pf), _MM_HINT_T0);
        }
        pf += 16;
      }
    }
    __m512 wv[kStreams];
#pragma GCC unroll 4
    for (int r = 0; r < kStreams; ++r) wv[r] = _mm512_loadu_ps(wo + r * ldw + i);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * in + i);
#pragma GCC unroll 4
      for (int r = 0; r < kStreams; ++r) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kStreams; ++r) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) y[m * ldy + o + r * part] = _mm512_reduce_add_ps(acc[r][m]);
  }
}

PROBE_INLINE void BlockAnyM(int64_t m, const float* x, int64_t in, const float* wo, int64_t ldw,
                            float* y, int64_t ldy, int64_t o, int64_t part, int64_t m0,
                            int64_t share_rows) {
  switch (m) {
    case 1: return Block<1>(x, in, wo, ldw, y, ldy, o, part, m0, share_rows);
    case 2: return Block<2>(x, in, wo, ldw, y, ldy, o, part, m0, share_rows);
    case 3: return Block<3>(x, in, wo, ldw, y, ldy, o, part, m0, share_rows);
    case 4: return Block<4>(x, in, wo, ldw, y, ldy, o, part, m0, share_rows);
    case 5: return Block<5>(x, in, wo, ldw, y, ldy, o, part, m0, share_rows);
    default: return Block<6>(x, in, wo, ldw, y, ldy, o, part, m0, share_rows);
  }
}

enum class Mode { kStream, kCompute, kTiles, kTilesX6, kRegisters, kRegistersStreamPrefetch };

// Output rows [o0, o1) of W [out, in] for `rows` input rows, as `mode` says.
PROBE_TARGET void Task(Mode mode, const float* x, const float* w, float* y, int64_t rows,
                       int64_t in, int64_t out, int64_t o0, int64_t o1) {
  const int64_t part = (o1 - o0) / kStreams, ldw = part * in;
  switch (mode) {
    case Mode::kStream:
      for (int64_t j = 0; j < part; ++j) {
        Block<1>(x, in, w + (o0 + j) * in, ldw, y, out, o0 + j, part, 0, 1);
      }
      return;
    case Mode::kCompute:
    case Mode::kTiles:
    case Mode::kTilesX6:
      for (int64_t j = 0; j < part; ++j) {
        const float* wo = w + (mode == Mode::kCompute ? o0 : o0 + j) * in;
        for (int64_t m0 = 0; m0 < rows; m0 += kBlockRows) {
          // kTilesX6: every block reads the first block's x (its 6 rows stay
          // in L1), the rest as kTiles.
          const float* xm = x + (mode == Mode::kTilesX6 ? 0 : m0 * in);
          BlockAnyM(std::min<int64_t>(kBlockRows, rows - m0), xm, in, wo, ldw, y + m0 * out, out,
                    o0 + j, part, m0, mode == Mode::kCompute ? 0 : rows);
        }
      }
      return;
    case Mode::kRegisters:
    case Mode::kRegistersStreamPrefetch: {
      const bool prefetch = mode == Mode::kRegisters;
      const int64_t lines = in / 16;  // of each of the 4 rows of the next tile
      // The FMAs of rows - 1 more rows: (rows - 1) * 4 * in / 16 of them, 12 a step.
      const int64_t steps = std::max<int64_t>(1, (rows - 1) * kStreams * in / 16 / 12);
      // Every line of the next tile, evenly: one every `every` steps, or
      // `per_step` a step where there are fewer steps than lines (2-3 rows).
      const int64_t every = std::max<int64_t>(1, steps / lines);
      const int64_t per_step = (lines + steps - 1) / steps;
      __m512 a[12];
      for (int q = 0; q < 12; ++q) a[q] = _mm512_set1_ps(static_cast<float>(q));
      const __m512 b = _mm512_set1_ps(0.999f);
      for (int64_t j = 0; j < part; ++j) {
        Block<1>(x, in, w + (o0 + j) * in, ldw, y, out, o0 + j, part, 0, prefetch ? 0 : 1);
        const float* next = w + (o0 + j + 1) * in;
        const bool more = prefetch && j + 1 < part;
        int64_t line = 0;
        for (int64_t t = 0; t < steps; ++t) {
          if (more && t % every == 0) {
            for (int64_t k = 0; k < per_step && line < lines; ++k, ++line) {
#pragma GCC unroll 4
              for (int r = 0; r < kStreams; ++r) {
                _mm_prefetch(reinterpret_cast<const char*>(next + r * ldw + line * 16),
                             _MM_HINT_T0);
              }
            }
          }
#pragma GCC unroll 12
          for (int q = 0; q < 12; ++q) a[q] = _mm512_fmadd_ps(a[q], b, b);
        }
      }
      __m512 s = a[0];
      for (int q = 1; q < 12; ++q) s = _mm512_add_ps(s, a[q]);
      y[o0] += _mm512_reduce_add_ps(s);  // keeps the FMAs
      return;
    }
  }
}

struct Shape {
  int64_t in, out;
};

// Two threads: the caller and one helper that spins between linears.
class Pair {
 public:
  Pair() : helper_([this] { Loop(); }) {}
  ~Pair() {
    stop_.store(true);
    helper_.join();
  }
  // Runs half(0) here and half(1) on the helper; returns when both are done.
  void Run(const std::function<void(int)>& half) {
    job_ = &half;
    const int64_t done = done_.load();
    go_.fetch_add(1);
    half(0);
    for (int spins = 0; done_.load() == done; ++spins) Pause(spins);
  }

 private:
  // Spins, yielding the core now and then (a loaded machine).
  static void Pause(int spins) {
    if (spins % 4096 == 4095) {
      std::this_thread::yield();
    } else {
      _mm_pause();
    }
  }
  void Loop() {
    int64_t seen = 0;
    for (int spins = 0; !stop_.load(); ++spins) {
      const int64_t g = go_.load();
      if (g == seen) {
        Pause(spins);
        continue;
      }
      seen = g;
      spins = 0;
      (*job_)(1);
      done_.fetch_add(1);
    }
  }
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<int64_t> go_{0}, done_{0};
  std::atomic<bool> stop_{false};
  std::thread helper_;
};

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("overlap_probe: this CPU has no AVX-512F; nothing measured\n");
    return 0;
  }
  const int64_t rows = argc > 1 ? std::clamp<int64_t>(std::atoll(argv[1]), 2, 16) : 16;
  const int passes = argc > 2 ? std::max(1, std::atoi(argv[2])) : 30;
  const Shape shapes[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  std::vector<float*> weights;
  for (int layer = 0; layer < 12; ++layer) {
    for (const Shape& s : shapes) weights.push_back(AllocWeights(s.in * s.out));
  }
  std::vector<float> x768(rows * 768, 0.01f), x3072(rows * 3072, 0.01f), y(rows * 3072);
  Pair pair;
  auto pass = [&](Mode mode) {
    for (size_t k = 0; k < weights.size(); ++k) {
      const Shape s = shapes[k % 4];
      const float* x = s.in == 768 ? x768.data() : x3072.data();
      const int64_t half = s.out / 2 / kStreams * kStreams;
      pair.Run([&](int h) {
        Task(mode, x, weights[k], y.data(), rows, s.in, s.out, h == 0 ? 0 : half,
             h == 0 ? half : s.out);
      });
    }
  };
  auto median_ms = [&](Mode mode) {
    for (int i = 0; i < 3; ++i) pass(mode);
    std::vector<double> ms;
    for (int i = 0; i < passes; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      pass(mode);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double stream = median_ms(Mode::kStream), compute = median_ms(Mode::kCompute);
  const double tiles = median_ms(Mode::kTiles), tiles_x6 = median_ms(Mode::kTilesX6);
  const double regs = median_ms(Mode::kRegisters);
  const double regs_streampf = median_ms(Mode::kRegistersStreamPrefetch);
  std::printf("overlap_probe: 48 GPT-2-small linears, %lld input rows, 2 threads, median of %d\n",
              static_cast<long long>(rows), passes);
  std::printf("  stream (1 row)          %7.2f ms\n", stream);
  std::printf("  compute (W from cache)  %7.2f ms\n", compute);
  std::printf("  tiles                   %7.2f ms   (stream + compute %.2f, the larger %.2f)\n",
              tiles, stream + compute, std::max(stream, compute));
  std::printf("  tiles-x6                %7.2f ms\n", tiles_x6);
  std::printf("  registers               %7.2f ms\n", regs);
  std::printf("  registers-streampf      %7.2f ms\n", regs_streampf);
  std::printf("  checksum %g\n", static_cast<double>(y[0]));
  for (float* w : weights) std::free(w);
  return 0;
}
