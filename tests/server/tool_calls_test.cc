// Tool calls in chat output (server/tool_calls.h): the convention decided
// from the real chat templates in tests/chat/data, the parsers on outputs
// shaped as those models write them, what a stream may send before a call
// can be ruled out, and the OpenAI message / stream events built from them
// (server/openai_response.h).
#include "server/tool_calls.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/byte_tokenizer.h"
#include "server/openai_response.h"

namespace dikkat::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

std::string Template(const std::string& name) {
  std::ifstream in(std::string(DIKKAT_SOURCE_DIR) + "/tests/chat/data/chat_templates/" + name +
                   ".jinja");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

TEST(ToolCallFormatTest, DecidedFromTheTemplatesText) {
  EXPECT_EQ(DetectToolCallFormat(Template("Qwen-Qwen2.5-7B-Instruct")), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(Template("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use")),
            ToolCallFormat::kHermes);
  for (const char* llama : {"meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
                            "meta-llama-Llama-3.3-70B-Instruct"}) {
    EXPECT_EQ(DetectToolCallFormat(Template(llama)), ToolCallFormat::kLlama3Json) << llama;
  }
  // Conventions not parsed (their output stays content).
  for (const char* other :
       {"google-gemma-2-2b-it", "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
        "meetkai-functionary-medium-v3.1", "fireworks-ai-llama-3-firefunction-v2",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"}) {
    EXPECT_EQ(DetectToolCallFormat(Template(other)), ToolCallFormat::kNone) << other;
  }
}

auto Call(const std::string& name, const std::string& arguments) {
  return ::testing::AllOf(Field(&ToolCall::name, name), Field(&ToolCall::arguments, arguments));
}

TEST(ToolCallsTest, HermesBlocksWithTextAround) {
  // As Qwen2.5 answers two calls (the template's own layout).
  const std::string two =
      "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
      "\"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", "
      "\"date\": \"2024-10-01\", \"unit\": \"celsius\"}}\n</tool_call>";
  ParsedToolCalls parsed = ParseToolCalls(two, ToolCallFormat::kHermes);
  EXPECT_THAT(
      parsed.calls,
      ElementsAre(Call("get_current_temperature", R"({"location":"San Francisco, CA, USA"})"),
                  Call("get_temperature_date",
                       R"({"location":"San Francisco, CA, USA","date":"2024-10-01",)"
                       R"("unit":"celsius"})")));
  EXPECT_EQ(parsed.content, "");

  parsed = ParseToolCalls(
      "Let me look that up.\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": "
      "1}\"}\n</tool_call>\nOne moment.\n",
      ToolCallFormat::kHermes);
  EXPECT_THAT(parsed.calls, ElementsAre(Call("search", R"({"q": 1})")));  // a string: as sent
  EXPECT_EQ(parsed.content, "Let me look that up.\n\n\nOne moment.");

  parsed = ParseToolCalls("<tool_call>{\"name\": \"now\"}</tool_call>", ToolCallFormat::kHermes);
  EXPECT_THAT(parsed.calls, ElementsAre(Call("now", "{}")));

  // Not well-formed: no call, the text is content as generated.
  for (const char* bad : {"Just text.", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n",
                          "<tool_call>{\"name\": \"f\", \"arguments\": {}</tool_call>",
                          "<tool_call>{\"arguments\": {}}</tool_call>",
                          "<tool_call>{\"name\": \"\"}</tool_call>", "<tool_call>[1]</tool_call>",
                          "<tool_call>{\"name\": \"f\"}</tool_call> <tool_call>oops</tool_call>"}) {
    EXPECT_TRUE(ParseToolCalls(bad, ToolCallFormat::kHermes).calls.empty()) << bad;
  }
  EXPECT_TRUE(ParseToolCalls(two, ToolCallFormat::kNone).calls.empty());

  // Arguments nested deeper than a request body may be (32) are not a call:
  // serializing them again recursed once a level (a stack overflow at ~40K
  // levels, which a model may write). Brackets inside strings do not count.
  const auto nested = [](int depth, const std::string& inner) {
    return "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(depth, '[') + inner +
           std::string(depth, ']') + "}</tool_call>";
  };
  parsed = ParseToolCalls(nested(30, "\"[[[[[\\\"[[[\""), ToolCallFormat::kHermes);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].arguments,
            std::string(30, '[') + "\"[[[[[\\\"[[[\"" + std::string(30, ']'));
  EXPECT_EQ(ParseToolCalls(nested(32, "1"), ToolCallFormat::kHermes).calls.size(), 1u);
  EXPECT_TRUE(ParseToolCalls(nested(33, "1"), ToolCallFormat::kHermes).calls.empty());
  EXPECT_TRUE(ParseToolCalls(nested(100000, "1"), ToolCallFormat::kHermes).calls.empty());
}

TEST(ToolCallsTest, Llama3JsonIsTheWholeAnswer) {
  ParsedToolCalls parsed = ParseToolCalls(
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": [1, 2]}}",
      ToolCallFormat::kLlama3Json);
  EXPECT_THAT(parsed.calls, ElementsAre(Call("get_weather", R"({"city":"Paris","days":[1,2]})")));
  EXPECT_EQ(parsed.content, "");
  // With the python tag kept, "arguments" instead, several separated by ';'.
  parsed = ParseToolCalls(
      "<|python_tag|>{\"name\": \"a\", \"arguments\": {\"x\": \"}{\"}}; {\"name\": \"b\", "
      "\"parameters\": {}}\n",
      ToolCallFormat::kLlama3Json);
  EXPECT_THAT(parsed.calls, ElementsAre(Call("a", R"({"x":"}{"})"), Call("b", "{}")));

  for (const char* content :
       {"The weather in Paris is {mild}.", "{\"name\": \"f\", \"parameters\": {}} and more text",
        "{\"city\": \"Paris\"}", "{\"name\": \"f\", \"parameters\": {",
        "Sure: {\"name\": \"f\"}"}) {
    EXPECT_TRUE(ParseToolCalls(content, ToolCallFormat::kLlama3Json).calls.empty()) << content;
  }
}

// Every prefix of `text`: what may be streamed never shrinks, and is a
// prefix of the final content.
void ExpectStreamableIsMonotonicAndAPrefix(const std::string& text, ToolCallFormat format) {
  const ParsedToolCalls parsed = ParseToolCalls(text, format);
  const std::string& content = parsed.calls.empty() ? text : parsed.content;
  size_t previous = 0;
  for (size_t n = 0; n <= text.size(); ++n) {
    const size_t s = StreamableContent(std::string_view(text).substr(0, n), format);
    ASSERT_GE(s, previous) << n << ": " << text;
    ASSERT_LE(s, content.size()) << n << ": " << text;
    ASSERT_EQ(text.substr(0, s), content.substr(0, s)) << n << ": " << text;
    previous = s;
  }
}

TEST(ToolCallsTest, StreamsContentOnlyUntilACallMayBegin) {
  EXPECT_EQ(StreamableContent("Hello <tool", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(StreamableContent("Hello <tool_call>{", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(StreamableContent("Hello <b>", ToolCallFormat::kHermes), 9u);
  EXPECT_EQ(StreamableContent("Hello\n", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(StreamableContent("  {\"na", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(StreamableContent("\n", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(StreamableContent(" Paris is", ToolCallFormat::kLlama3Json), 9u);
  EXPECT_EQ(StreamableContent("<tool_call>", ToolCallFormat::kNone), 11u);
  for (const char* text :
       {"Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone.",
        "<tool_call>{\"name\": \"f\"}</tool_call>", "a <tool_cal b <tool_call>x", "plain text  "}) {
    ExpectStreamableIsMonotonicAndAPrefix(text, ToolCallFormat::kHermes);
  }
  for (const char* text : {"{\"name\": \"f\", \"parameters\": {}}", " Paris {x}", "{not json"}) {
    ExpectStreamableIsMonotonicAndAPrefix(text, ToolCallFormat::kLlama3Json);
  }
}

// The OpenAI answer: message.tool_calls and finish_reason "tool_calls",
// whole and streamed alike.
TEST(ToolCallsTest, ChatAnswersToolCallsWholeAndStreamed) {
  std::unique_ptr<model::Tokenizer> tokenizer = model::MakeByteTokenizer();
  openai::GenerateCall call;
  call.prompts.resize(1);
  call.tool_format = ToolCallFormat::kHermes;
  const std::string output =
      "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  openai::ChoiceBuilder whole(openai::NewResponseMeta(openai::Api::kChat, "m"), call, *tokenizer);
  openai::ChoiceBuilder stream(openai::NewResponseMeta(openai::Api::kChat, "m"), call, *tokenizer);
  std::string content;
  openai::Json tool_calls;
  int finishes = 0;
  auto collect = [&](const std::vector<openai::Json>& events) {
    for (const openai::Json& e : events) {
      const openai::Json& choice = e["choices"][0];
      if (choice["delta"].contains("content")) content += choice["delta"]["content"];
      if (choice["delta"].contains("tool_calls")) tool_calls = choice["delta"]["tool_calls"];
      if (!choice["finish_reason"].is_null()) {
        ++finishes;
        EXPECT_EQ(choice["finish_reason"], "tool_calls");
      }
    }
  };
  // Byte by byte, as a stream may split it.
  for (char c : output) {
    GeneratedChunk chunk;
    chunk.text = std::string(1, c);
    whole.Add(chunk);
    collect(stream.ChunkEvents(chunk));
    EXPECT_EQ(content.find("<tool"), std::string::npos) << "a call's text was streamed";
  }
  GenerateSummary summary;
  summary.reason = FinishReason::kEos;
  collect(stream.FinishEvents(summary));
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(content, "I will check.");
  ASSERT_EQ(tool_calls.size(), 1u);
  EXPECT_EQ(tool_calls[0]["index"], 0);
  EXPECT_EQ(tool_calls[0]["type"], "function");
  EXPECT_EQ(tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(tool_calls[0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_THAT(tool_calls[0]["id"].get<std::string>(), ::testing::StartsWith("call_"));

  const openai::Json response = whole.Response(summary);
  const openai::Json& message = response["choices"][0]["message"];
  EXPECT_EQ(message["content"], "I will check.");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_FALSE(message["tool_calls"][0].contains("index"));
  EXPECT_EQ(message["tool_calls"][0]["function"], tool_calls[0]["function"]);
  EXPECT_EQ(response["choices"][0]["finish_reason"], "tool_calls");

  // Without calls the answer is plain content, its finish its own.
  openai::ChoiceBuilder plain(openai::NewResponseMeta(openai::Api::kChat, "m"), call, *tokenizer);
  GeneratedChunk chunk;
  chunk.text = "No tools needed <tool";
  plain.Add(chunk);
  const openai::Json answer = plain.Response(summary);
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "No tools needed <tool");
  EXPECT_FALSE(answer["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace dikkat::server
