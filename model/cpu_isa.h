// Which vector instruction set the CPU kernels (cpu_kernels.h) run with.
//
// The machines a service lands on differ: AVX-512 Intel and AMD servers,
// AVX2-only AMD Zen 2 and older Intel, and CPUs with neither (or another
// architecture). Every kernel is compiled once per instruction set
// (cpu_kernels_avx512.cc, cpu_kernels_avx2.cc, cpu_kernels_generic.cc) and one
// of them is chosen once, at the first kernel call, from the CPU's features:
//
//   kAvx512   avx512f + avx512bw + avx512vl   (16 float lanes, masked tails)
//   kAvx2     avx2 + fma + f16c               (8 float lanes)
//   kGeneric  plain C++ the compiler vectorizes for the build's baseline
//             (SSE2 on x86-64, NEON on aarch64); on x86 only the float16
//             and int8 kernels and the decode attention use it, float32 and
//             bfloat16 linears go to LibTorch's BLAS / oneDNN routes.
//
// The environment variable DIKKAT_ISA=avx512|avx2|generic forces a choice
// (tests run every suite under each ISA the machine can execute; benchmarks
// measure the AVX2 path on an AVX-512 machine). A forced ISA the CPU lacks
// is not used: the best one the CPU has below it is, and DescribeIsa() says
// so. Torch-free. Thread-safe: the choice is made once; SetActiveIsa is for
// tests and benchmarks and must not race with running kernels.
#ifndef DIKKAT_MODEL_CPU_ISA_H_
#define DIKKAT_MODEL_CPU_ISA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dikkat::model {

enum class CpuIsa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

// "generic", "avx2", "avx512".
std::string_view IsaName(CpuIsa isa);

// The ISA named `name` (as IsaName spells it), or nothing.
std::optional<CpuIsa> ParseIsa(std::string_view name);

// True if this CPU can execute kernels built for `isa` (kGeneric: always).
bool IsaSupported(CpuIsa isa);

// The best ISA this CPU supports, from CPUID.
CpuIsa DetectedIsa();

// The ISA the kernels run with: DIKKAT_ISA when set, valid and supported
// (else the best supported ISA at or below it), otherwise DetectedIsa().
CpuIsa ActiveIsa();

// For tests and benchmarks: switches the kernels to `isa`. Returns false (and
// changes nothing) if the CPU cannot execute it.
bool SetActiveIsa(CpuIsa isa);

// True on CPUs known to execute 512-bit operations as two 256-bit halves
// (AMD family 25 with AVX-512: Zen 4). There some AVX-512 kernel choices made
// on full-width CPUs lose: the bfloat16 dot products and interleaved output
// rows at one input row (cpu_kernels.cc, OneRowStreams), and the prefetch
// into L2 (PrefetchToL2). From
// CPUID's vendor and family; false on other CPUs and architectures.
bool Avx512InHalves();

// True on Intel CPUs (CPUID's vendor "GenuineIntel"). Where AVX-512 is
// active there, longer linears go to OpenBLAS's GEMM sooner than on AMD
// (SmallBatchLinearLimitsFor, cpu_kernels.h: measured on an Intel Xeon).
bool IntelCpu();

// One core's L2 cache in bytes (sysconf's _SC_LEVEL2_CACHE_SIZE, which glibc
// reads from CPUID on x86), or 1 MiB where the system does not say. Read once.
int64_t L2CacheBytes();

// One line for logs and ModelInfo, e.g. "avx2 (forced by DIKKAT_ISA; the CPU
// supports avx512)" or "avx512 (detected)".
std::string DescribeIsa();

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_CPU_ISA_H_
