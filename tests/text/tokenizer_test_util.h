// Helpers shared by the tokenizer test suites: scratch directories and the
// Python reference script (tests/text/tokenizer_reference.py run by Debian's
// /usr/bin/python3).
#ifndef DIKKAT_TESTS_TEXT_TOKENIZER_TEST_UTIL_H_
#define DIKKAT_TESTS_TEXT_TOKENIZER_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dikkat::model::testing_util {

// A fresh directory under the test's temp dir, removed at destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "dikkat_tok_XXXXXX";
    char* made = mkdtemp(tmpl.data());
    if (made == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Text that exercises what tokenizers get wrong: several scripts (Turkish
// dotted/dotless i, CJK, Arabic), code, emoji with skin tones and ZWJ, digits,
// contractions, runs of spaces / tabs / newlines, NFKC-sensitive characters.
inline std::vector<std::string> ReferenceCorpus() {
  return {
      "Hello, world! This is a test of the tokenizer.",
      "The quick brown fox jumps over the lazy dog.",
      "Çok güzel bir gün; İstanbul'da ılık bir rüzgâr esiyor, şu ölçüleri değiştir.",
      "ISPARTA ışık İĞNE ığdır Şişli Ödemiş Üsküdar çğıİöşü ÇĞIİÖŞÜ",
      "def square(x):\n    return x ** 2  # the square\n",
      "int main() {\n\treturn 0;\n}\n",
      "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
      "Emoji: 🙂 👍🏽 👨‍👩‍👧 🇹🇷 ✔️",
      "Digits 1234567890 and 3.14159, 1,000,000 and 2024-01-31.",
      "I'm sure you're right, they'll see we've done what she'd said; it's 'quoted'.",
      "a    b     c\t\td",
      "\n\n\nthree newlines before and two after\n\n",
      "  leading and trailing spaces  ",
      "日本語のテキストと中文文本",
      "مرحبا بالعالم",
      "Café naïve résumé e\u0301 ﬁnal ＡＢＣ１２３ ½ x\u00a0y",
      "",
      " ",
      "!!!??? ... --- *** ///",
      "MixedCASE camelCaseIdentifiers snake_case_words HTTPServer",
  };
}

// Runs a shell command; returns its exit status (0 = success).
inline int Run(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Runs tokenizer_reference.py <command> <input.json> <output.json> [extra...]
// and returns the parsed output; fails the test if the script fails.
inline nlohmann::json RunReference(const ScratchDir& dir, const std::string& command,
                                   const nlohmann::json& input, const std::string& extra = "") {
  const std::string in = dir.File(command + "_in.json");
  const std::string out = dir.File(command + "_out.json");
  WriteFile(in, input.dump());
  const std::string cmd = std::string("/usr/bin/python3 ") + DIKKAT_SOURCE_DIR +
                          "/tests/text/tokenizer_reference.py " + command + " " + in + " " + out +
                          (extra.empty() ? "" : " " + extra);
  const int rc = Run(cmd);
  EXPECT_EQ(rc, 0) << "reference script failed: " << cmd;
  if (rc != 0) return nlohmann::json();
  return nlohmann::json::parse(ReadFile(out));
}

// The npm prefix holding `package`@`version` (build dir/npm/<package>@<version>,
// one prefix per package because npm prunes packages it did not save);
// installs it with npm when missing. ctest runs test cases as parallel
// processes, so the install runs under flock and leaves a marker file when
// complete. On failure: fails the test when CI=true (the registry is
// reachable there, so a miss is a real problem), otherwise returns "" and the
// caller skips, saying why.
inline std::string NpmPackageDir(const std::string& package, const std::string& version) {
  const std::string prefix = std::string(DIKKAT_BINARY_DIR) + "/npm/" + package + "@" + version;
  const std::string marker = prefix + "/.installed";
  if (std::filesystem::exists(marker)) return prefix;
  std::filesystem::create_directories(prefix);
  const std::string install = "npm install --no-save --no-audit --no-fund --loglevel=error --prefix " +
                              prefix + " " + package + "@" + version;
  const std::string cmd = "flock " + prefix + ".lock sh -c 'test -f " + marker + " || (" +
                          install + " && touch " + marker + ")' >" + prefix + ".log 2>&1";
  if (Run(cmd) == 0 && std::filesystem::exists(marker)) return prefix;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    ADD_FAILURE() << "CI: `" << install << "` failed; see " << prefix << ".log";
  }
  return "";
}

// Runs tokenizer_reference.js <command> <npm prefix> <in> <out>.
inline nlohmann::json RunNodeReference(const ScratchDir& dir, const std::string& command,
                                       const std::string& npm_prefix, const nlohmann::json& input) {
  const std::string in = dir.File(command + "_node_in.json");
  const std::string out = dir.File(command + "_node_out.json");
  WriteFile(in, input.dump());
  const std::string cmd = std::string("node ") + DIKKAT_SOURCE_DIR +
                          "/tests/text/tokenizer_reference.js " + command + " " + npm_prefix +
                          " " + in + " " + out;
  const int rc = Run(cmd);
  EXPECT_EQ(rc, 0) << "node reference failed: " << cmd;
  if (rc != 0) return nlohmann::json();
  return nlohmann::json::parse(ReadFile(out));
}

}  // namespace dikkat::model::testing_util

#endif  // DIKKAT_TESTS_TEXT_TOKENIZER_TEST_UTIL_H_
