// Process-wide compute settings, behind a torch-free header so that main.cc
// does not compile LibTorch headers.
#ifndef DIKKAT_SERVER_RUNTIME_H_
#define DIKKAT_SERVER_RUNTIME_H_

#include <string>

namespace dikkat::server {

// OpenBLAS picks its kernels when the library loads, from the CPU model it
// knows or from OPENBLAS_CORETYPE. OpenBLAS 0.3.21 (Debian 12) does not know
// recent CPUs and falls back to its slowest (Prescott) kernels, ~5x slower
// (docs/performance.md). If OPENBLAS_CORETYPE is unset, this sets it from the
// ISA of dikkat's own kernels (model/cpu_isa.h: the CPU's best, or
// DIKKAT_ISA's; AVX-512 -> SkylakeX, AVX2 -> Haswell, generic -> OpenBLAS's
// own choice). It also sets
// OMP_WAIT_POLICY=PASSIVE when unset (spinning OpenMP threads collapse
// throughput when another process shares the cores). Both are read when the
// libraries load, so the program re-executes itself once with them set;
// explicit settings are kept.
// Call first thing in main(). Returns only if no re-exec was needed (or it failed).
void SelectBlasKernels(int argc, char** argv);

// One line for the startup log: BLAS library, kernels in use and where the
// choice came from.
std::string DescribeBlas();

// One line for the startup log: the instruction set of dikkat's CPU kernels
// and where it came from (model/cpu_isa.h), e.g. "CPU kernels: avx2 (forced
// by DIKKAT_ISA; the CPU supports avx512)".
std::string DescribeCpuKernels();

// Keeps the large temporaries of a forward pass (activations of a 512-token
// prefill are several MiB each) in the allocator's heap between passes.
// glibc otherwise maps and unmaps them every time, and the page faults of
// touching fresh pages cost ~20% of a prefill (docs/performance.md). Allocations
// under 256 MiB come from the heap; up to 512 MiB of free heap is kept. Call
// first thing in main(), before other threads start.
void TuneAllocator();

// Sets LibTorch's intra-op thread count (at::set_num_threads). 0 means the
// number of online cores. Returns the count in effect afterwards. Call once,
// before any model is loaded.
int SetComputeThreads(int threads);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_RUNTIME_H_
