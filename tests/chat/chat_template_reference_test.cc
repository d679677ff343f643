// Every real chat template in tests/chat/data/chat_templates/ rendered over
// the conversations of chat_template_reference.py, against Debian's
// python3-jinja2 configured as Hugging Face transformers configures it: the
// same text byte for byte, and an error wherever jinja2 raises (with the
// template's own message when it called raise_exception).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "model/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace dikkat::chat {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path TemplateDir() { return fs::path(DIKKAT_SOURCE_DIR) / "tests/chat/data/chat_templates"; }

class ChatTemplateReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path out = fs::path(::testing::TempDir()) /
                         ("chat_template_reference_" + std::to_string(getpid()) + ".json");
    std::string cmd = std::string("/usr/bin/python3 ") + DIKKAT_SOURCE_DIR +
                      "/tests/chat/chat_template_reference.py " + out.string();
    for (const auto& entry : fs::directory_iterator(TemplateDir())) {
      if (entry.path().extension() == ".jinja") cmd += " " + entry.path().string();
    }
    const int rc = std::system(cmd.c_str());
    ASSERT_EQ(rc, 0) << "reference script failed (is python3-jinja2 installed?): " << cmd;
    reference_ = new nlohmann::ordered_json(nlohmann::ordered_json::parse(ReadFile(out)));
    fs::remove(out);
  }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
  }
  static inline nlohmann::ordered_json* reference_ = nullptr;
};

TEST_F(ChatTemplateReferenceTest, EveryTemplateMatchesJinja2ByteForByte) {
  ASSERT_NE(reference_, nullptr);
  std::map<std::string, ChatTemplate> templates;
  for (const auto& entry : fs::directory_iterator(TemplateDir())) {
    if (entry.path().extension() != ".jinja") continue;
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(ReadFile(entry.path()));
    ASSERT_TRUE(t.ok()) << entry.path().filename() << ": " << t.status();
    templates.emplace(entry.path().filename().string(), *std::move(t));
  }
  ASSERT_GE(templates.size(), 13u);
  std::map<std::string, int> rendered;  // per template: cases rendered (not raising)
  int checked = 0;
  for (const auto& c : (*reference_)["cases"]) {
    const std::string name = c["template"].get<std::string>();
    SCOPED_TRACE(name + " " + c["case"].get<std::string>());
    ASSERT_EQ(templates.count(name), 1u);
    const absl::StatusOr<std::string> got = templates.at(name).Render(c["context"]);
    ++checked;
    if (c["ok"].get<bool>()) {
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) continue;
      const std::string want = c["text"].get<std::string>();
      if (*got != want) {
        size_t at = 0;
        while (at < got->size() && at < want.size() && (*got)[at] == want[at]) ++at;
        const size_t from = at < 60 ? 0 : at - 60;
        ADD_FAILURE() << "differs at byte " << at << "\n  ours:   ..." << got->substr(from, 120)
                      << "\n  jinja2: ..." << want.substr(from, 120);
        continue;
      }
      ++rendered[name];
    } else {
      EXPECT_FALSE(got.ok()) << "jinja2 raised " << c["error"].get<std::string>()
                             << " but we rendered:\n"
                             << *got;
      if (!got.ok() && c["raised"].get<bool>()) {
        EXPECT_EQ(std::string(got.status().message()),
                  "chat template raised: " + c["error"].get<std::string>());
      }
    }
  }
  EXPECT_GT(checked, 300);
  std::printf("%d renders checked against jinja2 %s; rendered text per template:\n", checked,
              (*reference_)["jinja2"].get<std::string>().c_str());
  // Every template renders most conversations (not just errors both ways).
  for (const auto& [name, t] : templates) {
    std::printf("  %3d  %s\n", rendered[name], name.c_str());
    EXPECT_GE(rendered[name], 2) << name;
  }
}

// Small templates, one language feature each (SNIPPETS in the script):
// whitespace control, loops, scoping, macros, operators, literals, Python's
// str() of values, string methods, filters, tests.
TEST_F(ChatTemplateReferenceTest, LanguageSnippetsMatchJinja2) {
  ASSERT_NE(reference_, nullptr);
  const nlohmann::ordered_json& context = (*reference_)["snippet_context"];
  int checked = 0;
  for (const auto& c : (*reference_)["snippets"]) {
    const std::string source = c["source"].get<std::string>();
    SCOPED_TRACE(source);
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
    if (!c["ok"].get<bool>()) {
      EXPECT_FALSE(t.ok() && t->Render(context).ok()) << "jinja2: " << c["error"];
      continue;
    }
    ASSERT_TRUE(t.ok()) << t.status();
    const absl::StatusOr<std::string> got = t->Render(context);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c["text"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 45);
}

}  // namespace
}  // namespace dikkat::chat
