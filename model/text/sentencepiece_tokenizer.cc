// SentencePiece (tokenizer.model) through libsentencepiece, reached via the
// dlopen()ed module described in sentencepiece_shim/sentencepiece_shim.h.
#include "model/text/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/text/sentencepiece_shim/sentencepiece_shim.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_files.h"
#include "model/text/utf8.h"

#ifndef DIKKAT_SENTENCEPIECE_SHIM_PATH
#define DIKKAT_SENTENCEPIECE_SHIM_PATH ""
#endif

namespace dikkat::model {
namespace {

// GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang 14 only
// answers __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DIKKAT_CLANG_SANITIZER 1
#endif
#endif
#ifndef DIKKAT_CLANG_SANITIZER
#define DIKKAT_CLANG_SANITIZER 0
#endif

constexpr char kShimFile[] = "libdikkat_sentencepiece_shim.so";

// Where the module may be: $DIKKAT_SENTENCEPIECE_SHIM, next to the running
// executable or in its ../lib (installed layouts), then the build tree.
// (Unused in sanitizer builds, where LoadShim refuses before looking.)
[[maybe_unused]] std::vector<std::string> ShimCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("DIKKAT_SENTENCEPIECE_SHIM"); env != nullptr && *env) {
    out.push_back(env);
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / kShimFile).string());
    out.push_back((exe.parent_path().parent_path() / "lib" / kShimFile).string());
  }
  if (*DIKKAT_SENTENCEPIECE_SHIM_PATH) out.push_back(DIKKAT_SENTENCEPIECE_SHIM_PATH);
  return out;
}

absl::StatusOr<OpenSentencePieceFn> LoadShim() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || DIKKAT_CLANG_SANITIZER
  return absl::UnimplementedError(
      "SentencePiece is unavailable in sanitizer builds: its module needs RTLD_DEEPBIND, which "
      "the sanitizer runtimes reject");
#else
  std::vector<std::string> tried;
  for (const std::string& path : ShimCandidates()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      tried.push_back(path + " (missing)");
      continue;
    }
    // DEEPBIND: the module and libsentencepiece resolve their own (bundled
    // protobuf) symbols first; LOCAL: nobody else ever sees them.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      tried.push_back(absl::StrCat(path, " (", dlerror(), ")"));
      continue;
    }
    void* sym = dlsym(handle, kOpenSentencePieceSymbol);
    if (sym == nullptr) {
      tried.push_back(absl::StrCat(path, " (no symbol ", kOpenSentencePieceSymbol, ")"));
      dlclose(handle);
      continue;
    }
    // The handle stays open for the life of the process.
    return reinterpret_cast<OpenSentencePieceFn>(sym);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load the SentencePiece module ", kShimFile,
                   " (set DIKKAT_SENTENCEPIECE_SHIM to its path); tried: ",
                   absl::StrJoin(tried, "; ")));
#endif
}

absl::StatusOr<OpenSentencePieceFn> Shim() {
  static const auto* const shim = new absl::StatusOr<OpenSentencePieceFn>(LoadShim());
  return *shim;
}

// "<0x41>" -> 0x41, or -1 if `piece` is not a byte piece.
int BytePieceValue(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  return static_cast<int>(std::strtol(piece.substr(3, 2).c_str(), nullptr, 16));
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model,
                         std::vector<std::string> fingerprints)
      : model_(std::move(model)), fingerprints_(std::move(fingerprints)) {
    specials_.bos = model_->bos_id();
    specials_.eos = model_->eos_id();
    specials_.pad = model_->pad_id();
    specials_.unk = model_->unk_id();
  }

  std::string kind() const override { return "sentencepiece"; }
  int32_t vocab_size() const override { return model_->piece_size(); }
  const SpecialTokens& special_tokens() const override { return specials_; }
  std::vector<std::string> file_fingerprints() const override { return fingerprints_; }

  absl::StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens) const override {
    if (!utf8::IsValid(text)) {
      return absl::InvalidArgumentError("sentencepiece tokenizer: input text is not valid UTF-8");
    }
    std::vector<int> ids;
    std::string error;
    if (!model_->Encode(std::string(text), &ids, &error)) {
      return absl::InternalError(absl::StrCat("sentencepiece Encode failed: ", error));
    }
    Encoding enc;
    enc.ids.assign(ids.begin(), ids.end());
    if (add_special_tokens) AddSpecialTokens(&enc);
    return enc;
  }

  AddedTokens SpecialTokensAround() const override {
    AddedTokens added;
    if (specials_.bos >= 0) added.before.push_back(specials_.bos);
    return added;
  }

  // Runs of ordinary ids are decoded together so SentencePiece applies its
  // whitespace rules across them; kept specials are inserted as their piece.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string out;
    std::vector<int> run;
    const auto flush = [&] {
      if (!run.empty()) out += model_->Decode(run);
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) continue;
      if (IsSpecial(id)) {
        if (skip_special_tokens) continue;
        flush();
        out += model_->IdToPiece(id);
        continue;
      }
      run.push_back(id);
    }
    flush();
    return utf8::ToValid(out);
  }

  std::string TokenText(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    std::string piece = model_->IdToPiece(id);
    if (model_->IsByte(id)) {
      const int b = BytePieceValue(piece);
      if (b >= 0x20 && b < 0x7F) return std::string(1, static_cast<char>(b));
      return piece;
    }
    static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"
    std::string out;
    for (size_t pos = 0; pos < piece.size();) {
      if (piece.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
        out += ' ';
        pos += kSpaceMark.size();
      } else {
        out += piece[pos++];
      }
    }
    return out;
  }

  std::string TokenBytes(int32_t id) const override {
    if (id >= 0 && id < vocab_size() && model_->IsByte(id)) {
      const int b = BytePieceValue(model_->IdToPiece(id));
      if (b >= 0) return std::string(1, static_cast<char>(b));
    }
    return TokenText(id);
  }

  // Control pieces (<s>, </s>, <pad>, user-declared control symbols). <unk>
  // is an ordinary piece: it decodes to SentencePiece's " ⁇ ".
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && id < vocab_size() && model_->IsControl(id);
  }

 private:
  std::unique_ptr<SentencePieceModel> model_;
  std::vector<std::string> fingerprints_;
  SpecialTokens specials_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path) {
  DIKKAT_ASSIGN_OR_RETURN(OpenSentencePieceFn open, Shim());
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_path, ec)) {
    return absl::NotFoundError(absl::StrCat("SentencePiece model not found: ", model_path));
  }
  std::string error;
  std::unique_ptr<SentencePieceModel> model(open(model_path.c_str(), &error));
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load SentencePiece model ", model_path, ": ", error));
  }
  DIKKAT_ASSIGN_OR_RETURN(auto fingerprints, FingerprintFiles({model_path}));
  return std::make_unique<SentencePieceTokenizer>(std::move(model), std::move(fingerprints));
}

}  // namespace dikkat::model
