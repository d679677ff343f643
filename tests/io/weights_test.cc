// Weight file readers/writers against files written by PyTorch itself
// (tests/io/make_weight_fixtures.py, run with Debian's python3-torch).
// Expected values are the raw bytes PyTorch produced, so every dtype must
// round-trip bit-exactly (NaN payloads, -0.0, subnormals included).
#include "model/io/safetensors.h"
#include "model/io/torch_checkpoint.h"
#include "model/io/weights.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <caffe2/serialize/inline_container.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "common/sha256_file.h"

namespace dikkat::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kPython[] = "/usr/bin/python3";
const std::string kScript = std::string(DIKKAT_SOURCE_DIR) + "/tests/io/make_weight_fixtures.py";

// safetensors dtype names, as the format specifies them.
std::string DtypeName(at::ScalarType t) {
  static const std::map<at::ScalarType, std::string> kNames = {
      {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"}, {at::kBFloat16, "BF16"},
      {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
      {at::kByte, "U8"},    {at::kBool, "BOOL"}};
  auto it = kNames.find(t);
  return it == kNames.end() ? "?" : it->second;
}

std::string Hex(const at::Tensor& tensor) {
  at::Tensor t = tensor.contiguous();
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < t.nbytes(); ++i) {
    hex.push_back(kDigits[bytes[i] >> 4]);
    hex.push_back(kDigits[bytes[i] & 0xf]);
  }
  return hex;
}

void ExpectTensorIs(const std::string& name, const at::Tensor& t, const json& expected) {
  SCOPED_TRACE("tensor " + name);
  EXPECT_EQ(DtypeName(t.scalar_type()), expected.at("dtype").get<std::string>());
  EXPECT_EQ(t.sizes().vec(), expected.at("shape").get<std::vector<int64_t>>());
  EXPECT_EQ(Hex(t), expected.at("hex").get<std::string>());
}

// Same names, and each tensor bit-identical to what PyTorch wrote.
void ExpectTensorsAre(const TensorMap& got, const json& expected) {
  std::set<std::string> got_names, expected_names;
  for (const auto& [name, t] : got) got_names.insert(name);
  for (auto it = expected.begin(); it != expected.end(); ++it) expected_names.insert(it.key());
  EXPECT_EQ(got_names, expected_names);
  for (const auto& [name, t] : got) {
    if (expected.contains(name)) ExpectTensorIs(name, t, expected.at(name));
  }
}

// Runs a command and returns its stdout; *exit_code gets the exit status.
std::string RunCommand(const std::string& command, int* exit_code) {
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *exit_code = -1;
    return "";
  }
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Checkpoint records for the unpickler alone: none.
absl::StatusOr<std::pair<at::DataPtr, size_t>> NoRecords(const std::string& name) {
  return absl::NotFoundError(name);
}

class WeightsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = (fs::temp_directory_path() / "dikkat_weights_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) return;
    dir_ = new std::string(pattern);
    int exit_code = 0;
    const std::string log =
        RunCommand(std::string(kPython) + " " + kScript + " make " + *dir_ + " 2>&1", &exit_code);
    if (exit_code != 0) {
      setup_error_ = new std::string("fixture script failed: " + log);
      return;
    }
    expected_ = new json(json::parse(ReadAll(*dir_ + "/expected.json")));
  }

  static void TearDownTestSuite() {
    if (dir_ != nullptr) fs::remove_all(*dir_);
    delete dir_;
    delete expected_;
    delete setup_error_;
    dir_ = nullptr;
    expected_ = nullptr;
    setup_error_ = nullptr;
  }

  void SetUp() override {
    ASSERT_EQ(setup_error_, nullptr) << *setup_error_;
    ASSERT_NE(dir_, nullptr) << "mkdtemp failed";
    ASSERT_NE(expected_, nullptr);
  }

  static std::string Path(const std::string& name) { return *dir_ + "/" + name; }
  static const json& Expected(const std::string& key) { return expected_->at(key); }

  // A hand-made safetensors file: length prefix (header.size() unless given),
  // header text, data bytes.
  static std::string WriteRaw(const std::string& name, const std::string& header,
                              const std::string& data, int64_t length = -1) {
    const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
    std::string bytes(reinterpret_cast<const char*>(&n), sizeof(n));  // little-endian host
    bytes += header;
    bytes += data;
    WriteAll(Path(name), bytes);
    return Path(name);
  }

  static std::string* dir_;
  static json* expected_;
  static std::string* setup_error_;
};

std::string* WeightsTest::dir_ = nullptr;
json* WeightsTest::expected_ = nullptr;
std::string* WeightsTest::setup_error_ = nullptr;

// ---- safetensors reading --------------------------------------------------

TEST_F(WeightsTest, SafetensorsRoundTripsEveryDtypeExactly) {
  absl::StatusOr<TensorMap> tensors = ReadSafetensors(Path("basic.safetensors"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectTensorsAre(*tensors, Expected("basic"));
  EXPECT_EQ(tensors->count("__metadata__"), 0u);
}

TEST_F(WeightsTest, SafetensorsAlignedTensorsAliasTheFileAndMisalignedOnesAreCopied) {
  absl::StatusOr<TensorMap> tensors = ReadSafetensors(Path("basic.safetensors"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  // The fixture puts a 3-byte I8 tensor after F32, so F16/BF16/I64/... start
  // at odd offsets in the file; each must still be aligned for its dtype.
  for (const auto& [name, t] : *tensors) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % t.element_size(), 0u) << name;
  }
  // f32 is at data offset 0 and layer.0.weight at 124, both aligned: views on
  // one mapping sit exactly that far apart.
  const auto* f32 = static_cast<const char*>(tensors->at("f32").data_ptr());
  const auto* layer = static_cast<const char*>(tensors->at("layer.0.weight").data_ptr());
  EXPECT_EQ(layer - f32, 124);
}

TEST_F(WeightsTest, SafetensorsTensorsOutliveTheMapAndTheFile) {
  const std::string copy = Path("lifetime.safetensors");
  fs::copy_file(Path("basic.safetensors"), copy, fs::copy_options::overwrite_existing);
  at::Tensor f32, layer;
  {
    absl::StatusOr<TensorMap> tensors = ReadSafetensors(copy);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    f32 = tensors->at("f32");
    layer = tensors->at("layer.0.weight");
  }
  fs::remove(copy);
  ExpectTensorIs("f32", f32, Expected("basic").at("f32"));
  ExpectTensorIs("layer.0.weight", layer, Expected("basic").at("layer.0.weight"));
}

TEST_F(WeightsTest, ShardedIndexReadsEveryShard) {
  absl::StatusOr<TensorMap> tensors =
      ReadSafetensorsIndex(Path("sharded/model.safetensors.index.json"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectTensorsAre(*tensors, Expected("sharded"));
}

TEST_F(WeightsTest, ShardedIndexNamingATensorItsShardLacksFails) {
  absl::StatusOr<TensorMap> tensors =
      ReadSafetensorsIndex(Path("sharded_bad/model.safetensors.index.json"));
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensors.status().message(),
              AllOf(HasSubstr("'missing.weight'"), HasSubstr("model-00001-of-00002.safetensors")));
}

TEST_F(WeightsTest, ShardedIndexMayNotNameAShardOutsideItsFolder) {
  absl::StatusOr<TensorMap> tensors =
      ReadSafetensorsIndex(Path("sharded_escape/model.safetensors.index.json"));
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensors.status().message(),
              AllOf(HasSubstr("'../basic.safetensors'"), HasSubstr("no '..'")));
}

TEST_F(WeightsTest, SafetensorsIndexIsCheckedBeforeAnyShardIsRead) {
  absl::StatusOr<std::map<std::string, std::vector<std::string>>> shards = ParseSafetensorsIndex(
      R"({"metadata": {"total_size": 8}, "weight_map": {"b": "one.safetensors",
          "a": "one.safetensors", "c": "sub/two.safetensors"}})",
      "x/model.safetensors.index.json");
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(*shards, (std::map<std::string, std::vector<std::string>>{
                         {"one.safetensors", {"a", "b"}}, {"sub/two.safetensors", {"c"}}}));
  for (const char* shard : {"../one.safetensors", "sub/../../one.safetensors", "/abs.safetensors",
                            "sub/.."}) {
    absl::StatusOr<std::map<std::string, std::vector<std::string>>> bad = ParseSafetensorsIndex(
        json{{"weight_map", {{"a", shard}}}}.dump(), "x/model.safetensors.index.json");
    ASSERT_FALSE(bad.ok()) << shard;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr("must be a path inside the index's folder"));
  }
  for (const char* text : {"[]", "{}", R"({"weight_map": {}})", R"({"weight_map": {"a": 1}})",
                           R"({"weight_map": {"a": ""}})", "{\"weight_map\": "}) {
    EXPECT_EQ(ParseSafetensorsIndex(text, "i.json").status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

// ---- torch checkpoints -----------------------------------------------------

TEST_F(WeightsTest, TorchCheckpointReadsAStateDict) {
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(Path("ckpt.pt"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectTensorsAre(*tensors, Expected("ckpt"));
}

TEST_F(WeightsTest, TorchCheckpointReadsPickleProtocol4AndParameters) {
  absl::StatusOr<TensorMap> proto4 = ReadTorchCheckpoint(Path("ckpt_proto4.pt"));
  ASSERT_TRUE(proto4.ok()) << proto4.status();
  ExpectTensorsAre(*proto4, Expected("ckpt"));
  absl::StatusOr<TensorMap> params = ReadTorchCheckpoint(Path("params.pt"));
  ASSERT_TRUE(params.ok()) << params.status();
  ExpectTensorsAre(*params, Expected("params"));
}

TEST_F(WeightsTest, TorchCheckpointKeepsViewsOfOneStorage) {
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(Path("ckpt.pt"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  // Like torch.load: a transposed view and a row share the saved storage.
  const at::Tensor& big = tensors->at("extra.big");
  EXPECT_EQ(tensors->at("extra.view").data_ptr(), big.data_ptr());
  EXPECT_EQ(tensors->at("extra.view").strides().vec(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(static_cast<const float*>(tensors->at("extra.row").data_ptr()),
            static_cast<const float*>(big.data_ptr()) + 4);
}

TEST_F(WeightsTest, TorchCheckpointFlattensNestedDictsAndDropsNonTensors) {
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(Path("nested.pt"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectTensorsAre(*tensors, Expected("nested"));
}

TEST_F(WeightsTest, HostilePicklesAreRefusedWithoutCrashing) {
  // A 15-byte data.pkl holding a dict that contains itself used to recurse
  // until SIGSEGV; 200000 nested dicts overflowed the stack on destruction.
  for (const char* name : {"cyclic.pt", "deep.pt"}) {
    absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(Path(name));
    ASSERT_FALSE(tensors.ok()) << name;
    EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(tensors.status().message(),
                AllOf(HasSubstr(name), HasSubstr("nests dicts more than 64 levels")))
        << name;
  }
}

TEST_F(WeightsTest, UnpicklerAloneReadsWhatTheArchiveReaderReads) {
  // ParseTorchCheckpointPickle over the archive's own data.pkl and records.
  for (const char* name : {"ckpt.pt", "ckpt_proto4.pt", "params.pt", "nested.pt"}) {
    SCOPED_TRACE(name);
    caffe2::serialize::PyTorchStreamReader reader(Path(name));
    auto [pickle, size] = reader.getRecord("data.pkl");
    absl::StatusOr<TensorMap> alone = ParseTorchCheckpointPickle(
        std::string(static_cast<const char*>(pickle.get()), size), Path(name),
        [&reader](const std::string& record) -> absl::StatusOr<std::pair<at::DataPtr, size_t>> {
          if (!reader.hasRecord(record)) return absl::NotFoundError(record);
          auto [bytes, n] = reader.getRecord(record);
          return std::make_pair(std::move(bytes), n);
        });
    ASSERT_TRUE(alone.ok()) << alone.status();
    absl::StatusOr<TensorMap> archive = ReadTorchCheckpoint(Path(name));
    ASSERT_TRUE(archive.ok()) << archive.status();
    ASSERT_EQ(alone->size(), archive->size());
    for (const auto& [key, tensor] : *archive) {
      ASSERT_EQ(alone->count(key), 1u) << key;
      EXPECT_EQ(Hex(alone->at(key)), Hex(tensor)) << key;
      EXPECT_EQ(alone->at(key).strides().vec(), tensor.strides().vec()) << key;
    }
  }
  // A storage the records lack is named.
  caffe2::serialize::PyTorchStreamReader reader(Path("ckpt.pt"));
  auto [pickle, size] = reader.getRecord("data.pkl");
  absl::StatusOr<TensorMap> none = ParseTorchCheckpointPickle(
      std::string(static_cast<const char*>(pickle.get()), size), "ckpt.pt", NoRecords);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("archive has no record 'data/"));
}

TEST_F(WeightsTest, SharedDictsCannotMultiplyTheWorkOfFlattening) {
  // 60 levels of {"a": d, "b": d} through the memo: 1.3 KB with 2^60 paths,
  // whose flattening never ended (fuzz/torch_pickle_fuzzer.cc: a timeout).
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(Path("shared_dicts.pt"));
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensors.status().message(),
              AllOf(HasSubstr("shared_dicts.pt"), HasSubstr("refers to the same dicts")));
  // The unpickler alone says the same.
  std::string pickle = std::string("\x80\x02}q") + '\0' + '0';
  for (int i = 1; i <= 60; ++i) {
    const char prev = static_cast<char>(i - 1);
    pickle += std::string("}(X\x01") + '\0' + '\0' + '\0' + "ah" + prev;
    pickle += std::string("X\x01") + '\0' + '\0' + '\0' + "bh" + prev + "uq" + static_cast<char>(i);
    if (i < 60) pickle += '0';
  }
  pickle += '.';
  absl::StatusOr<TensorMap> alone = ParseTorchCheckpointPickle(pickle, "x.pt", NoRecords);
  EXPECT_THAT(alone.status().message(), HasSubstr("refers to the same dicts"));
  // A dict saved twice ({"model": sd, "ema": sd}) is still read, under both names.
  absl::StatusOr<TensorMap> twice = ReadTorchCheckpoint(Path("twice.pt"));
  ASSERT_TRUE(twice.ok()) << twice.status();
  ExpectTensorsAre(*twice, Expected("twice"));
}

TEST_F(WeightsTest, CyclesLeftOffTheStackAreFreed) {
  // A list appended to itself (DUP, APPEND) and then popped, or passed to
  // REDUCE, is reachable from neither the stack nor the memo; the unpickler
  // used to free only what was, and leaked these (fuzz/torch_pickle_fuzzer.cc
  // found it). LeakSanitizer checks this process at exit in the sanitizer
  // build (scripts/hardening.sh).
  const std::string popped = "\x80\x02]2a0}.";
  const std::string reduced = "\x80\x02" "cbuiltins\nlist\n]2a\x85R0}.";
  for (const std::string& pickle : {popped, reduced}) {
    absl::StatusOr<TensorMap> tensors = ParseTorchCheckpointPickle(pickle, "c.pt", NoRecords);
    ASSERT_FALSE(tensors.ok());
    EXPECT_THAT(tensors.status().message(), HasSubstr("without any tensors"));
  }
}

TEST_F(WeightsTest, LegacyTorchCheckpointIsRejectedWithAFix) {
  absl::StatusOr<TensorMap> tensors = ReadTorchCheckpoint(Path("legacy.pt"));
  ASSERT_FALSE(tensors.ok());
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensors.status().message(),
              AllOf(HasSubstr("legacy.pt"), HasSubstr("legacy torch.save format"),
                    HasSubstr("_use_new_zipfile_serialization=True")));
}

TEST_F(WeightsTest, TorchCheckpointRejectsOtherFiles) {
  absl::StatusOr<TensorMap> not_zip = ReadTorchCheckpoint(Path("basic.safetensors"));
  ASSERT_FALSE(not_zip.ok());
  EXPECT_EQ(not_zip.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_zip.status().message(), HasSubstr("not a PyTorch zip checkpoint"));

  const std::string corrupt = Path("corrupt.pt");
  WriteAll(corrupt, "PK\x03\x04 this is not a zip archive");
  absl::StatusOr<TensorMap> bad_zip = ReadTorchCheckpoint(corrupt);
  ASSERT_FALSE(bad_zip.ok());
  EXPECT_EQ(bad_zip.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_zip.status().message(),
              AllOf(HasSubstr("corrupt.pt"), HasSubstr("cannot be read")));

  absl::StatusOr<TensorMap> missing = ReadTorchCheckpoint(Path("nope.pt"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// ---- dispatch ----------------------------------------------------------------

TEST_F(WeightsTest, ReadWeightsDispatchesOnThePath) {
  struct Case {
    std::string path;
    std::string expected;
  };
  const Case cases[] = {
      {"basic.safetensors", "basic"},
      {"single_dir", "basic"},
      {"sharded/model.safetensors.index.json", "sharded"},
      {"sharded", "sharded"},
      {"ckpt.pt", "ckpt"},
      {"bin_dir", "ckpt"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    absl::StatusOr<TensorMap> tensors = ReadWeights(Path(c.path));
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    ExpectTensorsAre(*tensors, Expected(c.expected));
  }
  absl::StatusOr<TensorMap> missing = ReadWeights(Path("no_such_dir"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  fs::create_directory(Path("empty_dir"));
  absl::StatusOr<TensorMap> empty = ReadWeights(Path("empty_dir"));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(empty.status().message(), HasSubstr("model.safetensors"));
}

// ---- writing -----------------------------------------------------------------

TEST_F(WeightsTest, WrittenSafetensorsReadBackByPythonAndByUs) {
  absl::StatusOr<TensorMap> basic = ReadSafetensors(Path("basic.safetensors"));
  ASSERT_TRUE(basic.ok()) << basic.status();
  TensorMap to_write = *basic;
  to_write["f32_transposed"] = basic->at("f32").t();  // non-contiguous on purpose
  json expected = Expected("basic");
  expected["f32_transposed"] = Expected("f32_transposed");
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"source", "dikkat"}};

  const std::string out = Path("written.safetensors");
  ASSERT_TRUE(WriteSafetensors(out, to_write, metadata).ok());

  // Python's strict reader: 8-aligned header, offsets tiling the data exactly.
  int exit_code = 0;
  const std::string report =
      RunCommand(std::string(kPython) + " " + kScript + " read " + out, &exit_code);
  ASSERT_EQ(exit_code, 0) << report;
  const json parsed = json::parse(report);
  EXPECT_EQ(parsed.at("header_length").get<int64_t>() % 8, 0);
  EXPECT_EQ(parsed.at("metadata"), json(metadata));
  const json& python_tensors = parsed.at("tensors");
  EXPECT_EQ(python_tensors, expected);

  absl::StatusOr<TensorMap> ours = ReadSafetensors(out);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ExpectTensorsAre(*ours, expected);
}

TEST_F(WeightsTest, WriteSafetensorsRejectsUnsupportedDtypes) {
  TensorMap tensors = {{"z", at::zeros({2}, at::kComplexFloat)}};
  absl::Status status = WriteSafetensors(Path("complex.safetensors"), tensors);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'z'"), HasSubstr("ComplexFloat")));
}

// ---- safetensors errors --------------------------------------------------------

void ExpectError(const absl::StatusOr<TensorMap>& result, absl::StatusCode code,
                 const std::vector<std::string>& fragments) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), code) << result.status();
  for (const std::string& f : fragments) {
    EXPECT_THAT(result.status().message(), HasSubstr(f));
  }
}

TEST_F(WeightsTest, MissingFileIsNotFound) {
  ExpectError(ReadSafetensors(Path("absent.safetensors")), absl::StatusCode::kNotFound,
              {"absent.safetensors"});
}

TEST_F(WeightsTest, TruncatedDataSectionIsDataLoss) {
  const std::string whole = ReadAll(Path("basic.safetensors"));
  const std::string cut = Path("cut.safetensors");
  WriteAll(cut, whole.substr(0, whole.size() - 20));
  // layer.0.weight is the last tensor in the data section.
  ExpectError(ReadSafetensors(cut), absl::StatusCode::kDataLoss,
              {"cut.safetensors", "'layer.0.weight'", "truncated"});
}

TEST_F(WeightsTest, HeaderLengthPastTheEndIsDataLoss) {
  ExpectError(ReadSafetensors(WriteRaw("long.safetensors", "{}", "", 1000)),
              absl::StatusCode::kDataLoss, {"long.safetensors", "header length 1000"});
  WriteAll(Path("tiny.safetensors"), "abc");
  ExpectError(ReadSafetensors(Path("tiny.safetensors")), absl::StatusCode::kDataLoss,
              {"tiny.safetensors", "3 bytes"});
}

TEST_F(WeightsTest, BadHeaderJsonIsInvalid) {
  ExpectError(ReadSafetensors(WriteRaw("badjson.safetensors", "{\"w\": {\"dtype\":", "")),
              absl::StatusCode::kInvalidArgument, {"badjson.safetensors", "JSON"});
  ExpectError(ReadSafetensors(WriteRaw("array.safetensors", "[1, 2]", "")),
              absl::StatusCode::kInvalidArgument, {"not a JSON object"});
}

TEST_F(WeightsTest, UnknownDtypeIsInvalid) {
  const std::string path = WriteRaw(
      "dtype.safetensors", R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})",
      std::string(2, '\0'));
  ExpectError(ReadSafetensors(path), absl::StatusCode::kInvalidArgument,
              {"dtype.safetensors", "'w'", "F8_E4M3", "BF16"});
}

TEST_F(WeightsTest, ShapeNotMatchingByteRangeIsInvalid) {
  const std::string path = WriteRaw(
      "shape.safetensors", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
      std::string(20, '\0'));
  ExpectError(ReadSafetensors(path), absl::StatusCode::kInvalidArgument,
              {"shape.safetensors", "'w'", "20 bytes", "needs 24"});
}

TEST_F(WeightsTest, OverlappingOffsetsAreInvalid) {
  const std::string path = WriteRaw(
      "overlap.safetensors",
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
      std::string(24, '\0'));
  ExpectError(ReadSafetensors(path), absl::StatusCode::kInvalidArgument,
              {"overlap.safetensors", "'a'", "'b'", "overlapping"});
}

TEST_F(WeightsTest, MalformedEntriesAreInvalid) {
  ExpectError(ReadSafetensors(WriteRaw("nooffsets.safetensors",
                                       R"({"w":{"dtype":"F32","shape":[1]}})", "")),
              absl::StatusCode::kInvalidArgument, {"'w'", "data_offsets"});
  ExpectError(
      ReadSafetensors(WriteRaw("negshape.safetensors",
                               R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                               std::string(4, '\0'))),
      absl::StatusCode::kInvalidArgument, {"'w'", "shape"});
  ExpectError(
      ReadSafetensors(WriteRaw("bool.safetensors",
                               R"({"w":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                               std::string("\x01\x02", 2))),
      absl::StatusCode::kInvalidArgument, {"'w'", "BOOL"});
}

// ---- hashing -------------------------------------------------------------------

TEST_F(WeightsTest, Sha256FileMatchesHashlib) {
  const json& hashes = Expected("sha256");
  ASSERT_GE(hashes.size(), 6u);
  for (auto it = hashes.begin(); it != hashes.end(); ++it) {
    absl::StatusOr<std::string> digest = Sha256File(Path(it.key()));
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, it.value().get<std::string>()) << it.key();
  }
  EXPECT_EQ(Sha256File(Path("absent.bin")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dikkat::model
