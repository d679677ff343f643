// Model configuration parsing on arbitrary text: dikkat.json
// (ParseModelConfigJson), Hugging Face config.json (TranslateHfConfig) and
// sentence-transformers files (pooling, Dense, modules.json, prompts). Never crashes; a config that parses is
// valid and survives a round trip through ModelConfigToJson unchanged.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "model/io/config.h"
#include "model/io/hf_config.h"

namespace {

void CheckRoundTrip(const dikkat::model::ModelConfig& config, const char* origin) {
  DIKKAT_FUZZ_CHECK(dikkat::model::Validate(config).ok(), "%s accepted an invalid config: %s",
                    origin, std::string(dikkat::model::Validate(config).message()).c_str());
  const std::string json = dikkat::model::ModelConfigToJson(config);
  absl::StatusOr<dikkat::model::ModelConfig> again = dikkat::model::ParseModelConfigJson(json);
  DIKKAT_FUZZ_CHECK(again.ok(), "%s: its own JSON does not parse: %s\n%s", origin,
                    std::string(again.status().message()).c_str(), json.c_str());
  const std::string json2 = dikkat::model::ModelConfigToJson(*again);
  DIKKAT_FUZZ_CHECK(json == json2, "%s: round trip changed the config:\n%s\n%s", origin,
                    json.c_str(), json2.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<dikkat::model::ModelConfig> own = dikkat::model::ParseModelConfigJson(text);
  if (own.ok()) CheckRoundTrip(*own, "ParseModelConfigJson");
  absl::StatusOr<dikkat::model::ModelConfig> hf = dikkat::model::TranslateHfConfig(text);
  if (hf.ok()) CheckRoundTrip(*hf, "TranslateHfConfig");
  bool include_prompt = true;
  (void)dikkat::model::ParseSentenceTransformersPooling(text, &include_prompt);
  (void)dikkat::model::ParseSentenceTransformersDense(text);
  // The sentence-transformers files merged into a valid config: what they
  // accept must keep it valid and round-trip (prompts, default_prompt_name,
  // default_normalize).
  for (int file = 0; file < 2; ++file) {
    absl::StatusOr<dikkat::model::ModelConfig> base =
        dikkat::model::TranslateHfConfig(R"({"model_type": "bert", "hidden_size": 8,
                                           "num_attention_heads": 2, "num_hidden_layers": 1,
                                           "intermediate_size": 16, "vocab_size": 32})");
    DIKKAT_FUZZ_CHECK(base.ok(), "the base config does not translate");
    std::vector<std::string> dense;
    const absl::Status merged =
        file == 0 ? dikkat::model::MergeSentenceTransformersPrompts(text, &*base)
                  : dikkat::model::MergeSentenceTransformersModules(text, &*base, &dense);
    if (merged.ok()) CheckRoundTrip(*base, file == 0 ? "prompts" : "modules.json");
  }
  return 0;
}
