// What the kernel gives the process for its big regions: the transparent
// huge page mode and how much memory is in 2 MiB pages (for the server's log
// and the tests of HugePageArena, huge_pages.h). No LibTorch.
#ifndef DIKKAT_MODEL_MEMORY_PAGES_H_
#define DIKKAT_MODEL_MEMORY_PAGES_H_

#include <cstdint>

namespace dikkat::model {

inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// Whether this build places long-lived tensors in advised mappings at all
// (HugePageArena, huge_pages.h): Linux, and not under AddressSanitizer,
// whose heap redzones should keep seeing the weights.
bool HugePageArenaSupported();

// The kernel's transparent huge page mode: "always", "madvise" (what the
// arena's advice needs), "never", or "unavailable" (no such kernel feature,
// or not Linux); /sys/kernel/mm/transparent_hugepage/enabled.
const char* TransparentHugePagesMode();

// Bytes of this process's anonymous memory in huge pages (AnonHugePages of
// /proc/self/smaps_rollup); -1 where that cannot be read.
int64_t ProcessHugePageBytes();

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_MEMORY_PAGES_H_
