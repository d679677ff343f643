// HugePageArena: memory for the long-lived CPU tensors that every step reads
// end to end (the weights, the KV cache), in regions the kernel is asked to
// back with 2 MiB pages (Linux transparent huge pages, madvise
// MADV_HUGEPAGE).
//
// Why: a decode step streams all the weights from memory (~475 MiB for
// GPT-2 small in float32). In 4 KiB pages that is a TLB miss and a page walk
// every 4 KiB of every stream. Debian and Ubuntu default THP to "madvise",
// so memory nobody advises stays in 4 KiB pages there (docs/performance.md,
// "Weights and KV cache in 2 MiB pages").
//
// Tensors are placed one after another (kAlign-byte aligned) in chunks of
// at least `chunk_bytes`, each mapped on its own 2 MiB boundary, as views of
// one storage per chunk; a tensor keeps its chunk mapped, so tensors may
// outlive the arena and a chunk is unmapped with its last tensor (one
// long-lived tensor keeps its whole chunk: place only what lives as long).
// A chunk's untouched tail is address space only (and commit charge under
// vm.overcommit_memory=2); its last touched 2 MiB page is resident whole.
// Where THP is off ("never") the advice changes nothing and the memory is
// ordinary anonymous memory; if a mapping fails, the arena gives heap
// tensors (at::empty) from then on. Not thread-safe; one arena per load.
#ifndef DIKKAT_MODEL_HUGE_PAGES_H_
#define DIKKAT_MODEL_HUGE_PAGES_H_

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "model/memory_pages.h"

namespace dikkat::model {

class HugePageArena {
 public:
  static constexpr int64_t kAlign = 64;  // bytes; every tensor starts on it

  // Linux, and not under AddressSanitizer: there the weights stay in its
  // heap, whose redzones catch a kernel reading past a matrix's end
  // (HugePageArenaSupported, memory_pages.h).
  static bool Supported();

  // enabled = false, or not Supported(): every tensor from at::empty (the
  // memory as before).
  explicit HugePageArena(bool enabled, int64_t chunk_bytes = int64_t{256} << 20);
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // An uninitialized contiguous CPU tensor.
  at::Tensor Empty(at::IntArrayRef sizes, c10::ScalarType dtype);
  // A contiguous copy of `t` (any device) on the CPU in the arena; undefined
  // stays undefined.
  at::Tensor Copy(const at::Tensor& t);

  // False when off, unsupported, or after a mapping failed.
  bool enabled() const { return enabled_; }
  // Bytes of tensors placed in advised chunks so far.
  int64_t placed_bytes() const { return placed_; }

 private:
  bool enabled_;
  int64_t chunk_bytes_;
  at::Tensor chunk_;  // uint8 over the current mapping
  int64_t used_ = 0;  // bytes of chunk_ handed out
  int64_t placed_ = 0;
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_HUGE_PAGES_H_
