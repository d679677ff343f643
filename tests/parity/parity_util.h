// Shared helpers of the parity suites: run make_parity_fixtures.py (Debian's
// /usr/bin/python3 with python3-torch) into a temp dir, load the models it
// wrote through dikkat's public API, compare tensors and report the errors.
#ifndef DIKKAT_TESTS_PARITY_PARITY_UTIL_H_
#define DIKKAT_TESTS_PARITY_PARITY_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/stack.h>
#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/io/config.h"
#include "model/io/weights.h"
#include "model/kv_cache.h"
#include "model/transformer.h"

namespace dikkat::model::parity {

inline constexpr char kPython[] = "/usr/bin/python3";

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the fixture script for `suite` into a new temp dir. Returns the suite's
// folder (<tmp>/<suite>) or the script's output as the error.
inline absl::StatusOr<std::string> MakeFixtures(const std::string& suite) {
  std::string root = (std::filesystem::temp_directory_path() / "dikkat_parity_XXXXXX").string();
  if (mkdtemp(root.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string command =
      absl::StrCat(kPython, " ", DIKKAT_SOURCE_DIR, "/tests/parity/make_parity_fixtures.py ", root,
                   " ", suite, " 2>&1");
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
  return root + "/" + suite;
}

// Removes the temp root made by MakeFixtures (the parent of a suite folder).
inline void RemoveFixtures(const std::string& suite_dir) {
  std::filesystem::remove_all(std::filesystem::path(suite_dir).parent_path());
}

// Base of a test suite that reads the fixtures of `kSuite` (a suite of
// make_parity_fixtures.py): made once before the suite's first test and
// removed after its last; when they cannot be made (or a derived suite's own
// loading fails: Fail()), every test fails with the reason. Derived suites
// that load more call this SetUpTestSuite/TearDownTestSuite from theirs.
template <const char* kSuite>
class FixtureSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir = MakeFixtures(kSuite);
    if (dir.ok()) {
      dir_ = *dir;
    } else {
      Fail(dir.status());
    }
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) RemoveFixtures(dir_);
    dir_.clear();
    error_.clear();
  }
  void SetUp() override { ASSERT_TRUE(error_.empty()) << error_; }

  static bool Ok() { return error_.empty(); }
  static void Fail(const absl::Status& status) { error_ = status.ToString(); }
  // The suite's fixture folder.
  static const std::string& Dir() { return dir_; }

 private:
  static inline std::string dir_;
  static inline std::string error_;
};

inline double MaxAbsDiff(const at::Tensor& got, const at::Tensor& expected) {
  EXPECT_EQ(got.sizes(), expected.sizes());
  if (got.sizes() != expected.sizes()) return 1e30;
  at::Tensor diff = got.to(at::kDouble).sub(expected.to(at::kDouble)).abs();
  EXPECT_FALSE(diff.isnan().any().item<bool>()) << "NaN in a compared tensor";
  return diff.numel() == 0 ? 0.0 : diff.max().item<double>();
}

// The error relative to the reference's magnitude: max|got - expected| /
// max|expected|. Every parity tolerance is stated in these terms, so that it
// holds on any CPU and for outputs of any scale: a float32 computation whose
// sums run in another order (another ISA's kernels, another BLAS) moves each
// element by a few ulps of the largest values it sums, not by a fixed
// absolute amount.
inline double MaxRelDiff(const at::Tensor& got, const at::Tensor& expected) {
  const double abs_err = MaxAbsDiff(got, expected);
  if (abs_err >= 1e30 || expected.numel() == 0) return abs_err;
  const double scale = expected.to(at::kDouble).abs().max().item<double>();
  return abs_err / std::max(scale, 1e-30);
}

inline std::vector<int32_t> Ids(const at::Tensor& t) {
  at::Tensor c = t.to(at::kInt).contiguous();
  const int32_t* p = c.data_ptr<int32_t>();
  return std::vector<int32_t>(p, p + c.numel());
}

// Records a measured error in the XML report and prints it in the log.
inline void ReportError(const std::string& what, double value,
                        const char* kind = "max rel err") {
  ::testing::Test::RecordProperty(what, absl::StrFormat("%.3g", value));
  std::printf("[ parity ] %-48s %s %.3g\n", what.c_str(), kind, value);
}

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<Transformer> model;
  LoadReport report;
};

// Loads <dir>/dikkat.json + <dir>/model.safetensors (or another weights file).
inline absl::StatusOr<LoadedModel> LoadModelDir(const std::string& dir,
                                                c10::ScalarType dtype = at::kFloat,
                                                const std::string& weights_file = "") {
  LoadedModel loaded;
  absl::StatusOr<ModelConfig> config = ParseModelConfigJson(ReadFile(dir + "/dikkat.json"));
  if (!config.ok()) return config.status();
  loaded.config = *config;
  absl::StatusOr<TensorMap> weights =
      ReadWeights(weights_file.empty() ? dir + "/model.safetensors" : weights_file);
  if (!weights.ok()) return weights.status();
  LoadOptions options;
  options.dtype = dtype;
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Load(loaded.config, *weights, options, &loaded.report);
  if (!model.ok()) return model.status();
  loaded.model = std::move(*model);
  return loaded;
}

// A cache with room for `sequences` full-context sequences in blocks of
// `block_size` tokens.
inline absl::StatusOr<KvCache> MakeCache(const ModelConfig& config, int sequences,
                                         int32_t block_size = 4,
                                         c10::ScalarType dtype = at::kFloat) {
  const int64_t blocks = (config.max_positions + block_size - 1) / block_size;
  const int64_t budget =
      KvCache::BytesPerToken(config, dtype) * block_size * blocks * sequences;
  return KvCache::Create(config, budget, block_size, dtype, c10::Device(c10::DeviceType::CPU));
}

struct GreedyRun {
  std::vector<int32_t> tokens;
  at::Tensor step_logits;  // [steps, V]: the logits each token was chosen from
};

// Greedy decoding the way the engine does it: prefill `prompt` into the paged
// cache, then feed one token per step. The cache's blocks are released at the
// end.
inline GreedyRun GreedyWithCache(const Transformer& model, KvCache* cache,
                                 const std::vector<int32_t>& prompt, int steps,
                                 const CrossAttentionCache* cross = nullptr) {
  GreedyRun run;
  std::vector<at::Tensor> logits;
  std::vector<int32_t> table;
  std::vector<int32_t> pending = prompt;
  int64_t pos = 0;
  ForwardOptions options;
  for (int s = 0; s < steps; ++s) {
    const int64_t end = pos + static_cast<int64_t>(pending.size());
    EXPECT_TRUE(cache->allocator().EnsureCapacity(&table, end));
    SequenceChunk chunk;
    chunk.tokens = pending;
    chunk.start_pos = pos;
    chunk.block_table = &table;
    chunk.cross = cross;
    ForwardResult result = model.Decode({chunk}, cache, options);
    at::Tensor row = result.logits.select(0, 0);  // [V]
    logits.push_back(row);
    const int32_t next = static_cast<int32_t>(row.argmax().item<int64_t>());
    run.tokens.push_back(next);
    pos = end;
    pending = {next};
  }
  cache->allocator().Release(&table);
  run.step_logits = at::stack(logits);
  return run;
}

}  // namespace dikkat::model::parity

#endif  // DIKKAT_TESTS_PARITY_PARITY_UTIL_H_
