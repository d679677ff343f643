// The trained models shipped in models/ (training/train_lm.py,
// training/train_numbers.py): they load through dikkat's own loader, match
// the manifest, reproduce PyTorch's logits for the exported weights, and
// answer sensibly: the language model writes dictionary words, the numbers
// model spells held-out numbers exactly.
#include <ATen/core/Tensor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/sha256_file.h"
#include "model/io/weights.h"
#include "model/kv_cache.h"
#include "model/model_loader.h"
#include "model/transformer.h"

namespace dikkat::model {
namespace {

namespace fs = std::filesystem;

const std::string kModels = std::string(DIKKAT_SOURCE_DIR) + "/models";
const std::string kData = std::string(DIKKAT_SOURCE_DIR) + "/tests/model/data";
constexpr char kDictionary[] = "/usr/share/dict/american-english";  // Debian's wamerican

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

// A shipped model folder, loaded once per process; null (after a test
// failure that says why) if it does not load.
const LoadedModel* Model(const std::string& name) {
  static auto* models = new std::map<std::string, LoadedModel>();
  auto it = models->find(name);
  if (it == models->end()) {
    absl::StatusOr<LoadedModel> loaded = LoadModelFolder(kModels + "/" + name, LoadOptions{});
    EXPECT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    if (!loaded.ok()) return nullptr;
    it = models->emplace(name, std::move(*loaded)).first;
  }
  return &it->second;
}

std::vector<float> ToVector(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

double MaxAbsDiff(const std::vector<float>& got, const nlohmann::json& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < std::min<size_t>(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i].get<double>()));
  }
  return worst;
}

int32_t Argmax(const at::Tensor& logits_row) {
  return static_cast<int32_t>(logits_row.argmax(-1).item<int64_t>());
}

// Greedy decoding through the paged KV cache, the way the engine runs it:
// prefill the whole prefix once, then one token per step. Stops after
// `max_new` tokens or at `eos` (not included). `cross` is set for the decoder
// of an encoder-decoder model.
std::vector<int32_t> GreedyDecode(const LoadedModel& m, std::vector<int32_t> tokens, int max_new,
                                  int32_t eos, const CrossAttentionCache* cross = nullptr) {
  absl::StatusOr<KvCache> cache =
      KvCache::Create(m.config, 8ll << 20, 16, c10::ScalarType::Float, c10::Device("cpu"));
  EXPECT_TRUE(cache.ok()) << cache.status();
  std::vector<int32_t> table;
  std::vector<int32_t> generated;
  int64_t cached = 0;
  while (static_cast<int>(generated.size()) < max_new &&
         static_cast<int64_t>(tokens.size()) < m.config.max_positions) {
    EXPECT_TRUE(cache->allocator().EnsureCapacity(&table, static_cast<int64_t>(tokens.size())));
    SequenceChunk chunk;
    chunk.tokens = absl::MakeConstSpan(tokens).subspan(cached);
    chunk.start_pos = cached;
    chunk.block_table = &table;
    chunk.cross = cross;
    ForwardResult out = m.transformer->Decode({chunk}, &*cache, ForwardOptions{});
    cached = static_cast<int64_t>(tokens.size());
    const int32_t next = Argmax(out.logits[0]);
    if (next == eos) break;
    generated.push_back(next);
    tokens.push_back(next);
  }
  return generated;
}

std::string Sha256(const std::string& path) {
  absl::StatusOr<std::string> sha = Sha256File(path);
  EXPECT_TRUE(sha.ok()) << sha.status();
  return sha.ok() ? *sha : "";
}

// ---- the manifest -------------------------------------------------------------

TEST(DemoModelsTest, EveryShippedFileMatchesTheManifest) {
  const nlohmann::json manifest = ReadJson(kModels + "/MANIFEST.json");
  const nlohmann::json& files = manifest.at("files");
  std::set<std::string> on_disk;
  for (const char* folder : {"dikkat-lm", "dikkat-numbers"}) {
    for (const auto& entry : fs::directory_iterator(kModels + "/" + folder)) {
      on_disk.insert(absl::StrCat(folder, "/", entry.path().filename().string()));
    }
  }
  std::set<std::string> listed;
  for (const auto& [file, sha] : files.items()) listed.insert(file);
  EXPECT_EQ(on_disk, listed) << "models/MANIFEST.json and the model folders disagree";
  for (const auto& [file, sha] : files.items()) {
    EXPECT_EQ(Sha256(kModels + "/" + file), sha.get<std::string>()) << file;
  }
}

TEST(DemoModelsTest, LoaderFingerprintsAndSizesMatchTheManifest) {
  const nlohmann::json files = ReadJson(kModels + "/MANIFEST.json").at("files");
  int64_t total_bytes = 0;
  for (const char* name : {"dikkat-lm", "dikkat-numbers"}) {
    const LoadedModel* model = Model(name);
    ASSERT_NE(model, nullptr);
    const LoadedModel& m = *model;
    EXPECT_EQ(m.weights_sha256,
              files.at(absl::StrCat(name, "/model.safetensors")).get<std::string>());
    EXPECT_THAT(m.report.unused_tensors, ::testing::IsEmpty()) << name;
    EXPECT_EQ(m.config.name, name);
    EXPECT_EQ(m.tokenizer->kind(), "sentencepiece") << name;
    EXPECT_EQ(m.tokenizer->vocab_size(), m.config.vocab_size) << name;
    EXPECT_EQ(m.tokenizer->special_tokens().eos, m.config.eos_token_id) << name;
    for (const auto& entry : fs::directory_iterator(kModels + "/" + name)) {
      total_bytes += static_cast<int64_t>(fs::file_size(entry.path()));
    }
  }
  EXPECT_LE(total_bytes, 20ll << 20) << "the shipped models must stay within 20 MiB";
}

// ---- the language model ---------------------------------------------------------

TEST(DemoModelsTest, LanguageModelLogitsMatchPyTorch) {
  const LoadedModel* model = Model("dikkat-lm");
  ASSERT_NE(model, nullptr);
  const LoadedModel& m = *model;
  const nlohmann::json ref = ReadJson(kData + "/dikkat_lm_reference.json");
  const std::vector<int32_t> ids = ref.at("prompt_ids").get<std::vector<int32_t>>();
  SequenceChunk chunk;
  chunk.tokens = absl::MakeConstSpan(ids);
  ForwardResult out = m.transformer->Decode({chunk}, nullptr, ForwardOptions{});
  const double err = MaxAbsDiff(ToVector(out.logits[0]), ref.at("last_logits"));
  std::cout << "  max |logit - PyTorch| = " << err << "\n";
  EXPECT_LT(err, 1e-3);
}

TEST(DemoModelsTest, LanguageModelTokenizesAndContinuesLikePyTorch) {
  const LoadedModel* model = Model("dikkat-lm");
  ASSERT_NE(model, nullptr);
  const LoadedModel& m = *model;
  const nlohmann::json ref = ReadJson(kData + "/dikkat_lm_reference.json");
  for (const nlohmann::json& sample : ref.at("samples")) {
    const std::string prompt = sample.at("prompt").get<std::string>();
    absl::StatusOr<Encoding> enc = m.tokenizer->Encode(prompt, /*add_special_tokens=*/false);
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_EQ(enc->ids, sample.at("prompt_ids").get<std::vector<int32_t>>()) << prompt;
    const std::vector<int32_t> want = sample.at("greedy_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = GreedyDecode(m, enc->ids, static_cast<int>(want.size()),
                                                  static_cast<int32_t>(m.config.eos_token_id));
    EXPECT_EQ(m.tokenizer->Decode(got, true), sample.at("greedy_text").get<std::string>())
        << prompt;
  }
}

std::set<std::string> LoadDictionary() {
  std::set<std::string> words;
  std::ifstream in(kDictionary);
  std::string w;
  while (std::getline(in, w)) {
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return std::tolower(c); });
    words.insert(w);
  }
  return words;
}

// Lowercase, with the punctuation around the word stripped ("Lord," -> "lord").
std::string Normalize(std::string word) {
  auto is_edge = [](unsigned char c) { return !std::isalnum(c); };
  while (!word.empty() && is_edge(word.back())) word.pop_back();
  size_t start = 0;
  while (start < word.size() && is_edge(word[start])) ++start;
  word = word.substr(start);
  std::transform(word.begin(), word.end(), word.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return word;
}

TEST(DemoModelsTest, LanguageModelWritesMostlyDictionaryWords) {
  const std::set<std::string> dictionary = LoadDictionary();
  ASSERT_GT(dictionary.size(), 50000u) << "install wamerican (scripts/install-deps.sh)";
  const LoadedModel* model = Model("dikkat-lm");
  ASSERT_NE(model, nullptr);
  const LoadedModel& m = *model;
  // Prompts that are not the reference samples' prompts.
  const std::vector<std::string> prompts = {
      "The old man",      "My computer is", "Blessed are the",    "Never trust a",
      "Once upon a time", "Why do people",  "The king of Israel", "Good programmers"};
  int words = 0;
  int known = 0;
  std::vector<std::string> unknown;
  for (const std::string& prompt : prompts) {
    absl::StatusOr<Encoding> enc = m.tokenizer->Encode(prompt, false);
    ASSERT_TRUE(enc.ok()) << enc.status();
    const std::string text = m.tokenizer->Decode(
        GreedyDecode(m, enc->ids, 40, static_cast<int32_t>(m.config.eos_token_id)), true);
    std::cout << "  " << prompt << " ->" << text << "\n";
    for (absl::string_view raw : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
      const std::string word = Normalize(std::string(raw));
      if (word.empty() || std::isdigit(static_cast<unsigned char>(word[0]))) continue;
      ++words;
      if (dictionary.count(word) > 0) {
        ++known;
      } else {
        unknown.push_back(word);
      }
    }
  }
  ASSERT_GT(words, 100) << "the model stopped too early to judge";
  const double ratio = static_cast<double>(known) / words;
  std::cout << "  dictionary words: " << known << "/" << words << " (" << ratio
            << "); unknown: " << absl::StrJoin(unknown, " ") << "\n";
  EXPECT_GE(ratio, 0.7);
}

// ---- the numbers model ------------------------------------------------------------

std::string SpellNumber(const LoadedModel& m, const std::string& digits) {
  absl::StatusOr<Encoding> source = m.tokenizer->Encode(digits, /*add_special_tokens=*/false);
  EXPECT_TRUE(source.ok()) << source.status();
  SequenceChunk chunk;
  chunk.tokens = absl::MakeConstSpan(source->ids);
  ForwardOptions options;
  options.hidden_layer = ForwardOptions::kFinalHidden;
  const at::Tensor memory = m.transformer->Encode({chunk}, options).hidden[0];  // [S, d]
  const CrossAttentionCache cross = m.transformer->MakeCrossCache(memory);
  const std::vector<int32_t> words =
      GreedyDecode(m, {static_cast<int32_t>(m.config.decoder_start_token_id)}, 40,
                   static_cast<int32_t>(m.config.eos_token_id), &cross);
  return m.tokenizer->Decode(words, true);
}

TEST(DemoModelsTest, NumbersModelLogitsMatchPyTorch) {
  const LoadedModel* model = Model("dikkat-numbers");
  ASSERT_NE(model, nullptr);
  const LoadedModel& m = *model;
  const nlohmann::json ref = ReadJson(kData + "/dikkat_numbers_reference.json");
  const std::vector<int32_t> source = ref.at("source_ids").get<std::vector<int32_t>>();
  const std::vector<int32_t> prefix = ref.at("decoder_ids").get<std::vector<int32_t>>();
  SequenceChunk enc;
  enc.tokens = absl::MakeConstSpan(source);
  ForwardOptions options;
  options.hidden_layer = ForwardOptions::kFinalHidden;
  const CrossAttentionCache cross =
      m.transformer->MakeCrossCache(m.transformer->Encode({enc}, options).hidden[0]);
  SequenceChunk dec;
  dec.tokens = absl::MakeConstSpan(prefix);
  dec.cross = &cross;
  ForwardResult out = m.transformer->Decode({dec}, nullptr, ForwardOptions{});
  // Encode, MakeCrossCache and Decode run under LibTorch's inference mode
  // (transformer.h): what they return is made there.
  EXPECT_TRUE(cross.keys[0].is_inference());
  EXPECT_TRUE(cross.values[0].is_inference());
  EXPECT_TRUE(out.logits.is_inference());
  const double err = MaxAbsDiff(ToVector(out.logits[0]), ref.at("last_logits"));
  std::cout << "  max |logit - PyTorch| = " << err << "\n";
  EXPECT_LT(err, 1e-3);
}

TEST(DemoModelsTest, NumbersModelSpellsHeldOutNumbersExactly) {
  const LoadedModel* model = Model("dikkat-numbers");
  ASSERT_NE(model, nullptr);
  const LoadedModel& m = *model;
  const nlohmann::json heldout = ReadJson(kData + "/dikkat_numbers_reference.json").at("heldout");
  ASSERT_GE(heldout.size(), 50u);
  int right = 0;
  for (size_t i = 0; i < 50; ++i) {
    const std::string digits = heldout[i].at("digits").get<std::string>();
    const std::string want = heldout[i].at("words").get<std::string>();
    const std::string got = SpellNumber(m, digits);
    if (got == want) {
      ++right;
    } else {
      std::cout << "  " << digits << ": got '" << got << "', want '" << want << "'\n";
    }
  }
  EXPECT_GE(right, 48) << right << "/50 held-out numbers spelled exactly (need >= 95%)";
  EXPECT_EQ(SpellNumber(m, "4217"), "four thousand two hundred seventeen");
}

}  // namespace
}  // namespace dikkat::model
