// HugePageArena: memory for the long-lived CPU tensors that every step reads
// end to end (the weights, the KV cache), in regions the kernel is asked to
// back with 2 MiB pages (Linux transparent huge pages, madvise
// MADV_HUGEPAGE).
//
// Why: a decode step streams all the weights from memory (~475 MiB for
// GPT-2 small in float32). In 4 KiB pages that is a TLB miss and a page walk
// every 4 KiB of every stream, and the hardware prefetchers stop at each 4 KiB
// page's end. Most distributions default THP to "madvise", so memory nobody
// advised stays in 4 KiB pages (docs/performance.md, "Weights in 2 MiB
// pages").
//
// Tensors are placed one after another (64-byte aligned) in chunks of at
// least `chunk_bytes`, each mapped on its own 2 MiB boundary, as views of
// one storage per chunk; a tensor keeps its chunk mapped, so tensors may
// outlive the arena and a chunk is unmapped with its last tensor (one
// long-lived tensor keeps its whole chunk: place only what lives as long). Untouched tails cost address
// space only. Where THP is off ("never", or no Linux), the advice changes
// nothing and the memory is ordinary anonymous memory; if mapping fails the
// arena falls back to at::empty. Not thread-safe; one arena per load.
#ifndef DIKKAT_MODEL_HUGE_PAGES_H_
#define DIKKAT_MODEL_HUGE_PAGES_H_

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "model/memory_pages.h"

namespace dikkat::model {

class HugePageArena {
 public:
  // enabled = false, or not Supported(): every tensor from at::empty (the
  // memory as before).
  explicit HugePageArena(bool enabled, int64_t chunk_bytes = int64_t{64} << 20);

  // Linux, and not under AddressSanitizer: there the weights stay in its
  // heap, whose redzones catch a kernel reading past a matrix's end.
  static bool Supported();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // An uninitialized contiguous CPU tensor.
  at::Tensor Empty(at::IntArrayRef sizes, c10::ScalarType dtype);
  // A contiguous copy of `t` (any device) on the CPU in the arena; undefined
  // stays undefined.
  at::Tensor Copy(const at::Tensor& t);

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
