// ChatTemplate's own contract: errors (what and where), jinja2's Undefined,
// the render limits, thread safety. Byte-for-byte agreement with jinja2 is
// chat_template_reference_test's job.
#include "model/chat/chat_template.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/chat/python_text.h"
#include "model/chat/value.h"
#include "nlohmann/json.hpp"

namespace dikkat::chat {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::ordered_json;

absl::StatusOr<std::string> Render(const std::string& source, const json& context = json::object(),
                                   const RenderLimits& limits = RenderLimits()) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(context, limits);
}

std::string Ok(const std::string& source, const json& context = json::object()) {
  absl::StatusOr<std::string> r = Render(source, context);
  EXPECT_TRUE(r.ok()) << source << ": " << r.status();
  return r.ok() ? *r : "";
}

TEST(ChatTemplateTest, RendersAConversation) {
  const std::string source =
      "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}\n"
      "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
  const json context = {{"bos_token", "<s>"},
                        {"add_generation_prompt", true},
                        {"messages", {{{"role", "user"}, {"content", " Merhaba! "}}}}};
  EXPECT_EQ(Ok(source, context), "<s><|user|>\nMerhaba!\n<|assistant|>\n");
}

TEST(ChatTemplateTest, SyntaxErrorsSayWhere) {
  absl::StatusOr<std::string> r = Render("hello\n  {{ 'abc }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("line 2, column 6: unterminated string"));

  r = Render("{% if x %}\nno end");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("missing '{% elif %}'"));

  r = Render("a\nb {{ 1 + }}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("line 2, column 10: unexpected '}}'"));

  for (const char* bad : {"{% include 'x' %}", "{{ (1 }}", "{{ 1) }}", "{% break %}",
                          "{% for x in y %}", "{# open", "{{ x", "{% set %}", "{{ 'a' | }}",
                          "{% macro m( %}{% endmacro %}", "{{ x[] }}", "{{ 1 + @ }}"}) {
    EXPECT_EQ(Render(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ChatTemplateTest, RenderErrorsNameTheLine) {
  absl::StatusOr<std::string> r = Render("ok\n{% if true %}\n{{ missing.attr }}{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("line 3: cannot read attribute 'attr' of an undefined value"));
  EXPECT_THAT(Render("{{ 'a' + 1 }}").status().ToString(),
              HasSubstr("unsupported operand type(s) for +: 'str' and 'int'"));
  EXPECT_THAT(Render("{{ 1 // 0 }}").status().ToString(), HasSubstr("by zero"));
  EXPECT_THAT(Render("{{ [1] | map('string') | tojson }}").status().ToString(),
              HasSubstr("generator is not JSON serializable"));
  EXPECT_THAT(Render("{{ 9223372036854775807 + 1 }}").status().ToString(),
              HasSubstr("integer overflow"));
  EXPECT_THAT(Render("{{ x | nosuchfilter }}").status().ToString(),
              HasSubstr("no filter named 'nosuchfilter'"));
  EXPECT_THAT(Render("{{ [].append(1) }}").status().ToString(), HasSubstr("cannot modify"));
}

TEST(ChatTemplateTest, RaiseExceptionKeepsTheTemplatesMessage) {
  absl::StatusOr<std::string> r = Render(
      "a{% if messages[0].role == 'system' %}{{ raise_exception('System role not "
      "supported') }}{% endif %}",
      {{"messages", {{{"role", "system"}, {"content", "x"}}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(r.status().message()), "chat template raised: System role not supported");
}

TEST(ChatTemplateTest, ContextMustBeAnObject) {
  EXPECT_EQ(Render("x", json::array()).status().code(), absl::StatusCode::kInvalidArgument);
}

// jinja2's default Undefined: prints as nothing, is falsy, iterates as empty,
// has length 0, but any attribute, item, call or arithmetic on it raises.
TEST(ChatTemplateTest, UndefinedBehavesAsJinja2s) {
  EXPECT_EQ(Ok("[{{ nope }}]"), "[]");
  EXPECT_EQ(Ok("{{ nope is defined }} {{ nope is undefined }} {{ not nope }}"), "False True True");
  EXPECT_EQ(Ok("{% for x in nope %}x{% else %}empty{% endfor %}{{ nope | length }}"), "empty0");
  EXPECT_EQ(Ok("{{ 'a' ~ nope ~ 'b' }}{{ nope | default('d') }}{{ nope | trim }}"), "abd");
  EXPECT_EQ(Ok("{{ {'a': 1}.b is defined }}{{ {'a': 1}['b'] is defined }}{{ [1][3] is defined }}"),
            "FalseFalseFalse");
  EXPECT_EQ(Ok("{{ nope == nope }}{{ nope in [1] }}{{ 1 in nope }}"), "TrueFalseFalse");
  for (const char* raises :
       {"{{ nope.x }}", "{{ nope['x'] }}", "{{ nope() }}", "{{ nope + 'a' }}", "{{ 'a' + nope }}",
        "{{ nope | tojson }}", "{{ nope.x.y }}", "{{ nope[1:] }}", "{{ nope < 1 }}"}) {
    EXPECT_EQ(Render(raises).status().code(), absl::StatusCode::kInvalidArgument) << raises;
  }
}

TEST(ChatTemplateTest, TojsonKeepsKeyOrderAndUnicode) {
  const json context = json::parse(R"({"t": {"z": 1, "a": {"ü": "İ\n", "n": null}, "f": 1.5}})");
  EXPECT_EQ(Ok("{{ t | tojson }}", context), R"({"z": 1, "a": {"ü": "İ\n", "n": null}, "f": 1.5})");
  EXPECT_EQ(Ok("{{ t.a | tojson(indent=2) }}", context),
            "{\n  \"\xC3\xBC\": \"\xC4\xB0\\n\",\n  \"n\": null\n}");
}

TEST(ChatTemplateTest, FloatsPrintAsPythonReprs) {
  EXPECT_EQ(PyFloat(1.0), "1.0");
  EXPECT_EQ(PyFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(PyFloat(1e16), "1e+16");
  EXPECT_EQ(PyFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloat(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(PyFloat(0.0001), "0.0001");
  EXPECT_EQ(PyFloat(0.00001), "1e-05");
  EXPECT_EQ(PyFloat(-0.0), "-0.0");
  EXPECT_EQ(PyFloat(-2.5e-10), "-2.5e-10");
}

TEST(ChatTemplateTest, StrftimeNowFormatsTheLocalTime) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char year[8];
  std::strftime(year, sizeof(year), "%Y", &local);
  EXPECT_EQ(Ok("{{ strftime_now('%Y') }}"), year);
}

TEST(ChatTemplateTest, OutputLimit) {
  RenderLimits limits;
  limits.max_output_bytes = 500;
  const std::string loop = "{% for i in range(100) %}0123456789{% endfor %}";
  absl::StatusOr<std::string> r = Render(loop, json::object(), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("exceeds 500 bytes"));
  limits.max_output_bytes = 1000;
  EXPECT_TRUE(Render(loop, json::object(), limits).ok());
}

TEST(ChatTemplateTest, HugeValuesFailBeforeTheyAreBuilt) {
  for (const char* huge :
       {"{{ 'x' * 1000000000000 }}", "{{ [1, 2] * 1000000000000 }}", "{{ range(1000000000000) }}",
        "{% set s = 'ab' * 1000000 %}{{ s.replace('a', s) }}", "{{ 'abc' | indent(1000000000) }}",
        "{% set s = 'x' * 1000000 %}{{ (s ~ s ~ s ~ s ~ s) | length }}"}) {
    EXPECT_EQ(Render(huge).status().code(), absl::StatusCode::kResourceExhausted) << huge;
  }
}

TEST(ChatTemplateTest, TotalBytesLimitBoundsMemoryAcrossALoop) {
  // Each value is small, but the loop keeps building new ones.
  RenderLimits limits;
  limits.max_total_bytes = 1 << 20;
  absl::StatusOr<std::string> r = Render(
      "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s + 'x' %}"
      "{% endfor %}{{ ns.s | length }}",
      json::object(), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChatTemplateTest, StepLimit) {
  RenderLimits limits;
  limits.max_steps = 10'000;
  absl::StatusOr<std::string> r =
      Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
             json::object(), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("10000 evaluation steps"));
}

TEST(ChatTemplateTest, RecursionLimit) {
  absl::StatusOr<std::string> r = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("macro calls nested more than 32 deep"));
  // Bounded recursion within the limit works.
  EXPECT_EQ(Ok("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
               "{{ f(20) | length }}"),
            "31");
}

TEST(ChatTemplateTest, DeepNestingIsAParseErrorNotACrash) {
  for (const std::string& deep :
       {"{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}",
        "{{ " + std::string(100000, '[') + " }}", "{{ " + std::string(50000, '-') + "1 }}",
        [] {
          std::string s;
          for (int i = 0; i < 5000; ++i) s += "{% if true %}";
          return s;
        }(),
        "{{ x" + std::string(100000, '|') + " }}", "{{ " + std::string(30000, 'n') + " }}"}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(deep);
    if (t.ok()) {
      t->Render(json::object()).IgnoreError();
    } else {
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_THAT(
      ChatTemplate::Parse("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}")
          .status()
          .ToString(),
      HasSubstr("nested too deeply"));
}

TEST(ChatTemplateTest, RendersConcurrentlyFromOneParse) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.content }}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(4);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      json messages = json::array();
      for (int i = 0; i < 200; ++i) messages.push_back({{"content", std::to_string(k)}});
      for (int round = 0; round < 20; ++round) {
        absl::StatusOr<std::string> r = t->Render({{"messages", messages}});
        outputs[k] = r.ok() ? *r : r.status().ToString();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(outputs[k], std::string(200, '0' + k) + "200");
}

// The default limits against the real templates: a 100-message
// conversation with tool calls and two tool schemas must take at most a tenth
// of each budget (the smallest max_steps that renders it is printed).
TEST(ChatTemplateTest, DefaultLimitsLeaveRoomForLongConversations) {
  json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "description": "City"}, "days": {"type": "integer",
      "description": "Days", "minimum": 1}}, "required": ["city"]}}}])");
  tools.push_back(tools[0]);
  tools[1]["function"]["name"] = "get_time";
  json messages = json::array();
  messages.push_back({{"role", "system"}, {"content", "You are helpful."}});
  for (int i = 0; i < 33; ++i) {
    messages.push_back(
        {{"role", "user"}, {"content", "Weather in city " + std::to_string(i) + "?"}});
    messages.push_back(json::parse(R"({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather",
         "arguments": "{\"city\": \"Ankara\"}"}}]})"));
    messages.push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "{\"t\": 21}"}});
  }
  const json context = {{"messages", messages},          {"tools", tools},
                        {"add_generation_prompt", true}, {"bos_token", "<s>"},
                        {"eos_token", "</s>"},           {"functions", "[]"},
                        {"datetime", "2026-11-24"},      {"date_string", "24 Nov 2026"}};
  const RenderLimits defaults;
  namespace fs = std::filesystem;
  int rendered = 0;
  for (const auto& entry :
       fs::directory_iterator(fs::path(DIKKAT_SOURCE_DIR) / "tests/chat/data/chat_templates")) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream source;
    source << in.rdbuf();
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source.str());
    ASSERT_TRUE(t.ok()) << t.status();
    if (!t->Render(context).ok()) continue;  // e.g. Gemma: no system role
    ++rendered;
    RenderLimits tight = defaults;
    tight.max_steps = defaults.max_steps / 10;
    tight.max_total_bytes = defaults.max_total_bytes / 10;
    tight.max_output_bytes = defaults.max_output_bytes / 10;
    EXPECT_TRUE(t->Render(context, tight).ok()) << entry.path().filename();
    int64_t lo = 1;
    int64_t hi = tight.max_steps;
    while (lo < hi) {
      RenderLimits probe = defaults;
      probe.max_steps = (lo + hi) / 2;
      if (t->Render(context, probe).ok()) {
        hi = probe.max_steps;
      } else {
        lo = probe.max_steps + 1;
      }
    }
    std::printf("%7lld steps  %s\n", static_cast<long long>(lo), entry.path().filename().c_str());
  }
  EXPECT_GE(rendered, 8);
}

// Shapes that would make reference cycles (a macro in the scope it closes
// over, a namespace holding itself): the sanitizer build's LeakSanitizer
// checks that each render frees them.
TEST(ChatTemplateTest, CyclesAreFreed) {
  EXPECT_EQ(Ok("{% macro m(n) %}{% if n %}{{ m(n - 1) }}{% endif %}.{% endmacro %}{{ m(2) }}"),
            "...");
  EXPECT_EQ(Ok("{% set ns = namespace(x=1) %}{% set ns.me = ns %}{% set ns.l = [ns, ns] %}"
               "{{ ns.me.me.x }}"),
            "1");
}

// Everything that walks a value recurses (printing, tojson, ==, freeing):
// nesting is bounded wherever values come from.
TEST(ChatTemplateTest, DeeplyNestedValuesAreALimitNotACrash) {
  absl::StatusOr<std::string> r = Render(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nested more than 128 deep"));

  json deep = json::array();
  for (int i = 0; i < 1000; ++i) deep = json::array({std::move(deep)});
  r = Render("{{ messages | length }}", {{"messages", deep}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);

  // A namespace that holds itself prints until the depth limit, then fails.
  r = Render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChatTemplateTest, TojsonIndentIsBounded) {
  absl::StatusOr<std::string> r = Render("{{ [[[1]]] | tojson(indent=100000000) }}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ChatTemplateTest, CopiesShareTheParsedTemplate) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ x }}");
  ASSERT_TRUE(t.ok());
  const ChatTemplate copy = *t;
  t = ChatTemplate::Parse("other");
  EXPECT_EQ(*copy.Render({{"x", "still here"}}), "still here");
}

}  // namespace
}  // namespace dikkat::chat
