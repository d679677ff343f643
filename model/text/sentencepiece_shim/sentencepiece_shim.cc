// The dlopen()ed side of sentencepiece_shim.h: a thin adapter over
// sentencepiece::SentencePieceProcessor.
#include "model/text/sentencepiece_shim/sentencepiece_shim.h"

#include <sentencepiece_processor.h>

#include <memory>

namespace dikkat::model {
namespace {

class SentencePieceModelImpl final : public SentencePieceModel {
 public:
  bool Load(const char* path, std::string* error) {
    const auto status = processor_.Load(path);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }

  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const override {
    const auto status = processor_.Encode(text, ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string text;
    // Fails only for ids out of range, which the caller has filtered out.
    (void)processor_.Decode(ids, &text);
    return text;
  }
  int piece_size() const override { return processor_.GetPieceSize(); }
  std::string IdToPiece(int id) const override { return processor_.IdToPiece(id); }
  bool IsControl(int id) const override { return processor_.IsControl(id); }
  bool IsUnknown(int id) const override { return processor_.IsUnknown(id); }
  bool IsByte(int id) const override { return processor_.IsByte(id); }
  int bos_id() const override { return processor_.bos_id(); }
  int eos_id() const override { return processor_.eos_id(); }
  int pad_id() const override { return processor_.pad_id(); }
  int unk_id() const override { return processor_.unk_id(); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace
}  // namespace dikkat::model

extern "C" __attribute__((visibility("default"))) dikkat::model::SentencePieceModel*
dikkat_open_sentencepiece(const char* path, std::string* error) {
  auto model = std::make_unique<dikkat::model::SentencePieceModelImpl>();
  if (!model->Load(path, error)) return nullptr;
  return model.release();
}
