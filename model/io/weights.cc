// ReadWeights (format dispatch). The format readers live in
// safetensors.cc and torch_checkpoint.cc.
#include "model/io/weights.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/io/safetensors.h"
#include "model/io/torch_checkpoint.h"

namespace dikkat::model {
namespace {

namespace fs = std::filesystem;

// In a model directory: the first of these that exists wins.
absl::StatusOr<TensorMap> ReadWeightsDirectory(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "model.safetensors", ec)) {
    return ReadSafetensors((dir / "model.safetensors").string());
  }
  if (fs::is_regular_file(dir / "model.safetensors.index.json", ec)) {
    return ReadSafetensorsIndex((dir / "model.safetensors.index.json").string());
  }
  if (fs::is_regular_file(dir / "pytorch_model.bin", ec)) {
    return ReadTorchCheckpoint((dir / "pytorch_model.bin").string());
  }
  std::vector<std::string> pt_files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == ".pt") {
      pt_files.push_back(entry.path().filename().string());
    }
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot list weights directory '", dir.string(), "': ", ec.message()));
  }
  if (pt_files.size() == 1) return ReadTorchCheckpoint((dir / pt_files[0]).string());
  if (pt_files.size() > 1) {
    std::sort(pt_files.begin(), pt_files.end());
    return absl::InvalidArgumentError(
        absl::StrCat("weights directory '", dir.string(), "' holds several .pt files (",
                     absl::StrJoin(pt_files, ", "), "); name the one to load"));
  }
  return absl::NotFoundError(absl::StrCat(
      "weights directory '", dir.string(),
      "' has none of model.safetensors, model.safetensors.index.json, pytorch_model.bin, *.pt"));
}

}  // namespace

absl::StatusOr<TensorMap> ReadWeights(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat("weights path '", path, "' does not exist"));
  }
  if (fs::is_directory(status)) return ReadWeightsDirectory(path);
  if (absl::EndsWith(path, ".safetensors")) return ReadSafetensors(path);
  if (absl::EndsWith(path, ".index.json")) return ReadSafetensorsIndex(path);
  return ReadTorchCheckpoint(path);
}

}  // namespace dikkat::model
