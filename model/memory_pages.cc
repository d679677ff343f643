#include "model/memory_pages.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#define DIKKAT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DIKKAT_ASAN 1
#endif
#endif

namespace dikkat::model {

bool HugePageArenaSupported() {
#if defined(__linux__) && !defined(DIKKAT_ASAN)
  return true;
#else
  return false;
#endif
}

const char* TransparentHugePagesMode() {
#if defined(__linux__)
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!in || !std::getline(in, line)) return "unavailable";
  // e.g. "always [madvise] never": the bracketed word is the mode.
  if (line.find("[always]") != std::string::npos) return "always";
  if (line.find("[madvise]") != std::string::npos) return "madvise";
  if (line.find("[never]") != std::string::npos) return "never";
#endif
  return "unavailable";
}

int64_t ProcessHugePageBytes() {
#if defined(__linux__)
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &kb) == 1) return kb * 1024;
  }
#endif
  return -1;
}

}  // namespace dikkat::model
