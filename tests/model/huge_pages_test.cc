// HugePageArena (model/huge_pages.h): the tensors it hands out hold what was
// copied in, are aligned and adjacent in one storage per chunk, outlive the
// arena, and sit in mappings advised for 2 MiB pages where the kernel has
// transparent huge pages.
#include "model/huge_pages.h"

#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "model/linear_weight.h"
#include "model/memory_pages.h"
#include "model/weight_binder.h"

namespace dikkat::model {
namespace {

constexpr char kUnsupported[] =
    "no arena here (AddressSanitizer keeps the weights in its heap, or not Linux)";

// The VmFlags line of the /proc/self/smaps entry holding `p`; "" if none.
std::string VmFlagsOf(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(HugePageArenaTest, CopiesHoldTheValuesAlignedAndAdjacentInOneStorage) {
  if (!HugePageArena::Supported()) GTEST_SKIP() << kUnsupported;
  HugePageArena arena(true);
  const at::Tensor q = at::randn({96, 64});
  const at::Tensor k = at::randn({32, 64});
  const at::Tensor v = at::randn({32, 64}).to(at::kBFloat16);
  const at::Tensor odd = at::randint(-128, 127, {7, 3}, at::kChar);
  const at::Tensor cq = arena.Copy(q), ck = arena.Copy(k), cv = arena.Copy(v);
  const at::Tensor codd = arena.Copy(odd), after = arena.Copy(q);
  EXPECT_TRUE(at::equal(cq, q));
  EXPECT_TRUE(at::equal(ck, k));
  EXPECT_TRUE(at::equal(cv, v));
  EXPECT_TRUE(at::equal(codd, odd));
  EXPECT_EQ(cv.scalar_type(), at::kBFloat16);
  for (const at::Tensor& t : {cq, ck, cv, codd, after}) {
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
    EXPECT_TRUE(t.storage().is_alias_of(cq.storage()));
  }
  // One after another: 96 x 64 float32 is a whole number of cache lines.
  EXPECT_EQ(static_cast<char*>(ck.data_ptr()), static_cast<char*>(cq.data_ptr()) + q.nbytes());
  // 21 bytes of int8, then the next tensor on the next 64-byte boundary.
  EXPECT_EQ(static_cast<char*>(after.data_ptr()) - static_cast<char*>(codd.data_ptr()), 64);
  EXPECT_EQ(arena.placed_bytes(), 2 * q.nbytes() + k.nbytes() + v.nbytes() + odd.nbytes());
  // Writing one leaves its neighbours alone.
  ck.fill_(0.0f);
  EXPECT_TRUE(at::equal(cq, q));
  EXPECT_TRUE(at::equal(cv, v));
}

TEST(HugePageArenaTest, TensorsOutliveTheArenaAndLargeOnesGetTheirOwnChunk) {
  if (!HugePageArena::Supported()) GTEST_SKIP() << kUnsupported;
  at::Tensor small, large, next;
  const at::Tensor values = at::randn({3 << 20});  // 12 MiB
  {
    HugePageArena arena(true, 4 << 20);
    small = arena.Copy(at::arange(10, at::kFloat));
    large = arena.Copy(values);  // beyond the 4 MiB chunk: a chunk of its own
    next = arena.Copy(at::arange(5, at::kFloat));
    EXPECT_FALSE(large.storage().is_alias_of(small.storage()));
    // The large chunk is full and the arena never goes back to an earlier
    // one: `next` starts a third.
    EXPECT_FALSE(next.storage().is_alias_of(small.storage()));
    EXPECT_FALSE(next.storage().is_alias_of(large.storage()));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data_ptr()) % kHugePageBytes, 0u);
  }
  EXPECT_TRUE(at::equal(small, at::arange(10, at::kFloat)));
  EXPECT_TRUE(at::equal(large, values));
  EXPECT_TRUE(at::equal(next, at::arange(5, at::kFloat)));
  large.add_(1.0f);  // still mapped and writable
  EXPECT_TRUE(at::equal(large, values + 1.0f));
}

TEST(HugePageArenaTest, DisabledGivesOrdinaryTensors) {
  HugePageArena arena(false);
  const at::Tensor a = arena.Copy(at::randn({100}));
  const at::Tensor b = arena.Empty({4, 5}, at::kHalf);
  EXPECT_FALSE(a.storage().is_alias_of(b.storage()));
  EXPECT_EQ(b.scalar_type(), at::kHalf);
  EXPECT_EQ(b.sizes(), at::IntArrayRef({4, 5}));
  EXPECT_EQ(arena.placed_bytes(), 0);
  EXPECT_FALSE(arena.Copy(at::Tensor()).defined());
}

// The advice is what the arena controls; whether the kernel then finds free
// 2 MiB pages depends on the machine's memory, so the backing is reported,
// not asserted.
TEST(HugePageArenaTest, ChunksAreAdvisedForHugePages) {
  if (!HugePageArena::Supported()) GTEST_SKIP() << kUnsupported;
  const std::string mode = TransparentHugePagesMode();
  if (mode != "madvise" && mode != "always") {
    GTEST_SKIP() << "transparent huge pages: " << mode;
  }
  HugePageArena arena(true, 8 << 20);
  at::Tensor t = arena.Empty({2 << 20}, at::kFloat);  // 8 MiB
  t.fill_(1.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kHugePageBytes, 0u);
  const std::string flags = VmFlagsOf(t.data_ptr());
  ASSERT_FALSE(flags.empty()) << "no /proc/self/smaps entry for the chunk";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  std::cout << "process memory in huge pages: " << ProcessHugePageBytes() / (1 << 20)
            << " MiB\n";
}

// What attention relies on: q, k and v taken together are row views of one
// stacked matrix (and, under int8, its scales of one stacked tensor), with or
// without the arena, so MultiHeadAttention fuses them as a view; each piece
// holds what it would alone.
TEST(HugePageArenaTest, StackedMatricesAreRowViewsOfOneStorage) {
  TensorMap file;
  file["q"] = at::randn({64, 96});
  file["k"] = at::randn({32, 96});
  file["v"] = at::randn({96, 32}).t();  // strided, as a transposed (Conv1D) source
  file["b"] = at::randn({64});
  file["bk"] = at::randn({31});  // not a whole cache line
  file["bv"] = at::randn({32});
  for (bool huge : {true, false}) {
    for (c10::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kChar}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (huge ? " in the arena" : " in the heap"));
      WeightBinder binder(file, dtype, at::kFloat, c10::Device(c10::DeviceType::CPU), huge);
      const std::vector<LinearWeight> qkv =
          *binder.TakeStackedMatrices({"q", "k", "v"}, {{64, 96}, {32, 96}, {32, 96}});
      const std::vector<at::Tensor> biases =
          *binder.TakeStacked({"b", "bk", "bv"}, {{64}, {31}, {32}});
      ASSERT_EQ(qkv.size(), 3u);
      const char* names[] = {"q", "k", "v"};
      int64_t row = 0;
      for (int i = 0; i < 3; ++i) {
        const LinearWeight& w = qkv[i];
        EXPECT_TRUE(w.w.storage().is_alias_of(qkv[0].w.storage()));
        EXPECT_EQ(static_cast<char*>(w.w.data_ptr()),
                  static_cast<char*>(qkv[0].w.data_ptr()) + row * 96 * w.w.element_size());
        const at::Tensor& src = file[names[i]];
        if (dtype == at::kChar) {
          const LinearWeight alone = QuantizeInt8(src);
          EXPECT_TRUE(at::equal(w.w, alone.w));
          EXPECT_TRUE(at::equal(w.scales, alone.scales));
          EXPECT_TRUE(w.scales.storage().is_alias_of(qkv[0].scales.storage()));
        } else {
          EXPECT_TRUE(at::equal(w.w, src.to(dtype)));
        }
        row += src.size(0);
      }
      EXPECT_TRUE(biases[1].storage().is_alias_of(biases[0].storage()));
      EXPECT_EQ(static_cast<float*>(biases[2].data_ptr()),
                static_cast<float*>(biases[0].data_ptr()) + 95);
      EXPECT_TRUE(at::equal(biases[1], file["bk"]));
      EXPECT_EQ(binder.huge_page_bytes(), huge && HugePageArena::Supported() ? binder.bytes() : 0);
    }
  }
}

}  // namespace
}  // namespace dikkat::model
