#include "model/text/tokenizer.h"

#include "model/text/utf8.h"

namespace dikkat::model {

bool IsValidUtf8(std::string_view text) { return utf8::IsValid(text); }

}  // namespace dikkat::model
