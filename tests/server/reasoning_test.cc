// Reasoning in thinking models' chat answers (server/reasoning.h): where it
// starts (an opening <think>, or a prompt that left one open, as DeepSeek-R1's
// real template does), where it ends, what a stream may send before a tag is
// ruled out, and the OpenAI message / stream events built from it
// (server/openai_response.h), with and without tool calls.
#include "server/reasoning.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/chat/chat_template.h"
#include "model/text/byte_tokenizer.h"
#include "server/openai_response.h"

namespace dikkat::server {
namespace {

std::string RenderTemplate(const std::string& name, const openai::Json& messages) {
  std::ifstream in(std::string(DIKKAT_SOURCE_DIR) + "/tests/chat/data/chat_templates/" + name +
                   ".jinja");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::Parse(text.str());
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  nlohmann::ordered_json context = {{"messages", messages},
                                    {"add_generation_prompt", true},
                                    {"bos_token", "<s>"},
                                    {"eos_token", "</s>"}};
  absl::StatusOr<std::string> prompt = t->Render(context);
  EXPECT_TRUE(prompt.ok()) << prompt.status();
  return prompt.ok() ? *prompt : "";
}

TEST(ReasoningTest, APromptOpensReasoningWhenItsLastThinkIsUnclosed) {
  // DeepSeek-R1's real template ends the prompt inside a <think> block; an
  // earlier turn's reasoning is closed (the template drops it anyway).
  const openai::Json messages =
      openai::Json::array({{{"role", "user"}, {"content", "2+2?"}},
                           {{"role", "assistant"}, {"content", "<think>add</think>4"}},
                           {{"role", "user"}, {"content", "3+3?"}}});
  const std::string r1 = RenderTemplate("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", messages);
  EXPECT_TRUE(PromptOpensReasoning(r1)) << r1;
  // Templates without thinking never open one.
  EXPECT_FALSE(PromptOpensReasoning(RenderTemplate("Qwen-Qwen2.5-7B-Instruct", messages)));
  EXPECT_FALSE(PromptOpensReasoning(""));
  // Qwen3 with enable_thinking false: an empty block, closed.
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_TRUE(PromptOpensReasoning("<think>a</think>b<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(PromptOpensReasoning("<think>"));
  EXPECT_FALSE(PromptOpensReasoning("</think>"));
  EXPECT_FALSE(PromptOpensReasoning("  \n"));
  // A message that mentions the tag opens nothing: only the prompt's end.
  EXPECT_FALSE(PromptOpensReasoning(
      "<|im_start|>user\nWrap your reasoning in <think> tags<|im_end|>\n<|im_start|>assistant\n"));
}

TEST(ReasoningTest, SplitsAWholeAnswer) {
  ReasoningSplit s = SplitReasoning("<think>\nplan\n</think>\n\nAnswer", false, true);
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "\nplan\n");
  EXPECT_EQ(s.content, "\n\nAnswer");  // as generated, as vLLM gives it
  // Leading whitespace before the tag is allowed.
  s = SplitReasoning(" \n<think>x</think>y", false, true);
  EXPECT_EQ(s.reasoning, "x");
  EXPECT_EQ(s.content, "y");
  // No opening tag and no open prompt: all content, tags and all.
  s = SplitReasoning("Answer </think> more", false, true);
  EXPECT_FALSE(s.has_reasoning);
  EXPECT_EQ(s.content, "Answer </think> more");
  s = SplitReasoning("x<think>y</think>", false, true);
  EXPECT_FALSE(s.has_reasoning);
  // Opened by the prompt: reasoning from the first byte; a <think> the
  // model writes anyway is a tag.
  s = SplitReasoning("plan</think>Answer", true, true);
  EXPECT_EQ(s.reasoning, "plan");
  EXPECT_EQ(s.content, "Answer");
  s = SplitReasoning("\n<think>plan</think>Answer", true, true);
  EXPECT_EQ(s.reasoning, "plan");
  // Cut before </think> (max_tokens): all reasoning, no content.
  s = SplitReasoning("<think>still thinking </th", false, true);
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "still thinking </th");
  EXPECT_EQ(s.content, "");
  // Only the first </think> ends it.
  s = SplitReasoning("<think>a</think>b</think>c", false, true);
  EXPECT_EQ(s.reasoning, "a");
  EXPECT_EQ(s.content, "b</think>c");
  s = SplitReasoning("", false, true);
  EXPECT_FALSE(s.has_reasoning);
  EXPECT_EQ(s.content_ready, 0u);
}

TEST(ReasoningTest, HoldsBackWhatMayYetBeATag) {
  // The answer's start may become "<think>": no content yet.
  for (const char* start : {"", "\n", "<", "<thi", " <think"}) {
    const ReasoningSplit s = SplitReasoning(start, false, false);
    EXPECT_FALSE(s.has_reasoning) << start;
    EXPECT_EQ(s.content_ready, 0u) << start;
    EXPECT_EQ(SplitReasoning(start, false, true).content_ready, std::string(start).size());
  }
  EXPECT_EQ(SplitReasoning("<b>", false, false).content_ready, 3u);
  // The reasoning's end may become "</think>".
  ReasoningSplit s = SplitReasoning("<think>abc</thi", false, false);
  EXPECT_EQ(s.reasoning, "abc</thi");
  EXPECT_EQ(s.reasoning_ready, 3u);
  s = SplitReasoning("<think>a<", false, false);
  EXPECT_EQ(s.reasoning_ready, 1u);  // "<" may start "</think>"
  s = SplitReasoning("<think>a<b", false, false);
  EXPECT_EQ(s.reasoning_ready, 3u);
  s = SplitReasoning("<think>a</b", false, false);
  EXPECT_EQ(s.reasoning_ready, 4u);
  // Opened by the prompt, an answer that may still be a (redundant) <think>.
  s = SplitReasoning("<th", true, false);
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning_ready, 0u);
  s = SplitReasoning("<th", true, true);
  EXPECT_EQ(s.reasoning, "<th");
}

struct Streamed {
  std::string reasoning, content;
  openai::Json tool_calls;
  std::vector<std::string> finish_reasons;
};

// Feeds `output` byte by byte (as a stream may split it) to a whole and a
// streamed builder; returns what the stream sent and the whole response.
openai::Json Answer(const openai::GenerateCall& call, const std::string& output,
                    Streamed* streamed) {
  std::unique_ptr<model::Tokenizer> tokenizer = model::MakeByteTokenizer();
  openai::ChoiceBuilder whole(openai::NewResponseMeta(openai::Api::kChat, "m"), call, *tokenizer);
  openai::ChoiceBuilder stream(openai::NewResponseMeta(openai::Api::kChat, "m"), call, *tokenizer);
  auto collect = [&](const std::vector<openai::Json>& events) {
    for (const openai::Json& e : events) {
      const openai::Json& choice = e["choices"][0];
      const openai::Json& delta = choice["delta"];
      if (delta.contains("reasoning_content")) {
        EXPECT_TRUE(streamed->content.empty()) << "reasoning after content";
        streamed->reasoning += delta["reasoning_content"].get<std::string>();
      }
      if (delta.contains("content")) streamed->content += delta["content"].get<std::string>();
      if (delta.contains("tool_calls")) streamed->tool_calls = delta["tool_calls"];
      if (!choice["finish_reason"].is_null())
        streamed->finish_reasons.push_back(choice["finish_reason"]);
    }
  };
  for (char c : output) {
    GeneratedChunk chunk;
    chunk.text = std::string(1, c);
    whole.Add(chunk);
    collect(stream.ChunkEvents(chunk));
    EXPECT_EQ(streamed->reasoning.find("</think"), std::string::npos) << "a tag was streamed";
    if (call.parse_reasoning) {
      EXPECT_EQ(streamed->content.find("<think"), std::string::npos) << "a tag was streamed";
    }
  }
  GenerateSummary summary;
  summary.reason = FinishReason::kEos;
  collect(stream.FinishEvents(summary));
  return whole.Response(summary);
}

TEST(ReasoningTest, ChatAnswersReasoningApartWholeAndStreamed) {
  openai::GenerateCall call;
  call.prompts.resize(1);
  call.parse_reasoning = true;
  Streamed s;
  openai::Json r = Answer(call, "<think>\nLet me add.\n</think>\n\nIt is 4.", &s);
  const openai::Json& message = r["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "\nLet me add.\n");
  EXPECT_EQ(message["content"], "\n\nIt is 4.");
  EXPECT_EQ(s.reasoning, "\nLet me add.\n");
  EXPECT_EQ(s.content, "\n\nIt is 4.");
  EXPECT_EQ(s.finish_reasons, std::vector<std::string>{"stop"});

  // Opened by the prompt (DeepSeek-R1), cut before </think>: all reasoning.
  call.prompt_opens_reasoning = true;
  s = Streamed();
  r = Answer(call, "Hmm, 2 and 2 </thin", &s);
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Hmm, 2 and 2 </thin");
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(s.reasoning, "Hmm, 2 and 2 </thin");  // the held bytes come at the finish
  EXPECT_EQ(s.content, "");

  // No reasoning (Qwen3 with enable_thinking false): all content, tags and
  // all; reasoning_content null.
  call.prompt_opens_reasoning = false;
  s = Streamed();
  r = Answer(call, "Plain </think> answer", &s);
  EXPECT_TRUE(r["choices"][0]["message"]["reasoning_content"].is_null());
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Plain </think> answer");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Plain </think> answer");

  // Without the parser the tags are content.
  call.parse_reasoning = false;
  s = Streamed();
  r = Answer(call, "<think>a</think>b", &s);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "<think>a</think>b");
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(s.content, "<think>a</think>b");
}

// Tool calls are parsed from the content after the reasoning: a call
// written while thinking is not one.
TEST(ReasoningTest, ToolCallsComeFromTheContentOnly) {
  openai::GenerateCall call;
  call.prompts.resize(1);
  call.parse_reasoning = true;
  call.tool_format = ToolCallFormat::kHermes;
  const std::string call_text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  Streamed s;
  openai::Json r =
      Answer(call, "<think>I should call " + call_text + "?</think>\n\n" + call_text, &s);
  const openai::Json& message = r["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "I should call " + call_text + "?");
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(s.reasoning, "I should call " + call_text + "?");
  EXPECT_EQ(s.content,
            "");  // only whitespace outside the call, held and dropped as without reasoning
  ASSERT_EQ(s.tool_calls.size(), 1u);
  EXPECT_EQ(s.tool_calls[0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(s.finish_reasons, std::vector<std::string>{"tool_calls"});

  // The call only in the reasoning: content, no call.
  s = Streamed();
  r = Answer(call, "<think>" + call_text + "</think>No call.", &s);
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "No call.");
  EXPECT_EQ(s.finish_reasons, std::vector<std::string>{"stop"});
}

}  // namespace
}  // namespace dikkat::server
