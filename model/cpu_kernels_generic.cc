// The CPU kernels for any CPU: 8-lane vectors of GCC/Clang's generic vector
// extensions, which the compiler lowers to the build's baseline vector unit
// (two SSE2 registers per vector on x86-64, two NEON registers on aarch64)
// with no intrinsic and no target attribute. The bodies are
// cpu_kernels_body.inc; Ops is described in cpu_kernels_avx2.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/cpu_kernels_isa.h"

// The 32-byte vectors are passed between always-inline functions of this
// file only (internal linkage): the ABI note GCC gives for them on a
// baseline x86-64 build does not concern any interface.
#pragma GCC diagnostic ignored "-Wpsabi"

#define DIKKAT_KERNEL
#define DIKKAT_INLINE __attribute__((always_inline)) inline

namespace dikkat::model::kernels {
namespace {

typedef float F32x8 __attribute__((vector_size(32)));
typedef float F32x4 __attribute__((vector_size(16)));
typedef int32_t I32x4 __attribute__((vector_size(16)));
typedef int16_t I16x8 __attribute__((vector_size(16)));
typedef int16_t I16x4 __attribute__((vector_size(8)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));
typedef int32_t I32x8 __attribute__((vector_size(32)));
typedef uint16_t U16x8 __attribute__((vector_size(16)));
typedef int8_t I8x8 __attribute__((vector_size(8)));

struct Ops {
  using V = F32x8;
  static constexpr int kLanes = 8;
  static constexpr CpuIsa kIsa = CpuIsa::kGeneric;
  // Sized like AVX2's (16 registers of 8 lanes); on SSE2 each vector takes
  // two of its 16 registers, so the compiler spills a little at M >= 3.
  static constexpr int kMaxBlockRows = 4;
  static constexpr int kRowBlockRows = 4;  // all of a register block (see AVX-512's)
  static constexpr int kBlockRows[9] = {0, 4, 4, 2, 2, 1, 1, 1, 1};
  // Block after block over each task's slice of W (LinearRowsTiled is not
  // measured on this path).
  static constexpr bool kTiledRowBlocks = false;
  static constexpr int64_t kSpreadTilePrefetchBytes = 0;  // no spread tiles here
  static constexpr int64_t kSpreadTilePrefetchBytesFewRows = 0;
  static constexpr int64_t kSpreadTileInputPart = 0;
  static constexpr int kBf16PairMaxRows = 4;
  static constexpr int kBf16PairRows[5] = {0, 4, 2, 2, 1};
  // No one-row stream kernel for bfloat16; int8 blocks as the float ones.
  static constexpr int kStreamPrefetchBytes = 0;
  static constexpr int kInt8BlockRows[9] = {0, 4, 4, 2, 2, 1, 1, 1, 1};
  static constexpr bool kInt8ScalePerGroup = false;
  // int8 weights meet float32 x (Int8Block), not int16 (Int8X16Block).
  static constexpr bool kInt8Int16X = false;
  // Where W is prefetched into L2 only (PrefetchToL2): AVX2's ranges (not
  // measured on this path).
  static constexpr int kPrefetchL2Rows[2] = {1, 8};
  static constexpr int kInt8PrefetchL2Rows[2] = {2, 2};

  DIKKAT_INLINE static V Zero() { return V{}; }
  DIKKAT_INLINE static V Set1(float a) { return V{a, a, a, a, a, a, a, a}; }
  DIKKAT_INLINE static V Fma(V a, V b, V c) { return a * b + c; }
  DIKKAT_INLINE static V Add(V a, V b) { return a + b; }
  DIKKAT_INLINE static float Reduce(V a) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  }
  // y[j] = Reduce(v_j) + bias[j] (bias may be null) for a, b, c, d.
  DIKKAT_INLINE static void Reduce4(V a, V b, V c, V d, const float* bias, float* y) {
    const V v[4] = {a, b, c, d};
    for (int j = 0; j < 4; ++j) y[j] = bias != nullptr ? Reduce(v[j]) + bias[j] : Reduce(v[j]);
  }
  DIKKAT_INLINE static void Prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
  DIKKAT_INLINE static void PrefetchL2(const void* p) { __builtin_prefetch(p, 0, 2); }

  DIKKAT_INLINE static V Load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  DIKKAT_INLINE static V FromBits(U32x8 bits) {
    V v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  DIKKAT_INLINE static V Load(const uint16_t* p) {
    U16x8 h;
    std::memcpy(&h, p, sizeof h);
    return FromBits(__builtin_convertvector(h, U32x8) << 16);
  }
  // IEEE binary16 -> float32 exactly (normals, subnormals, inf, NaN), in
  // vector operations (one lane at a time, a float16 KV cache ran at
  // 0.72-0.87x float32's speed at 8-32 streams): the exponent rebased (+112,
  // or to 255 for infinities and NaN, payload kept); a subnormal or zero is
  // its mantissa x 2^-24, which float32 holds exactly; then the sign.
  DIKKAT_INLINE static V Load(const Half16* p) {
    U16x8 h;
    std::memcpy(&h, p, sizeof h);
    const U32x8 w = __builtin_convertvector(h, U32x8);
    const U32x8 magnitude = w & 0x7FFFu;
    const U32x8 shifted = magnitude << 13;
    const V normal = FromBits(shifted + (112u << 23));
    const V special = FromBits(shifted + (224u << 23));
    // The magnitude as a float (below 2^15: exact) for the compares.
    I32x8 signed_magnitude;
    std::memcpy(&signed_magnitude, &magnitude, sizeof signed_magnitude);
    const V m = __builtin_convertvector(signed_magnitude, V);
    const V subnormal = m * 5.9604644775390625e-8f;  // 2^-24
    const V v = Select(Less(m, Set1(1024.0f)), subnormal,
                       Select(Less(m, Set1(31744.0f)), normal, special));  // 0x400, 0x7C00
    U32x8 bits;
    std::memcpy(&bits, &v, sizeof bits);
    return FromBits(bits | ((w & 0x8000u) << 16));
  }
  template <typename T>
  DIKKAT_INLINE static V LoadN(const T* p, int n) {
    T buf[kLanes] = {};
    std::memcpy(buf, p, sizeof(T) * n);
    return Load(static_cast<const T*>(buf));
  }
  // Widened in 16-byte steps (int8 -> int16 -> int32 -> float): GCC 12
  // converts 8 int8 straight to the 32-byte float vector one byte at a time
  // on SSE2 (sign extends and scalar inserts); this way it is unpacks and
  // compares (as on NEON, widening moves).
  DIKKAT_INLINE static V LoadInt8(const int8_t* p, V scale) {
    I8x8 raw;
    std::memcpy(&raw, p, sizeof raw);
    const I16x8 wide = __builtin_convertvector(raw, I16x8);
    I16x4 quarters[2];
    std::memcpy(quarters, &wide, sizeof quarters);
    const F32x4 halves[2] = {
        __builtin_convertvector(__builtin_convertvector(quarters[0], I32x4), F32x4),
        __builtin_convertvector(__builtin_convertvector(quarters[1], I32x4), F32x4)};
    V v;
    std::memcpy(&v, halves, sizeof v);
    return v * scale;
  }
  DIKKAT_INLINE static V LoadInt8N(const int8_t* p, int n, V scale) {
    int8_t buf[kLanes] = {};
    std::memcpy(buf, p, n);
    return LoadInt8(buf, scale);
  }

  // For the elementwise kernels (norms, activations, softmax). Max and Min
  // return b where either is NaN (as x86's maxps / minps), so Max(lo, x)
  // keeps a NaN x.
  DIKKAT_INLINE static V Mul(V a, V b) { return a * b; }
  DIKKAT_INLINE static V Sub(V a, V b) { return a - b; }
  DIKKAT_INLINE static V Div(V a, V b) { return a / b; }
  DIKKAT_INLINE static V Max(V a, V b) { return Select(Less(b, a), a, b); }
  DIKKAT_INLINE static V Min(V a, V b) { return Select(Less(a, b), a, b); }
  // Comparisons and selects as the vector unit has them. GCC 12 lowers a
  // comparison of these 32-byte vectors, and `mask ? a : b` on them, for
  // SSE2 to a scalar compare (or select) and shuffles per lane; made of
  // 16-byte halves (one cmpps each, as one NEON compare each) and bitwise
  // operations, the SSE2 build's GELU went from 4.1 to 1.47 ms for [512,
  // 3072] (AVX2's 0.49; AMD EPYC Zen 4, two threads).
  template <typename Compare>
  DIKKAT_INLINE static I32x8 CompareHalves(V a, V b, Compare compare) {
    F32x4 a2[2], b2[2];
    std::memcpy(a2, &a, sizeof a2);
    std::memcpy(b2, &b, sizeof b2);
    const I32x4 m2[2] = {compare(a2[0], b2[0]), compare(a2[1], b2[1])};
    I32x8 m;
    std::memcpy(&m, m2, sizeof m);
    return m;
  }
  DIKKAT_INLINE static I32x8 Less(V a, V b) {
    return CompareHalves(a, b, [](F32x4 x, F32x4 y) { return x < y; });
  }
  DIKKAT_INLINE static I32x8 LessOrEqual(V a, V b) {
    return CompareHalves(a, b, [](F32x4 x, F32x4 y) { return x <= y; });
  }
  // mask ? a : b lane by lane, for a comparison's mask (all bits or none).
  DIKKAT_INLINE static V Select(I32x8 mask, V a, V b) {
    U32x8 m, ab, bb;
    std::memcpy(&m, &mask, sizeof m);
    std::memcpy(&ab, &a, sizeof ab);
    std::memcpy(&bb, &b, sizeof bb);
    return FromBits((m & ab) | (~m & bb));
  }
  // 2^n for whole numbers n in [-126, 127].
  DIKKAT_INLINE static V Pow2(V n) {
    const I32x8 e = __builtin_convertvector(n, I32x8) + 127;
    U32x8 bits;
    std::memcpy(&bits, &e, sizeof bits);
    return FromBits(bits << 23);
  }
  // x >= 0 ? a : b, lane by lane (NaN x: b).
  DIKKAT_INLINE static V SelectNonNegative(V x, V a, V b) { return Select(LessOrEqual(Zero(), x), a, b); }
  DIKKAT_INLINE static void Store(float* p, V a) { std::memcpy(p, &a, sizeof a); }
  DIKKAT_INLINE static void StoreN(float* p, V a, int n) { std::memcpy(p, &a, sizeof(float) * n); }
  DIKKAT_INLINE static void LoadBf16Pair(const uint16_t* p, V& even, V& odd) {
    U32x8 raw;
    std::memcpy(&raw, p, sizeof raw);
    even = FromBits(raw << 16);
    odd = FromBits(raw & 0xFFFF0000u);
  }
};

#include "model/cpu_kernels_body.inc"

}  // namespace

const KernelTable& GenericKernels() { return kTable; }

}  // namespace dikkat::model::kernels
