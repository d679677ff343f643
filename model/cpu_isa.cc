#include "model/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace dikkat::model {
namespace {

// CPUID leaf 0's vendor string (EBX, EDX, ECX: "AuthenticAMD",
// "GenuineIntel"); empty where there is none.
std::string CpuVendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, regs[3] = {0, 0, 0};
  if (__get_cpuid(0, &eax, &regs[0], &regs[2], &regs[1]) == 0) return "";
  return std::string(reinterpret_cast<const char*>(regs), sizeof(regs));
#else
  return "";
#endif
}

struct IsaChoice {
  CpuIsa isa;
  std::string how;  // for DescribeIsa
};

IsaChoice Choose() {
  const CpuIsa detected = DetectedIsa();
  const char* env = std::getenv("DIKKAT_ISA");
  if (env == nullptr || *env == '\0') return {detected, "detected"};
  const std::optional<CpuIsa> wanted = ParseIsa(env);
  if (!wanted.has_value()) {
    return {detected, std::string("detected; DIKKAT_ISA=") + env +
                          " is not one of avx512, avx2, generic and was ignored"};
  }
  if (static_cast<int>(*wanted) > static_cast<int>(detected)) {
    return {detected, std::string("DIKKAT_ISA=") + env + " asked for more than the CPU supports"};
  }
  if (*wanted == detected) return {detected, "detected; DIKKAT_ISA agrees"};
  return {*wanted, std::string("forced by DIKKAT_ISA; the CPU supports ") +
                       std::string(IsaName(detected))};
}

const IsaChoice& Initial() {
  static const IsaChoice choice = Choose();
  return choice;
}

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports has no "f16c").
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
#endif

// -1: not overridden by SetActiveIsa.
std::atomic<int> override_isa{-1};

}  // namespace

std::string_view IsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kGeneric: break;
  }
  return "generic";
}

std::optional<CpuIsa> ParseIsa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == IsaName(isa)) return isa;
  }
  return std::nullopt;
}

bool IsaSupported(CpuIsa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && IsaSupported(CpuIsa::kAvx2);
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
    case CpuIsa::kGeneric: return true;
  }
  return false;
#else
  return isa == CpuIsa::kGeneric;
#endif
}

CpuIsa DetectedIsa() {
  // Once: IsaSupported executes CPUID (HasF16c), which a hypervisor traps, and
  // kernels ask per task (SpreadTiles, cpu_kernels.cc).
  static const CpuIsa detected = [] {
    if (IsaSupported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
    if (IsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
    return CpuIsa::kGeneric;
  }();
  return detected;
}

CpuIsa ActiveIsa() {
  const int o = override_isa.load(std::memory_order_relaxed);
  return o >= 0 ? static_cast<CpuIsa>(o) : Initial().isa;
}

bool SetActiveIsa(CpuIsa isa) {
  if (!IsaSupported(isa)) return false;
  override_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

bool Avx512InHalves() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool in_halves = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (CpuVendor() != "AuthenticAMD" || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) {
      return false;
    }
    const unsigned base = (eax >> 8) & 0xFu, extended = (eax >> 20) & 0xFFu;
    const unsigned family = base == 0xFu ? base + extended : base;
    return family == 0x19u && IsaSupported(CpuIsa::kAvx512);
  }();
  return in_halves;
#else
  return false;
#endif
}

bool IntelCpu() {
  static const bool intel = CpuVendor() == "GenuineIntel";
  return intel;
}

int64_t L2CacheBytes() {
  static const int64_t bytes = [] {
#if defined(_SC_LEVEL2_CACHE_SIZE)
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0) return static_cast<int64_t>(l2);
#endif
    return int64_t{1} << 20;
  }();
  return bytes;
}

std::string DescribeIsa() {
  const int o = override_isa.load(std::memory_order_relaxed);
  if (o >= 0) return std::string(IsaName(static_cast<CpuIsa>(o))) + " (set by SetActiveIsa)";
  return std::string(IsaName(Initial().isa)) + " (" + Initial().how + ")";
}

}  // namespace dikkat::model
