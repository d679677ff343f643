// The CPU kernels for AVX-512 (avx512f + avx512bw + avx512vl): 16 float32
// lanes in 32 zmm registers, masked loads for row tails. The bodies are
// cpu_kernels_body.inc; only the vector operations are here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/cpu_kernels_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics (_mm512_cvtepu16_epi32 and friends) start from
// _mm512_undefined_*() and trip -Wuninitialized falsely (GCC bug 105593).
// (clang has no -Wmaybe-uninitialized and warns about the unknown group.)
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define DIKKAT_KERNEL __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define DIKKAT_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"), always_inline)) inline

namespace dikkat::model::kernels {
namespace {

struct Ops {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr CpuIsa kIsa = CpuIsa::kAvx512;
  // Output rows per register block for M input rows: R*M accumulators, R
  // weight vectors and one x vector in the 32 zmm registers (R*M + R + 1 <=
  // 32); each weight vector loaded serves M FMAs and each x vector R.
  static constexpr int kMaxBlockRows = 8;
  // Calls of more rows than this run as blocks of this many (tile by tile,
  // kTiledRowBlocks; the rest from the cache): 7-8 rows as 6 + 1-2, 16 as
  // 6 + 6 + 4. The first block streams W from memory, and a 6-row block
  // (4 output rows a register block) does so faster than an 8-row one
  // (3 output rows). Block after block over each task's slice of W, the
  // order before the tiles, against blocks of 8, paired on a Zen 5 EPYC
  // (BM_RowBlockRowsPaired): a 16-token prefill fp32 1.08x / 1.08x, int8
  // 1.10x / 1.12x; an 8-sequence decode step fp32 1.08x / 0.98x, int8
  // 1.02x / 1.03x, bf16 1.06x / 1.03x; 32 sequences fp32 1.03x / 1.05x, int8
  // 1.06x / 1.10x. Blocks of 4: 1.01-1.09x. Same bits.
  static constexpr int kRowBlockRows = 6;
  static constexpr int kBlockRows[9] = {0, 8, 8, 6, 5, 4, 4, 3, 3};
  // More rows than one block: tile by tile through the blocks of 6
  // (LinearRowsTiled). Against block after block, paired on a Zen 5 EPYC
  // (BM_TiledRowBlocksPaired, 2-3 rounds), a decode step of 8 sequences:
  // fp32 1.08-1.10x, bf16 1.08-1.09x, fp16 1.08x; 16: 1.00-1.10x; a prefill
  // of 8 / 16 tokens 1.03-1.10x / 0.99-1.10x; 32 rows level (0.97-1.05x).
  // int8 (Int8RowsTiled, two rounds): 8 sequences 1.03x, 16 1.11-1.14x, 32
  // 1.03-1.04x; prefill of 8 / 16 / 32 tokens 1.02-1.03x / 1.04-1.06x /
  // 1.00-1.04x. (With blocks of 8, 3 output rows a register block, tiles
  // measured level or slower here.)
  static constexpr bool kTiledRowBlocks = true;
  // How far ahead of each stream LinearRowsSpreadTiled's row blocks
  // prefetch (each its share): 2 KiB. Paired on an Intel Xeon
  // (BM_SpreadTilesPaired, float32, the decode step at 1 / 4 / 8 rows
  // against the routing before, with the first block prefetching alone): 1
  // KiB 0.98x / 1.11-1.12x / 1.10-1.11x, 2 KiB 1.03x / 1.10-1.12x / 1.10x, 3
  // KiB 1.02-1.03x / 1.11-1.12x / 1.07-1.08x.
  static constexpr int64_t kSpreadTilePrefetchBytes = 2048;
  static constexpr int64_t kSpreadTilePrefetchBytesFewRows = 2048;  // (1 KiB: 0.98x at 1 row)
  // The tiles over all of the input at once (input parts unmeasured here).
  static constexpr int64_t kSpreadTileInputPart = 0;
  // bfloat16 pairs: R*M accumulators + 2R weight vectors + 2 x vectors <= 32.
  static constexpr int kBf16PairMaxRows = 4;
  static constexpr int kBf16PairRows[5] = {0, 8, 6, 5, 4};
  // One input row where OneRowStreams() (cpu_kernels_isa.h: CPUs that run
  // 512-bit operations in halves): bfloat16 weights not taken by the
  // AVX512_BF16 dot products go through LinearRowsBf16Stream (as on AVX2),
  // float32 weights through LinearRowsF32Spread and int8 weights through
  // Int8Block, one output row after another. Elsewhere (and at more rows)
  // int8 blocks as the float ones.
  static constexpr int kStreamPrefetchBytes = 1024;
  static constexpr int kInt8BlockRows[9] = {0, 8, 8, 6, 5, 4, 4, 3, 3};
  static constexpr bool kInt8ScalePerGroup = false;
  // int8 weights meet float32 x (Int8Block), not int16 (Int8X16Block).
  static constexpr bool kInt8Int16X = false;
  // Calls of this many input rows prefetch W into L2 only (PrefetchToL2,
  // cpu_kernels_isa.h; measured on Zen 4): float weights at 1-8 rows, int8
  // at 2-3.
  static constexpr int kPrefetchL2Rows[2] = {1, 8};
  static constexpr int kInt8PrefetchL2Rows[2] = {2, 3};

  static __mmask16 Mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }

  DIKKAT_INLINE static V Zero() { return _mm512_setzero_ps(); }
  DIKKAT_INLINE static V Set1(float a) { return _mm512_set1_ps(a); }
  DIKKAT_INLINE static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  DIKKAT_INLINE static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  DIKKAT_INLINE static float Reduce(V a) { return _mm512_reduce_add_ps(a); }
  // y[j] = Reduce(v_j) + bias[j] (bias may be null) for the four vectors
  // a, b, c, d, with the additions Reduce makes, pair for pair (the eight
  // upper lanes onto the lower, then four, two, one), so the same bits; a
  // third of the instructions of four Reduce calls.
  DIKKAT_INLINE static void Reduce4(V a, V b, V c, V d, const float* bias, float* y) {
    // [a + a>>8 | b + b>>8] in 128-bit blocks: a's lanes j and j + 8 in
    // blocks 0-1, b's in blocks 2-3; the same for c, d.
    const V ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    const V cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    // Block k: vector k's lanes j + (j + 4) of the above (j < 4).
    const V q =
        _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    // Within each block: lanes j + (j ^ 2), then + (j ^ 1): every lane the sum.
    const V h = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));
    const V t = _mm512_add_ps(h, _mm512_permute_ps(h, 0xB1));
    const __m512i firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    __m128 sums = _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, t));
    if (bias != nullptr) sums = _mm_add_ps(sums, _mm_loadu_ps(bias));
    _mm_storeu_ps(y, sums);
  }
  DIKKAT_INLINE static void Prefetch(const void* p) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  }
  DIKKAT_INLINE static void PrefetchL2(const void* p) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
  }

  DIKKAT_INLINE static V Load(const float* p) { return _mm512_loadu_ps(p); }
  DIKKAT_INLINE static V Load(const uint16_t* p) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  DIKKAT_INLINE static V Load(const Half16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // The first n < 16 elements, the rest zero: masked loads, no scalar tail.
  DIKKAT_INLINE static V LoadN(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  DIKKAT_INLINE static V LoadN(const uint16_t* p, int n) {
    const __m256i raw = _mm256_maskz_loadu_epi16(Mask(n), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  DIKKAT_INLINE static V LoadN(const Half16* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(Mask(n), p));
  }
  // 16 int8 weights widened to float32 times their group's scale: the matrix
  // is read from memory at one byte per weight.
  DIKKAT_INLINE static V LoadInt8(const int8_t* p, V scale) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)), scale);
  }
  DIKKAT_INLINE static V LoadInt8N(const int8_t* p, int n, V scale) {
    const __m128i raw = _mm_maskz_loadu_epi8(Mask(n), p);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)), scale);
  }

  // For the elementwise kernels (norms, activations, softmax). Max and Min
  // return b where either is NaN (as maxps / minps), so Max(lo, x) keeps a
  // NaN x.
  DIKKAT_INLINE static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  DIKKAT_INLINE static V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  DIKKAT_INLINE static V Div(V a, V b) { return _mm512_div_ps(a, b); }
  DIKKAT_INLINE static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  DIKKAT_INLINE static V Min(V a, V b) { return _mm512_min_ps(a, b); }
  // 2^n for whole numbers n in [-126, 127].
  DIKKAT_INLINE static V Pow2(V n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  // x >= 0 ? a : b, lane by lane (NaN x: b).
  DIKKAT_INLINE static V SelectNonNegative(V x, V a, V b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), b, a);
  }
  DIKKAT_INLINE static void Store(float* p, V a) { _mm512_storeu_ps(p, a); }
  DIKKAT_INLINE static void StoreN(float* p, V a, int n) { _mm512_mask_storeu_ps(p, Mask(n), a); }
  // 32 bfloat16 values: the even-indexed ones as float32 in `even`, the odd
  // ones in `odd`, without a cross-lane shuffle.
  DIKKAT_INLINE static void LoadBf16Pair(const uint16_t* p, V& even, V& odd) {
    const __m512i raw = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
    odd = _mm512_castsi512_ps(_mm512_maskz_mov_epi16(0xAAAAAAAAu, raw));
  }
};

#include "model/cpu_kernels_body.inc"

}  // namespace

const KernelTable& Avx512Kernels() { return kTable; }

}  // namespace dikkat::model::kernels

#else  // not x86-64: never selected (IsaSupported is false)

namespace dikkat::model::kernels {
const KernelTable& Avx512Kernels() { return GenericKernels(); }
}  // namespace dikkat::model::kernels

#endif
