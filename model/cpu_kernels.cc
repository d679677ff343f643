#include "model/cpu_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "model/cpu_kernels_isa.h"
#include "model/work_team.h"

namespace dikkat::model {
namespace kernels {

namespace {
std::atomic<int64_t> row_block_rows{0};  // SetRowBlockRows
// The on/off overrides the Set* functions below keep for benchmarks and
// tests: -1 the default choice, 0 off, 1 on.
std::atomic<int> tiled_row_blocks{-1};  // SetTiledRowBlocks
std::atomic<int> one_row_streams{-1};   // SetOneRowStreams
std::atomic<int> one_row_spread{0};     // SetOneRowSpread
std::atomic<int> int8_one_row_scale_per_group{-1};  // SetInt8OneRowScalePerGroup
std::atomic<int> tile_prefetch_shares{-1};  // SetTilePrefetchShares
std::atomic<int> prefetch_to_l2{-1};        // SetPrefetchToL2
std::atomic<int> bf16_dot{-1};          // SetBf16DotProducts
std::atomic<int> int8_row_int16{-1};    // SetInt8OneRowInt16X
std::atomic<int> int8_row_vnni{-1};     // SetInt8OneRowVnni
std::atomic<int> spread_tiles{-1};  // SetSpreadTiles
std::atomic<int64_t> spread_prefetch_bytes{0};  // SetSpreadTilePrefetch
std::atomic<int> spread_prefetch_l2{-1};        // SetSpreadTilePrefetch
std::atomic<int64_t> spread_input_part{-1};     // SetSpreadTileInputPart

void SetOverride(std::atomic<int>& flag, int mode) {
  flag.store(mode < 0 ? -1 : (mode > 0 ? 1 : 0), std::memory_order_relaxed);
}

bool OverrideOr(const std::atomic<int>& flag, bool default_choice) {
  const int mode = flag.load(std::memory_order_relaxed);
  return mode < 0 ? default_choice : mode > 0;
}
}  // namespace

int64_t RowBlockRowsOverride() { return row_block_rows.load(std::memory_order_relaxed); }
int TiledRowBlocksOverride() { return tiled_row_blocks.load(std::memory_order_relaxed); }

bool OneRowStreams() { return OverrideOr(one_row_streams, Avx512InHalves()); }

int OneRowSpread(bool int8) {
  const int streams = one_row_spread.load(std::memory_order_relaxed);
  if (streams > 0) return streams;
  if (Avx512InHalves()) return int8 ? 2 : 4;
  // AVX2-only CPUs: int8's one row (the int16-x kernel) in 2 streams; their
  // float weights take the far-apart tiles instead (SpreadTiles).
  return int8 && DetectedIsa() == CpuIsa::kAvx2 ? 2 : 1;
}

bool SpreadTiles(int64_t rows) {
  const int mode = spread_tiles.load(std::memory_order_relaxed);
  if (mode >= 0) return mode > 0;
  if (rows < kSpreadTileRows[0] || rows > kSpreadTileRows[1]) return false;
  return IntelCpu() || DetectedIsa() == CpuIsa::kAvx2;
}

int64_t SpreadTilePrefetchBytes(int64_t isa_default) {
  const int64_t bytes = spread_prefetch_bytes.load(std::memory_order_relaxed);
  return bytes > 0 ? bytes : isa_default;
}

int64_t SpreadTileInputPart(int64_t isa_default) {
  const int64_t values = spread_input_part.load(std::memory_order_relaxed);
  const int64_t part = values >= 0 ? values : isa_default;
  return (part + 63) / 64 * 64;
}

bool SpreadTilePrefetchToL2() {
  return OverrideOr(spread_prefetch_l2, false);
}

bool Int8OneRowScalePerGroup() { return OverrideOr(int8_one_row_scale_per_group, true); }

bool TilePrefetchShares(int64_t rows, int lo, int hi) {
  // Not where PrefetchToL2's default sends the prefetches into L2 (whatever
  // SetPrefetchToL2 forces, so that its benchmark compares one thing).
  return OverrideOr(tile_prefetch_shares, !(Avx512InHalves() && rows >= lo && rows <= hi));
}

bool PrefetchToL2(int64_t rows, int lo, int hi) {
  return OverrideOr(prefetch_to_l2, Avx512InHalves() && rows >= lo && rows <= hi);
}

const KernelTable& Kernels() {
  switch (ActiveIsa()) {
    case CpuIsa::kAvx512: return Avx512Kernels();
    case CpuIsa::kAvx2: return Avx2Kernels();
    case CpuIsa::kGeneric: break;
  }
  return GenericKernels();
}

}  // namespace kernels

namespace {

using kernels::BFloat16Bits;
using kernels::Half16;
using kernels::KernelTable;

std::atomic<bool> long_tiled_tasks{true};  // SetSmallBatchLinearLongTiledTasks
std::atomic<int64_t> decode_task_units{kDefaultDecodeTaskUnits};  // SetDecodeTaskUnits
std::atomic<bool> paged_attention_before{false};  // SetPagedDecodeAttentionAsBefore
std::atomic<bool> prompt_attention_on{true};      // SetPromptAttention
// PromptAttention runs head after head over values copied per KV head once
// every KV head's keys and values (keys x Hkv x D x 2 floats) no longer fit
// one core's L2 cache (L2CacheBytes, cpu_isa.h); SetPromptHeadsOuterAfter
// overrides it (-1: this default). The attention alone of 12 GPT-2-small
// layers (6 KiB of keys and values a key), that way at every length against
// as before (BM_PromptAttentionOrderPaired, both in one process, 2 threads):
//  - Intel Xeon, 2 MiB L2 (default past 341 keys), AVX-512 / AVX2 forced:
//    16 keys 0.78x / 0.75x, 128 0.90x / 0.89x, 256 0.97x / 1.00x, 512 1.24x
//    / 1.33x, 1024 1.58x / 1.76x, 2048 1.91x / 2.04x;
//  - AMD EPYC Zen 3, 512 KiB L2 (default past 85 keys), AVX2: 16 keys
//    0.75x / 0.81x, 64 1.02x, 96 1.05x, 128 1.09x / 1.12x, 256 1.12x, 512
//    1.09x, 1024 1.17x, 2048 1.85x; a whole prefill of 128 / 512 tokens
//    1.03x / 1.10x.
// Below the L2 the copy costs a parallel loop and gains nothing. Only
// GPT-2-small's shape was measured: wider models cross at fewer keys (32 KV
// heads of 128, 32 KiB a key: 16 keys on a 512 KiB L2), unmeasured.
std::atomic<int64_t> prompt_heads_outer_after{-1};

bool PromptHeadsOuter(int64_t keys, int64_t hkv, int64_t d) {
  const int64_t after = prompt_heads_outer_after.load(std::memory_order_relaxed);
  if (after >= 0) return keys > after;
  return keys * hkv * d * 2 * static_cast<int64_t>(sizeof(float)) > L2CacheBytes();
}

// Positions ahead that the per-head decode attention prefetches a head's
// cache rows. Measured with per-head tasks at 1-32 sequences on a Zen 3 EPYC
// (before whole rows took 2 and more): 8 and 16 alike, 1.05-1.2x; 2-4 less,
// 1.0-1.09x.
constexpr int64_t kPagedAttentionPrefetchRows = 8;

// Runs body(o0, o1) over output rows [0, out) on the work team, in tasks of
// whole 24-row units (a multiple of every register block size but 5). Up to
// 8 input rows, tasks of up to kDefaultDecodeTaskUnits units (192 rows), at
// least 2 a thread: each task reads its slice of W as one run the hardware
// prefetcher follows, and long runs matter most for the short rows of int8
// and bfloat16 (on a Zen 5 EPYC against 72-row tasks, paired: the batch-1
// decode step int8 1.09-1.15x, bf16 1.04-1.07x, fp32 level; batch 8 int8
// 1.01-1.06x; BM_DecodeTaskUnitsPaired, docs/performance.md). With more
// rows each output row is more work:
//  - where the kernel reuses the task's whole slice of W block after block
//    (`tiled` false: int8 with int16 x, AVX2), one unit per task, which keeps the slice
//    small enough for the L2 cache (72-288 KiB of float32 for GPT-2-small's
//    768- and 3072-wide rows);
//  - where it goes tile by tile (`tiled`: float32, bfloat16, float16 on
//    AVX2 and AVX-512, int8 on AVX-512),
//    only a tile is reused, and longer tasks (up to 4 units, at least 4
//    tasks a thread) read W in longer sequential runs and claim fewer
//    chunks: 1.01-1.07x at 16-48 rows (level at 63) on a Zen 3 EPYC, paired
//    (BM_LinearTaskSizePaired, docs/performance.md).
template <typename Body>
void ForEachOutputTask(int64_t out, int64_t rows, bool tiled, const Body& body) {
  constexpr int64_t kUnit = 24;
  const int64_t units = (out + kUnit - 1) / kUnit;
  int64_t grain = 1;
  if (rows <= kSmallBatchMaxRows) {
    // Long tasks, as many as 2 a thread allows: a task's rows are one run
    // of W for the hardware prefetcher.
    const int64_t threads = std::max(1, at::get_num_threads());
    grain = std::clamp<int64_t>(units / (2 * threads), 1,
                                decode_task_units.load(std::memory_order_relaxed));
  } else if (tiled && long_tiled_tasks.load(std::memory_order_relaxed)) {
    const int64_t threads = std::max(1, at::get_num_threads());
    grain = std::clamp<int64_t>(units / (4 * threads), 1, 4);
  }
  TeamParallelFor(units, grain,
                  [&](int64_t u0, int64_t u1) { body(u0 * kUnit, std::min(out, u1 * kUnit)); });
}

// Whether the float kernels go tile by tile through the row blocks.
bool TiledRowBlocks(const KernelTable& k) {
  return kernels::OverrideOr(kernels::tiled_row_blocks, k.tiled_row_blocks);
}

// The AVX512_BF16 kernels where the CPU has them and the active ISA is
// AVX-512, else null. By default not on CPUs that split 512-bit operations
// in halves (Avx512InHalves): on a Zen 4 EPYC the widening kernel (a stream
// at one row) ran the batch-1 decode step 1.21x faster than the dot products
// and 1.03-1.06x at 2-4 rows (BM_Bf16DotPaired), where on a Zen 5 the dot
// products had been 1.08-1.11x faster than widening.
const kernels::Bf16DotKernels* ActiveBf16Dot() {
  const bool wanted = kernels::OverrideOr(kernels::bf16_dot, !Avx512InHalves());
  return ActiveIsa() == CpuIsa::kAvx512 && wanted ? kernels::Avx512Bf16DotKernels() : nullptr;
}

std::atomic<bool> int8_int16_x{true};  // SetInt8Int16Activations

// Whether table k's int8 kernel takes x as int16 (its quantize_x_int16, the
// AVX2 table's), unless SetInt8Int16Activations(false) asks for float32 x.
bool TableInt8Int16X(const KernelTable& k) {
  return k.quantize_x_int16 != nullptr && int8_int16_x.load(std::memory_order_relaxed);
}

// The one-row int8 kernels with x as int16 where the active ISA is AVX-512
// and SetInt8OneRowInt16X has turned them on or left the choice to the CPU:
//   - on Intel's (IntelCpu), the 512-bit multiply-adds. On an Intel Xeon
//     (Sapphire / Granite Rapids class) they ran the 48 GPT-2-small linears
//     1.28-1.32x and the batch-1 int8 decode step 1.14-1.15x faster than the
//     float32-x blocks (BM_Int8OneRowInt16XPaired, session 28; other Intel
//     AVX-512 CPUs, Skylake-SP and Ice Lake, not measured; nor the VNNI form
//     there);
//   - on CPUs that run 512-bit operations in halves (Zen 4) with
//     AVX512_VNNI, the VNNI form (SetInt8OneRowVnni), in 4 far-apart streams
//     with prefetches into L2. On a Zen 4 EPYC (session 42,
//     BM_Int8OneRowVnniPaired against the float32-x stream, Int8Spread, which
//     the multiply-adds had run at 0.64-0.69x of there in session 41,
//     BM_Int8OneRowInt16XPaired): the batch-1 int8 decode step 1.03x /
//     1.06x, the 48 linears 1.08x / 1.21x; the multiply-adds took
//     1.54-1.83x its time. In 2 streams with prefetches into L1 it had been
//     level with the float32-x stream (0.98-1.01x): both at the memory's
//     speed there, the VNNI form with under half of the instructions. Zen 5
//     was not measured.
// SetInt8OneRowVnni(0) on Zen 4 leaves the multiply-adds (for benchmarks of
// the two int16-x forms), not the float32-x stream: SetInt8OneRowInt16X(0)
// gives that.
// Not where SetInt8Int16Activations(false) asks for float32 x.
const kernels::Int8RowInt16Kernels* ActiveInt8OneRowInt16X() {
  const kernels::Int8RowInt16Kernels* vnni = kernels::Avx512VnniInt8RowKernels();
  const bool zen4_vnni = Avx512InHalves() && vnni != nullptr;
  const bool wanted = kernels::OverrideOr(kernels::int8_row_int16, IntelCpu() || zen4_vnni) &&
                      int8_int16_x.load(std::memory_order_relaxed);
  if (ActiveIsa() != CpuIsa::kAvx512 || !wanted) return nullptr;
  if (vnni != nullptr && kernels::OverrideOr(kernels::int8_row_vnni, Avx512InHalves())) {
    return vnni;
  }
  return kernels::Avx512Int8RowInt16Kernels();
}

// The most input rows the dot products take: all they can (1-4) where
// SetBf16DotProducts(1) forces them, else one. At 2-4 rows the widening
// kernels ran an Intel Xeon's (Sapphire / Granite Rapids class, full-width
// AVX-512) decode step 1.06x / 1.12x faster at 2 / 4 rows and its linears 1.20x at 4
// (BM_Bf16DotPaired, session 27), where on a Zen 5 the two had been level
// there (0.998-1.02x); at one row the dot products won on both (1.16-1.20x
// on the Xeon).
int64_t Bf16DotMaxRows(const kernels::Bf16DotKernels& dot) {
  return kernels::bf16_dot.load(std::memory_order_relaxed) > 0 ? dot.max_rows : 1;
}

// Runs pass(r0, n) over rows [0, rows) in passes of at most kLinearPassRows
// rows, each a pass over W. Every row is computed alone, so the passes give
// the same bits as one would.
template <typename Pass>
void ForEachLinearPass(int64_t rows, const Pass& pass) {
  for (int64_t r0 = 0; r0 < rows; r0 += kLinearPassRows) {
    pass(r0, std::min(kLinearPassRows, rows - r0));
  }
}

// y = x W^T + b for at most kLinearPassRows rows with the active ISA's kernels.
template <typename W>
void LinearPass(const float* x, const W* w, const float* b, float* y, int64_t rows, int64_t in,
                int64_t out) {
  const KernelTable& k = kernels::Kernels();
  kernels::LinearRowsFn<W> fn;
  if constexpr (std::is_same_v<W, float>) {
    fn = k.linear_f32;
  } else if constexpr (std::is_same_v<W, BFloat16Bits>) {
    fn = k.linear_bf16;
    // bfloat16 weights, few rows, AVX512_BF16: x in two bfloat16 parts.
    const kernels::Bf16DotKernels* dot = ActiveBf16Dot();
    if (dot != nullptr && rows <= Bf16DotMaxRows(*dot)) {
      std::vector<uint16_t> parts(2 * rows * in);
      uint16_t *hi = parts.data(), *lo = hi + rows * in;
      dot->split(x, hi, lo, rows * in);
      ForEachOutputTask(out, rows, TiledRowBlocks(k), [&](int64_t o0, int64_t o1) {
        dot->linear(hi, lo, w, b, y, rows, in, out, o0, o1);
      });
      return;
    }
  } else {
    fn = k.linear_f16;
  }
  // bfloat16 weights, few rows: the shuffle-free kernel on x reordered.
  std::vector<float> xp;
  // (Not read by the far-apart tiles: SpreadTiles.)
  if (std::is_same_v<W, BFloat16Bits> && rows <= k.bf16_pair_max_rows && in >= 32 &&
      !(k.spread_tile_streams > 0 && kernels::SpreadTiles(rows))) {
    xp.resize(rows * in);
    k.split_even_odd(x, xp.data(), rows, in);
  }
  const float* xpp = xp.empty() ? nullptr : xp.data();
  ForEachOutputTask(out, rows, TiledRowBlocks(k), [&](int64_t o0, int64_t o1) {
    fn(x, xpp, w, b, y, rows, in, out, o0, o1);
  });
}

// y = x W^T + b for any number of rows.
template <typename W>
void LinearDispatch(const float* x, const W* w, const float* b, float* y, int64_t rows,
                    int64_t in, int64_t out) {
  ForEachLinearPass(rows, [&](int64_t r0, int64_t n) {
    LinearPass(x + r0 * in, w, b, y + r0 * out, n, in, out);
  });
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
  const KernelTable& k = kernels::Kernels();
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
      k.dequantize_rows(wp, sp, in, groups, r0, r1, tp + (r0 - o) * in);
    });
    at::Tensor dst = y.narrow(1, o, n);  // strided columns: BLAS writes them in place
    at::mm_out(dst, x, tile.narrow(0, 0, n).t());
  }
  return b.defined() ? y.add_(b.to(at::kFloat)) : y;
}

std::atomic<bool> row_blocks{true};     // SetSmallBatchLinearRowBlocks
std::atomic<int64_t> int8_gemm_from{0};  // SetInt8GemmMinRows

}  // namespace

SmallBatchLinearLimits SmallBatchLinearLimitsFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return IntelCpu() ? kSmallBatchLinearLimitsAvx512Intel : kSmallBatchLinearLimitsAvx512;
    case CpuIsa::kAvx2: return kSmallBatchLinearLimitsAvx2;
    case CpuIsa::kGeneric: break;
  }
  return kSmallBatchLinearLimitsGeneric;
}

bool FastBFloat16Gemm() {
#if defined(__x86_64__)
  static const bool dq = __builtin_cpu_supports("avx512dq");
  return ActiveIsa() == CpuIsa::kAvx512 && dq;
#else
  return false;
#endif
}

void SetBf16DotProducts(int mode) {
  kernels::SetOverride(kernels::bf16_dot, mode);
}

bool Bf16DotProductsActive() { return ActiveBf16Dot() != nullptr; }

void SetInt8OneRowInt16X(int mode) { kernels::SetOverride(kernels::int8_row_int16, mode); }
void SetInt8OneRowVnni(int mode) { kernels::SetOverride(kernels::int8_row_vnni, mode); }
bool Int8OneRowVnniActive() {
  const kernels::Int8RowInt16Kernels* row = ActiveInt8OneRowInt16X();
  return row != nullptr && row == kernels::Avx512VnniInt8RowKernels();
}

bool Int8OneRowInt16XActive() { return ActiveInt8OneRowInt16X() != nullptr; }

std::string DescribeOneRowSpread() {
  const int streams = kernels::OneRowSpread(false);
  if (streams <= 1) {
    // SpreadTiles (Intel, AVX2-only CPUs): the float weights' rows in far-apart tiles.
    const int64_t tile = kernels::Kernels().spread_tile_streams;
    const int int8 = kernels::OneRowSpread(true);
    // AVX2's int16-x kernel (Int8Rows), where x goes to it as int16; AVX-512's
    // int8 spreads only where OneRowSpread(false) is above 1 (below).
    const std::string int8_spread =
        int8 > 1 && ActiveIsa() == CpuIsa::kAvx2 && TableInt8Int16X(kernels::Kernels())
            ? "int8 linears of 1 input row as " + std::to_string(int8) +
                  " far-apart streams of W a task"
            : "";
    if (tile == 0 || !kernels::SpreadTiles(1)) return int8_spread;
    // (bfloat16's one row takes the AVX512_BF16 dot products where active.)
    return "float32 / bfloat16 / float16 linears of " +
           std::to_string(kernels::kSpreadTileRows[0]) + "-" +
           std::to_string(kernels::kSpreadTileRows[1]) + " input rows as " +
           std::to_string(tile) + " far-apart streams of W a task, tile by tile" +
           (int8_spread.empty() ? "" : "; " + int8_spread);
  }
  // LinearRows and Int8Rows (cpu_kernels_body.inc): AVX2 holds fewer streams
  // at 2-3 rows; int8 with float32 x (AVX-512) takes 3 rows as 4 streams and
  // 2 in blocks, AVX2's int16-x kernel one row only. The generic kernels
  // never spread.
  if (ActiveIsa() == CpuIsa::kGeneric) return "";
  const bool avx512 = ActiveIsa() == CpuIsa::kAvx512;
  // int8's one row in the VNNI kernel: the float weights' count (VnniOneRow).
  const int int8_one_row = Int8OneRowVnniActive() ? streams : kernels::OneRowSpread(true);
  return std::string("1-3 input rows as ") + (avx512 ? "" : "up to ") + std::to_string(streams) +
         " far-apart streams of W a task (int8: 1 row as " + std::to_string(int8_one_row) +
         (avx512 ? ", 3 rows as 4)" : ")");
}

void SetSmallBatchLinearRowBlocks(bool enabled) {
  row_blocks.store(enabled, std::memory_order_relaxed);
}

void SetPagedDecodeAttentionAsBefore(bool before) {
  paged_attention_before.store(before, std::memory_order_relaxed);
}

void SetDecodeTaskUnits(int64_t units) {
  decode_task_units.store(units > 0 ? units : kDefaultDecodeTaskUnits, std::memory_order_relaxed);
}

void SetOneRowStreams(int mode) {
  kernels::SetOverride(kernels::one_row_streams, mode);
}

void SetOneRowSpread(int streams) {
  const bool valid = streams == 1 || streams == 2 || streams == 4 || streams == 8;
  kernels::one_row_spread.store(valid ? streams : 0, std::memory_order_relaxed);
}

void SetInt8OneRowScalePerGroup(int mode) {
  kernels::SetOverride(kernels::int8_one_row_scale_per_group, mode);
}

void SetTilePrefetchShares(int mode) {
  kernels::SetOverride(kernels::tile_prefetch_shares, mode);
}

void SetPrefetchToL2(int mode) { kernels::SetOverride(kernels::prefetch_to_l2, mode); }

void SetSpreadTiles(int mode) { kernels::SetOverride(kernels::spread_tiles, mode); }

void SetSpreadTilePrefetch(int64_t bytes, int l2) {
  kernels::spread_prefetch_bytes.store(std::clamp<int64_t>(bytes, 0, int64_t{1} << 20),
                                       std::memory_order_relaxed);
  kernels::SetOverride(kernels::spread_prefetch_l2, l2);
}

void SetSpreadTileInputPart(int64_t values) {
  kernels::spread_input_part.store(values < 0 ? -1 : std::min<int64_t>(values, int64_t{1} << 30),
                                   std::memory_order_relaxed);
}

void SetTiledRowBlocks(int mode) {
  kernels::SetOverride(kernels::tiled_row_blocks, mode);
}

void SetRowBlockRows(int64_t rows) {
  kernels::row_block_rows.store(std::max<int64_t>(rows, 0), std::memory_order_relaxed);
}

void SetSmallBatchLinearLongTiledTasks(bool enabled) {
  long_tiled_tasks.store(enabled, std::memory_order_relaxed);
}

int64_t Int8GemmMinRows() {
  const int64_t rows = int8_gemm_from.load(std::memory_order_relaxed);
  return rows > 0 ? rows : SmallBatchLinearLimitsFor(ActiveIsa()).int8_gemm_from;
}

void SetInt8GemmMinRows(int64_t rows) {
  int8_gemm_from.store(std::max<int64_t>(rows, 0), std::memory_order_relaxed);
}

void SetInt8Int16Activations(bool enabled) {
  int8_int16_x.store(enabled, std::memory_order_relaxed);
}

namespace {
// t as a contiguous float32 tensor: t itself when it is one, without a
// trip through LibTorch's dispatcher (two a linear, ~100 a decode step).
at::Tensor ContiguousFloat(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat && t.is_contiguous()) return t;
  return t.to(at::kFloat).contiguous();
}
}  // namespace

bool SmallBatchLinearApplies(const at::Tensor& x, const at::Tensor& w) {
  const SmallBatchLinearLimits limits = SmallBatchLinearLimitsFor(ActiveIsa());
  int64_t max_rows = 0, min_rows = 1;
  switch (w.scalar_type()) {
    case at::kFloat:
      max_rows = limits.float32;
      min_rows = limits.float32_from;
      break;
    case at::kBFloat16: max_rows = limits.bfloat16; break;
    case at::kHalf: max_rows = limits.float16; break;
    default: return false;
  }
  if (!row_blocks.load(std::memory_order_relaxed)) {
    max_rows = std::min(max_rows, kSmallBatchMaxRows);
  }
  return x.dim() == 2 && x.size(0) >= min_rows && x.size(0) <= max_rows && x.is_cpu() && w.is_cpu() &&
         w.dim() == 2 && w.is_contiguous();
}

at::Tensor SmallBatchLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  TORCH_CHECK(w.size(1) == in, "SmallBatchLinear: x has ", in, " columns, w ", w.size(1));
  at::Tensor xf = ContiguousFloat(x);
  at::Tensor bf = b.defined() ? ContiguousFloat(b) : at::Tensor();
  at::Tensor y = at::empty({rows, out}, x.options().dtype(at::kFloat));
  const float* bp = bf.defined() ? bf.data_ptr<float>() : nullptr;
  if (w.scalar_type() == at::kFloat) {
    LinearDispatch(xf.data_ptr<float>(), w.data_ptr<float>(), bp, y.data_ptr<float>(), rows, in,
                   out);
  } else if (w.scalar_type() == at::kBFloat16) {
    LinearDispatch(xf.data_ptr<float>(), reinterpret_cast<const BFloat16Bits*>(w.data_ptr()), bp,
                   y.data_ptr<float>(), rows, in, out);
  } else {
    TORCH_CHECK(w.scalar_type() == at::kHalf, "SmallBatchLinear: weight dtype ", w.scalar_type(),
                " not supported");
    LinearDispatch(xf.data_ptr<float>(), reinterpret_cast<const Half16*>(w.data_ptr()), bp,
                   y.data_ptr<float>(), rows, in, out);
  }
  return y.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
}

at::Tensor Int8GatherRows(const LinearWeight& w, const at::Tensor& ids) {
  TORCH_CHECK(w.quantized() && w.w.is_cpu() && w.w.is_contiguous() && w.scales.is_contiguous(),
              "Int8GatherRows: contiguous int8 CPU weights");
  const at::Tensor idx = ids.to(at::kLong).contiguous();
  const int64_t n = idx.numel(), out = w.out_features(), in = w.in_features();
  const int64_t groups = w.scales.size(1);
  const int64_t* ip = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(ip[i] >= 0 && ip[i] < out, "row ", ip[i], " of a table of ", out, " rows");
  }
  at::Tensor y = at::empty({n, in}, at::TensorOptions().dtype(at::kFloat));
  const KernelTable& k = kernels::Kernels();
  const int8_t* wp = w.w.data_ptr<int8_t>();
  const float* sp = w.scales.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    k.dequantize_rows(wp, sp, in, groups, ip[i], ip[i] + 1, yp + i * in);
  }
  return y;
}

at::Tensor GatherRows(const at::Tensor& table, const at::Tensor& ids) {
  if (!table.is_cpu() || table.dim() != 2 || !table.is_contiguous() || !ids.is_cpu() ||
      ids.dim() != 1) {
    return table.index_select(0, ids);
  }
  const at::Tensor idx = (ids.scalar_type() == at::kLong ? ids : ids.to(at::kLong)).contiguous();
  const int64_t n = idx.numel(), rows = table.size(0);
  const int64_t row_bytes = table.size(1) * static_cast<int64_t>(table.element_size());
  const int64_t* ip = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK_INDEX(ip[i] >= 0 && ip[i] < rows, "index ", ip[i],
                      " is out of bounds for a table of ", rows, " rows");
  }
  at::Tensor y = at::empty({n, table.size(1)}, table.options());
  const char* src = static_cast<const char*>(table.data_ptr());
  char* dst = static_cast<char*>(y.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * row_bytes, src + ip[i] * row_bytes, static_cast<size_t>(row_bytes));
  }
  return y;
}

at::Tensor Int8Linear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& b) {
  TORCH_CHECK(w.quantized() && w.w.scalar_type() == at::kChar && w.w.is_contiguous() &&
                  w.scales.is_contiguous() && w.w.is_cpu(),
              "Int8Linear: a contiguous int8 CPU weight with scales");
  const int64_t in = w.in_features(), out = w.out_features(), groups = w.scales.size(1);
  TORCH_CHECK(x.size(-1) == in, "Int8Linear: x has ", x.size(-1), " columns, w ", in);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = out;
  at::Tensor xf = ContiguousFloat(x.dim() == 2 ? x : x.reshape({-1, in}));  // [M, in]
  const int64_t rows = xf.size(0);
  // x [M, in]: y itself, not a view of it (a view keeps its base, and
  // CpuResidualAdd adds in place only into storage nothing else shares).
  const auto shaped = [&](const at::Tensor& y) { return x.dim() == 2 ? y : y.view(out_shape); };
  if (rows >= Int8GemmMinRows()) return shaped(Int8LinearGemm(xf, w, b));
  at::Tensor bf = b.defined() ? ContiguousFloat(b) : at::Tensor();
  at::Tensor y = at::empty({rows, out}, xf.options());
  const float* xp = xf.data_ptr<float>();
  const int8_t* wp = w.w.data_ptr<int8_t>();
  const float* sp = w.scales.data_ptr<float>();
  const float* bp = bf.defined() ? bf.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const KernelTable& k = kernels::Kernels();
  // x as int16 per row and group, once for every task, where the kernel
  // multiplies int8 by int16: the ISA's (AVX2), or for one row on Intel's
  // AVX-512 the one-row kernel (ActiveInt8OneRowInt16X).
  std::vector<int16_t> xq;
  std::vector<float> xs;
  kernels::Int8RowsFn fn = k.int8_rows_float_x;
  kernels::QuantizeXInt16Fn quantize = nullptr;
  const kernels::Int8RowInt16Kernels* row_int16 = rows == 1 ? ActiveInt8OneRowInt16X() : nullptr;
  if (row_int16 != nullptr) {
    quantize = row_int16->quantize;
    fn = row_int16->one_row;
  } else if (TableInt8Int16X(k)) {
    quantize = k.quantize_x_int16;
    fn = k.int8_rows;
  }
  if (quantize != nullptr) {
    xq.resize(row_int16 != nullptr ? row_int16->scratch_int16s(in) : rows * in);
    xs.resize(rows * groups);
    quantize(xp, xq.data(), xs.data(), rows, in, groups);
  }
  // The float32-x kernel goes tile by tile where the float ones do.
  const bool tiled = xq.empty() && TiledRowBlocks(k);
  ForEachLinearPass(rows, [&](int64_t r0, int64_t n) {
    const float* x0 = xp + r0 * in;
    const int16_t* xq0 = xq.empty() ? nullptr : xq.data() + r0 * in;
    const float* xs0 = xs.empty() ? nullptr : xs.data() + r0 * groups;
    float* y0 = yp + r0 * out;
    ForEachOutputTask(out, n, tiled, [&](int64_t o0, int64_t o1) {
      fn(x0, xq0, xs0, wp, sp, bp, y0, n, in, groups, out, o0, o1);
    });
  });
  return shaped(y);
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
  // q * (1 / sqrt(d)) as LibTorch's float32 multiply by that scalar (the
  // same bits), in one loop: q is a strided view of the fused projection.
  at::Tensor qs;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  if (q.scalar_type() == at::kFloat && q.stride(2) == 1) {
    qs = at::empty({batch, hq, d}, q.options());
    const float* src = q.data_ptr<float>();
    float* dst = qs.data_ptr<float>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < hq; ++h) {
        const float* row = src + b * q.stride(0) + h * q.stride(1);
        float* o = dst + (b * hq + h) * d;
        for (int64_t j = 0; j < d; ++j) o[j] = row[j] * scale;
      }
    }
  } else {
    qs = (q.to(at::kFloat) * (1.0 / std::sqrt(static_cast<double>(d)))).contiguous();
  }
  at::Tensor out = at::empty({batch, hq, d}, q.options().dtype(at::kFloat));
  const KernelTable& k = kernels::Kernels();
  kernels::DecodeAttentionFn fn = nullptr;
  switch (k_cache.scalar_type()) {
    case at::kFloat: fn = k.decode_attention_f32; break;
    case at::kBFloat16: fn = k.decode_attention_bf16; break;
    case at::kHalf: fn = k.decode_attention_f16; break;
    default:
      TORCH_CHECK(false, "PagedDecodeAttention: cache dtype ", k_cache.scalar_type(),
                  " not supported");
  }
  // At least one sequence per thread: a task per sequence over whole cache
  // rows (one sequential stream per cache block). Fewer: a task per
  // (sequence, KV head), for all threads, with software prefetch. Paired
  // (BM_PagedAttentionPaired), against per-head tasks without prefetch, on a
  // Zen 3 EPYC: whole rows 1.2-1.6x at 2-32 sequences of 128-1024 tokens;
  // the prefetch 1.05-1.12x at one sequence (docs/performance.md).
  const bool before = paged_attention_before.load(std::memory_order_relaxed);
  const int64_t threads = std::max(1, at::get_num_threads());
  const bool whole_rows = !before && batch >= threads;
  const kernels::DecodeAttentionArgs args{qs.data_ptr<float>(), k_cache.data_ptr(),
                                          v_cache.data_ptr(),   out.data_ptr<float>(),
                                          &tables,              &lens,
                                          block_size,           window,
                                          hq,                   hkv,
                                          d,                    whole_rows,
                                          before ? 0 : kPagedAttentionPrefetchRows};
  if (whole_rows) {
    TeamParallelFor(batch, 1, [&](int64_t t0, int64_t t1) { fn(args, t0, t1); });
  } else {
    // A few (sequence, KV head) pairs per chunk: one scores buffer each.
    TeamParallelFor(batch * hkv, std::max<int64_t>(1, batch * hkv / 16),
                    [&](int64_t t0, int64_t t1) { fn(args, t0, t1); });
  }
  return out.scalar_type() == q.scalar_type() ? out : out.to(q.scalar_type());
}

void SetPromptAttention(bool on) { prompt_attention_on.store(on, std::memory_order_relaxed); }

void SetPromptHeadsOuterAfter(int64_t keys) {
  prompt_heads_outer_after.store(keys < 0 ? -1 : keys, std::memory_order_relaxed);
}

bool PromptAttentionOn() { return prompt_attention_on.load(std::memory_order_relaxed); }

namespace {
// Heads and values contiguous in each position's row, float32 on the CPU.
bool PromptRowsOk(const at::Tensor& t) {
  return t.is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 3 && t.stride(2) == 1 &&
         t.stride(1) == t.size(2) && t.stride(0) >= t.size(1) * t.size(2);
}
}  // namespace

bool PromptAttentionApplies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return PromptAttentionOn() && kernels::Kernels().prompt_attention != nullptr &&
         PromptRowsOk(q) && PromptRowsOk(k) && PromptRowsOk(v) && k.sizes() == v.sizes() &&
         q.size(2) == k.size(2) && q.size(2) > 0 && k.size(1) > 0 && q.size(1) % k.size(1) == 0;
}

at::Tensor PromptAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           int64_t start, bool causal, int64_t window) {
  TORCH_CHECK(PromptRowsOk(q) && PromptRowsOk(k) && PromptRowsOk(v) && k.sizes() == v.sizes() &&
                  q.size(2) == k.size(2) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "PromptAttention: float32 [positions, heads, D] rows with heads contiguous");
  const int64_t len = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t total = k.size(0), hkv = k.size(1);
  TORCH_CHECK(!causal || start + len <= total, "PromptAttention: queries past the last key");
  at::Tensor out = at::empty({len, hq * d}, q.options());
  if (len == 0) return out;
  const KernelTable& kt = kernels::Kernels();
  TORCH_CHECK(kt.prompt_attention != nullptr, "PromptAttention: not on the ", IsaName(kt.isa),
              " kernels");
  // The keys transposed per KV head, [Hkv, D, ldk], zero past `total`: each
  // key's value j for kt.prompt_key_chunk keys at once.
  const int64_t chunk = kt.prompt_key_chunk;
  const int64_t ldk = (total + chunk - 1) / chunk * chunk;
  at::Tensor keys_t = at::empty({hkv, d, ldk}, q.options());
  {
    const float* src = k.data_ptr<float>();
    float* dst = keys_t.data_ptr<float>();
    const int64_t ks = k.stride(0);
    TeamParallelFor(hkv * d, std::max<int64_t>(1, d / 4), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t h = r / d, j = r % d;
        float* row = dst + r * ldk;
        const float* col = src + h * d + j;
        for (int64_t c = 0; c < total; ++c) row[c] = col[c * ks];
        std::fill(row + total, row + ldk, 0.0f);
      }
    });
  }
  // Every KV head's keys and values past one core's L2 cache
  // (PromptHeadsOuter) and more than one block of query rows: the values too, [Hkv, total, D], and
  // the tasks head after head (below), so that a core's consecutive tasks
  // read one head's keys and values (2 x 128 KiB at 512 keys of 64), which
  // stay in its L2 cache, each as one block (in rows of 4 KiB or more, as the
  // fused q, k, v rows of 9 KiB in GPT-2-small, a head's values are D floats
  // of a page per key).
  const int64_t blocks = (len + kt.prompt_rows - 1) / kt.prompt_rows;
  const bool heads_outer = blocks > 1 && PromptHeadsOuter(total, hkv, d);
  at::Tensor values = v;
  int64_t v_stride = v.stride(0), v_head = d;
  if (heads_outer) {
    values = at::empty({hkv, total, d}, q.options());
    const float* src = v.data_ptr<float>();
    float* dst = values.data_ptr<float>();
    const int64_t vs = v.stride(0);
    TeamParallelFor(hkv * total, std::max<int64_t>(1, total / 4), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t h = r / total, c = r % total;
        std::copy(src + c * vs + h * d, src + c * vs + h * d + d, dst + r * d);
      }
    });
    v_stride = d;
    v_head = total * d;
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const kernels::PromptAttentionArgs args{q.data_ptr<float>(),
                                          q.stride(0),
                                          keys_t.data_ptr<float>(),
                                          ldk,
                                          values.data_ptr<float>(),
                                          v_stride,
                                          v_head,
                                          heads_outer,
                                          out.data_ptr<float>(),
                                          len,
                                          start,
                                          total,
                                          hq,
                                          hkv,
                                          d,
                                          window,
                                          causal,
                                          scale};
  // Tasks of one head and one block of query rows, the longest (the last
  // rows, causal) first so that the short ones fill in at the end: block
  // after block with the heads inside, or (heads_outer) head after head with
  // its blocks inside, each head's longest first.
  TeamParallelFor(blocks * hq, 1,
                  [&](int64_t t0, int64_t t1) { kt.prompt_attention(args, t0, t1); });
  return out;
}

}  // namespace dikkat::model
