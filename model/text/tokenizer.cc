#include "model/text/tokenizer.h"

#include <algorithm>
#include <array>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "model/text/utf8.h"

namespace dikkat::model {

bool IsValidUtf8(std::string_view text) { return utf8::IsValid(text); }

void Tokenizer::AddSpecialTokens(Encoding* enc) const {
  const AddedTokens added = SpecialTokensAround();
  enc->ids.insert(enc->ids.begin(), added.before.begin(), added.before.end());
  enc->ids.insert(enc->ids.end(), added.after.begin(), added.after.end());
  // One segment (BERT's type 0) over the whole.
  if (!enc->type_ids.empty()) enc->type_ids.assign(enc->ids.size(), 0);
}

const std::vector<std::pair<std::string, int32_t>>& Tokenizer::SpecialTexts() const {
  absl::call_once(special_texts_once_, [this] {
    absl::flat_hash_map<std::string, int32_t> by_text;
    const int32_t n = vocab_size();
    for (int32_t id = 0; id < n; ++id) {
      if (!IsSpecial(id)) continue;
      std::string text = TokenText(id);
      if (!text.empty()) by_text.emplace(std::move(text), id);  // the lowest id stays
    }
    special_texts_.assign(by_text.begin(), by_text.end());
    std::sort(special_texts_.begin(), special_texts_.end(), [](const auto& a, const auto& b) {
      if (a.first.size() != b.first.size()) return a.first.size() > b.first.size();
      return a.second < b.second;
    });
  });
  return special_texts_;
}

absl::StatusOr<Encoding> EncodeParsingSpecialTokens(const Tokenizer& tokenizer,
                                                    std::string_view text,
                                                    bool add_special_tokens) {
  const std::vector<std::pair<std::string, int32_t>>& specials = tokenizer.SpecialTexts();
  if (specials.empty()) return tokenizer.Encode(text, add_special_tokens);
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
  // Candidates by first byte, longest first (SpecialTexts' order).
  std::array<std::vector<int32_t>, 256> by_first;
  for (size_t k = 0; k < specials.size(); ++k) {
    by_first[static_cast<unsigned char>(specials[k].first[0])].push_back(static_cast<int32_t>(k));
  }
  Encoding out;
  bool type_ids = false;
  auto encode_part = [&](std::string_view part) -> absl::Status {
    if (part.empty()) return absl::OkStatus();
    absl::StatusOr<Encoding> e = tokenizer.EncodePart(part, part.data() == text.data());
    if (!e.ok()) return e.status();
    out.ids.insert(out.ids.end(), e->ids.begin(), e->ids.end());
    type_ids = type_ids || !e->type_ids.empty();
    return absl::OkStatus();
  };
  size_t part_start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t match = -1;
    for (int32_t k : by_first[static_cast<unsigned char>(text[i])]) {
      const std::string& s = specials[k].first;
      if (text.compare(i, s.size(), s) == 0) {
        match = k;
        break;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    if (absl::Status s = encode_part(text.substr(part_start, i - part_start)); !s.ok()) return s;
    out.ids.push_back(specials[match].second);
    i += specials[match].first.size();
    part_start = i;
  }
  if (absl::Status s = encode_part(text.substr(part_start)); !s.ok()) return s;
  // One segment (BERT's type 0) when the tokenizer gives segment ids.
  if (type_ids) out.type_ids.assign(out.ids.size(), 0);
  if (add_special_tokens) tokenizer.AddSpecialTokens(&out);
  return out;
}

}  // namespace dikkat::model
