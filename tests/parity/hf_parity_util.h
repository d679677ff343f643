// Shared helpers of the hf_*_test suites: run make_hf_fixtures.py (Debian's
// /usr/bin/python3 with python3-torch) into a temp dir, load a Hugging Face
// folder the way LoadModelFolder does minus the tokenizer (ReadModelConfig ->
// ReadWeights -> ConvertHfWeights -> Transformer::Load), and check a decoder
// against the reference logits and greedy tokens.
#ifndef DIKKAT_TESTS_PARITY_HF_PARITY_UTIL_H_
#define DIKKAT_TESTS_PARITY_HF_PARITY_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/io/hf_weights.h"
#include "model/io/model_folder.h"
#include "model/io/safetensors.h"
#include "model/io/weights.h"
#include "model/model_loader.h"
#include "model/transformer.h"
#include "tests/parity/parity_util.h"

namespace dikkat::model::parity {

// What make_hf_fixtures.py wrote for one suite.
struct HfSuite {
  std::string dir;  // <tmp>/<suite>; its parent is removed by RemoveFixtures
  TensorMap expected;
  nlohmann::json cases;

  const at::Tensor& Expected(const std::string& name, int b) const {
    return expected.at(absl::StrCat(name, "_", b));
  }
  int sequences() const { return cases.at("sequences").get<int>(); }
  std::string Folder(const std::string& layout) const { return dir + "/" + layout; }
};

inline absl::StatusOr<std::unique_ptr<HfSuite>> MakeHfSuite(const std::string& suite) {
  std::string root = (std::filesystem::temp_directory_path() / "dikkat_hf_XXXXXX").string();
  if (mkdtemp(root.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string command = absl::StrCat(kPython, " ", DIKKAT_SOURCE_DIR,
                                           "/tests/parity/make_hf_fixtures.py ", root, " ", suite,
                                           " 2>&1");
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("popen failed: " + command);
  std::string log;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) log.append(buffer, n);
  const int status = pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::filesystem::remove_all(root);
    return absl::InternalError(absl::StrCat("fixture script failed (", command, "):\n", log));
  }
  std::printf("%s", log.c_str());  // the reference's greedy top-2 gaps
  auto out = std::make_unique<HfSuite>();
  out->dir = root + "/" + suite;
  absl::StatusOr<TensorMap> expected = ReadSafetensors(out->dir + "/expected.safetensors");
  if (!expected.ok()) return expected.status();
  out->expected = std::move(*expected);
  out->cases = nlohmann::json::parse(ReadFile(out->dir + "/cases.json"));
  return out;
}

struct HfModel {
  ModelConfig config;
  std::unique_ptr<Transformer> model;
  LoadReport report;
  std::vector<std::string> dropped;  // HF buffers / tied duplicates ConvertHfWeights left out
};

// config.json + whatever weights file the folder holds, without a tokenizer.
// `max_positions`: LoadOptions::max_positions (0: the model's context).
inline absl::StatusOr<HfModel> LoadHfFolder(const std::string& folder,
                                            c10::ScalarType dtype = at::kFloat,
                                            int64_t max_positions = 0) {
  HfModel loaded;
  absl::StatusOr<ModelConfig> config = ReadModelConfig(folder);
  if (!config.ok()) return config.status();
  loaded.config = *config;
  absl::StatusOr<TensorMap> weights = ReadWeights(folder);
  if (!weights.ok()) return weights.status();
  absl::StatusOr<HfWeights> hf = ConvertHfWeights(loaded.config, *weights);
  if (!hf.ok()) return hf.status();
  // As the loader.
  if (absl::Status s = AddDenseModuleWeights(folder, loaded.config, &*hf); !s.ok()) return s;
  loaded.dropped = hf->dropped;
  LoadOptions options;
  options.dtype = dtype;
  options.max_positions = max_positions;
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Load(loaded.config, hf->tensors, options, &loaded.report);
  if (!model.ok()) return DescribeHfLoadError(model.status(), loaded.config, *hf);
  // As the server's loader (model_loader.cc).
  if (absl::Status s = CheckUnusedHfTensors(loaded.report.unused_tensors, *hf, loaded.config);
      !s.ok()) {
    return s;
  }
  loaded.model = std::move(*model);
  return loaded;
}

// Logits of every prompt position, all prompts in one batched Decode without
// a cache; returns the largest error against the reference's logits_<b>.
inline double MaxPromptLogitError(const HfSuite& suite, const Transformer& model) {
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < suite.sequences(); ++b) prompts.push_back(Ids(suite.Expected("prompt", b)));
  std::vector<SequenceChunk> chunks(prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) chunks[b].tokens = prompts[b];
  ForwardOptions options;
  options.all_logits = true;
  const at::Tensor logits = model.Decode(chunks, nullptr, options).logits;  // [total, V]
  double worst = 0;
  int64_t offset = 0;
  for (int b = 0; b < suite.sequences(); ++b) {
    const int64_t n = static_cast<int64_t>(prompts[b].size());
    worst = std::max(worst, MaxRelDiff(logits.narrow(0, offset, n), suite.Expected("logits", b)));
    offset += n;
  }
  return worst;
}

// Greedy decoding with the paged KV cache as the engine does it; expects the
// reference's tokens exactly. Returns the largest error of the first step's
// logits (from the cached prefill) against the reference's last prompt row.
inline double CheckGreedy(const HfSuite& suite, const Transformer& model) {
  absl::StatusOr<KvCache> cache = MakeCache(model.config(), 1);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return 1e30;
  const int steps = suite.cases.at("steps").get<int>();
  double worst = 0;
  for (int b = 0; b < suite.sequences(); ++b) {
    const std::vector<int32_t> prompt = Ids(suite.Expected("prompt", b));
    GreedyRun run = GreedyWithCache(model, &*cache, prompt, steps);
    EXPECT_EQ(run.tokens, Ids(suite.Expected("greedy", b))) << "prompt " << b;
    const at::Tensor& reference = suite.Expected("logits", b);
    worst = std::max(worst, MaxRelDiff(run.step_logits.select(0, 0),
                                       reference.select(0, reference.size(0) - 1)));
  }
  return worst;
}

}  // namespace dikkat::model::parity

#endif  // DIKKAT_TESTS_PARITY_HF_PARITY_UTIL_H_
