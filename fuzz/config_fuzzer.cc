// Model configuration parsing on arbitrary text: dikkat.json
// (ParseModelConfigJson), Hugging Face config.json (TranslateHfConfig) and
// sentence-transformers pooling. Never crashes; a config that parses is
// valid and survives a round trip through ModelConfigToJson unchanged.
#include <cstdint>
#include <string>

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
  (void)dikkat::model::ParseSentenceTransformersPooling(text);
  return 0;
}
