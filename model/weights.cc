// ReadWeights (format dispatch) and Sha256File. The format readers live in
// safetensors.cc and torch_checkpoint.cc.
#include "model/weights.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

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

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open '", path, "' to hash it"));
  }
  // OpenSSL uses the CPU's SHA extensions where present (~2 GB/s here), which
  // keeps fingerprinting multi-GB weights off the start-up critical path.
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("OpenSSL SHA-256 initialisation failed");
  }
  std::vector<unsigned char> buffer(1 << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    if (EVP_DigestUpdate(ctx.get(), buffer.data(), n) != 1) {
      return absl::InternalError(absl::StrCat("OpenSSL SHA-256 update failed for '", path, "'"));
    }
  }
  if (std::ferror(file.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read '", path, "' to hash it"));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &digest_size) != 1) {
    return absl::InternalError(absl::StrCat("OpenSSL SHA-256 final failed for '", path, "'"));
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest_size);
  for (unsigned int i = 0; i < digest_size; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xf]);
  }
  return hex;
}

}  // namespace dikkat::model
