// int8 weights at one input row with x rounded to int16 per group of 32
// inputs (the weights' groups) and 512-bit integer multiply-adds (vpmaddwd:
// 32 int16 products summed pairwise into 16 exact int32 lanes, one
// instruction; AVX512BW). x is quantized as the AVX2 kernels do
// (QuantizeXInt16, cpu_kernels_body.inc: the same xq and xs); each group's
// 16 lane sums are converted to float32 and multiplied by the weight's
// scale times x's in one FMA, and the lanes are added at the end. Per 32
// weights of a row: a widening load, the multiply-add, a conversion and an
// FMA, where the float32-x kernel (Int8Block) widens, converts, scales and
// multiplies 16 at a time, eight. On an Intel Xeon the 48 GPT-2-small
// linears ran 1.28-1.32x faster (BM_Int8OneRowInt16XPaired). The int16
// rounding of x adds at most absmax_g(x) / 65534 per input to each
// product's error, ~1/256 of the weights' own rounding (int8_linear_test
// bounds it).
//
// Compiled for AVX-512 (avx512f, avx512bw, avx512vl) in its own file so
// that only these functions carry that target here; callers check that
// AVX-512 is active (cpu_kernels.cc) or supported (the tests).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "model/cpu_kernels_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (GCC bug
// 105593; see cpu_kernels_avx512.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define DIKKAT_ROW_KERNEL __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define DIKKAT_ROW_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"), always_inline)) inline

namespace dikkat::model::kernels {
namespace {

// Output rows per register block: R accumulators, x's group and the
// temporaries of R rows in the 32 zmm registers. 4 and 6 measured level
// with 8, 12 and 16 slower (docs/performance.md).
constexpr int kBlockRows = 8;

// x [rows, in] -> xq, xs as QuantizeXInt16Fn says; the same bits as
// cpu_kernels_body.inc's scalar QuantizeXInt16 (x * (32767 / absmax)
// rounded to nearest even, then held to +-32767).
DIKKAT_ROW_KERNEL void QuantizeX(const float* x, int16_t* xq, float* xs, int64_t rows,
                                  int64_t in, int64_t groups) {
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512 hi = _mm512_set1_ps(32767.0f), lo = _mm512_set1_ps(-32767.0f);
  for (int64_t m = 0; m < rows; ++m) {
    const float* xm = x + m * in;
    int16_t* qm = xq + m * in;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i0 = g * 32;
      const int64_t n = std::min<int64_t>(32, in - i0);
      const __mmask16 m0 = n >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << n) - 1);
      const __mmask16 m1 =
          n >= 32 ? __mmask16{0xffff}
                  : (n > 16 ? static_cast<__mmask16>((1u << (n - 16)) - 1) : __mmask16{0});
      const __m512 v0 = _mm512_maskz_loadu_ps(m0, xm + i0);
      const __m512 v1 = _mm512_maskz_loadu_ps(m1, xm + i0 + 16);
      const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
      // Finite: every lane's |x| < infinity (false for NaN).
      const bool finite = (_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) & m0) == m0 &&
                          (_mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ) & m1) == m1;
      const float absmax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
      // 0 where absmax is so small (< ~1e-34) that 32767 / absmax overflows:
      // the group rounds to 0.
      float inv = finite && absmax > 0.0f ? 32767.0f / absmax : 0.0f;
      if (!std::isfinite(inv)) inv = 0.0f;
      xs[m * groups + g] = finite ? absmax / 32767.0f : std::numeric_limits<float>::quiet_NaN();
      const __m512 iv = _mm512_set1_ps(inv);
      // The clamp, then rounding (the same as the scalar's rounding first:
      // the bounds are integers). max_ps gives its second operand for a NaN
      // (x * 0 of a non-finite group), -32767 as std::max(-32767, NaN) does.
      const __m512 q0 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, iv), lo), hi);
      const __m512 q1 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, iv), lo), hi);
      _mm256_mask_storeu_epi16(qm + i0, m0, _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(q0)));
      _mm256_mask_storeu_epi16(qm + i0 + 16, m1, _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(q1)));
    }
  }
}

// Groups whose combined scales a register block computes at once (R x 64
// floats on the stack).
constexpr int64_t kScaleChunk = 64;

// acc[r] += c[r] * (the 16 int32 lane sums of xq[g] * W[r, g], pairs of
// products each) for the group at input i, c[r] = ws[r, g] * xs_g at
// c + r * ldc: the first n inputs of it when kTail (n < 32).
template <int R, bool kTail>
DIKKAT_ROW_INLINE void GroupStep(const int16_t* xq, const int8_t* wo, const float* c,
                                  int64_t ldc, int64_t in, int64_t g, int n,
                                  __m512 (&acc)[R]) {
  const int64_t i = g * 32;
  const __mmask32 mask = kTail ? static_cast<__mmask32>((1ull << n) - 1) : ~__mmask32{0};
  const __m512i xv = kTail ? _mm512_maskz_loadu_epi16(mask, xq + i)
                           : _mm512_loadu_si512(xq + i);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const int8_t* wr = wo + r * in + i;
    const __m256i w8 = kTail ? _mm256_maskz_loadu_epi8(mask, wr)
                             : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr));
    const __m512i sum = _mm512_madd_epi16(_mm512_cvtepi8_epi16(w8), xv);
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(c[r * ldc]), acc[r]);
  }
}

// c[r][j] = ws[r, g0 + j] * xs[g0 + j] for j < n <= kScaleChunk, r < R.
template <int R>
DIKKAT_ROW_INLINE void CombinedScales(const float* so, const float* xs, int64_t groups,
                                       int64_t g0, int64_t n, float (&c)[R][kScaleChunk]) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16{0xffff}
                                    : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 xsv = _mm512_maskz_loadu_ps(m, xs + g0 + j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(&c[r][j], m,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(m, so + r * groups + g0 + j), xsv));
    }
  }
}

// y[o + r] = sum over groups of the scaled group sums + b[o + r], r < R.
// Each group's sum times the weight's and x's scales multiplied first (the
// scales of kScaleChunk groups at once): 4 vector operations a group and
// row.
template <int R>
DIKKAT_ROW_KERNEL void Block(const int16_t* xq, const float* xs, const int8_t* w,
                              const float* scales, const float* b, float* y, int64_t in,
                              int64_t groups, int64_t o) {
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const int8_t* wo = w + o * in;
  const float* so = scales + o * groups;
  const int64_t whole = in / 32;
  alignas(64) float c[R][kScaleChunk];
  for (int64_t g0 = 0; g0 < whole; g0 += kScaleChunk) {
    const int64_t n = std::min(kScaleChunk, whole - g0);
    CombinedScales<R>(so, xs, groups, g0, n, c);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t g = g0 + j;
      // The next block's rows and scales, a cache line each per 64 weights
      // (Int8Block's prefetch).
      if (g % 2 == 0) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(wo + (R + r) * in + g * 32), _MM_HINT_T0);
        }
        _mm_prefetch(reinterpret_cast<const char*>(so + R * groups + g * R), _MM_HINT_T0);
      }
      GroupStep<R, false>(xq, wo, &c[0][j], kScaleChunk, in, g, 0, acc);
    }
  }
  if (whole * 32 < in) {
    float tail[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) tail[r] = so[r * groups + whole] * xs[whole];
    GroupStep<R, true>(xq, wo, tail, 1, in, whole, static_cast<int>(in - whole * 32), acc);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float bias = b != nullptr ? b[o + r] : 0.0f;
    y[o + r] = _mm512_reduce_add_ps(acc[r]) + bias;
  }
}

// Output rows [o0, o1) of one input row (Int8RowsFn; rows is 1, x and ldy
// unused).
DIKKAT_ROW_KERNEL void OneRow(const float* /*x*/, const int16_t* xq, const float* xs,
                               const int8_t* w, const float* scales, const float* b, float* y,
                               int64_t /*rows*/, int64_t in, int64_t groups, int64_t /*ldy*/,
                               int64_t o0, int64_t o1) {
  int64_t o = o0;
  for (; o + kBlockRows <= o1; o += kBlockRows) {
    Block<kBlockRows>(xq, xs, w, scales, b, y, in, groups, o);
  }
  for (; o < o1; ++o) Block<1>(xq, xs, w, scales, b, y, in, groups, o);
}

const Int8RowInt16Kernels kRow = {&QuantizeX, &OneRow};

}  // namespace

const Int8RowInt16Kernels* Avx512Int8RowInt16Kernels() { return &kRow; }

}  // namespace dikkat::model::kernels

#else  // not x86-64

namespace dikkat::model::kernels {
const Int8RowInt16Kernels* Avx512Int8RowInt16Kernels() { return nullptr; }
}  // namespace dikkat::model::kernels

#endif
