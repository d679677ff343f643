#include "model/chat/chat_template.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dikkat::chat {
namespace {

std::string Render(const std::string& source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return "PARSE: " + std::string(t.status().message());
  auto r = t->Render(context);
  if (!r.ok()) return "RENDER: " + std::string(r.status().message());
  return *r;
}

TEST(ChatTemplateTest, Smoke) { EXPECT_EQ(Render("a{{ 1 + 2 }}b"), "a3b"); }

}  // namespace
}  // namespace dikkat::chat
