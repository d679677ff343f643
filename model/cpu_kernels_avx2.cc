// The CPU kernels for AVX2 + FMA + F16C (Intel Haswell and later, AMD Zen 1-3
// and every x86 server since 2015): 8 float32 lanes in 16 ymm registers.
// The bodies are cpu_kernels_body.inc; only the vector operations are here.
//
// What Ops provides (the same for every ISA file):
//   V, kLanes, kIsa; kMaxBlockRows, kRowBlockRows (input rows per row block, <=
//   kMaxBlockRows) and kBlockRows[M] (output rows per
//   register block for M input rows), kTiledRowBlocks (the loop order for
//   more rows than one block), kSpreadTilePrefetchBytes and
//   kSpreadTilePrefetchBytesFewRows (the far-apart tiles' prefetch distance
//   beyond one row block and within it), kBf16PairMaxRows and kBf16PairRows[M];
//   kStreamPrefetchBytes (0: no one-row stream kernel for bfloat16),
//   kInt8BlockRows[M], kInt8ScalePerGroup;
//   Zero, Set1, Fma(a, b, c) = a * b + c, Add, Reduce (sum of lanes),
//   Reduce4(a, b, c, d, bias, y) (four Reduce sums, bit for bit, plus bias, to
//   y[0..3]), Prefetch;
//   Load(p) of kLanes float32 / bfloat16 / float16 values as float32, LoadN(p,
//   n) of the first n < kLanes (the rest zero, nothing read past p + n);
//   LoadInt8(p, scale) / LoadInt8N; Store, StoreN; LoadBf16Pair(p, even, odd)
//   of 2 * kLanes bfloat16 values.
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

#define DIKKAT_KERNEL __attribute__((target("avx2,fma,f16c")))
#define DIKKAT_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace dikkat::model::kernels {
namespace {

struct Ops {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr CpuIsa kIsa = CpuIsa::kAvx2;
  // 16 ymm registers: R*M accumulators + R weight vectors + 1 x vector <= 16.
  // Blocks of up to 4 input rows (M = 4: 12 accumulators, 7 loads per 12
  // FMAs); more rows reuse the task's slice of W from the L2 cache.
  static constexpr int kMaxBlockRows = 4;
  static constexpr int kRowBlockRows = 4;  // all of a register block (see AVX-512's)
  static constexpr int kBlockRows[9] = {0, 6, 4, 3, 3, 2, 2, 1, 1};
  // More rows than one block: tiles of 3 output rows through every block
  // (LinearRowsTiled; 1.04-1.16x at 8-16 rows on a Zen 3 EPYC).
  static constexpr bool kTiledRowBlocks = true;
  // How far ahead of each stream LinearRowsSpreadTiled's row blocks
  // prefetch: 512 bytes for up to kRowBlockRows input rows (a tile of one
  // block, bound by the memory), 2 KiB (as AVX-512's) for more. Paired on a
  // Zen 3 EPYC (session 34, BM_SpreadTilePrefetchPaired, decode steps
  // against 2 KiB): float32 at 1 row 256 B 1.09x, 512 B 1.12x / 1.13x, 768 B
  // 1.10x, 1 KiB 1.05-1.09x (four rounds), 1.5 KiB 1.01x; 512 B at 2 / 3 / 4
  // rows 1.11x / 1.14x / 1.11x, at 6 1.01x, at 8 / 12 0.95x / 0.96x;
  // bfloat16 and float16 (widened) 1.10x / 1.07x at 1 row, 1.07x / 1.10x at
  // 4, 0.94x at 8. A 16-token prefill measured level at 512 B-64 KiB, into
  // L1 or L2 (0.96-1.01x), and 8 rows at 1-64 KiB (0.95-1.03x).
  static constexpr int64_t kSpreadTilePrefetchBytes = 2048;
  static constexpr int64_t kSpreadTilePrefetchBytesFewRows = 512;
  // float32 tiles of several row blocks in parts of 768 input values
  // (LinearRowsSpreadTiledParts, cpu_kernels_body.inc): GPT-2-small's MLP
  // projection (3072 wide) in 4, its tile's 3 rows 9 KiB of L1 a part
  // instead of 36. Paired on a Zen 3 EPYC (BM_SpreadTileInputPartPaired,
  // against whole rows; session 36's three rounds, 8 / 12 / 16 sequences
  // and a 16-token prefill): 1.03 / 1.03 / 1.05 / 1.04x, 1.04 / - / 0.99 /
  // 1.04x, 1.02 / - / 1.03 / 1.06x (parts of 384-1024 values 1.01-1.06x);
  // session 37, this kernel: 1.00 / 1.03 / 1.02 / 1.03x (512 and 1024
  // values 0.98-1.08x); a standalone probe of that projection alone
  // 1.04-1.18x at 8-16 rows. The 768-wide linears measured level or slower
  // in parts (0.92-1.02x), so inputs of 768 or less stay whole; bfloat16 and float16 (3 rows 18 KiB)
  // measured 0.96-1.00x in parts of 512-768 and have no parts. Other
  // AVX2-only CPUs (Zen 2, Intel's; L1d of 32-48 KiB) take 768 unmeasured.
  static constexpr int64_t kSpreadTileInputPart = 768;
  // bfloat16 pairs: R*M accumulators + 2R weight vectors + 2 x vectors <= 16.
  static constexpr int kBf16PairMaxRows = 4;
  static constexpr int kBf16PairRows[5] = {0, 4, 3, 2, 2};
  // One input row of bfloat16 weights: output rows one after another (one
  // sequential stream per task), prefetched this many bytes ahead.
  static constexpr int kStreamPrefetchBytes = 1024;
  // int8: output rows per block. One input row is bound by memory: 3
  // interleaved rows (3 short streams) read faster than 6 on a Zen 3 EPYC.
  static constexpr int kInt8BlockRows[9] = {0, 3, 4, 3, 3, 2, 2, 1, 1};
  static constexpr bool kInt8ScalePerGroup = true;
  // int8 x int16 (Int8X16Block): output rows per block for M input rows.
  static constexpr bool kInt8Int16X = true;
  static constexpr int kInt8X16BlockRows[9] = {0, 3, 3, 2, 2, 1, 1, 1, 1};
  static constexpr int kInt8StreamPrefetchBytes = 1024;
  // Calls of this many input rows prefetch W into L2 only (PrefetchToL2,
  // cpu_kernels_isa.h; measured on Zen 4): float weights at 1-8 rows, int8
  // at 2.
  static constexpr int kPrefetchL2Rows[2] = {1, 8};
  static constexpr int kInt8PrefetchL2Rows[2] = {2, 2};

  DIKKAT_INLINE static V Zero() { return _mm256_setzero_ps(); }
  DIKKAT_INLINE static V Set1(float a) { return _mm256_set1_ps(a); }
  DIKKAT_INLINE static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  DIKKAT_INLINE static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  DIKKAT_INLINE static float Reduce(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // y[j] = Reduce(v_j) + bias[j] (bias may be null) for a, b, c, d.
  DIKKAT_INLINE static void Reduce4(V a, V b, V c, V d, const float* bias, float* y) {
    const V v[4] = {a, b, c, d};
    for (int j = 0; j < 4; ++j) y[j] = bias != nullptr ? Reduce(v[j]) + bias[j] : Reduce(v[j]);
  }
  DIKKAT_INLINE static void Prefetch(const void* p) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  }
  DIKKAT_INLINE static void PrefetchL2(const void* p) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
  }

  DIKKAT_INLINE static V Load(const float* p) { return _mm256_loadu_ps(p); }
  DIKKAT_INLINE static V Load(const uint16_t* p) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
  DIKKAT_INLINE static V Load(const Half16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // Tails (n < 8): copied into a zeroed vector's worth first, so that nothing
  // past p + n is read. Once per row, not in the inner loop.
  template <typename T>
  DIKKAT_INLINE static V LoadN(const T* p, int n) {
    alignas(32) T buf[kLanes] = {};
    std::memcpy(buf, p, sizeof(T) * n);
    return Load(static_cast<const T*>(buf));
  }
  // 8 int8 weights widened to float32 times their group's scale.
  DIKKAT_INLINE static V LoadInt8(const int8_t* p, V scale) {
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw)), scale);
  }
  DIKKAT_INLINE static V LoadInt8N(const int8_t* p, int n, V scale) {
    alignas(16) int8_t buf[16] = {};
    std::memcpy(buf, p, n);
    return LoadInt8(buf, scale);
  }
  // Integer vectors for the int8 x int16 kernel.
  using IV = __m256i;
  // 16 int8 weights sign-extended to int16.
  DIKKAT_INLINE static IV LoadInt8AsInt16(const int8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  DIKKAT_INLINE static IV LoadInt16(const int16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  // 8 int32 lanes: a[2j] * b[2j] + a[2j + 1] * b[2j + 1] (vpmaddwd).
  DIKKAT_INLINE static IV MulAddPairs(IV a, IV b) { return _mm256_madd_epi16(a, b); }
  DIKKAT_INLINE static IV AddInt32(IV a, IV b) { return _mm256_add_epi32(a, b); }
  DIKKAT_INLINE static V Int32ToFloat(IV a) { return _mm256_cvtepi32_ps(a); }
  DIKKAT_INLINE static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  // For the elementwise kernels (norms, activations, softmax). Max and Min
  // return b where either is NaN (as maxps / minps), so Max(lo, x) keeps a
  // NaN x.
  DIKKAT_INLINE static V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  DIKKAT_INLINE static V Div(V a, V b) { return _mm256_div_ps(a, b); }
  DIKKAT_INLINE static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  DIKKAT_INLINE static V Min(V a, V b) { return _mm256_min_ps(a, b); }
  // 2^n for whole numbers n in [-126, 127].
  DIKKAT_INLINE static V Pow2(V n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // x >= 0 ? a : b, lane by lane (NaN x: b).
  DIKKAT_INLINE static V SelectNonNegative(V x, V a, V b) {
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
  }

  DIKKAT_INLINE static void Store(float* p, V a) { _mm256_storeu_ps(p, a); }
  DIKKAT_INLINE static void StoreN(float* p, V a, int n) {
    alignas(32) float buf[kLanes];
    _mm256_store_ps(buf, a);
    std::memcpy(p, buf, sizeof(float) * n);
  }
  // 16 bfloat16 values: the even-indexed ones as float32 in `even`, the odd
  // ones in `odd` (shift and mask: no cross-lane shuffle).
  DIKKAT_INLINE static void LoadBf16Pair(const uint16_t* p, V& even, V& odd) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    odd = _mm256_castsi256_ps(
        _mm256_and_si256(raw, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

#include "model/cpu_kernels_body.inc"

}  // namespace

const KernelTable& Avx2Kernels() { return kTable; }

}  // namespace dikkat::model::kernels

#else  // not x86-64: never selected (IsaSupported is false)

namespace dikkat::model::kernels {
const KernelTable& Avx2Kernels() { return GenericKernels(); }
}  // namespace dikkat::model::kernels

#endif
