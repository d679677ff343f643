// Hugging Face `model.safetensors.index.json` on arbitrary text: the
// weight_map and shard path checks (model::ParseSafetensorsIndex), then, for
// an index those accept, model::ReadSafetensorsIndex from a sandbox:
//
//   <sandbox>/outside.safetensors            tensor "outside_secret"
//   <sandbox>/sub/model.safetensors.index.json   the input
//   <sandbox>/sub/model-00001-of-00002.safetensors   "a", "b"
//   <sandbox>/sub/model-00002-of-00002.safetensors   "c"
//   <sandbox>/sub/nested/shard.safetensors           "d"
//
// Never crashes. Every accepted shard path stays inside sub/ (no absolute
// path, no ".." that climbs out, e.g. to outside.safetensors), each tensor
// name belongs to one shard, and a successful read returns exactly the
// names the index lists.
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "model/io/safetensors.h"
#include "model/io/weights.h"

namespace {

namespace fs = std::filesystem;

struct Sandbox {
  fs::path root;
  fs::path sub;
  std::string index;
};

void WriteShard(const fs::path& path, const std::vector<std::string>& names) {
  dikkat::model::TensorMap tensors;
  for (const std::string& name : names) tensors[name] = at::arange(4, at::kFloat);
  fs::create_directories(path.parent_path());
  if (!dikkat::model::WriteSafetensors(path.string(), tensors).ok()) std::abort();
}

const Sandbox& GetSandbox() {
  static const Sandbox* sandbox = [] {
    auto* s = new Sandbox;
    s->root = fs::temp_directory_path() / ("dikkat_fuzz_index_" + std::to_string(getpid()));
    s->sub = s->root / "sub";
    s->index = (s->sub / "model.safetensors.index.json").string();
    WriteShard(s->root / "outside.safetensors", {"outside_secret"});
    WriteShard(s->sub / "model-00001-of-00002.safetensors", {"a", "b"});
    WriteShard(s->sub / "model-00002-of-00002.safetensors", {"c"});
    WriteShard(s->sub / "nested" / "shard.safetensors", {"d"});
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(GetSandbox().root, ec);
    });
    return s;
  }();
  return *sandbox;
}

// Whether `shard`, taken relative to `dir`, names something inside it.
bool StaysInside(const std::string& shard) {
  const fs::path rel = fs::path(shard).lexically_normal();
  if (rel.is_absolute() || rel.empty()) return false;
  return *rel.begin() != "..";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Sandbox& sandbox = GetSandbox();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto shards = dikkat::model::ParseSafetensorsIndex(text, sandbox.index);
  if (!shards.ok()) {
    DIKKAT_FUZZ_CHECK(!shards.status().message().empty(), "an error without a message");
    return 0;
  }
  std::set<std::string> names;
  for (const auto& [shard, shard_names] : *shards) {
    DIKKAT_FUZZ_CHECK(StaysInside(shard), "accepted shard path '%s' leaves the index's folder",
                      shard.c_str());
    DIKKAT_FUZZ_CHECK(!shard_names.empty(), "shard '%s' without tensors", shard.c_str());
    for (const std::string& name : shard_names) {
      DIKKAT_FUZZ_CHECK(names.insert(name).second, "tensor '%s' in two shards", name.c_str());
    }
  }
  DIKKAT_FUZZ_CHECK(!names.empty(), "an accepted index without tensors");

  // ReadSafetensorsIndex reads the index at its place in the sandbox.
  FILE* f = std::fopen(sandbox.index.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  auto tensors = dikkat::model::ReadSafetensorsIndex(sandbox.index);
  if (!tensors.ok()) {
    DIKKAT_FUZZ_CHECK(!tensors.status().message().empty(), "an error without a message");
    return 0;
  }
  DIKKAT_FUZZ_CHECK(tensors->count("outside_secret") == 0,
                    "a shard outside the index's folder was read");
  std::set<std::string> got;
  for (const auto& [name, tensor] : *tensors) {
    DIKKAT_FUZZ_CHECK(tensor.defined(), "tensor '%s' is undefined", name.c_str());
    got.insert(name);
  }
  DIKKAT_FUZZ_CHECK(got == names, "the read tensors are not the ones the index lists");
  return 0;
}
