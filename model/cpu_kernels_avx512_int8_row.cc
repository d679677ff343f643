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
// bounds it). Below, the same integer sums with AVX512_VNNI's byte dot
// products (Zen 4's one-row int8 kernel; see "The same integer sums with
// AVX512_VNNI").
//
// Compiled for AVX-512 (avx512f, avx512bw, avx512vl; the VNNI functions also
// avx512vnni) in its own file so that only these functions carry those
// targets here; callers check that AVX-512 is active (cpu_kernels.cc) or
// supported (the tests), and the VNNI table is null on a CPU without
// AVX512_VNNI.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "model/cpu_kernels_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
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

int64_t ScratchInt16s(int64_t in) { return in; }

const Int8RowInt16Kernels kRow = {&QuantizeX, &OneRow, &ScratchInt16s};

// ---- The same integer sums with AVX512_VNNI -----------------------------------
//
// vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds the four
// products to an int32 lane: 64 weights a 512-bit instruction. An int16 x
// is 256 * hi + lo, hi = x >> 8 (signed, -128..127) and lo = x & 255
// (unsigned), so w * x = 256 * (w * hi) + lo * w:
//   - lo * w is vpdpbusd(lo, w) as it stands;
//   - w * hi has no unsigned side: (w ^ 0x80) = w + 128 is one, and
//     vpdpbusd(w ^ 0x80, hi) = w * hi + 128 * hi, so the accumulator starts
//     from -128 * (the lane's four hi), precomputed once per call.
// A lane's sum (4 products of each) is w * hi over its 4 inputs, shifted
// left by 8, plus lo * w: exactly the int16-x kernel's pairs summed (every
// partial sum fits int32: |w * hi| <= 4 * 128 * 128 before the shift). Per
// 64 weights and row: an xor, two vpdpbusd, a shift, a conversion, a
// permute (the two groups' scales to their 8 lanes each) and an FMA, 7
// operations where the float32-x stream (Int8Spread) takes 16 (it widens,
// converts, scales and multiplies 16 weights at a time). The groups' int32 sums are the int16-x
// kernel's; the float32 sums differ in order (lanes hold 4 inputs of one
// group here, 2 there).

#define DIKKAT_VNNI_KERNEL \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#define DIKKAT_VNNI_INLINE                                                              \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"), always_inline)) \
  inline

// One row's scratch (xq of QuantizeXInt16Fn's contract points at it, in
// int16s): xq itself [in], then from the next address that is a multiple of
// 64 (a cache line: the kernel loads them 64 bytes at a time), p = in rounded
// up to 64, hi [p] (int8), lo [p] (uint8) and the accumulators' start
// [p / 4] (int32), zero past in.
int64_t Padded(int64_t in) { return (in + 63) / 64 * 64; }
int64_t VnniScratchInt16s(int64_t in) { return in + 32 + Padded(in) * 3 / 2; }
uintptr_t VnniBytes(const int16_t* scratch, int64_t in) {
  const auto end = reinterpret_cast<uintptr_t>(scratch + in);
  return (end + 63) / 64 * 64;
}

struct VnniX {
  const int16_t* xq;
  const int8_t* hi;
  const uint8_t* lo;
  const int32_t* start;
};
VnniX VnniParts(const int16_t* scratch, int64_t in) {
  const int64_t p = Padded(in);
  const auto* bytes = reinterpret_cast<const uint8_t*>(VnniBytes(scratch, in));
  return {scratch, reinterpret_cast<const int8_t*>(bytes), bytes + p,
          reinterpret_cast<const int32_t*>(bytes + 2 * p)};
}

// x [1, in] -> xq and xs (QuantizeX's bits), then hi, lo and the starts.
// One row only (the scratch holds one; Int8Linear calls it for one row):
// `rows` is not used.
DIKKAT_VNNI_KERNEL void VnniQuantize(const float* x, int16_t* scratch, float* xs,
                                     int64_t /*rows*/, int64_t in, int64_t groups) {
  QuantizeX(x, scratch, xs, 1, in, groups);
  const int64_t p = Padded(in);
  auto* bytes = reinterpret_cast<uint8_t*>(VnniBytes(scratch, in));
  auto* start = reinterpret_cast<int32_t*>(bytes + 2 * p);
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < p; i += 64) {
    const int64_t n = in - i;  // > 0: p - 64 < in
    const __mmask32 m0 = n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
    const __mmask32 m1 =
        n >= 64 ? ~__mmask32{0}
                : (n > 32 ? static_cast<__mmask32>((1u << (n - 32)) - 1) : __mmask32{0});
    const __m512i a = _mm512_maskz_loadu_epi16(m0, scratch + i);
    const __m512i b = _mm512_maskz_loadu_epi16(m1, scratch + i + 32);
    const __m512i hi =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srai_epi16(a, 8))),
                           _mm512_cvtepi16_epi8(_mm512_srai_epi16(b, 8)), 1);
    const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(a)),
                                          _mm512_cvtepi16_epi8(b), 1);
    _mm512_storeu_si512(bytes + i, hi);
    _mm512_storeu_si512(bytes + p + i, lo);
    // 128 * (each lane's four hi), negated.
    const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, hi);
    _mm512_storeu_si512(start + i / 4, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
  }
}

// x's parts at input i (a multiple of 64), loaded once for every row.
struct VnniXAt {
  __m512i hi, lo, start;
};
DIKKAT_VNNI_INLINE VnniXAt LoadVnniX(const VnniX& xp, int64_t i) {
  return {_mm512_loadu_si512(xp.hi + i), _mm512_loadu_si512(xp.lo + i),
          _mm512_loadu_si512(xp.start + i / 4)};
}

// The 16 int32 lane sums of one row's 64 weights at wr (two groups, 8 lanes
// each; masked: the first 32 only) times x's parts there.
template <bool kHalf>
DIKKAT_VNNI_INLINE __m512i VnniSums(const int8_t* wr, const VnniXAt& x) {
  const __m512i wv = kHalf ? _mm512_maskz_loadu_epi8(__mmask64{0xffffffff}, wr)
                           : _mm512_loadu_si512(wr);
  const __m512i u = _mm512_xor_si512(wv, _mm512_set1_epi8(static_cast<char>(0x80)));
  __m512i a = _mm512_dpbusd_epi32(x.start, u, x.hi);
  a = _mm512_slli_epi32(a, 8);
  return _mm512_dpbusd_epi32(a, x.lo, wv);
}

// One input row, output rows [o0, o1) as S far-apart streams (Int8Spread's
// order; the rest one stream), each next row prefetched as Int8Spread does.
template <int S>
DIKKAT_VNNI_KERNEL void VnniSpread(const VnniX& xp, const float* xs, const int8_t* w,
                                   const float* scales, const float* b, float* y, int64_t in,
                                   int64_t groups, int64_t o0, int64_t o1, bool l2) {
  const int64_t whole = in / 32, pairs = whole / 2;
  const int64_t part = (o1 - o0) / S;
  const int64_t ldw = part * in, lds = part * groups;
  // Lanes 0-7 take a pair's first group's scale, 8-15 its second's.
  const __m512i pair_lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t j = 0; j < part; ++j) {
    const int64_t o = o0 + j;
    const int8_t* wo = w + o * in;
    const float* so = scales + o * groups;
    __m512 acc[S];
#pragma GCC unroll 8
    for (int r = 0; r < S; ++r) {
      acc[r] = _mm512_setzero_ps();
      const char* next_scales = reinterpret_cast<const char*>(so + r * lds + groups);
      if (l2) {
        _mm_prefetch(next_scales, _MM_HINT_T1);
      } else {
        _mm_prefetch(next_scales, _MM_HINT_T0);
      }
    }
    for (int64_t c0 = 0; c0 < pairs; c0 += 8) {
      // The combined scales ws * xs of 16 groups (8 pairs) at once.
      const int64_t g0 = 2 * c0, ng = std::min<int64_t>(16, 2 * pairs - g0);
      const __mmask16 gm = ng >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << ng) - 1);
      const __m512 xsv = _mm512_maskz_loadu_ps(gm, xs + g0);
      __m512 cw[S];
#pragma GCC unroll 8
      for (int r = 0; r < S; ++r) {
        cw[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(gm, so + r * lds + g0), xsv);
      }
      const int64_t nc = ng / 2;
      for (int64_t k = 0; k < nc; ++k) {
        const int64_t i = (c0 + k) * 64;
        const VnniXAt xi = LoadVnniX(xp, i);
        const __m512i idx = _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(static_cast<int>(2 * k)));
#pragma GCC unroll 8
        for (int r = 0; r < S; ++r) {
          const int8_t* wr = wo + r * ldw;
          if (l2) {
            _mm_prefetch(reinterpret_cast<const char*>(wr + in + i), _MM_HINT_T1);
          } else {
            _mm_prefetch(reinterpret_cast<const char*>(wr + in + i), _MM_HINT_T0);
          }
          const __m512i sum = VnniSums<false>(wr + i, xi);
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_permutexvar_ps(idx, cw[r]),
                                   acc[r]);
        }
      }
    }
    if (whole % 2 != 0) {
      // One whole group left: its 32 weights in lanes 0-7, the scale there only.
      const int64_t g = whole - 1, i = g * 32;
      const VnniXAt xi = LoadVnniX(xp, i);
#pragma GCC unroll 8
      for (int r = 0; r < S; ++r) {
        const __m512i sum = VnniSums<true>(wo + r * ldw + i, xi);
        const __m512 c = _mm512_maskz_mov_ps(__mmask16{0x00ff},
                                             _mm512_set1_ps(so[r * lds + g] * xs[g]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), c, acc[r]);
      }
    }
    // A last group shorter than 32: scalar integer sums of xq (the same).
    float tail[S] = {};
    if (whole * 32 < in) {
#pragma GCC unroll 8
      for (int r = 0; r < S; ++r) {
        const int8_t* wr = wo + r * ldw;
        int32_t sum = 0;
        for (int64_t i = whole * 32; i < in; ++i) sum += int32_t{wr[i]} * int32_t{xp.xq[i]};
        tail[r] = static_cast<float>(sum) * xs[whole] * so[r * lds + whole];
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < S; ++r) {
      const float bias = b != nullptr ? b[o + r * part] : 0.0f;
      y[o + r * part] = (_mm512_reduce_add_ps(acc[r]) + tail[r]) + bias;
    }
  }
  if constexpr (S > 1) {
    VnniSpread<1>(xp, xs, w, scales, b, y, in, groups, o0 + S * part, o1, l2);
  }
}

// Output rows [o0, o1) of one input row (Int8RowsFn; xq is VnniQuantize's
// scratch; rows is 1, x and ldy unused). Always output row after output row
// in far-apart streams (SetOneRowStreams does not apply), as many as the
// float weights take (OneRowSpread(false): 4 on Zen 4), not the float32-x
// int8 stream's 2: with under half of its instructions a row this kernel is
// bound by memory as theirs are (on Zen 4, 4 streams against one measured
// 1.06x / 1.08x, 2 1.11x / 1.07x: level within the noise). Its prefetches go
// to L2 where PrefetchToL2 says so for one row (Zen 4: 1.09x / 1.12x against
// L1). Each row's sums are the same either way.
DIKKAT_VNNI_KERNEL void VnniOneRow(const float* /*x*/, const int16_t* xq, const float* xs,
                                   const int8_t* w, const float* scales, const float* b, float* y,
                                   int64_t /*rows*/, int64_t in, int64_t groups,
                                   int64_t /*ldy*/, int64_t o0, int64_t o1) {
  const VnniX xp = VnniParts(xq, in);
  const bool l2 = PrefetchToL2(1, 1, 1);
  switch (OneRowSpread(false)) {
    case 2: return VnniSpread<2>(xp, xs, w, scales, b, y, in, groups, o0, o1, l2);
    case 4: return VnniSpread<4>(xp, xs, w, scales, b, y, in, groups, o0, o1, l2);
    case 8: return VnniSpread<8>(xp, xs, w, scales, b, y, in, groups, o0, o1, l2);
    default: return VnniSpread<1>(xp, xs, w, scales, b, y, in, groups, o0, o1, l2);
  }
}

// CPUID leaf 7 (subleaf 0), ECX bit 11: AVX512_VNNI.
bool HasAvx512Vnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 11)) != 0;
}

const Int8RowInt16Kernels kVnniRow = {&VnniQuantize, &VnniOneRow, &VnniScratchInt16s};

}  // namespace

const Int8RowInt16Kernels* Avx512Int8RowInt16Kernels() { return &kRow; }

const Int8RowInt16Kernels* Avx512VnniInt8RowKernels() {
  static const bool supported = HasAvx512Vnni();
  return supported ? &kVnniRow : nullptr;
}

}  // namespace dikkat::model::kernels

#else  // not x86-64

namespace dikkat::model::kernels {
const Int8RowInt16Kernels* Avx512Int8RowInt16Kernels() { return nullptr; }
const Int8RowInt16Kernels* Avx512VnniInt8RowKernels() { return nullptr; }
}  // namespace dikkat::model::kernels

#endif
