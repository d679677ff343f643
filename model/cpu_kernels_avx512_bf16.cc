// bfloat16 weights at a few input rows with AVX512_BF16's dot product
// (vdpbf16ps: 32 bfloat16 products summed pairwise into 16 float32 lanes,
// one instruction; AMD Zen 4 and later, Intel Cooper Lake and Sapphire
// Rapids and later). x stays float32 to 16 significant bits: it is split
// into two bfloat16 parts, hi = x rounded to bfloat16 and lo = (x - hi)
// rounded to bfloat16, so that |x - hi - lo| <= 2^-17 |x|, and each weight
// vector meets both: two instructions per 32 weights where widening the
// weights to float32 takes four (LinearBlockBf16Pairs). bfloat16 products
// are exact in float32; the instruction adds them with round-to-nearest and
// flushes subnormals. Results agree with the float32-x kernels to ~2^-17 of
// the magnitudes summed (cpu_kernels_test holds every bfloat16 path to 1e-5).
//
// Only for CPUs whose CPUID says AVX512_BF16 (Avx512Bf16DotKernels); the
// functions carry that target, nothing else in the binary does.
#include <cstdint>

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

#define DIKKAT_BF16_KERNEL \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define DIKKAT_BF16_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"), always_inline)) inline

namespace dikkat::model::kernels {
namespace {

// Output rows per block for M input rows: R*M accumulators, R weight
// vectors and 2M x vectors in the 32 zmm registers.
constexpr int kMaxRows = 4;
constexpr int kBlockRows[kMaxRows + 1] = {0, 8, 8, 6, 4};

DIKKAT_BF16_INLINE __m512 Widen(__m256bh h) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(h)), 16));
}

// 16 values: hi and lo parts. Where hi is not finite (x infinite, NaN or
// rounded up past the largest bfloat16) lo is 0, so that hi alone carries x.
DIKKAT_BF16_INLINE void Split16(__m512 x, __m256i* hi, __m256i* lo) {
  const __m256bh h = _mm512_cvtneps_pbh(x);
  const __m512 hf = Widen(h);
  const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(hf), _mm512_set1_ps(3.4e38f),
                                              _CMP_LE_OQ);
  *hi = reinterpret_cast<__m256i>(h);
  *lo = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_sub_ps(finite, x, hf)));
}

DIKKAT_BF16_KERNEL void SplitBf16(const float* x, uint16_t* hi, uint16_t* lo, int64_t n) {
  int64_t i = 0;
  __m256i h, l;
  for (; i + 16 <= n; i += 16) {
    Split16(_mm512_loadu_ps(x + i), &h, &l);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), h);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i), l);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    Split16(_mm512_maskz_loadu_ps(m, x + i), &h, &l);
    _mm256_mask_storeu_epi16(hi + i, m, h);
    _mm256_mask_storeu_epi16(lo + i, m, l);
  }
}

// 32 bfloat16 values from p, the first n of them where n < 32 (the rest 0).
template <bool kTail>
DIKKAT_BF16_INLINE __m512bh Load32(const uint16_t* p, int n) {
  const __m512i v = kTail ? _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << n) - 1), p)
                          : _mm512_loadu_si512(p);
  return reinterpret_cast<__m512bh>(v);
}

template <int M, int R, bool kTail>
DIKKAT_BF16_INLINE void DotStep(const uint16_t* xh, const uint16_t* xl, const uint16_t* wo,
                                int64_t in, int64_t i, int n, __m512 (&acc)[R][M]) {
  __m512bh wv[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // The next block's rows, one cache line each per step: R short streams
    // (1.5-6 KiB for GPT-2-small) that the hardware prefetcher picks up late.
    if (!kTail) _mm_prefetch(reinterpret_cast<const char*>(wo + (R + r) * in + i), _MM_HINT_T0);
    wv[r] = Load32<kTail>(wo + r * in + i, n);
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
    const __m512bh h = Load32<kTail>(xh + m * in + i, n);
    const __m512bh l = Load32<kTail>(xl + m * in + i, n);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc[r][m] = _mm512_dpbf16_ps(acc[r][m], wv[r], h);
      acc[r][m] = _mm512_dpbf16_ps(acc[r][m], wv[r], l);
    }
  }
}

template <int M, int R>
DIKKAT_BF16_KERNEL void DotBlock(const uint16_t* xh, const uint16_t* xl, const uint16_t* w,
                                 const float* b, float* y, int64_t in, int64_t ldy, int64_t o) {
  __m512 acc[R][M];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  }
  const uint16_t* wo = w + o * in;
  int64_t i = 0;
  for (; i + 32 <= in; i += 32) DotStep<M, R, false>(xh, xl, wo, in, i, 0, acc);
  if (i < in) DotStep<M, R, true>(xh, xl, wo, in, i, static_cast<int>(in - i), acc);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float bias = b != nullptr ? b[o + r] : 0.0f;
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) y[m * ldy + o + r] = _mm512_reduce_add_ps(acc[r][m]) + bias;
  }
}

template <int M>
DIKKAT_BF16_KERNEL void DotRows(const uint16_t* xh, const uint16_t* xl, const uint16_t* w,
                                const float* b, float* y, int64_t in, int64_t ldy, int64_t o0,
                                int64_t o1) {
  constexpr int R = kBlockRows[M];
  int64_t o = o0;
  for (; o + R <= o1; o += R) DotBlock<M, R>(xh, xl, w, b, y, in, ldy, o);
  for (; o < o1; ++o) DotBlock<M, 1>(xh, xl, w, b, y, in, ldy, o);
}

void LinearBf16Dot(const uint16_t* xh, const uint16_t* xl, const uint16_t* w, const float* b,
                   float* y, int64_t rows, int64_t in, int64_t ldy, int64_t o0, int64_t o1) {
  switch (rows) {
    case 1: return DotRows<1>(xh, xl, w, b, y, in, ldy, o0, o1);
    case 2: return DotRows<2>(xh, xl, w, b, y, in, ldy, o0, o1);
    case 3: return DotRows<3>(xh, xl, w, b, y, in, ldy, o0, o1);
    default: return DotRows<4>(xh, xl, w, b, y, in, ldy, o0, o1);
  }
}

// CPUID leaf 7 sub-leaf 1, EAX bit 5 (GCC 12 and clang 14 name it
// differently in __builtin_cpu_supports).
bool HasAvx512Bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
}

const Bf16DotKernels kBf16Dot = {kMaxRows, &SplitBf16, &LinearBf16Dot};

}  // namespace

const Bf16DotKernels* Avx512Bf16DotKernels() {
  static const bool supported = HasAvx512Bf16();
  return supported ? &kBf16Dot : nullptr;
}

}  // namespace dikkat::model::kernels

#else  // not x86-64

namespace dikkat::model::kernels {
const Bf16DotKernels* Avx512Bf16DotKernels() { return nullptr; }
}  // namespace dikkat::model::kernels

#endif
