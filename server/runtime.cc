#include "server/runtime.h"

#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <ATen/Parallel.h>

#include "model/cpu_isa.h"
#include "model/cpu_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace dikkat::server {
namespace {

// Set in the re-executed process so that a failed selection never loops.
constexpr char kReexecMarker[] = "DIKKAT_BLAS_SELECTED";

// The OpenBLAS kernels matching the ISA of dikkat's own kernels (the CPU's
// best, or DIKKAT_ISA's), so that a forced ISA forces both.
const char* CoreTypeForThisCpu() {
  switch (model::ActiveIsa()) {
    case model::CpuIsa::kAvx512: return "SkylakeX";
    case model::CpuIsa::kAvx2: return "Haswell";
    case model::CpuIsa::kGeneric: break;
  }
  return nullptr;  // let OpenBLAS decide
}

}  // namespace

void SelectBlasKernels(int argc, char** argv) {
  (void)argc;
  if (std::getenv(kReexecMarker) != nullptr) return;
  bool changed = false;
  std::string chosen = "omp";  // what this function set, for DescribeBlas()
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    if (const char* core = CoreTypeForThisCpu(); core != nullptr) {
      setenv("OPENBLAS_CORETYPE", core, 0);
      chosen = "coretype";
      changed = true;
    }
  }
  // libgomp's default is to spin for a while at every barrier. When another
  // process holds a core (a client, a sidecar, a noisy neighbour) the spinning
  // threads starve the working one: a decode step measured 40x slower under
  // load (docs/performance.md). Passive waiting costs ~3% when the machine is
  // quiet.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    changed = true;
  }
  if (!changed) return;
  setenv(kReexecMarker, chosen.c_str(), 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on with the libraries' own choices.
}

std::string DescribeBlas() {
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) {
    return "BLAS: not OpenBLAS (install libopenblas0-openmp for ~50x faster matrix products)";
  }
  const char* marker = std::getenv(kReexecMarker);
  std::string source = marker != nullptr && std::string(marker) == "coretype"
                           ? "chosen from the CPU's features"
                       : std::getenv("OPENBLAS_CORETYPE") != nullptr
                           ? "from OPENBLAS_CORETYPE"
                           : "OpenBLAS's own detection";
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  return std::string("BLAS: OpenBLAS, ") + core_name() + " kernels (" + source +
         "); OpenMP wait policy " + (wait != nullptr ? wait : "default");
}

std::string DescribeCpuKernels() {
  std::string bf16;
  if (model::Bf16DotProductsActive()) {
    bf16 = "; one-row bfloat16 linears with avx512_bf16 dot products";
  } else if (model::ActiveIsa() == model::CpuIsa::kAvx512 && model::Avx512InHalves()) {
    bf16 = "; 512-bit operations in halves on this CPU: bfloat16 linears by widening";
  }
  // Int8OneRowInt16XActive (model/cpu_kernels.h): Intel's AVX-512 CPUs,
  // and Zen 4's with AVX512_VNNI (Int8OneRowVnniActive).
  const char* int8 = !model::Int8OneRowInt16XActive() ? ""
                     : model::Int8OneRowVnniActive()
                         ? "; one-row int8 linears with x as int16 and avx512_vnni dot products"
                         : "; one-row int8 linears with x as int16";
  // PrefetchToL2 (model/cpu_kernels_isa.h): on these CPUs, whatever the ISA.
  const char* prefetch =
      model::Avx512InHalves() ? "; weights prefetched into L2 at decode sizes" : "";
  // OneRowSpread, SpreadTiles (model/cpu_kernels_isa.h): measured on
  // these CPUs only.
  std::string spread = model::DescribeOneRowSpread();
  if (!spread.empty()) spread = "; " + spread;
  // SmallBatchLinearLimitsFor (model/cpu_kernels.h): where the BLAS takes over.
  const model::SmallBatchLinearLimits limits =
      model::SmallBatchLinearLimitsFor(model::ActiveIsa());
  const std::string rows = limits.float32_from > 1
                               ? std::to_string(limits.float32_from) + "-" +
                                     std::to_string(limits.float32)
                               : "up to " + std::to_string(limits.float32);
  const std::string routes =
      "; float32 linears of " + rows + " rows on these kernels, the rest on the BLAS";
  return "CPU kernels: " + model::DescribeIsa() + bf16 + int8 + prefetch + spread + routes;
}

void TuneAllocator() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

int SetComputeThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  return at::get_num_threads();
}

}  // namespace dikkat::server
