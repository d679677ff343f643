#include "model/cpu_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "model/work_team.h"

// GCC 12's AVX-512 intrinsics (_mm512_cvtepu16_epi32 and friends) start from
// _mm512_undefined_*() and trip -Wuninitialized falsely (GCC bug 105593).
// (clang has no -Wmaybe-uninitialized and warns about the unknown group.)
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace dikkat::model {
namespace {

// DIKKAT_NO_AVX512 (any value) selects the portable loops on any CPU: the
// tests run them that way too (tests/CMakeLists.txt, *_portable).
bool HasAvx512() {
  static const bool has = std::getenv("DIKKAT_NO_AVX512") == nullptr &&
                          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

inline float Bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// IEEE half stored as raw bits (a distinct type from bfloat16's uint16_t).
struct Half16 {
  uint16_t bits;
};

template <typename W>
inline float LoadScalar(const W* p, int64_t i);
template <>
inline float LoadScalar<Half16>(const Half16* p, int64_t i) {
  return static_cast<float>(c10::Half(p[i].bits, c10::Half::from_bits()));
}
template <>
inline float LoadScalar<float>(const float* p, int64_t i) {
  return p[i];
}
template <>
inline float LoadScalar<uint16_t>(const uint16_t* p, int64_t i) {
  return Bf16ToFloat(p[i]);
}

// ---- AVX-512 helpers ---------------------------------------------------------

__attribute__((target("avx512f,avx512bw"))) inline __m512 Load16(const float* p) {
  return _mm512_loadu_ps(p);
}
__attribute__((target("avx512f,avx512bw"))) inline __m512 Load16(const uint16_t* p) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

__attribute__((target("avx512f,avx512bw"))) inline __m512 Load16(const Half16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Masked loads of the first n < 16 elements (the rest read as zero): rows
// whose length is not a multiple of 16 need no scalar tail loop.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 Load16(const float* p,
                                                                          __mmask16 k) {
  return _mm512_maskz_loadu_ps(k, p);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 Load16(const uint16_t* p,
                                                                          __mmask16 k) {
  __m256i raw = _mm256_maskz_loadu_epi16(k, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 Load16(const Half16* p,
                                                                          __mmask16 k) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}

// ---- SmallBatchLinear -----------------------------------------------------------

// Output rows computed together for M input rows. The R x M accumulators, the
// R weight vectors and one x vector live in the 32 zmm registers (R*M + R + 1
// <= 32); each weight vector loaded serves M FMAs and each x vector R, so the
// loads stay below the FMA count from M = 2 on.
template <int M>
constexpr int BlockRows() {
  constexpr int kRows[] = {0, 8, 8, 6, 5, 4, 4, 3, 3};
  return kRows[M];
}

// acc[r][m] = 0 for every block accumulator.
template <int M, int R>
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void ZeroBlock(
    __m512 (&acc)[R][M]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  }
}

// acc[r][m] += W[r, i:i+16] * x[m, i:i+16] (only the first lanes of mask k
// when kMasked).
template <int M, int R, bool kMasked, typename W>
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void LinearStep(
    const float* x, const W* wo, int64_t in, int64_t i, __mmask16 k, __m512 (&acc)[R][M]) {
  __m512 wv[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) wv[r] = kMasked ? Load16(wo + r * in + i, k) : Load16(wo + r * in + i);
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const __m512 xv = kMasked ? _mm512_maskz_loadu_ps(k, x + m * in + i) : _mm512_loadu_ps(x + m * in + i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
  }
}

// y[m, o + r] = sum of acc[r][m]'s lanes + b[o + r].
template <int M, int R>
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void StoreBlock(
    const __m512 (&acc)[R][M], const float* b, float* y, int64_t ldy, int64_t o) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float bias = b != nullptr ? b[o + r] : 0.0f;
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      float* dst = y + m * ldy + o + r;
      const float s = _mm512_reduce_add_ps(acc[r][m]) + bias;
      *dst = s;
    }
  }
}

// y[m, o + r] = x[m, :] . W[o + r, :] + b[o + r] for r < R, m < M: every
// weight read once for the M rows. The loops over R and M are unrolled so
// that the accumulators stay in registers (-O2 does not unroll them itself).
template <int M, int R, typename W>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void LinearBlockAvx512(
    const float* x, const W* w, const float* b, float* y, int64_t in, int64_t ldy, int64_t o) {
  __m512 acc[R][M];
  ZeroBlock<M, R>(acc);
  const W* wo = w + o * in;
  int64_t i = 0;
  for (; i + 16 <= in; i += 16) {
    // The next block's rows, a cache line each per 64 bytes of weights:
    // R short streams (one to a few KiB each) that the hardware prefetcher
    // picks up late. Not for one row: that step is bound by memory bandwidth,
    // the task's rows are one contiguous stream the hardware prefetcher
    // follows, and the extra prefetches (past the task's last block, too)
    // cost ~12% of batch-1 decode.
    if (M > 1 && (i * static_cast<int64_t>(sizeof(W))) % 64 == 0) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(wo + (R + r) * in + i), _MM_HINT_T0);
      }
    }
    LinearStep<M, R, false>(x, wo, in, i, 0, acc);
  }
  if (i < in) {
    LinearStep<M, R, true>(x, wo, in, i, static_cast<__mmask16>((1u << (in - i)) - 1), acc);
  }
  StoreBlock<M, R>(acc, b, y, ldy, o);
}

// Output rows [o0, o1): blocks of BlockRows<M>(), the remainder one by one.
template <int M, typename W>
void LinearRowsAvx512(const float* x, const W* w, const float* b, float* y, int64_t in,
                      int64_t ldy, int64_t o0, int64_t o1) {
  constexpr int R = BlockRows<M>();
  int64_t o = o0;
  for (; o + R <= o1; o += R) LinearBlockAvx512<M, R>(x, w, b, y, in, ldy, o);
  for (; o < o1; ++o) LinearBlockAvx512<M, 1>(x, w, b, y, in, ldy, o);
}

// bfloat16 weights, few rows: widening 16 bfloat16 values to float32 takes a
// cross-lane shuffle per vector, which bounds the kernel below the memory
// speed at M <= 4. Read 32 weights per load instead and split them without
// shuffles: shifting each 32-bit lane left by 16 gives the even elements as
// float32, masking off its low half the odd ones. x is reordered once per
// call to match: per 32-element block, its 16 even elements then its 16 odd
// ones (`xp`); the last in % 32 elements keep x's order and the plain path.
// The products are the same as LinearBlockAvx512's, summed in another order.
template <int M>
constexpr int Bf16PairRows() {  // R*M accumulators + 2R weight vectors + 2 x vectors <= 32
  constexpr int kRows[] = {0, 8, 6, 5, 4};
  return kRows[M];
}

template <int M, int R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void LinearBlockBf16Pairs(
    const float* x, const float* xp, const uint16_t* w, const float* b, float* y, int64_t in,
    int64_t ldy, int64_t o) {
  __m512 acc[R][M];
  ZeroBlock<M, R>(acc);
  const uint16_t* wo = w + o * in;
  int64_t i = 0;
  for (; i + 32 <= in; i += 32) {
    __m512 even[R], odd[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // The next block's rows, one cache line each per step: R short streams
      // of 24..96 lines are too short for the hardware prefetcher alone (not
      // for one row, see LinearBlockAvx512).
      if (M > 1) _mm_prefetch(reinterpret_cast<const char*>(wo + (R + r) * in + i), _MM_HINT_T0);
      const __m512i raw = _mm512_loadu_si512(wo + r * in + i);
      even[r] = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
      odd[r] = _mm512_castsi512_ps(_mm512_maskz_mov_epi16(0xAAAAAAAAu, raw));
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xe = _mm512_loadu_ps(xp + m * in + i);
      const __m512 xo = _mm512_loadu_ps(xp + m * in + i + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[r][m] = _mm512_fmadd_ps(even[r], xe, acc[r][m]);
        acc[r][m] = _mm512_fmadd_ps(odd[r], xo, acc[r][m]);
      }
    }
  }
  for (; i + 16 <= in; i += 16) LinearStep<M, R, false>(x, wo, in, i, 0, acc);
  if (i < in) {
    LinearStep<M, R, true>(x, wo, in, i, static_cast<__mmask16>((1u << (in - i)) - 1), acc);
  }
  StoreBlock<M, R>(acc, b, y, ldy, o);
}

// xp[m, 32c + j] = x[m, 32c + 2j], xp[m, 32c + 16 + j] = x[m, 32c + 2j + 1]
// (j < 16) for whole blocks of 32; the rest copied as it is.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void SplitEvenOdd(const float* x, float* xp,
                                                                       int64_t rows, int64_t in) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t m = 0; m < rows; ++m) {
    const float* src = x + m * in;
    float* dst = xp + m * in;
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
      const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
      _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(lo, even, hi));
      _mm512_storeu_ps(dst + i + 16, _mm512_permutex2var_ps(lo, odd, hi));
    }
    std::copy(src + i, src + in, dst + i);
  }
}

template <int M>
void LinearRowsBf16Pairs(const float* x, const float* xp, const uint16_t* w, const float* b,
                         float* y, int64_t in, int64_t ldy, int64_t o0, int64_t o1) {
  constexpr int R = Bf16PairRows<M>();
  int64_t o = o0;
  for (; o + R <= o1; o += R) LinearBlockBf16Pairs<M, R>(x, xp, w, b, y, in, ldy, o);
  for (; o < o1; ++o) LinearBlockBf16Pairs<M, 1>(x, xp, w, b, y, in, ldy, o);
}

// ---- Row blocks and tasks shared by SmallBatchLinear and Int8Linear -----------

// Calls block(std::integral_constant<int, M>{}, m0) for consecutive blocks of
// M <= kSmallBatchMaxRows input rows m0..m0+M-1 covering [0, rows). The
// register blocks are compiled for M = 1..8 (BlockRows); more rows reuse
// them: a task runs every row block over its own slice of W, which stays in
// the L2 cache from one row block to the next (24 output rows when there are
// several row blocks, ForEachOutputTask: 72-288 KiB of float32 for
// GPT-2-small's 768- and 3072-wide rows), so W is streamed from memory once
// per call whatever the number of rows.
template <typename Block>
inline void ForEachRowBlock(int64_t rows, const Block& block) {
  for (int64_t m0 = 0; m0 < rows; m0 += kSmallBatchMaxRows) {
    switch (std::min(kSmallBatchMaxRows, rows - m0)) {
      case 1: block(std::integral_constant<int, 1>{}, m0); break;
      case 2: block(std::integral_constant<int, 2>{}, m0); break;
      case 3: block(std::integral_constant<int, 3>{}, m0); break;
      case 4: block(std::integral_constant<int, 4>{}, m0); break;
      case 5: block(std::integral_constant<int, 5>{}, m0); break;
      case 6: block(std::integral_constant<int, 6>{}, m0); break;
      case 7: block(std::integral_constant<int, 7>{}, m0); break;
      default: block(std::integral_constant<int, 8>{}, m0); break;
    }
  }
}

// Runs body(o0, o1) over output rows [0, out) on the work team, in tasks of
// whole 24-row units (a multiple of every block size but 5). Up to
// kSmallBatchMaxRows input rows, about 64 output rows per task: enough work
// to amortize the task and enough tasks to balance. With more rows each
// output row is more work, so one unit per task suffices (and keeps the
// task's slice of W small enough for the L2 cache).
template <typename Body>
void ForEachOutputTask(int64_t out, int64_t rows, const Body& body) {
  constexpr int64_t kUnit = 24;
  const int64_t units = (out + kUnit - 1) / kUnit;
  TeamParallelFor(units, rows <= kSmallBatchMaxRows ? 64 / kUnit + 1 : 1,
                  [&](int64_t u0, int64_t u1) { body(u0 * kUnit, std::min(out, u1 * kUnit)); });
}

template <typename W>
void LinearRowsGeneric(const float* x, const W* w, const float* b, float* y, int64_t rows,
                       int64_t in, int64_t ldy, int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    for (int64_t m = 0; m < rows; ++m) {
      float s = 0;
      for (int64_t j = 0; j < in; ++j) s += LoadScalar(w + o * in, j) * x[m * in + j];
      s += b ? b[o] : 0.0f;
      float* dst = y + m * ldy + o;
      *dst = s;
    }
  }
}

// y = x W^T + b for any number of rows: up to 4 rows of bfloat16 weights the
// shuffle-free kernel, otherwise row blocks of up to kSmallBatchMaxRows.
template <typename W>
void LinearDispatch(const float* x, const W* w, const float* b, float* y, int64_t rows,
                    int64_t in, int64_t out) {
  // bfloat16 weights, up to 4 rows: the shuffle-free kernel on x reordered.
  std::vector<float> xp;
  if (std::is_same_v<W, uint16_t> && HasAvx512() && rows <= 4 && in >= 32) {
    xp.resize(rows * in);
    SplitEvenOdd(x, xp.data(), rows, in);
  }
  ForEachOutputTask(out, rows, [&](int64_t o0, int64_t o1) {
    if (!HasAvx512()) return LinearRowsGeneric(x, w, b, y, rows, in, out, o0, o1);
    if constexpr (std::is_same_v<W, uint16_t>) {
      if (!xp.empty()) {
        const float* p = xp.data();
        switch (rows) {
          case 1: return LinearRowsBf16Pairs<1>(x, p, w, b, y, in, out, o0, o1);
          case 2: return LinearRowsBf16Pairs<2>(x, p, w, b, y, in, out, o0, o1);
          case 3: return LinearRowsBf16Pairs<3>(x, p, w, b, y, in, out, o0, o1);
          default: return LinearRowsBf16Pairs<4>(x, p, w, b, y, in, out, o0, o1);
        }
      }
    }
    ForEachRowBlock(rows, [&](auto m, int64_t m0) {
      LinearRowsAvx512<decltype(m)::value>(x + m0 * in, w, b, y + m0 * out, in, out, o0, o1);
    });
  });
}

// ---- Int8Linear ----------------------------------------------------------------

// 16 int8 weights widened to float32 and multiplied by their group's scale:
// the int8 -> float32 conversion stays in registers, so the matrix is read
// from memory at one byte per weight.
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline __m512 LoadInt8(
    const int8_t* p, __m512 scale) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)), scale);
}
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline __m512 LoadInt8(
    const int8_t* p, __mmask16 k, __m512 scale) {
  const __m128i raw = _mm_maskz_loadu_epi8(k, p);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)), scale);
}

// acc[r][m] += dequant(W[r, i:i+16]) * x[m, i:i+16] (the first lanes of k
// when kMasked); the 16 elements lie in one scale group (16 divides 32).
template <int M, int R, bool kMasked>
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void Int8Step(
    const float* x, const int8_t* wo, const float* so, int64_t in, int64_t groups, int64_t i,
    __mmask16 k, __m512 (&acc)[R][M]) {
  static_assert(kInt8GroupSize % 16 == 0, "a 16-lane step must not straddle two groups");
  const int64_t g = i / kInt8GroupSize;
  __m512 wv[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 scale = _mm512_set1_ps(so[r * groups + g]);
    wv[r] = kMasked ? LoadInt8(wo + r * in + i, k, scale) : LoadInt8(wo + r * in + i, scale);
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    const float* xm = x + m * in + i;
    const __m512 xv = kMasked ? _mm512_maskz_loadu_ps(k, xm) : _mm512_loadu_ps(xm);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
  }
}

// y[m, o + r] = x[m, :] . dequant(W[o + r, :]) + b[o + r] for r < R, m < M.
template <int M, int R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void Int8BlockAvx512(
    const float* x, const int8_t* w, const float* scales, const float* b, float* y, int64_t in,
    int64_t groups, int64_t ldy, int64_t o) {
  __m512 acc[R][M];
  ZeroBlock<M, R>(acc);
  const int8_t* wo = w + o * in;
  const float* so = scales + o * groups;
  int64_t i = 0;
  for (; i + 16 <= in; i += 16) {
    // The next block's rows, a cache line each per 64 weights: int8 rows are
    // 4x shorter streams than float32 ones, too short for the hardware
    // prefetcher alone.
    if (i % 64 == 0) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(wo + (R + r) * in + i), _MM_HINT_T0);
      }
    }
    Int8Step<M, R, false>(x, wo, so, in, groups, i, 0, acc);
  }
  if (i < in) {
    Int8Step<M, R, true>(x, wo, so, in, groups, i, static_cast<__mmask16>((1u << (in - i)) - 1),
                         acc);
  }
  StoreBlock<M, R>(acc, b, y, ldy, o);
}

template <int M>
void Int8RowsAvx512(const float* x, const int8_t* w, const float* scales, const float* b,
                    float* y, int64_t in, int64_t groups, int64_t ldy, int64_t o0, int64_t o1) {
  constexpr int R = BlockRows<M>();
  int64_t o = o0;
  for (; o + R <= o1; o += R) Int8BlockAvx512<M, R>(x, w, scales, b, y, in, groups, ldy, o);
  for (; o < o1; ++o) Int8BlockAvx512<M, 1>(x, w, scales, b, y, in, groups, ldy, o);
}

void Int8RowsGeneric(const float* x, const int8_t* w, const float* scales, const float* b,
                     float* y, int64_t rows, int64_t in, int64_t groups, int64_t ldy, int64_t o0,
                     int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    const int8_t* wo = w + o * in;
    const float* so = scales + o * groups;
    for (int64_t m = 0; m < rows; ++m) {
      float s = 0;
      for (int64_t j = 0; j < in; ++j) s += wo[j] * so[j / kInt8GroupSize] * x[m * in + j];
      y[m * ldy + o] = s + (b ? b[o] : 0.0f);
    }
  }
}

// Input rows [0, rows) in row blocks against output rows [o0, o1): the
// task's slice of W (tens to a few hundred KiB of int8) stays in the L2 cache
// from one row block to the next.
void Int8Rows(const float* x, const int8_t* w, const float* scales, const float* b, float* y,
              int64_t rows, int64_t in, int64_t groups, int64_t out, int64_t o0, int64_t o1) {
  if (!HasAvx512()) return Int8RowsGeneric(x, w, scales, b, y, rows, in, groups, out, o0, o1);
  ForEachRowBlock(rows, [&](auto m, int64_t m0) {
    Int8RowsAvx512<decltype(m)::value>(x + m0 * in, w, scales, b, y + m0 * out, in, groups, out,
                                       o0, o1);
  });
}

// dst[r - o0, :] = dequant(W[r, :]) for r in [o0, o1): float32 rows for a GEMM.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void DequantizeRowsAvx512(
    const int8_t* w, const float* scales, int64_t in, int64_t groups, int64_t o0, int64_t o1,
    float* dst) {
  for (int64_t o = o0; o < o1; ++o) {
    const int8_t* wo = w + o * in;
    const float* so = scales + o * groups;
    float* d = dst + (o - o0) * in;
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
      _mm512_storeu_ps(d + i, LoadInt8(wo + i, _mm512_set1_ps(so[i / kInt8GroupSize])));
    }
    if (i < in) {
      const __mmask16 k = static_cast<__mmask16>((1u << (in - i)) - 1);
      _mm512_mask_storeu_ps(d + i, k, LoadInt8(wo + i, k, _mm512_set1_ps(so[i / kInt8GroupSize])));
    }
  }
}

void DequantizeRows(const int8_t* w, const float* scales, int64_t in, int64_t groups, int64_t o0,
                    int64_t o1, float* dst) {
  if (HasAvx512()) return DequantizeRowsAvx512(w, scales, in, groups, o0, o1, dst);
  for (int64_t o = o0; o < o1; ++o) {
    for (int64_t j = 0; j < in; ++j) {
      dst[(o - o0) * in + j] = w[o * in + j] * scales[o * groups + j / kInt8GroupSize];
    }
  }
}

// Many rows (prefill): y[:, tile] = x dequant(W[tile])^T one tile of W's
// rows at a time, each tile dequantized by the work team into a float32
// buffer of at most 16 MiB (held in the L3 cache; every GPT-2-small matrix
// but the LM head is one tile) and multiplied by LibTorch's GEMM (OpenBLAS,
// multithreaded, writing straight into y's columns). Measured at 512 rows:
// 1 MiB tiles cost ~25% more, as OpenBLAS packs x again for every tile.
// The buffer lives for one call: the model stays int8.
at::Tensor Int8LinearGemm(const at::Tensor& x /*[M, in] float32*/, const LinearWeight& w,
                          const at::Tensor& b) {
  const int64_t in = w.in_features(), out = w.out_features(), groups = w.scales.size(1);
  const int64_t tile_rows = std::max<int64_t>(16, (int64_t{1} << 22) / in / 16 * 16);
  at::Tensor y = at::empty({x.size(0), out}, x.options());  // [M, out]
  at::Tensor tile = at::empty({std::min(tile_rows, out), in}, x.options());
  const int8_t* wp = w.w.data_ptr<int8_t>();
  const float* sp = w.scales.data_ptr<float>();
  float* tp = tile.data_ptr<float>();
  for (int64_t o = 0; o < out; o += tile_rows) {
    const int64_t n = std::min(tile_rows, out - o);
    TeamParallelFor((n + 15) / 16, 1, [&](int64_t c0, int64_t c1) {
      const int64_t r0 = o + c0 * 16, r1 = std::min(o + n, o + c1 * 16);
      DequantizeRows(wp, sp, in, groups, r0, r1, tp + (r0 - o) * in);
    });
    at::Tensor dst = y.narrow(1, o, n);  // strided columns: BLAS writes them in place
    at::mm_out(dst, x, tile.narrow(0, 0, n).t());
  }
  return b.defined() ? y.add_(b.to(at::kFloat)) : y;
}

// ---- PagedDecodeAttention ---------------------------------------------------------

template <typename T>
__attribute__((target("avx512f,avx512bw"))) inline float DotAvx512(const float* q, const T* k,
                                                                   int64_t d) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), Load16(k + i), acc);
  float s = _mm512_reduce_add_ps(acc);
  for (; i < d; ++i) s += q[i] * LoadScalar(k, i);
  return s;
}

template <typename T>
__attribute__((target("avx512f,avx512bw"))) inline void AxpyAvx512(float a, const T* v, float* out,
                                                                   int64_t d) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_fmadd_ps(av, Load16(v + i), _mm512_loadu_ps(out + i)));
  }
  for (; i < d; ++i) out[i] += a * LoadScalar(v, i);
}

template <typename T>
inline float DotGeneric(const float* q, const T* k, int64_t d) {
  float s = 0;
  for (int64_t i = 0; i < d; ++i) s += q[i] * LoadScalar(k, i);
  return s;
}
template <typename T>
inline void AxpyGeneric(float a, const T* v, float* out, int64_t d) {
  for (int64_t i = 0; i < d; ++i) out[i] += a * LoadScalar(v, i);
}

// One (sequence, KV head): the G query heads that share it, over its keys.
template <typename T, bool kAvx512>
void AttendOneKvHead(
    const float* q /*[G, D] pre-scaled*/, const T* k_cache, const T* v_cache,
    const std::vector<int32_t>& table, int64_t first, int64_t len, int64_t block_size,
    int64_t kv_heads, int64_t kv_head, int64_t group, int64_t d, float* scores /*[G, len]*/,
    float* out /*[G, D]*/) {
  const int64_t n = len - first;
  for (int64_t p = first; p < len; ++p) {
    const int64_t slot = int64_t{table[p / block_size]} * block_size + p % block_size;
    const T* k = k_cache + (slot * kv_heads + kv_head) * d;
    for (int64_t g = 0; g < group; ++g) {
      scores[g * n + (p - first)] = kAvx512 ? DotAvx512(q + g * d, k, d) : DotGeneric(q + g * d, k, d);
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores + g * n;
    const float max = *std::max_element(s, s + n);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - max));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
    std::fill(out + g * d, out + (g + 1) * d, 0.0f);
  }
  for (int64_t p = first; p < len; ++p) {
    const int64_t slot = int64_t{table[p / block_size]} * block_size + p % block_size;
    const T* v = v_cache + (slot * kv_heads + kv_head) * d;
    for (int64_t g = 0; g < group; ++g) {
      const float a = scores[g * n + (p - first)];
      if (kAvx512) {
        AxpyAvx512(a, v, out + g * d, d);
      } else {
        AxpyGeneric(a, v, out + g * d, d);
      }
    }
  }
}

template <typename T>
void DecodeAttentionAll(const float* q, const T* k_cache, const T* v_cache, float* out,
                        const std::vector<const std::vector<int32_t>*>& tables,
                        const std::vector<int64_t>& lens, int64_t block_size, int64_t window,
                        int64_t hq, int64_t hkv, int64_t d) {
  const int64_t batch = static_cast<int64_t>(lens.size());
  const int64_t group = hq / hkv;
  const bool avx = HasAvx512();
  // A few (sequence, KV head) pairs per chunk: one scores buffer each.
  TeamParallelFor(batch * hkv, std::max<int64_t>(1, batch * hkv / 16), [&](int64_t t0, int64_t t1) {
    std::vector<float> scores;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / hkv, h = t % hkv;
      const int64_t len = lens[b];
      const int64_t first = window > 0 ? std::max<int64_t>(0, len - window) : 0;
      scores.resize(group * (len - first));
      const float* qb = q + (b * hq + h * group) * d;
      float* ob = out + (b * hq + h * group) * d;
      if (avx) {
        AttendOneKvHead<T, true>(qb, k_cache, v_cache, *tables[b], first, len, block_size, hkv, h,
                                 group, d, scores.data(), ob);
      } else {
        AttendOneKvHead<T, false>(qb, k_cache, v_cache, *tables[b], first, len, block_size, hkv,
                                  h, group, d, scores.data(), ob);
      }
    }
  });
}

}  // namespace

namespace {
std::atomic<bool> row_blocks{true};  // SetSmallBatchLinearRowBlocks
}  // namespace

void SetSmallBatchLinearRowBlocks(bool enabled) {
  row_blocks.store(enabled, std::memory_order_relaxed);
}

bool SmallBatchLinearApplies(const at::Tensor& x, const at::Tensor& w) {
  int64_t max_rows = 0;
  switch (w.scalar_type()) {
    case at::kFloat: max_rows = kSmallBatchLinearMaxRowsFloat; break;
    case at::kBFloat16: max_rows = kSmallBatchLinearMaxRowsBFloat16; break;
    case at::kHalf: max_rows = kSmallBatchLinearMaxRowsHalf; break;
    default: return false;
  }
  if (!row_blocks.load(std::memory_order_relaxed)) max_rows = kSmallBatchMaxRows;
  return x.dim() == 2 && x.size(0) >= 1 && x.size(0) <= max_rows && x.is_cpu() && w.is_cpu() &&
         w.dim() == 2 && w.is_contiguous();
}

at::Tensor SmallBatchLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  TORCH_CHECK(w.size(1) == in, "SmallBatchLinear: x has ", in, " columns, w ", w.size(1));
  at::Tensor xf = x.to(at::kFloat).contiguous();
  at::Tensor bf = b.defined() ? b.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor y = at::empty({rows, out}, x.options().dtype(at::kFloat));
  const float* bp = bf.defined() ? bf.data_ptr<float>() : nullptr;
  if (w.scalar_type() == at::kFloat) {
    LinearDispatch(xf.data_ptr<float>(), w.data_ptr<float>(), bp, y.data_ptr<float>(), rows, in,
                   out);
  } else if (w.scalar_type() == at::kBFloat16) {
    LinearDispatch(xf.data_ptr<float>(), reinterpret_cast<const uint16_t*>(w.data_ptr()), bp,
                   y.data_ptr<float>(), rows, in, out);
  } else {
    LinearDispatch(xf.data_ptr<float>(), reinterpret_cast<const Half16*>(w.data_ptr()), bp,
                   y.data_ptr<float>(), rows, in, out);
  }
  return y.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
}

at::Tensor Int8Linear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& b) {
  TORCH_CHECK(w.quantized() && w.w.scalar_type() == at::kChar && w.w.is_contiguous() &&
                  w.scales.is_contiguous() && w.w.is_cpu(),
              "Int8Linear: a contiguous int8 CPU weight with scales");
  const int64_t in = w.in_features(), out = w.out_features(), groups = w.scales.size(1);
  TORCH_CHECK(x.size(-1) == in, "Int8Linear: x has ", x.size(-1), " columns, w ", in);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = out;
  at::Tensor xf = x.reshape({-1, in}).to(at::kFloat).contiguous();  // [M, in]
  const int64_t rows = xf.size(0);
  if (rows >= kInt8GemmMinRows) return Int8LinearGemm(xf, w, b).view(out_shape);
  at::Tensor bf = b.defined() ? b.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor y = at::empty({rows, out}, xf.options());
  const float* xp = xf.data_ptr<float>();
  const int8_t* wp = w.w.data_ptr<int8_t>();
  const float* sp = w.scales.data_ptr<float>();
  const float* bp = bf.defined() ? bf.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  ForEachOutputTask(out, rows, [&](int64_t o0, int64_t o1) {
    Int8Rows(xp, wp, sp, bp, yp, rows, in, groups, out, o0, o1);
  });
  return y.view(out_shape);
}

at::Tensor PagedDecodeAttention(const at::Tensor& q, const at::Tensor& k_cache,
                                const at::Tensor& v_cache,
                                const std::vector<const std::vector<int32_t>*>& tables,
                                const std::vector<int64_t>& lens, int64_t block_size,
                                int64_t window) {
  const int64_t batch = q.size(0), hq = q.size(1), d = q.size(2), hkv = k_cache.size(1);
  TORCH_CHECK(static_cast<int64_t>(lens.size()) == batch && tables.size() == lens.size(),
              "PagedDecodeAttention: one table and length per sequence");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "KV cache must be contiguous");
  at::Tensor qs = (q.to(at::kFloat) * (1.0 / std::sqrt(static_cast<double>(d)))).contiguous();
  at::Tensor out = at::empty({batch, hq, d}, q.options().dtype(at::kFloat));
  if (k_cache.scalar_type() == at::kFloat) {
    DecodeAttentionAll(qs.data_ptr<float>(), k_cache.data_ptr<float>(), v_cache.data_ptr<float>(),
                       out.data_ptr<float>(), tables, lens, block_size, window, hq, hkv, d);
  } else if (k_cache.scalar_type() == at::kBFloat16) {
    DecodeAttentionAll(qs.data_ptr<float>(), reinterpret_cast<const uint16_t*>(k_cache.data_ptr()),
                       reinterpret_cast<const uint16_t*>(v_cache.data_ptr()), out.data_ptr<float>(),
                       tables, lens, block_size, window, hq, hkv, d);
  } else {
    TORCH_CHECK(k_cache.scalar_type() == at::kHalf, "PagedDecodeAttention: cache dtype ",
                k_cache.scalar_type(), " not supported");
    DecodeAttentionAll(qs.data_ptr<float>(), reinterpret_cast<const Half16*>(k_cache.data_ptr()),
                       reinterpret_cast<const Half16*>(v_cache.data_ptr()), out.data_ptr<float>(),
                       tables, lens, block_size, window, hq, hkv, d);
  }
  return out.scalar_type() == q.scalar_type() ? out : out.to(q.scalar_type());
}

}  // namespace dikkat::model
