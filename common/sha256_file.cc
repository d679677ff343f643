#include "common/sha256_file.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dikkat {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

absl::StatusOr<std::string> Sha256File(const std::string& path) { return Sha256Files({path}); }

absl::StatusOr<std::string> Sha256Files(const std::vector<std::string>& paths) {
  // OpenSSL uses the CPU's SHA extensions where present (~2 GB/s here), which
  // keeps fingerprinting multi-GB weights off the start-up critical path.
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("OpenSSL SHA-256 initialisation failed");
  }
  std::vector<unsigned char> buffer(1 << 20);
  for (const std::string& path : paths) {
    std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
    if (file == nullptr) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot open '", path, "' to hash it"));
    }
    size_t n;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
      if (EVP_DigestUpdate(ctx.get(), buffer.data(), n) != 1) {
        return absl::InternalError(absl::StrCat("OpenSSL SHA-256 update failed for '", path, "'"));
      }
    }
    if (std::ferror(file.get()) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read '", path, "' to hash it"));
    }
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &digest_size) != 1) {
    return absl::InternalError("OpenSSL SHA-256 final failed");
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

}  // namespace dikkat
