// Hugging Face tokenizer.json: reads the parts dikkat supports and refuses
// the rest by name, so an unsupported pipeline never yields wrong ids quietly.
#include "model/text/tokenizer_json.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/text/byte_level_bpe.h"
#include "model/text/gpt2_pretokenizer.h"
#include "model/text/llama_bpe_tokenizer.h"
#include "model/text/tokenizer.h"
#include "model/text/tokenizer_files.h"
#include "model/text/wordpiece_tokenizer.h"
#include "nlohmann/json.hpp"

namespace dikkat::model {
namespace {

using Json = nlohmann::json;

// A number in a tokenizer.json that is not a 32-bit integer where one is
// needed (a token id, a length).
class NotAnInt32 : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// nlohmann's get<int32_t>() converts any number: a float outside int32's
// range is undefined behaviour (UBSan aborts), a larger integer wraps to
// another id. Seen while writing fuzz/tokenizer_files_fuzzer.cc.
int32_t Int32Of(const Json& j) {
  const bool fits = (j.is_number_unsigned() && j.get<uint64_t>() <= INT32_MAX) ||
                    (j.is_number_integer() && !j.is_number_unsigned() &&
                     j.get<int64_t>() >= INT32_MIN && j.get<int64_t>() <= INT32_MAX);
  if (!fits) throw NotAnInt32(absl::StrCat(j.dump(), " is not a 32-bit integer"));
  return static_cast<int32_t>(j.get<int64_t>());
}

std::string TypeOf(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
  return j.dump();
}

struct ByteLevelPipeline {
  BytePreTokenizer pre_tokenizer = BytePreTokenizer::kGpt2;
  bool add_prefix_space = false;
};

// The byte-level pre-tokenizers dikkat implements:
//   ByteLevel (GPT-2's pattern), alone or as the only member of a Sequence;
//   Sequence[Digits(individual_digits), ByteLevel]          (SmolLM);
//   Sequence[Split(Llama 3's or Qwen2's pattern, Isolated),
//            ByteLevel(use_regex = false)]                  (Llama 3, Qwen2).
absl::StatusOr<ByteLevelPipeline> ReadByteLevelPipeline(const std::string& path, const Json& pre) {
  const auto unsupported = [&]() {
    return absl::UnimplementedError(absl::StrCat(
        path, ": BPE with pre_tokenizer ", pre.dump().substr(0, 600),
        " is not supported (supported: ByteLevel with the GPT-2 pattern; Digits(individual_digits) "
        "then ByteLevel; Split with Llama 3's or Qwen2's pattern then ByteLevel(use_regex=false))"));
  };
  std::vector<const Json*> steps;
  if (TypeOf(pre) == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array()) {
    for (const Json& step : pre["pretokenizers"]) steps.push_back(&step);
  } else if (!pre.is_null()) {
    steps.push_back(&pre);
  }
  if (steps.empty() || steps.size() > 2 || TypeOf(*steps.back()) != "ByteLevel") return unsupported();
  const Json& byte_level = *steps.back();
  ByteLevelPipeline pipeline;
  pipeline.add_prefix_space = byte_level.value("add_prefix_space", false);
  const bool own_regex = byte_level.value("use_regex", true);
  if (steps.size() == 1) {
    if (!own_regex) return unsupported();
    return pipeline;
  }
  const Json& first = *steps.front();
  if (TypeOf(first) == "Digits" && first.value("individual_digits", false) && own_regex &&
      !pipeline.add_prefix_space) {  // (Hugging Face would prefix each digit piece)
    pipeline.pre_tokenizer = BytePreTokenizer::kGpt2Digits;
    return pipeline;
  }
  if (TypeOf(first) != "Split" || own_regex || pipeline.add_prefix_space ||
      first.value("behavior", std::string()) != "Isolated" || first.value("invert", false) ||
      !first.contains("pattern") || !first["pattern"].is_object() ||
      !first["pattern"].contains("Regex") || !first["pattern"]["Regex"].is_string()) {
    return unsupported();
  }
  const std::string regex = first["pattern"]["Regex"].get<std::string>();
  if (regex == kLlama3SplitPattern) {
    pipeline.pre_tokenizer = BytePreTokenizer::kLlama3;
  } else if (regex == kQwen2SplitPattern) {
    pipeline.pre_tokenizer = BytePreTokenizer::kQwen2;
  } else {
    return unsupported();
  }
  return pipeline;
}

struct SpecialFrame {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

// What add_special_tokens puts around a single sequence.
absl::StatusOr<SpecialFrame> ParsePostProcessor(const std::string& path, const Json& post) {
  SpecialFrame frame;
  const std::string type = TypeOf(post);
  if (type == "null" || type == "ByteLevel") return frame;
  // Llama 3's: Sequence[ByteLevel (offsets only), TemplateProcessing]. At
  // most one member adds tokens.
  if (type == "Sequence" && post.contains("processors") && post["processors"].is_array() &&
      std::none_of(post["processors"].begin(), post["processors"].end(),
                   [](const Json& m) { return TypeOf(m) == "Sequence"; })) {
    bool framed = false;
    for (const Json& member : post["processors"]) {
      DIKKAT_ASSIGN_OR_RETURN(SpecialFrame part, ParsePostProcessor(path, member));
      if (part.prefix.empty() && part.suffix.empty()) continue;
      if (framed) {
        return absl::UnimplementedError(absl::StrCat(
            path, ": post_processor Sequence with more than one member adding tokens"));
      }
      framed = true;
      frame = std::move(part);
    }
    return frame;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    frame.prefix.push_back(Int32Of(post.at("cls").at(1)));
    frame.suffix.push_back(Int32Of(post.at("sep").at(1)));
    return frame;
  }
  if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    for (const Json& piece : post.at("single")) {
      if (piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      for (const Json& id : post.at("special_tokens").at(name).at("ids")) {
        (seen_sequence ? frame.suffix : frame.prefix).push_back(Int32Of(id));
      }
    }
    return frame;
  }
  return absl::UnimplementedError(
      absl::StrCat(path, ": post_processor \"", type,
                   "\" is not supported (supported: ByteLevel, RobertaProcessing, "
                   "BertProcessing, TemplateProcessing, a Sequence of them)"));
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseMerges(
    const std::string& path, const Json& model) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const Json& m : model.at("merges")) {
    if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      continue;
    }
    const std::string line = m.get<std::string>();
    const size_t space = line.find(' ');
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": merge \"", line, "\" is not two space-separated tokens"));
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

std::vector<AddedToken> ParseAddedTokens(const Json& j) {
  std::vector<AddedToken> added_tokens;
  for (const Json& added : j.value("added_tokens", Json::array())) {
    added_tokens.push_back({Int32Of(added.at("id")), added.at("content").get<std::string>(),
                            added.value("special", false)});
  }
  return added_tokens;
}

constexpr char kSpaceMark[] = "\xE2\x96\x81";  // U+2581 "▁"

// A Llama / SentencePiece-converted BPE: "▁" for spaces, either from the
// legacy normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] or from the
// Metaspace pre-tokenizer, and usually byte_fallback.
bool IsMetaspaceBpe(const Json& j) {
  static const Json kNull;
  const Json& norm = j.contains("normalizer") ? j["normalizer"] : kNull;
  const Json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : kNull;
  if (TypeOf(pre) == "Metaspace") return true;
  if (j.at("model").value("byte_fallback", false)) return true;
  const std::string dumped = norm.dump();
  return dumped.find(kSpaceMark) != std::string::npos;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadLlamaBpeJson(const std::string& path,
                                                           const Json& j) {
  static const Json kNull;
  const Json& norm = j.contains("normalizer") ? j["normalizer"] : kNull;
  const Json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : kNull;
  const Json& model = j.at("model");
  LlamaBpeSpec spec;
  const auto unsupported = [&](const std::string& what) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": ", what, " is not supported for BPE with \"▁\" spaces (supported: "
        "normalizer Sequence[Prepend(\"▁\"), Replace(\" \", \"▁\")] with no pre_tokenizer, "
        "or no normalizer with the Metaspace pre_tokenizer)"));
  };
  if (TypeOf(pre) == "Metaspace") {
    if (!norm.is_null()) return unsupported(absl::StrCat("normalizer ", TypeOf(norm)));
    if (pre.value("replacement", std::string(kSpaceMark)) != kSpaceMark) {
      return unsupported(absl::StrCat("Metaspace replacement ", pre["replacement"].dump()));
    }
    std::string scheme = pre.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = pre.value("add_prefix_space", true) ? "always" : "never";
    if (scheme == "always") {
      spec.prefix = LlamaBpeSpec::Prefix::kUnlessPresent;
    } else if (scheme == "first") {
      spec.prefix = LlamaBpeSpec::Prefix::kFirst;
    } else if (scheme == "never") {
      spec.prefix = LlamaBpeSpec::Prefix::kNever;
    } else {
      return unsupported(absl::StrCat("Metaspace prepend_scheme \"", scheme, "\""));
    }
    spec.split_words = pre.value("split", true);
  } else {
    if (!pre.is_null()) return unsupported(absl::StrCat("pre_tokenizer ", TypeOf(pre)));
    std::vector<Json> steps;
    if (TypeOf(norm) == "Sequence") {
      for (const Json& n : norm.at("normalizers")) steps.push_back(n);
    } else if (!norm.is_null()) {
      steps.push_back(norm);
    }
    bool replaces_spaces = false;
    spec.prefix = LlamaBpeSpec::Prefix::kNever;
    for (const Json& step : steps) {
      const std::string type = TypeOf(step);
      if (type == "Prepend" && step.value("prepend", std::string()) == kSpaceMark) {
        spec.prefix = LlamaBpeSpec::Prefix::kAlways;
      } else if (type == "Replace" && step.contains("pattern") &&
                 step["pattern"].value("String", std::string()) == " " &&
                 step.value("content", std::string()) == kSpaceMark) {
        replaces_spaces = true;
      } else {
        return unsupported(absl::StrCat("normalizer step ", step.dump()));
      }
    }
    if (!replaces_spaces) return unsupported(absl::StrCat("normalizer ", norm.dump()));
  }
  spec.strip_leading_space = spec.prefix != LlamaBpeSpec::Prefix::kNever;
  if (!model.value("dropout", Json()).is_null()) {
    return unsupported(absl::StrCat("BPE dropout ", model["dropout"].dump()));
  }
  if (model.value("ignore_merges", false)) return unsupported("BPE ignore_merges=true");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json v = model.value(key, Json());
    if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty())) {
      return unsupported(absl::StrCat("BPE ", key, " ", v.dump()));
    }
  }
  spec.byte_fallback = model.value("byte_fallback", false);
  spec.fuse_unk = model.value("fuse_unk", false);
  const Json unk = model.value("unk_token", Json());
  if (unk.is_string()) spec.unk_token = unk.get<std::string>();
  for (const auto& [piece, id] : model.at("vocab").items()) spec.vocab.emplace(piece, Int32Of(id));
  DIKKAT_ASSIGN_OR_RETURN(spec.merges, ParseMerges(path, model));
  spec.added_tokens = ParseAddedTokens(j);
  DIKKAT_ASSIGN_OR_RETURN(SpecialFrame frame,
                          ParsePostProcessor(path, j.value("post_processor", Json())));
  spec.prefix_ids = std::move(frame.prefix);
  spec.suffix_ids = std::move(frame.suffix);
  DIKKAT_ASSIGN_OR_RETURN(spec.fingerprints, FingerprintFiles({path}));
  return MakeLlamaBpe(std::move(spec));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadByteLevelBpeJson(const std::string& path,
                                                                const Json& j) {
  static const Json kNull;
  const Json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : kNull;
  DIKKAT_ASSIGN_OR_RETURN(const ByteLevelPipeline pipeline, ReadByteLevelPipeline(path, pre));
  const Json& norm = j.contains("normalizer") ? j["normalizer"] : kNull;
  if (!norm.is_null() && TypeOf(norm) != "NFC") {
    return absl::UnimplementedError(absl::StrCat(path, ": byte-level BPE with normalizer ",
                                                 TypeOf(norm),
                                                 " is not supported (supported: none, NFC)"));
  }
  const Json& model = j.at("model");
  // BPE options that change the pieces, which this tokenizer does not model.
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json& v = model.contains(key) ? model[key] : kNull;
    if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty())) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": byte-level BPE with ", key, " ", v.dump(), " is not supported"));
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": byte-level BPE with dropout ", model["dropout"].dump(),
                     " is not supported (it samples merges: not reproducible)"));
  }
  ByteLevelBpeSpec spec;
  spec.add_prefix_space = pipeline.add_prefix_space;
  spec.pre_tokenizer = pipeline.pre_tokenizer;
  spec.nfc = TypeOf(norm) == "NFC";
  spec.ignore_merges = model.value("ignore_merges", false);
  for (const auto& [token, id] : model.at("vocab").items()) spec.vocab.emplace(token, Int32Of(id));
  DIKKAT_ASSIGN_OR_RETURN(spec.merges, ParseMerges(path, model));
  spec.added_tokens = ParseAddedTokens(j);
  DIKKAT_ASSIGN_OR_RETURN(SpecialFrame frame,
                          ParsePostProcessor(path, j.value("post_processor", Json())));
  spec.prefix_ids = std::move(frame.prefix);
  spec.suffix_ids = std::move(frame.suffix);
  DIKKAT_ASSIGN_OR_RETURN(spec.fingerprints, FingerprintFiles({path}));
  return MakeByteLevelBpe(std::move(spec));
}

// BERT's pipeline: BertNormalizer + BertPreTokenizer + WordPiece.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadWordPieceJson(const std::string& path,
                                                            const Json& j) {
  static const Json kNull;
  const Json& norm = j.contains("normalizer") ? j["normalizer"] : kNull;
  const Json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : kNull;
  if (TypeOf(norm) != "BertNormalizer" || TypeOf(pre) != "BertPreTokenizer") {
    return absl::UnimplementedError(absl::StrCat(
        path, ": WordPiece with normalizer ", TypeOf(norm), " and pre_tokenizer ", TypeOf(pre),
        " is not supported (supported: BertNormalizer + BertPreTokenizer)"));
  }
  if (!norm.value("clean_text", true)) {
    return absl::UnimplementedError(absl::StrCat(path, ": BertNormalizer clean_text=false"));
  }
  const Json& model = j.at("model");
  WordPieceOptions options;
  options.lower_case = norm.value("lowercase", true);
  const Json strip = norm.value("strip_accents", Json());
  options.strip_accents = strip.is_boolean() ? strip.get<bool>() : options.lower_case;
  options.tokenize_chinese_chars = norm.value("handle_chinese_chars", true);
  options.unk_token = model.value("unk_token", std::string("[UNK]"));
  options.continuing_subword_prefix = model.value("continuing_subword_prefix", std::string("##"));
  options.max_input_chars_per_word =
      model.contains("max_input_chars_per_word") ? Int32Of(model["max_input_chars_per_word"]) : 100;
  std::vector<std::string> vocab;
  for (const auto& [token, id_json] : model.at("vocab").items()) {
    const int32_t id = Int32Of(id_json);
    if (id < 0 || id > 10'000'000) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token \"", token, "\" has id ", id, "; allowed 0..10000000"));
    }
    if (static_cast<size_t>(id) >= vocab.size()) vocab.resize(id + 1);
    vocab[id] = token;
  }
  DIKKAT_ASSIGN_OR_RETURN(auto fingerprints, FingerprintFiles({path}));
  return MakeWordPiece(std::move(vocab), options, std::move(fingerprints));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& path) {
  DIKKAT_ASSIGN_OR_RETURN(std::string text, ReadTokenizerFile(path));
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a tokenizer.json (a JSON object with a \"model\")"));
  }
  const std::string type = TypeOf(j["model"]);
  try {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok;
    if (type == "BPE") {
      tok = IsMetaspaceBpe(j) ? LoadLlamaBpeJson(path, j) : LoadByteLevelBpeJson(path, j);
    } else if (type == "WordPiece") {
      tok = LoadWordPieceJson(path, j);
    } else {
      return absl::UnimplementedError(absl::StrCat(
          path, ": model type \"", type, "\" is not supported (supported: BPE, WordPiece)"));
    }
    if (!tok.ok() && tok.status().message().find(path) == std::string_view::npos) {
      return absl::Status(tok.status().code(), absl::StrCat(path, ": ", tok.status().message()));
    }
    return tok;
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed ", type, " model: ", e.what()));
  } catch (const NotAnInt32& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": malformed ", type, " model: ", e.what()));
  }
}

}  // namespace dikkat::model
