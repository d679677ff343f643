#ifndef DIKKAT_MODEL_TEXT_BYTE_TOKENIZER_H_
#define DIKKAT_MODEL_TEXT_BYTE_TOKENIZER_H_

#include <memory>

#include "model/text/tokenizer.h"

namespace dikkat::model {

// Byte-level tokenizer: id b (0..255) is byte b; specials follow at 256+.
// Used by models trained on raw bytes and by the build-time tiny model.
std::unique_ptr<Tokenizer> MakeByteTokenizer();

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TEXT_BYTE_TOKENIZER_H_
