#include "model/huge_pages.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/strides.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dikkat::model {
namespace {

constexpr int64_t kAlign = HugePageArena::kAlign;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// One mapping of `bytes` (a multiple of kHugePageBytes) on a 2 MiB boundary,
// nullptr when it cannot be mapped.
std::shared_ptr<void> MapAligned(int64_t bytes) {
#if defined(__linux__)
  // Map 2 MiB more, then trim both ends to the boundary.
  const size_t span = static_cast<size_t>(bytes + kHugePageBytes);
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const auto aligned = static_cast<uintptr_t>(RoundUp(static_cast<int64_t>(start), kHugePageBytes));
  const size_t head = aligned - start;
  const size_t tail = span - head - static_cast<size_t>(bytes);
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + static_cast<uintptr_t>(bytes)), tail);
  void* base = reinterpret_cast<void*>(aligned);
  // Advice only: without THP in the kernel (EINVAL) the pages stay 4 KiB.
  (void)madvise(base, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  return std::shared_ptr<void>(base, [bytes](void* p) { munmap(p, static_cast<size_t>(bytes)); });
#else
  (void)bytes;
  return nullptr;
#endif
}

}  // namespace

bool HugePageArena::Supported() { return HugePageArenaSupported(); }

HugePageArena::HugePageArena(bool enabled, int64_t chunk_bytes)
    : enabled_(enabled && Supported()),
      chunk_bytes_(RoundUp(std::max(chunk_bytes, kHugePageBytes), kHugePageBytes)) {}

at::Tensor HugePageArena::Empty(at::IntArrayRef sizes, c10::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t bytes = numel * item;
  if (!enabled_ || bytes == 0) return at::empty(sizes, options);
  int64_t offset = RoundUp(used_, kAlign);
  if (!chunk_.defined() || offset + bytes > chunk_.numel()) {
    const int64_t chunk_bytes = std::max(RoundUp(bytes, kHugePageBytes), chunk_bytes_);
    std::shared_ptr<void> mapping = MapAligned(chunk_bytes);
    if (mapping == nullptr) {  // out of address space or refused: the heap from now on
      enabled_ = false;
      return at::empty(sizes, options);
    }
    // One byte tensor over the whole chunk; the deleter holds the mapping,
    // so it is unmapped with the chunk's last tensor.
    chunk_ = at::from_blob(
        mapping.get(), {chunk_bytes}, [mapping](void*) mutable { mapping.reset(); },
        at::TensorOptions().dtype(at::kByte));
    used_ = 0;
    offset = 0;
  }
  used_ = offset + bytes;
  placed_ += bytes;
  // A view of the chunk's storage: tensors placed one after another share
  // it, so neighbours are adjacent pieces of one storage (separate q, k and v
  // projections fuse without a copy: MultiHeadAttention).
  at::Tensor out = at::empty({0}, options);
  out.set_(chunk_.storage(), offset / item, sizes, c10::contiguous_strides(sizes));
  return out;
}

at::Tensor HugePageArena::Copy(const at::Tensor& t) {
  if (!t.defined()) return t;
  at::Tensor out = Empty(t.sizes(), t.scalar_type());
  out.copy_(t);
  return out;
}

}  // namespace dikkat::model
