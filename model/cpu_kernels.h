// Hand-written CPU kernels for the places where LibTorch's general ops
// leave most of the machine idle during decoding:
//
//  * SmallBatchLinear: y = x W^T + b for the rows of a decode step. W is
//    streamed from memory once: up to 8 rows that is the whole cost, and
//    OpenBLAS's GEMM and LibTorch's bfloat16 GEMV are far from it; more rows
//    run as register blocks over each task's slice of W, held in the L2
//    cache (faster than OpenBLAS's GEMM for 9..32 rows of float32 weights).
//  * Int8Linear: the same for int8 weights with a float32 scale per group of
//    32 inputs (--dtype int8), for any number of rows.
//  * PagedDecodeAttention: one query token per sequence against its keys and
//    values read in place from the paged KV cache, for every sequence and
//    head of a decode step in one parallel call (no gather copies, no
//    per-sequence op dispatch).
//
// Each kernel exists for AVX-512, for AVX2 + FMA + F16C and as generic C++
// (cpu_kernels_isa.h); the one for ActiveIsa() (cpu_isa.h: chosen from the
// CPU at start, DIKKAT_ISA forces another) runs, and where a library is
// faster on that ISA the routing below sends the work there instead. All
// share their loops with the work team (work_team.h). CPU tensors only: on
// other devices the callers keep LibTorch's ops (see attention.cc).
#ifndef DIKKAT_MODEL_CPU_KERNELS_H_
#define DIKKAT_MODEL_CPU_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "model/cpu_isa.h"
#include "model/linear_weight.h"

namespace dikkat::model {

// Input rows of a decode-sized linear: up to this many, tasks are long runs
// of W (ForEachOutputTask) and the kernels make one pass over W per task, or
// two on AVX-512 at 7-8 rows (row blocks of 6, cpu_kernels_avx512.cc); more
// rows run as several blocks over short tasks' slices of W, held in the L2
// cache. 8 is the largest register block (AVX-512's).
inline constexpr int64_t kSmallBatchMaxRows = 8;

// Most rows of one pass over W in SmallBatchLinear and Int8Linear's row
// kernels: more (prefills) run as passes of this many rows. At 512 rows one
// pass was ~1.0x OpenBLAS's GEMM on a Zen 4 EPYC, passes of 128 or 256 rows
// 1.07-1.12x (BM_LinearRoutesPaired, session 20).
inline constexpr int64_t kLinearPassRows = 256;

// Rows up to which Linear (attention.cc) sends weights of each dtype to
// SmallBatchLinear on an ISA; with more rows (or 0), LibTorch's routes: for
// float32 OpenBLAS's GEMV at one row and GEMM above, for bfloat16 oneDNN's
// GEMM, for float16 the matrix widened to float32 on every call (LibTorch
// 1.13 has no CPU float16 product).
struct SmallBatchLinearLimits {
  int64_t float32;
  int64_t bfloat16;
  int64_t float16;
  // Rows from which float32 goes to SmallBatchLinear (below: OpenBLAS's GEMV).
  int64_t float32_from = 1;
  // Rows from which Int8Linear dequantizes tiles of W for LibTorch's GEMM
  // (below: the int8 row kernels).
  int64_t int8_gemm_from = 64;
};

// Each ISA's limits come from BM_LinearRoutesPaired (bench/engine_bench.cc):
// the 48 GPT-2-small linears through our kernels and through the library
// route, alternating pass by pass, with the ISA forced (DIKKAT_ISA, and
// OPENBLAS_CORETYPE for OpenBLAS's side). Figures: docs/performance.md,
// "Routing per ISA".
//
// AVX-512 (since session 17's tiles through the row blocks; Zen 5, paired;
// the same limits measured right on Zen 4 in session 18: float32 1.31-2.57x
// at 1-63 rows, bfloat16 1.08x at 32, 0.96x at 48, 0.86x at 63):
//  * float32: the row blocks are 2.1-2.2x OpenBLAS's GEMM at 16 rows, 1.45x
//    at 32, 1.17-1.31x at 48-63 (two rounds); a whole decode step of 48
//    sequences 1.13x. (Before the tiles: level at 32, slower from 48.)
//  * bfloat16: 1.6-1.7x oneDNN's GEMM at 16 rows, 1.13x at 32, 0.89-0.98x at
//    48-63; a whole decode step of 16 / 32 sequences 1.34x / 1.04x. Ours
//    also keeps x in float32 where oneDNN rounds it to bfloat16.
//  * float16: row blocks up to 63 (the alternative widens W every call).
// Beyond 63 rows (prefills; session 20, Zen 4, two rounds):
//  * float32: 1.55x OpenBLAS's GEMM at 64 rows, 1.27-1.33x at 128,
//    1.07-1.13x at 256; in passes of 256 rows (kLinearPassRows) 1.05-1.07x
//    at 512 and 1.06-1.09x at 1024: up to 2048 rows, the default prefill
//    budget of a step (was 63).
//  * float16: 1.75x the widened GEMM at 64, 1.42-1.44x at 128, 1.18-1.23x at
//    256, 1.07-1.18x at 512-1024 in passes: up to 2048.
//  * bfloat16: oneDNN's GEMM (AVX512_BF16 on Zen 4) is 1.4-1.7x ours from
//    128 rows: stays at 32.
//  * int8: the row kernels are 1.41x the dequantized tiles' GEMM at 64 rows,
//    1.18-1.22x at 128, 1.02-1.11x at 256, 0.88-0.95x at 512-1024 (in
//    passes of 256): the GEMM from 257 rows (was 64).
inline constexpr SmallBatchLinearLimits kSmallBatchLinearLimitsAvx512{2048, 32, 2048, 1, 257};
// AVX-512 on Intel CPUs (IntelCpu, cpu_isa.h; the table above is measured on
// AMD: Zen 5 to 63 rows, Zen 4 beyond). On an Intel Xeon (Sapphire / Granite
// Rapids class, two 512-bit FMA units a core; session 27,
// BM_LinearRoutesPaired with OpenBLAS's SkylakeX kernels) OpenBLAS's GEMM
// overtakes the row blocks sooner: float32 ours 1.64x at 63 rows, 1.18x at
// 128, 0.72x / 0.66x / 0.64x at 256 / 512 / 1024 (in passes); float16 1.32x
// at 128, 0.81x at 256; int8's row kernels 1.31x the dequantized tiles' GEMM
// at 64, level at 128, 0.69x at 256; bfloat16 1.05x oneDNN at 32, 0.98x at
// 48 (as on AMD). Zen 5 keeps the table above until measured beyond 63 rows
// (Zen 4 led at 63 rows by about as much as Zen 5 and stayed ahead to 1024).
// With these limits a step of more than 128 float32 rows (a long prompt, or
// decode rows beside a prefill chunk) goes to the GEMM, so a row's bits there
// depend on its step's size, as on AVX2; on AMD's AVX-512 they do not up to
// 2048 rows (the default step budget).
inline constexpr SmallBatchLinearLimits kSmallBatchLinearLimitsAvx512Intel{128, 32, 128, 1, 129};
// AVX2 (AMD EPYC with AVX-512 forced to AVX2, OpenBLAS's Haswell kernels):
//  * float32: level with OpenBLAS's GEMV at one row on Zen 5 (both stream W at
//    the memory's speed), 1.4-3.8x its GEMM at 2-16 rows, 1.2x at 32, level at
//    48. On Zen 4 (session 18, three rounds): 1.33x its GEMV at one row,
//    1.03-1.31x at 32, 1.08-1.20x at 48, 1.14-1.28x at 63, and a decode step
//    of 48 sequences 1.04x / 1.16x (BM_DecodeRowBlocksPaired): up to 63 rows
//    (was 32), level or faster on both machines.
//  * bfloat16: every row count. LibTorch 1.13 sends bfloat16 products to
//    oneDNN only on CPUs with AVX-512 (BW, VL, DQ); on an AVX2-only CPU it
//    falls back to its own scalar GEMM. (Forced AVX2 on an AVX-512 machine
//    still measures oneDNN's AVX-512 route, which wins from 8 rows there.)
//  * float16: 1.4-8x the widened GEMM at every row count up to 63.
// Beyond 63 rows (session 20, Zen 4 forced to AVX2, two rounds): at 128 rows
// float32 1.03-1.05x OpenBLAS's GEMM, bfloat16 1.09-1.12x and float16
// 1.09-1.14x the widened GEMM; at 256 0.90-1.04x: up to 128 rows. int8: the
// row kernels are 1.21x the dequantized tiles' GEMM at 63 rows, level at 64,
// 0.84-0.87x at 128: the GEMM from 64 rows.
// This table runs by default only on CPUs whose best ISA is AVX2. Natively on
// one (session 34: AMD EPYC Zen 3, family 25 model 1, OpenBLAS's Haswell
// kernels, two rounds where noted): float32 1.22x at 64 rows, 1.03x / 0.98x
// at 96, 0.98x at 112, 0.94x / 0.88x at 128, 0.84x / 0.92x at 256: up to 96
// rows (was 128); bfloat16 1.16x at 96, 1.13x at 128, 0.99x at 256 and
// float16 1.31x at 96, 1.25x at 128, 0.90x at 256: up to 128 (unchanged);
// int8's row kernels 1.30x the GEMM at 63 rows, 1.13x / 1.15x at 64, 1.03x
// at 80, 0.94x / 0.88x at 96: the GEMM from 96 rows (was 64).
inline constexpr SmallBatchLinearLimits kSmallBatchLinearLimitsAvx2{96, 128, 128, 1, 96};
// Generic (8-lane vector extensions, SSE2 on x86-64): float32 only at 2-8
// rows (1.2-2.4x OpenBLAS's GEMM there; its GEMV is 2x ours at one row and
// its GEMM from 16 rows). bfloat16 and float16: the library route is W
// widened to fp32 at every call (Linear: no fast bfloat16 GEMM without
// AVX-512), which costs more than the product itself; measured 2026-11-24
// (AMD EPYC family 26 forced to generic, a build running alongside, paired):
// bfloat16 ours 28x at 1 row, 17x at 8, 2.5x at 63; float16 4.8x at 1 row,
// 2.6x at 8, 0.34x at 63 (its lanes convert one by one). The earlier limits
// (0, 0) were measured against oneDNN's bfloat16 GEMM, which forcing the ISA
// does not take away on an AVX-512 machine: bfloat16 batch-1 decode then took
// longer than a 30 s client deadline for 128 tokens.
inline constexpr SmallBatchLinearLimits kSmallBatchLinearLimitsGeneric{8, 63, 8, 2};

// The limits of `isa` on this CPU (AVX-512: AMD's or Intel's table).
SmallBatchLinearLimits SmallBatchLinearLimitsFor(CpuIsa isa);

// True if LibTorch's bfloat16 matrix product is oneDNN's (fast): LibTorch 1.13
// uses oneDNN for it only on CPUs with AVX-512 BW, VL and DQ, and otherwise a
// scalar loop (at 512 x 768 x 3072: 1365 ms against 36 ms for the product
// widened to float32, measured with oneDNN switched off). Follows the active
// ISA, so that a forced AVX2 routes as an AVX2-only machine would.
bool FastBFloat16Gemm();

// True if Linear should use SmallBatchLinear for x [M, in] with w [out, in]:
// CPU, contiguous, float32/bfloat16/float16 weights, 1 (float32_from) <= M <=
// the active ISA's limit for the dtype (and <= kSmallBatchMaxRows after
// SetSmallBatchLinearRowBlocks(false)).
bool SmallBatchLinearApplies(const at::Tensor& x, const at::Tensor& w);

// For benchmarks: false routes at most kSmallBatchMaxRows rows to
// SmallBatchLinear (the routing before row blocks: GEMM from 9 rows), so that
// both can be measured side by side in one process. Default true.
void SetSmallBatchLinearRowBlocks(bool enabled);

// For benchmarks: false runs float32, bfloat16 and float16 linears of more
// than kSmallBatchMaxRows rows in tasks of one 24-row unit, as before longer
// tasks for the tiled kernels (ForEachOutputTask, cpu_kernels.cc). Default
// true.
void SetSmallBatchLinearLongTiledTasks(bool enabled);

// True where bfloat16 linears of one row (up to 4 where SetBf16DotProducts
// forces them) use AVX512_BF16's dot product (cpu_kernels_avx512_bf16.cc):
// the active ISA is AVX-512, the CPU has AVX512_BF16, and SetBf16DotProducts
// has turned it on or left the choice to the CPU: on unless it runs 512-bit
// operations in halves (Avx512InHalves, cpu_isa.h; Zen 4), where widening is
// faster. By default 2-4 rows widen everywhere (faster on an Intel Xeon,
// level on a Zen 5).
bool Bf16DotProductsActive();
// For the server's log: which input rows read W as several far-apart
// streams a task (OneRowSpread, cpu_kernels_isa.h), e.g. "1-3 input rows as
// 4 far-apart streams of W a task (int8: 1 row as 4, 3 rows as 4)" (Zen 4:
// int8's one row in the VNNI kernel takes the float weights' count) or, on
// Intel and AVX2-only CPUs, "float32 / bfloat16 / float16 linears of 1-16
// input rows as 4 far-apart streams of W a task, tile by tile" (SpreadTiles),
// on AVX2-only CPUs followed by "; int8 linears of 1 input row as 2
// far-apart streams of W a task"; empty where each task reads one stream.
std::string DescribeOneRowSpread();

// For tests and benchmarks: 0 runs bfloat16 linears of up to 4 rows through
// the float32 kernels (each weight widened) even where AVX512_BF16's dot
// product could take them, 1 through the dot products (1-4 rows) wherever
// the CPU has them, -1 (the default) as the CPU's choice above (one row):
// both can be tested and measured side by side in one process.
void SetBf16DotProducts(int mode);

// True where int8 linears of one input row (a batch-1 decode step) round x
// to int16 per group of 32 inputs and sum each group's products as integers
// with 512-bit multiply-adds or AVX512_VNNI's byte dot products
// (cpu_kernels_avx512_int8_row.cc): the active ISA is AVX-512,
// SetInt8Int16Activations has not asked for float32 x, and
// SetInt8OneRowInt16X has turned it on or left the choice to the CPU (on
// Intel's the multiply-adds, on Zen 4 with AVX512_VNNI the dot products:
// where measured faster; Zen 5 not measured). Within the int16 rounding bound of the float32-x kernels
// (int8_linear_test), not the same bits: such a row alone differs slightly
// from the same row in a step of several, as bfloat16's one-row dot
// products do.
bool Int8OneRowInt16XActive();
// For tests and benchmarks: 0 runs one-row int8 linears through the
// float32-x kernels, 1 through the int16-x kernel wherever AVX-512 is active,
// -1 (the default) as the CPU's choice.
void SetInt8OneRowInt16X(int mode);
// For tests and benchmarks: where the one-row int16-x kernel runs
// (Int8OneRowInt16XActive), 1 takes its AVX512_VNNI form where the CPU has
// those instructions, 0 the 512-bit multiply-adds, -1 (the default) the
// CPU's choice (the VNNI form on Zen 4). The same int32 sums per group;
// float32 sums in another order.
void SetInt8OneRowVnni(int mode);
// True where one-row int8 linears take that VNNI form.
bool Int8OneRowVnniActive();

// Most output rows per task of a linear of at most kSmallBatchMaxRows rows,
// in units of 24 (fewer where a thread would otherwise get fewer than 2
// tasks): long runs of W for the hardware prefetcher.
inline constexpr int64_t kDefaultDecodeTaskUnits = 8;

// For benchmarks: tasks of at most `units` x 24 output rows for linears of
// at most kSmallBatchMaxRows rows (0: the default), so that task sizes can
// be measured side by side in one process.
void SetDecodeTaskUnits(int64_t units);

// For benchmarks: input rows per row block where a kernel runs several row
// blocks over a task's slice of W, block after block (where not tiled,
// SetTiledRowBlocks) (at most the ISA's register-block limit; 0: the
// ISA's own choice); in the far-apart tiles (SpreadTiles) 4 or 8
// (5 / 3 streams on AVX-512; 4 on AVX2 as its own), else the ISA's own.
void SetRowBlockRows(int64_t rows);
// For benchmarks: the order in which the float kernels (and int8 with
// float32 x) run more input rows than one row block: 1 tile by tile of W's
// rows through every block, 0 block after block over a task's slice of W,
// -1 the ISA's own choice. Each output is the same sum either way.
void SetTiledRowBlocks(int mode);
// For benchmarks and tests: whether float32, bfloat16 (where its dot
// products do not take the rows) and float16 W go through the far-apart
// tiles (SpreadTiles, cpu_kernels_isa.h; AVX-512 and AVX2 tables): 1 on at
// any number of rows, 0 off, -1 the CPU's own choice. Where on they take
// the rows before the kernels that SetOneRowStreams, SetOneRowSpread,
// SetTiledRowBlocks, SetTilePrefetchShares and SetPrefetchToL2 choose
// between (and prefetch into L1 whatever SetPrefetchToL2 says): benchmarks
// and tests of those set it to 0. Same sums, but for
// bfloat16's 1-4 rows, whose pairs (LinearBlockBf16Pairs) or AVX2 stream
// sum in another order.
void SetSpreadTiles(int mode);
// For benchmarks: how far ahead (bytes > 0, at most 1 MiB; 0 the ISA's own distance) and
// where (l2 1: into L2 only, 0: into L1, -1 the default) the far-apart
// tiles (SetSpreadTiles) prefetch each stream of W. Same sums.
void SetSpreadTilePrefetch(int64_t bytes, int l2);
// For benchmarks and tests: the parts of the input (values, rounded up to a
// multiple of 64; 0 all of it at once; -1 the ISA's own) that the float32
// far-apart tiles of several row blocks sum over one at a time, where the
// ISA has such parts (AVX2; SpreadTileInputPart, cpu_kernels_isa.h). Same
// sums.
void SetSpreadTileInputPart(int64_t values);
// For benchmarks: whether the row blocks of a tile share the prefetching
// of the next tile's weights (1), or each block prefetches all of them (0,
// the order before); -1 the default (shared, except at the rows whose
// prefetches go into L2 only: TilePrefetchShares, cpu_kernels_isa.h). Same
// sums.
void SetTilePrefetchShares(int mode);
// For benchmarks: where the kernels' software prefetches of the weights go:
// 1 into L2 only, 0 into L1, -1 by the CPU and the number of rows
// (PrefetchToL2, cpu_kernels_isa.h). Same sums.
void SetPrefetchToL2(int mode);
// For benchmarks: how the AVX-512 kernels run one input row of float32,
// bfloat16 (where the dot products do not take it) and int8 weights: 1 output row
// after output row (one stream of W per task), 0 several rows interleaved,
// -1 the CPU's own choice (OneRowStreams, cpu_kernels_isa.h). Same sums.
void SetOneRowStreams(int mode);
// For benchmarks: how many far-apart streams of W a task reads at once
// where one input row streams, and float 2-3 rows where above 1 (1, 2, 4
// or 8; 0 the default). OneRowSpread, cpu_kernels_isa.h. Same sums for
// float32 and int8; bfloat16 in 2-8 streams sums as its 2-4-row blocks do,
// in one stream in four parts.
void SetOneRowSpread(int streams);
// For benchmarks: whether that one-row int8 stream broadcasts each output
// row's scale once per group of 32 (1, the default) or once per vector (0).
// Same sums.
void SetInt8OneRowScalePerGroup(int mode);

// x [M, in] (any float dtype, any M >= 1), w [out, in] float32, bfloat16 or
// float16, b [out] or undefined -> [M, out] in x's dtype. Accumulates in
// float32; activations are never rounded to the weights' dtype (with
// AVX512_BF16 dot products, x is kept as two bfloat16 parts: to 2^-17 of
// |x|, where the weights' own rounding is 2^-9).
at::Tensor SmallBatchLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// Rows from which Int8Linear dequantizes tiles of W for LibTorch's GEMM on
// the active ISA (SmallBatchLinearLimits::int8_gemm_from, or the override).
int64_t Int8GemmMinRows();

// For benchmarks: Int8Linear goes to the GEMM from `rows` rows (0: the
// active ISA's choice), so that both routes can be measured side by side.
void SetInt8GemmMinRows(int64_t rows);

// For benchmarks: false makes Int8Linear's row kernels take x as float32
// (each weight widened to float32) on every ISA, instead of int16 per row
// and group of 32 where the ISA has that kernel (AVX2; one row on Intel's
// AVX-512, Int8OneRowInt16XActive), so that both can be measured side by
// side in one process. Default true.
void SetInt8Int16Activations(bool enabled);

// x [..., in] (any float dtype), w int8 with scales (QuantizeInt8), b [out] or
// undefined -> [..., out] float32, accumulated in float32. Any number of rows:
// below Int8GemmMinRows(), blocks of up to kSmallBatchMaxRows rows reuse each
// task's slice of the matrix from the cache (the int8 matrix is read from
// memory once); from it, tiles of W dequantized into a cache-sized float32
// buffer go through LibTorch's GEMM. Below Int8GemmMinRows() on AVX2 (and
// for one row where Int8OneRowInt16XActive: Intel's AVX-512, Zen 4's with
// AVX512_VNNI), x is rounded to int16 per row
// and group of 32 (absmax / 32767 steps: about 1/256 of the weights' own
// rounding) and each group's products are summed as integers. Below
// Int8GemmMinRows() every row is computed as if it were alone, except that
// one row alone takes the int16-x kernel where Int8OneRowInt16XActive and the
// float32-x blocks among others.
at::Tensor Int8Linear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& b);

// Rows `ids` of int8 w (CPU, contiguous) dequantized -> [ids, in] float32:
// the int8 embedding table's lookup, each weight times its group's scale
// (the bits of LinearWeight::Dequantize's rows). ids must lie in [0, out).
at::Tensor Int8GatherRows(const LinearWeight& w, const at::Tensor& ids);

// Rows `ids` (integers, on the CPU) of a 2-D table -> [ids, columns] in the
// table's dtype: a copy per row where the table is a contiguous CPU tensor,
// else index_select. ids must lie in [0, rows) (index_select's check and
// error type); the same values as index_select.
at::Tensor GatherRows(const at::Tensor& table, const at::Tensor& ids);

// For benchmarks: true runs PagedDecodeAttention as before whole cache rows
// (a task per sequence and KV head at every batch size, no software
// prefetch), so that both can be measured side by side. Default false.
void SetPagedDecodeAttentionAsBefore(bool before);

// One decode token per sequence.
//   q:       [B, Hq, D] (float32 or the cache dtype)
//   k_cache, v_cache: [slots, Hkv, D] float32, bfloat16 or float16, contiguous
//   tables:  per sequence its block table; lens: per sequence the number of
//            keys (positions 0..len-1, the newest already written)
//   window:  0 = all keys; else only the last `window` positions
// Returns [B, Hq, D] in q's dtype. Scale 1/sqrt(D). A sequence's result is
// the same bits whatever the other sequences of the batch (its heads are
// computed in one fixed order by either of the kernel's two task shapes).
at::Tensor PagedDecodeAttention(const at::Tensor& q, const at::Tensor& k_cache,
                                const at::Tensor& v_cache,
                                const std::vector<const std::vector<int32_t>*>& tables,
                                const std::vector<int64_t>& lens, int64_t block_size,
                                int64_t window);

// A prompt's (or chunk's) attention with its keys in hand, on the CPU in
// float32, as register blocks of query rows (cpu_kernels_body.inc,
// PromptAttention) instead of LibTorch's matmul, mask, softmax and matmul.
//   q:    [len, Hq, D] float32, the queries at positions start..start+len-1
//   k, v: [total, Hkv, D] float32, the keys at positions 0..total-1
//         (total = start + len when causal)
//   causal: query p sees the keys [max(0, p - window + 1), p] (window 0:
//         [0, p]); else every key
// Each of the three may be a view with any stride between positions, but
// with its heads and values contiguous; and the active ISA must have the
// kernel (AVX-512 and AVX2; not the generic table): PromptAttentionApplies.
// Returns [len, Hq * D]. Scale 1/sqrt(D), applied to q first as LibTorch's
// path does.
bool PromptAttentionApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
at::Tensor PromptAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           int64_t start, bool causal, int64_t window);

// For benchmarks and tests: false sends prompts through LibTorch's operators
// (ScaledDotProductAttention) as before PromptAttention. Default true.
void SetPromptAttention(bool on);

// For benchmarks and tests: PromptAttention runs head after head over the
// values copied per KV head for more than `keys` keys (and more than one block
// of query rows), else block of query rows after block with the heads inside,
// over the values where they lie in v's rows (as before: a very large `keys`).
// The same bits either way. Negative: the default (past the keys whose
// keys and values, every KV head's, fill one core's L2 cache).
void SetPromptHeadsOuterAfter(int64_t keys);
bool PromptAttentionOn();

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_CPU_KERNELS_H_
