// The boundary between dikkat_text and libsentencepiece.
//
// Why a separate, dlopen()ed module: Debian's libsentencepiece.so exports the
// protobuf-lite it bundles (an older protobuf than libprotobuf.so 3.21, which
// libtorch pulls in). Linked into an executable next to libtorch, whichever
// copy the loader finds first interposes the other and the process crashes in
// static initialisation. dikkat_text therefore never links libsentencepiece;
// it dlopen()s this module with RTLD_LOCAL | RTLD_DEEPBIND, so the module and
// libsentencepiece bind to their own protobuf and nothing else sees it.
//
// Only standard-library types cross the boundary (both sides share the one
// libstdc++). No Abseil here: sentencepiece_processor.h defines its own
// absl::string_view.
#ifndef DIKKAT_MODEL_TEXT_SENTENCEPIECE_SHIM_SENTENCEPIECE_SHIM_H_
#define DIKKAT_MODEL_TEXT_SENTENCEPIECE_SHIM_SENTENCEPIECE_SHIM_H_

#include <string>
#include <vector>

namespace dikkat::model {

// One loaded SentencePiece model. Const methods are thread-safe (they call
// SentencePieceProcessor's const methods only).
class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  // false + *error on failure (SentencePiece's status message).
  virtual bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const = 0;
  virtual std::string Decode(const std::vector<int>& ids) const = 0;
  virtual int piece_size() const = 0;
  virtual std::string IdToPiece(int id) const = 0;
  virtual bool IsControl(int id) const = 0;
  virtual bool IsUnknown(int id) const = 0;
  virtual bool IsByte(int id) const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
  virtual int unk_id() const = 0;
};

// The module's one exported symbol: loads `path` (a tokenizer.model file).
// Returns nullptr and sets *error on failure. The caller owns the result.
using OpenSentencePieceFn = SentencePieceModel* (*)(const char* path, std::string* error);
inline constexpr char kOpenSentencePieceSymbol[] = "dikkat_open_sentencepiece";

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_SENTENCEPIECE_SHIM_SENTENCEPIECE_SHIM_H_
