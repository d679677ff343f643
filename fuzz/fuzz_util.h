// Helpers shared by the libFuzzer targets in fuzz/.
#ifndef DIKKAT_FUZZ_FUZZ_UTIL_H_
#define DIKKAT_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dikkat::fuzz {

// The readers under test take a path: the input goes to one file per
// process (libFuzzer runs inputs one at a time in a process), rewritten for
// every input and removed at exit.
inline std::string g_input_path;

inline const std::string& WriteInputFile(const uint8_t* data, size_t size, const char* suffix) {
  if (g_input_path.empty()) {
    g_input_path = std::string("/tmp/dikkat_fuzz_") + std::to_string(getpid()) + suffix;
    std::atexit([] { std::remove(g_input_path.c_str()); });
  }
  FILE* f = std::fopen(g_input_path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return g_input_path;
}

// Aborts (a libFuzzer crash) with a message when a property does not hold.
#define DIKKAT_FUZZ_CHECK(cond, ...)                                   \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "property failed: %s\n", #cond);            \
      std::fprintf(stderr, __VA_ARGS__);                               \
      std::fprintf(stderr, "\n");                                      \
      std::abort();                                                    \
    }                                                                  \
  } while (0)

}  // namespace dikkat::fuzz

#endif  // DIKKAT_FUZZ_FUZZ_UTIL_H_
