// Internal to the CPU kernels (cpu_kernels.cc): the per-ISA row kernels on
// raw pointers, one table per instruction set (cpu_isa.h). Each table is
// defined in its own file from the ISA-independent bodies in
// cpu_kernels_body.inc, compiled with that ISA's target attributes:
// cpu_kernels_avx512.cc, cpu_kernels_avx2.cc, cpu_kernels_generic.cc.
// cpu_kernels.cc owns tensors, routing and the split into tasks; a table's
// functions compute one task's output rows [o0, o1) and never allocate.
// Torch-free.
#ifndef DIKKAT_MODEL_CPU_KERNELS_ISA_H_
#define DIKKAT_MODEL_CPU_KERNELS_ISA_H_

#include <cstdint>
#include <vector>

#include "model/cpu_isa.h"

namespace dikkat::model::kernels {

// IEEE half stored as raw bits (a distinct type from bfloat16's uint16_t).
struct Half16 {
  uint16_t bits;
};
using BFloat16Bits = uint16_t;

// y[m, o] = x[m, :] . W[o, :] + b[o] for m < rows, o in [o0, o1); x [rows,
// in] float32, W [out, in], y with row stride ldy. `xp` is x reordered by
// split_even_odd, or null; kernels that do not use it ignore it.
template <typename W>
using LinearRowsFn = void (*)(const float* x, const float* xp, const W* w, const float* b,
                              float* y, int64_t rows, int64_t in, int64_t ldy, int64_t o0,
                              int64_t o1);

// The same for int8 W with a float32 scale per row and group of 32 inputs
// (linear_weight.h): scales [out, groups]. `xq` and `xs` are x quantized by
// the table's quantize_x_int16 (null where it has none; kernels that do not
// use them ignore them).
using Int8RowsFn = void (*)(const float* x, const int16_t* xq, const float* xs, const int8_t* w,
                            const float* scales, const float* b, float* y, int64_t rows,
                            int64_t in, int64_t groups, int64_t ldy, int64_t o0, int64_t o1);

// x [rows, in] float32 -> xq [rows, in] int16 and xs [rows, groups] float32,
// per row and group of 32 inputs (the weights' groups; the last may be
// shorter): xs = absmax / 32767 (0 for an all-zero group), xq = x / xs
// rounded to nearest, ties to even (0 where 32767 / absmax overflows, absmax
// below ~1e-34; NaN xs for a group with a NaN or infinity).
using QuantizeXInt16Fn = void (*)(const float* x, int16_t* xq, float* xs, int64_t rows,
                                  int64_t in, int64_t groups);

// dst[o - o0, :] = dequant(W[o, :]) for o in [o0, o1).
using DequantizeRowsFn = void (*)(const int8_t* w, const float* scales, int64_t in,
                                  int64_t groups, int64_t o0, int64_t o1, float* dst);

// One decode query per sequence against the paged cache. With whole_rows,
// for the sequences t in [t0, t1), all heads of each reading whole cache
// rows; else for the (sequence, KV head) pairs t in [t0, t1) (t = sequence *
// kv_heads + kv head), each position's rows of the head prefetched
// prefetch_rows positions early (0: none; at most block_size). Both give the
// same bits.
struct DecodeAttentionArgs {
  const float* q;  // [B, Hq, D], pre-scaled by 1/sqrt(D)
  const void* k_cache;  // [slots, Hkv, D] of the cache dtype
  const void* v_cache;
  float* out;  // [B, Hq, D]
  const std::vector<const std::vector<int32_t>*>* tables;
  const std::vector<int64_t>* lens;
  int64_t block_size, window, hq, hkv, d;
  bool whole_rows;
  int64_t prefetch_rows;
};
using DecodeAttentionFn = void (*)(const DecodeAttentionArgs& args, int64_t t0, int64_t t1);

// A prompt's (or a chunk's) float32 attention with the keys in hand, for
// the tasks t in [t0, t1): t = block * hq + head counted from the last block
// of query rows (the longest, causal), blocks of prompt_rows queries (or head
// after head: heads_outer below). Query
// i (i < len) is at position start + i; causal, it sees the keys at
// positions [max(0, p - window + 1) if window > 0 else 0, p]; otherwise all
// `total` keys. Scores q . k / sqrt(d) (q scaled first, as LibTorch's path
// does), a softmax per query, the values summed with those weights.
struct PromptAttentionArgs {
  const float* q;    // [len, Hq, D] with q_stride floats from one query to the next
  int64_t q_stride;
  const float* kt;   // [Hkv, D, ldk]: the keys transposed, zero from `total` on
  int64_t ldk;       // a multiple of prompt_key_chunk, >= total
  const float* v;    // KV head h's value of key c at v[h * v_head + c * v_stride]
  int64_t v_stride, v_head;
  // Task t: head t / blocks, its block of query rows blocks - 1 - t % blocks
  // (false: block blocks - 1 - t / Hq, head t % Hq), blocks = ceil(len / rows).
  bool heads_outer;
  float* out;        // [len, Hq, D], contiguous
  int64_t len, start, total, hq, hkv, d, window;
  bool causal;
  float scale;       // 1 / sqrt(d) as a float
};
using PromptAttentionFn = void (*)(const PromptAttentionArgs& args, int64_t t0, int64_t t1);

struct KernelTable {
  CpuIsa isa;
  // Input rows of one register block; more rows run as several blocks over
  // each task's slice of W.
  int64_t max_block_rows;
  // More rows than one block go tile by tile of W's rows through every block
  // (only a tile is reused from the cache, not the task's whole slice of W).
  bool tiled_row_blocks;
  // Far-apart streams of W a task in LinearRowsSpreadTiled (0: not in
  // this table; SpreadTiles says where it runs).
  int64_t spread_tile_streams;
  // Up to this many rows, bfloat16 linears read x reordered by
  // split_even_odd (0: never).
  int64_t bf16_pair_max_rows;
  // xp[m, 2L*c + j] = x[m, 2L*c + 2j], xp[m, 2L*c + L + j] = x[m, 2L*c + 2j + 1]
  // (j < L lanes) per whole block of 2L; the rest copied as it is.
  void (*split_even_odd)(const float* x, float* xp, int64_t rows, int64_t in);
  LinearRowsFn<float> linear_f32;
  LinearRowsFn<BFloat16Bits> linear_bf16;
  LinearRowsFn<Half16> linear_f16;
  // int8 weights below Int8GemmMinRows() rows. Where quantize_x_int16 is
  // set, x goes to the kernel as int16 per row and group (it multiplies
  // int8 by int16 into int32 sums per group, then scales them); else as
  // float32 (each weight widened to float32).
  QuantizeXInt16Fn quantize_x_int16;
  Int8RowsFn int8_rows;
  // The float32-x kernel on every ISA (what int8_rows is where
  // quantize_x_int16 is null): for paired benchmarks.
  Int8RowsFn int8_rows_float_x;
  DequantizeRowsFn dequantize_rows;
  DecodeAttentionFn decode_attention_f32;
  DecodeAttentionFn decode_attention_bf16;
  DecodeAttentionFn decode_attention_f16;
  // Query rows per task and keys per score block of prompt_attention.
  int64_t prompt_rows;
  int64_t prompt_key_chunk;
  PromptAttentionFn prompt_attention;  // null: LibTorch's operators instead
  // Elementwise (cpu_elementwise_body.inc), on the calling thread.
  // y[i] = GELU(x[i]), i < n: the tanh approximation or erf's; y may be x.
  void (*gelu)(const float* x, float* y, int64_t n, bool tanh);
  // y[i] = silu(g[i]) * u[i], i < n; y may be g or u.
  void (*silu_mul)(const float* g, const float* u, float* y, int64_t n);
  // Rows of x [rows, d] -> y: LayerNorm (rms false, biased variance) or
  // RMSNorm, times w and plus b where not null; y may be x.
  void (*norm)(const float* x, const float* w, const float* b, float eps, bool rms, float* y,
               int64_t rows, int64_t d);
  // y[i] = e^((x[i] - shift) / divisor), i < n (y may be x, or null), and
  // their sum.
  double (*exp_shifted)(const float* x, float shift, float divisor, float* y, int64_t n);
  // The largest x[i], i < n (NaN ignored), and whether any is NaN or +inf.
  float (*max_checked)(const float* x, int64_t n, bool* bad);
};

// bfloat16 weights times x split into two bfloat16 parts with the
// AVX512_BF16 dot product (cpu_kernels_avx512_bf16.cc), up to max_rows
// input rows. split: x [n] -> hi [n], lo [n] with hi + lo = x to 2^-17 of
// |x|. linear: LinearRowsFn's contract on x's parts xh, xl [rows, in].
using SplitBf16Fn = void (*)(const float* x, uint16_t* hi, uint16_t* lo, int64_t n);
using LinearBf16DotFn = void (*)(const uint16_t* xh, const uint16_t* xl, const uint16_t* w,
                                 const float* b, float* y, int64_t rows, int64_t in, int64_t ldy,
                                 int64_t o0, int64_t o1);
struct Bf16DotKernels {
  int64_t max_rows;
  SplitBf16Fn split;
  LinearBf16DotFn linear;
};

// int8 weights times x quantized to int16, one input row, with 512-bit
// integer multiply-adds or AVX512_VNNI's byte dot products
// (cpu_kernels_avx512_int8_row.cc; AVX-512 only).
// quantize: QuantizeXInt16Fn's contract (the same bits as the AVX2 table's).
// one_row: Int8RowsFn's contract for rows == 1 (x itself unused).
// scratch_int16s: the int16s xq must hold for one row of `in` inputs (in,
// or more where the kernel keeps x in its own form after it: the VNNI
// one's, whose quantize takes one row only).
struct Int8RowInt16Kernels {
  QuantizeXInt16Fn quantize;
  Int8RowsFn one_row;
  int64_t (*scratch_int16s)(int64_t in);
};

// Input rows per row block of the kernels that run several row blocks over a
// task's slice of W (0: each ISA's own); set by SetRowBlockRows (cpu_kernels.h).
int64_t RowBlockRowsOverride();
// Whether the AVX-512 kernels run one input row (batch-1 decode) as one
// sequential stream of W per task, output row after output row (float32:
// LinearRowsF32Spread, in the AVX2 table too; bfloat16 widened:
// LinearRowsBf16Stream; int8: Int8Block of one output row), rather
// than interleaving several output rows: on CPUs that run 512-bit
// operations in halves (Avx512InHalves: Zen 4). There, paired
// (BM_IsaTablesPaired), the interleaved blocks ran the batch-1 decode step
// at 0.70x (int8) and 0.77x (bfloat16) of the AVX2 kernels, which stream;
// streaming, level with them (0.95-0.99x). On a full-width Zen 5 a
// streaming variant of the bfloat16 dot kernel measured 0.91-0.98x of the
// blocks. Each row's sums are the same either way. SetOneRowStreams
// (cpu_kernels.h) overrides it for benchmarks. AVX2 always streams bfloat16
// and int8; float32 where this is true (measured on Zen 4 only; its 6-row
// blocks elsewhere until measured on an AVX2-only CPU). On Intel and
// AVX2-only CPUs the far-apart tiles take the float weights' rows before any of these
// (SpreadTiles).
bool OneRowStreams();
// How many far-apart streams of W a task reads at once where one input row
// streams (float32 and bfloat16 where OneRowStreams, AVX2's bfloat16 and
// int16-x int8 everywhere): 1, or its output rows in 2, 4 or 8 equal parts,
// row j of each at once (LinearRowsF32Spread, LinearRowsBf16Spread,
// Int8Spread, Int8X16Spread). One stream per core leaves the memory
// system idle part of the time: on a Zen 4 EPYC, 2 threads, a plain read
// of 512 MB ran at ~21-25 GB/s as one stream per thread and ~28-32 GB/s as
// 4-8 far-apart ones. Paired, the batch-1 decode step (BM_OneRowSpreadPaired,
// against one stream) ran there:
//   float32   AVX-512 2: 1.09-1.12x, 4: 1.21-1.26x, 8: 1.27x; AVX2 2: 1.08x, 4: 1.19x
//   bfloat16  AVX-512 2: 1.07x, 4: 1.14x, 8: 1.16x; AVX2 2: 1.06x, 4: 1.23x, 8: 1.17x
//   int8      AVX-512 2: 1.09x, 4: 1.07x, 8: 1.03x; AVX2 2: 1.08x, 4: 1.00x, 8: 0.97x
// so 4 for float weights and 2 for int8 where Avx512InHalves (Zen 4); int8's
// one row in the AVX512_VNNI kernel (Zen 4's default since session 42) takes
// the float weights' count (OneRowSpread(false); VnniOneRow). int8
// takes 2 on CPUs whose best ISA is AVX2 too (DetectedIsa; their float
// weights take SpreadTiles instead): on an AMD EPYC Zen 3 (family 25 model 1,
// session 35, three rounds), the batch-1 int8 decode step against one
// stream ran 1.10x / 1.14x / 1.13x with 2, 0.98x / 1.06x / 1.09x with 4 and
// 0.90x with 8; other AVX2-only CPUs (Zen 2, Intel) unmeasured, taking it as
// the nearest measured kind. 1 elsewhere until measured there. Where
// OneRowSpread(false) is above 1, 2 and 3 input rows of float32 and bfloat16
// (widened) W go the same way (S at most the register
// block's rows: AVX2 3 at 3 rows of float32, 3 / 2 at 2 / 3 of bfloat16)
// instead of the row blocks; paired there, the decode step of 2 sequences
// float32 1.00-1.20x, median 1.08x (AVX2 forced 1.18-1.25x), bfloat16
// 1.09-1.11x (AVX2 1.13x); of 3 float32 1.03-1.17x (AVX2 1.04-1.06x),
// bfloat16 1.03-1.05x (AVX2 1.09-1.17x); float32 at 4 level (1.01-1.03x:
// not taken), at 6 and 8 slower than the tiles (0.83-0.97x). int8 with
// float32 x (AVX-512) at 3 rows only, with 4 streams (Int8Rows). Each row's sums are the one-stream kernel's
// (float32, int8) or LinearBlockBf16Pairs' (bfloat16). SetOneRowSpread
// (cpu_kernels.h) overrides it.
int OneRowSpread(bool int8);
// Whether `rows` input rows of float weights (float32, and bfloat16 and
// float16 widened; not bfloat16's dot products) go through
// LinearRowsSpreadTiled (far-apart streams tile by tile, with a software
// prefetch a fixed distance ahead in each; AVX-512 and AVX2): on Intel CPUs
// and on CPUs whose best ISA is AVX2 (DetectedIsa), at 1-16 rows
// (kSpreadTileRows). Measured on one Intel model (a Sapphire / Granite Rapids
// class Xeon, 48 KiB of L1d a core; 24 rows level, float32 at 32 slower; see
// docs/performance.md, session 29) and on an AMD EPYC Zen 3 (family 25 model
// 1, AVX2 only, 32 KiB of L1d; session 33, BM_SpreadTilesPaired, decode steps
// against the tiles, two rounds): float32 1.08x / 1.08x at 1 row, 1.09x at 2,
// 1.10x at 3, 1.13x at 4, 1.00x / 1.03x at 8, 1.07x at 12, 1.04x at 16, a
// 16-token prefill 1.03x; bfloat16 (widened) 1.14x / 1.08x at 1, 1.22x at 4,
// 1.08x / 1.11x at 8, 1.10x at 16; float16 1.54x at 1, 1.20x at 4, 1.04x at
// 8, 1.01x at 16. On other AVX2-only CPUs (Zen 2 among them) it is on
// unmeasured, as the nearest measured kind. Not on AMD's AVX-512 CPUs (Zen 4
// streams one row its own way, OneRowStreams; Zen 5 not measured). Intel
// CPUs of 32 KiB L1d with AVX-512 were not measured. SetSpreadTiles
// (cpu_kernels.h) forces it on (at any number of rows) or off.
bool SpreadTiles(int64_t rows);
inline constexpr int64_t kSpreadTileRows[2] = {1, 16};
// How many bytes ahead of each far-apart stream LinearRowsSpreadTiled's
// blocks prefetch W: `isa_default` (Ops::kSpreadTilePrefetchBytes) unless
// SetSpreadTilePrefetch (cpu_kernels.h) sets another; and whether into L2
// only (false unless set). Same sums.
int64_t SpreadTilePrefetchBytes(int64_t isa_default);
bool SpreadTilePrefetchToL2();
// How many input values a part of the float32 far-apart tiles of several
// row blocks covers (LinearRowsSpreadTiledParts, cpu_kernels_body.inc):
// `isa_default` (Ops::kSpreadTileInputPart; 0 all of the input at once)
// unless SetSpreadTileInputPart (cpu_kernels.h) sets another; a multiple of
// 64. Only the ISAs whose default is not 0 have the parts. Same sums.
int64_t SpreadTileInputPart(int64_t isa_default);
// Whether the AVX-512 one-row int8 stream broadcasts a row's scale once per
// group (fewer instructions, the same products) rather than once per vector;
// true unless SetInt8OneRowScalePerGroup (cpu_kernels.h) says otherwise.
bool Int8OneRowScalePerGroup();

// The order of the row blocks: -1 each ISA's own (Ops::kTiledRowBlocks), 0
// block after block, 1 tiled; set by SetTiledRowBlocks (cpu_kernels.h).
int TiledRowBlocksOverride();
// Whether the row blocks of a tile (LinearRowsTiled: float32, bfloat16 and
// float16 weights) share the prefetching of the next tile's rows of W in
// proportion to their input rows (cpu_kernels_body.inc, PrefetchShare),
// rather than each block prefetching all of them at the pace of its own
// reads, which puts the whole stream from memory into the first block's
// time. Paired on a Zen 4 EPYC (BM_TilePrefetchSharesPaired, decode steps
// of 8-32 sequences and prefills of 8-32 tokens, docs/performance.md):
// float32 1.05-1.20x on AVX-512 and 1.05-1.21x on AVX2; bfloat16 and
// float16 0.99-1.06x on AVX-512, 1.06-1.14x on AVX2. int8 (compute-bound
// at these rows) measured 0.95-0.99x sharing and keeps its own prefetch.
// Not for `rows` where PrefetchToL2's default sends the prefetches into L2
// only (the ISA's range [lo, hi], 1-8 rows where 512-bit operations run in
// halves): there each block prefetching all of the next tile measured
// faster (session 26, Zen 4, float32: sharing 0.95-0.98x at 7-8 rows on
// AVX-512 and AVX2 forced, with 2 MiB pages and without; 1.07-1.22x at
// 10-16 rows). SetTilePrefetchShares (cpu_kernels.h) overrides it for
// benchmarks.
bool TilePrefetchShares(int64_t rows, int lo, int hi);

// Whether the kernels' software prefetches of W (the next register block's
// or tile's rows, or the stream ahead at one row) for a call of `rows` input
// rows go to L2 only (_MM_HINT_T1) rather than to L1 (_MM_HINT_T0): on CPUs
// that run 512-bit operations in halves (Avx512InHalves: Zen 4, whichever
// ISA runs), for rows in [lo, hi], each ISA's Ops::kPrefetchL2Rows (float
// weights) and Ops::kInt8PrefetchL2Rows. At few rows a step is bound by
// memory, and prefetches into L1 hold the core's L1 miss buffers, which its
// own loads then wait for; the L1 hardware prefetcher brings the lines on
// from L2. Paired on a Zen 4 EPYC (BM_PrefetchToL2Paired, decode steps;
// 2026-11-27, docs/performance.md), L2 against L1: AVX-512 float32
// 1.17-1.30x at 2-8 sequences, bfloat16 1.26x at 1 (the one-row stream) and
// 1.07-1.41x at 2-8, float16 1.08-1.47x at 2-8, int8 1.29x / 1.17x at 2 / 3
// but 0.96x at 1 and 0.99-1.07x at 4-8; AVX2 (forced) float 1.02-1.45x at
// 2-8, bfloat16 1.02x at 1, int8 1.16x at 2 but 0.93-0.99x at 1 and 3-8. At
// 16-32 rows (bound by compute) and in a 16-token prefill: 0.95-1.02x. (The
// int8 figures at 1 row are the float32-x stream's; the AVX512_VNNI one-row
// kernel asks PrefetchToL2(1, 1, 1): L2 on Zen 4, where it measured 1.09x /
// 1.12x against L1, session 42.) On a
// Zen 5 EPYC, hints T1/T2 for the tiles had measured 0.96-1.01x (session
// 17, before the blocks shared the tile's prefetches): other CPUs keep L1
// until measured. SetPrefetchToL2 (cpu_kernels.h) forces either for
// benchmarks. Same sums.
bool PrefetchToL2(int64_t rows, int lo, int hi);

// The AVX512_BF16 kernels, or null on a CPU without those instructions.
const Bf16DotKernels* Avx512Bf16DotKernels();

// The one-row int8 kernels with int16 x (null where not built: not x86-64).
// Calling them on a CPU without AVX-512 is undefined (SIGILL).
const Int8RowInt16Kernels* Avx512Int8RowInt16Kernels();
// The same integer sums with AVX512_VNNI's byte dot products (x split into
// its high and low bytes; cpu_kernels_avx512_int8_row.cc), or null on a CPU
// without them. quantize gives xs and xq with QuantizeXInt16Fn's bits and
// the kernel's own form of x after xq (scratch_int16s).
const Int8RowInt16Kernels* Avx512VnniInt8RowKernels();

// The tables, one per ISA. Calling a table's functions on a CPU without its
// ISA is undefined (SIGILL): use Kernels().
const KernelTable& Avx512Kernels();
const KernelTable& Avx2Kernels();
const KernelTable& GenericKernels();

// The table of ActiveIsa().
const KernelTable& Kernels();

}  // namespace dikkat::model::kernels

#endif  // DIKKAT_MODEL_CPU_KERNELS_ISA_H_
