// The OpenAI-compatible API's request parsing (server/openai_request.h) and
// response encoding (server/openai_response.h), without a server: the JSON
// fields each endpoint serves, what they map to in the engine's requests,
// and the errors for what the JSON form makes wrong.
#include "server/openai_request.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/byte_tokenizer.h"
#include "server/chat_prompt.h"
#include "server/openai_response.h"
#include "server/prompt_fan_out.h"
#include "server/request_checks.h"
#include "server/status_util.h"

namespace dikkat::server::openai {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class OpenAiRequestTest : public ::testing::Test {
 protected:
  OpenAiRequestTest() : tokenizer_(model::MakeByteTokenizer()) {
    config_.architecture = model::Architecture::kDecoderOnly;
    config_.name = "m";
    config_.vocab_size = 259;
    config_.d_model = 4;
    config_.n_heads = 2;
    config_.ffn_dim = 8;
    config_.n_layers = 1;
    config_.max_positions = 64;
    options_.max_batch_entries = 3;
    limits_ = ModelLimits{&config_, tokenizer_.get(), &options_};
  }

  absl::StatusOr<GenerateCall> Completion(const std::string& body) {
    return ParseCompletionRequest(Json::parse(body), body_limits_, limits_);
  }

  // A model folder whose tokenizer_config.json holds `chat_template`.
  static ChatPrompt LoadChat(const std::string& chat_template) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / "dikkat-openai-request-chat";
    fs::create_directories(dir);
    std::ofstream(dir / "tokenizer_config.json")
        << Json{{"bos_token", "<s>"}, {"chat_template", chat_template}}.dump();
    absl::StatusOr<ChatPrompt> chat = ChatPrompt::Load(dir.string());
    fs::remove_all(dir);
    EXPECT_TRUE(chat.ok()) << chat.status();
    return std::move(*chat);
  }

  absl::StatusOr<GenerateCall> Chat(const ChatPrompt& chat, const std::string& fields) {
    return ParseChatRequest(
        Json::parse(
            absl::StrCat(R"({"messages": [{"role": "user", "content": "hi"}])", fields, "}")),
        chat, body_limits_, limits_);
  }

  model::ModelConfig config_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  EngineOptions options_;
  ModelLimits limits_;
  BodyLimits body_limits_;
};

TEST_F(OpenAiRequestTest, BodyMustBeABoundedJsonObject) {
  EXPECT_TRUE(ParseBody(R"({"a": [[1]]})", BodyLimits{}).ok());
  EXPECT_THAT(ParseBody("{", BodyLimits{}).status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseBody("[1]", BodyLimits{}).status().message(), HasSubstr("JSON object"));
  BodyLimits shallow;
  shallow.max_json_depth = 3;
  EXPECT_TRUE(ParseBody(R"({"a": [{"b": 1}]})", shallow).ok());
  EXPECT_THAT(ParseBody(R"({"a": [[[1]]]})", shallow).status().message(),
              HasSubstr("deeper than 3"));
  // Brackets inside strings do not count.
  EXPECT_TRUE(ParseBody(R"({"a": "[[[[[[\"[[["})", shallow).ok());
}

// Found by an audit: an 8 MiB body of token ids ("0,0,0,...", 4.2M ids)
// parsed into the JSON tree took 72 MB more resident memory, one of empty
// strings 170 MB (measured with nlohmann 3.11, AMD EPYC), on each of up to
// 64 HTTP workers. Now numbers and other values are counted on the bytes
// and refused before parsing.
TEST_F(OpenAiRequestTest, BodiesOfTooManyValuesAreRefusedBeforeParsing) {
  BodyValues values;
  ASSERT_TRUE(ParseBody(R"({"a": [1, -2, 3.5e-7, 1E+3, 0], "b": "x-1", "c": [true, false, null],
                           "d": {"e": -0.5}})",
                        BodyLimits{}, &values)
                  .ok());
  EXPECT_EQ(values.numbers, 6);
  // Keys a b c d e, the string, the objects, the lists, the literals.
  EXPECT_EQ(values.others, 5 + 1 + 2 + 2 + 3);

  BodyLimits limits;
  limits.max_numbers = 4;
  limits.max_other_values = 5;
  EXPECT_TRUE(ParseBody(R"({"p": [1, 22, 333, -4]})", limits).ok());
  EXPECT_THAT(ParseBody(R"({"p": [1, 22, 333, -4, 5]})", limits).status().message(),
              HasSubstr("holds 5 numbers; the server's models need at most 4"));
  EXPECT_TRUE(ParseBody(R"({"p": ["1", "2"]})", limits).ok());  // {, "p", [, 2 strings: 5
  EXPECT_THAT(ParseBody(R"({"p": ["1", "2", "3"]})", limits).status().message(),
              HasSubstr("holds 6 JSON values that are not numbers"));
  // An escaped backslash ends no string early, nor an escaped quote.
  EXPECT_THAT(ParseBody(R"({"p": "\\", "q": [1, 2, 3, 4, 5]})", limits).status().message(),
              HasSubstr("holds 5 numbers"));
  EXPECT_THAT(ParseBody(R"({"p": "\"", "q": [1, 2, 3, 4, 5]})", limits).status().message(),
              HasSubstr("holds 5 numbers"));
  // Digits and letters in strings are not values.
  EXPECT_TRUE(ParseBody(R"({"p": "1 2 3 4 5 true false null [ { -7"})", limits).ok());
  limits.max_numbers = 0;  // no bound
  limits.max_other_values = 0;
  EXPECT_TRUE(ParseBody(R"({"p": [1, 2, 3, 4, 5, "a", "b", "c"]})", limits).ok());

  // What a body used is taken from the bounds left for its strings' JSON.
  limits.max_numbers = 10;
  limits.max_other_values = 0;
  const BodyLimits left = LeftAfter(limits, BodyValues{4, 100});
  EXPECT_EQ(left.max_numbers, 6);
  EXPECT_EQ(left.max_other_values, 0);                             // none stays none
  EXPECT_EQ(LeftAfter(limits, BodyValues{12, 0}).max_numbers, 1);  // never 0 (none)

  // The bound the server sets: its largest call's ids and the options.
  options_.max_batch_entries = 3;
  BodyLimits server;
  EXPECT_EQ(MaxBodyNumbers(server, options_, config_),
            32 * config_.max_positions + kBodyNumbersBesideIds);
  options_.max_batch_entries = 64;
  EXPECT_EQ(MaxBodyNumbers(server, options_, config_),
            64 * config_.max_positions + kBodyNumbersBesideIds);
  config_.max_positions = 0;
  EXPECT_EQ(MaxBodyNumbers(server, options_, config_), 0);

  // The whole 8 MiB body of ids is refused at once.
  std::string ids = R"({"prompt": [)";
  while (ids.size() < (8u << 20)) ids += "0,";
  ids += "0]}";
  server.max_numbers = 1 << 20;
  EXPECT_THAT(ParseBody(ids, server).status().message(), HasSubstr("numbers"));
}

// Found while fuzzing ParseBody (fuzz/openai_request_fuzzer.cc): an ordered
// JSON object looks every new key up among the previous ones, so a 1 MB body
// of 100 000 keys took 46 s of one core to parse (AMD EPYC); now it is
// refused from the bytes, before parsing.
TEST_F(OpenAiRequestTest, ObjectsWithTooManyMembersAreRefusedBeforeParsing) {
  auto object = [](int members, const std::string& key_prefix) {
    std::string body = "{";
    for (int i = 0; i < members; ++i) {
      absl::StrAppend(&body, i > 0 ? "," : "", "\"", key_prefix, i, "\": 0");
    }
    return body + "}";
  };
  BodyLimits limits;
  EXPECT_EQ(limits.max_object_members, 1024);
  EXPECT_TRUE(ParseBody(object(1024, "k"), limits).ok());
  EXPECT_THAT(ParseBody(object(1025, "k"), limits).status().message(),
              HasSubstr("more than 1024 members"));
  // Nested: the inner object counts its own members, the outer its own.
  const std::string wide_inner = absl::StrCat(R"({"logit_bias": )", object(2000, ""), "}");
  EXPECT_THAT(ParseBody(wide_inner, limits).status().message(),
              HasSubstr("more than 1024 members"));
  // Colons in strings are not members; many small objects are fine.
  BodyLimits two;
  two.max_object_members = 2;
  EXPECT_TRUE(ParseBody(R"({"a": "x:y:z", "b": {"c": ":"}})", two).ok());
  std::string list = R"({"messages": [)";
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&list, i > 0 ? "," : "", R"({"role": "user"})");
  EXPECT_TRUE(ParseBody(list + "]}", limits).ok());
  // The wide body that took 46 s is refused at once.
  const absl::Time start = absl::Now();
  EXPECT_FALSE(ParseBody(object(100000, "k"), limits).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(OpenAiRequestTest, CompletionFieldsMapToTheEngineRequest) {
  absl::StatusOr<GenerateCall> call = Completion(
      R"({"prompt": "hi", "temperature": 0.5, "top_p": 0.9, "seed": 42, "n": 2, "best_of": 3,
          "stop": ["a", "b"], "presence_penalty": 0.1, "top_k": 5, "stream": true,
          "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->prompts.size(), 1u);
  EXPECT_EQ(call->n, 2);
  const GenerateRequest& r = call->prompts[0].request;
  // Byte tokenizer: ids are bytes, after the <bos> (257) tokenizer(prompt) adds.
  EXPECT_THAT(r.prompt, ElementsAre(257, 'h', 'i'));
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.1f);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.best_of, 3);
  EXPECT_THAT(r.stop_strings, ElementsAre("a", "b"));
  EXPECT_EQ(r.max_new_tokens, 16);  // OpenAI's default
  EXPECT_TRUE(call->stream);
  EXPECT_TRUE(call->include_usage);
  EXPECT_FALSE(call->want_logprobs);

  call = Completion(R"({"prompt": [[104, 105]], "stop": "x", "max_tokens": 3,
                        "logprobs": 2, "echo": true})");
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->prompts.size(), 1u);  // a list of one prompt
  const GenerateRequest& ids = call->prompts[0].request;
  EXPECT_THAT(ids.prompt, ElementsAre(104, 105));
  EXPECT_THAT(ids.stop_strings, ElementsAre("x"));
  EXPECT_EQ(ids.max_new_tokens, 3);
  EXPECT_TRUE(call->want_logprobs);
  EXPECT_EQ(ids.sampling.top_logprobs, 2);
  EXPECT_EQ(ids.prompt_logprobs, 2);  // echo + logprobs scores the prompt
  EXPECT_TRUE(call->echo);
  EXPECT_EQ(call->prompts[0].echo_text, "hi");
}

// Fields left out take the model's recommended sampling
// (generation_config.json); vLLM's top_k -1 and 0 are off whatever it says.
TEST_F(OpenAiRequestTest, UnsetSamplingFieldsTakeTheModelsDefaults) {
  config_.sampling_defaults.temperature = 0.7f;
  config_.sampling_defaults.top_k = 20;
  absl::StatusOr<GenerateCall> call = Completion(R"({"prompt": "hi"})");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_FLOAT_EQ(call->prompts[0].request.sampling.temperature, 0.7f);
  EXPECT_EQ(call->prompts[0].request.sampling.top_k, 20);
  for (const char* off : {R"({"prompt": "hi", "top_k": -1, "temperature": 1})",
                          R"({"prompt": "hi", "top_k": 0, "temperature": 1})"}) {
    call = Completion(off);
    ASSERT_TRUE(call.ok()) << call.status();
    EXPECT_EQ(call->prompts[0].request.sampling.top_k, 0) << off;
    EXPECT_FLOAT_EQ(call->prompts[0].request.sampling.temperature, 1.0f) << off;
  }
  call = Completion(R"({"prompt": "hi", "top_k": 5})");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->prompts[0].request.sampling.top_k, 5);
}

TEST_F(OpenAiRequestTest, LogitBiasMapsToTheSamplingOptions) {
  absl::StatusOr<GenerateCall> call =
      Completion(R"({"prompt": "x", "logit_bias": {"104": -100, "7": 2.5, "258": 100}})");
  ASSERT_TRUE(call.ok()) << call.status();
  const std::vector<model::LogitBias>& bias = call->prompts[0].request.sampling.logit_bias;
  ASSERT_EQ(bias.size(), 3u);
  EXPECT_EQ(bias[0].token_id, 7);
  EXPECT_EQ(bias[0].bias, 2.5f);
  EXPECT_EQ(bias[1].token_id, 104);
  EXPECT_EQ(bias[1].bias, -100.0f);
  EXPECT_EQ(bias[2].token_id, 258);

  auto error = [&](const std::string& bias_json) {
    absl::StatusOr<GenerateCall> c =
        Completion(absl::StrCat(R"({"prompt": "x", "logit_bias": )", bias_json, "}"));
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bias_json;
    return std::string(c.status().message());
  };
  EXPECT_THAT(error("[1]"), HasSubstr("logit_bias: expected an object"));
  EXPECT_THAT(error(R"({"a": 1})"), HasSubstr(R"(key "a" is not a token id)"));
  EXPECT_THAT(error(R"({"5": "high"})"), HasSubstr(R"(logit_bias["5"]: expected a number)"));
  Json many = Json::object();
  for (int i = 0; i < 301; ++i) many[std::to_string(i)] = 1;
  EXPECT_THAT(error(many.dump()), HasSubstr("301 entries; at most 300"));
  // Ids and biases are the engine's check (the same as gRPC's).
  absl::StatusOr<GenerateCall> c =
      Completion(R"({"prompt": "x", "logit_bias": {"259": 1, "3": -101}})");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(std::string(CheckGenerateRequest(c->prompts[0].request, config_, options_).message()),
              HasSubstr("logit_bias"));
}

TEST_F(OpenAiRequestTest, FieldsThatWouldChangeTheOutputAreNeverIgnored) {
  auto error = [](const absl::StatusOr<GenerateCall>& call) {
    EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(call.status().message());
  };
  // OpenAI's fields without effect on the output, and null ones, pass.
  EXPECT_TRUE(Completion(R"({"prompt": "x", "user": "u1", "metadata": {"a": "b"}, "store": false,
                             "service_tier": "auto", "suffix": null, "prompt_cache_key": "k"})")
                  .ok());
  EXPECT_THAT(error(Completion(R"({"prompt": "x", "suffix": "}"})")),
              HasSubstr("suffix: fill-in-the-middle is not served"));
  EXPECT_THAT(error(Completion(R"({"prompt": "x", "min_tokens": 3})")),
              HasSubstr("min_tokens: not a field /v1/completions serves"));
  EXPECT_THAT(error(Completion(R"({"prompt": "x", "messages": []})")),
              HasSubstr("messages: not a field /v1/completions serves"));
  EXPECT_THAT(error(Completion(R"({"prompt": "x", "top_logprobs": 2})")),
              HasSubstr("top_logprobs: not a field"));
  EXPECT_THAT(
      ParseEmbeddingsRequest(Json::parse(R"({"input": "a", "n": 2})"), limits_).status().message(),
      HasSubstr("n: not a field /v1/embeddings serves"));
  EXPECT_TRUE(ParseEmbeddingsRequest(Json::parse(R"({"input": "a", "user": "u"})"), limits_).ok());

  // vLLM's stop extensions map to the engine's.
  absl::StatusOr<GenerateCall> call = Completion(
      R"({"prompt": "x", "stop_token_ids": [3, 4], "include_stop_str_in_output": true})");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_THAT(call->prompts[0].request.stop_token_ids, ElementsAre(3, 4));
  EXPECT_TRUE(call->prompts[0].request.include_stop_text);
  EXPECT_THAT(error(Completion(R"({"prompt": "x", "stop_token_ids": 3})")),
              HasSubstr("stop_token_ids: expected a list"));

  const ChatPrompt chat = LoadChat("{% for m in messages %}{{ m.content }}{% endfor %}");
  // Chat maps OpenAI's penalties and token limits.
  call = Chat(chat, R"(, "presence_penalty": 0.5, "frequency_penalty": -0.25,
                       "max_completion_tokens": 7, "stop": "q", "n": 2, "temperature": 1,
                       "user": "u", "response_format": {"type": "text"}, "tool_choice": "auto",
                       "modalities": ["text"])");
  ASSERT_TRUE(call.ok()) << call.status();
  const GenerateRequest& r = call->prompts[0].request;
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.25f);
  EXPECT_EQ(r.max_new_tokens, 7);
  EXPECT_THAT(r.stop_strings, ElementsAre("q"));
  EXPECT_EQ(call->n, 2);
  // What would need constrained decoding is refused, saying so.
  EXPECT_THAT(error(Chat(chat, R"(, "response_format": {"type": "json_object"})")),
              HasSubstr(R"(response_format: {"type": "json_object"} needs constrained decoding)"));
  EXPECT_THAT(error(Chat(chat, R"(, "response_format": {"type": "json_schema",
                                                       "json_schema": {"name": "x"}})")),
              HasSubstr("constrained decoding"));
  EXPECT_THAT(error(Chat(chat, R"(, "response_format": {"type": "yaml"})")),
              HasSubstr("response_format.type"));
  EXPECT_THAT(error(Chat(chat, R"(, "response_format": "text")")),
              HasSubstr("response_format: expected an object"));
  EXPECT_THAT(error(Chat(chat, R"(, "tool_choice": "required")")),
              HasSubstr(R"(tool_choice: "required" would force a tool call)"));
  EXPECT_THAT(
      error(Chat(chat, R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})")),
      HasSubstr("tool_choice: a named function"));
  EXPECT_TRUE(Chat(chat, R"(, "tool_choice": "none")").ok());
  const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "f"}}])";
  EXPECT_THAT(error(Chat(chat, tools + R"(, "parallel_tool_calls": false)")),
              HasSubstr("parallel_tool_calls: false is not served"));
  EXPECT_TRUE(Chat(chat, tools + R"(, "parallel_tool_calls": true)").ok());
  EXPECT_TRUE(Chat(chat, R"(, "parallel_tool_calls": false)").ok());  // no tools: no effect
  EXPECT_THAT(error(Chat(chat, R"(, "modalities": ["text", "audio"])")),
              HasSubstr("modalities: only"));
  EXPECT_THAT(error(Chat(chat, R"(, "functions": [{"name": "f"}])")),
              HasSubstr("functions: deprecated by OpenAI and not served; use tools"));
  EXPECT_THAT(error(Chat(chat, R"(, "audio": {"voice": "x"})")), HasSubstr("audio:"));
  EXPECT_THAT(error(Chat(chat, R"(, "reasoning_effort": "low")")),
              HasSubstr("reasoning_effort: not served"));
  EXPECT_THAT(error(Chat(chat, R"(, "echo": true)")),
              HasSubstr("echo: not a field /v1/chat/completions serves"));
}

// vLLM's chat_template_kwargs reach the template as its variables (Qwen3's
// enable_thinking), and may replace the defaults the server passes; the
// request's own fields (messages, tools) may not be replaced there.
TEST_F(OpenAiRequestTest, ChatTemplateKwargsAreTemplateVariables) {
  const ChatPrompt chat = LoadChat(
      "{% for m in messages %}{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}[gen]{% endif %}"
      "{% if enable_thinking is defined and enable_thinking is false %}[no-think]{% endif %}"
      "{{ bos_token }}");
  auto prompt_of = [&](const std::string& fields) -> std::string {
    absl::StatusOr<GenerateCall> call = Chat(chat, fields);
    if (!call.ok()) return std::string(call.status().message());
    return tokenizer_->Decode(call->prompts[0].request.prompt, false);
  };
  auto error = [](const absl::StatusOr<GenerateCall>& call) {
    return call.ok() ? std::string("ok") : std::string(call.status().message());
  };
  EXPECT_EQ(prompt_of(""), "hi[gen]<s>");
  EXPECT_EQ(prompt_of(R"(, "chat_template_kwargs": {"enable_thinking": false})"),
            "hi[gen][no-think]<s>");
  EXPECT_EQ(prompt_of(R"(, "chat_template_kwargs": {"enable_thinking": true})"), "hi[gen]<s>");
  EXPECT_EQ(prompt_of(R"(, "chat_template_kwargs": null)"), "hi[gen]<s>");
  EXPECT_EQ(prompt_of(R"(, "chat_template_kwargs": {"add_generation_prompt": false,
                                                     "bos_token": "B"})"),
            "hiB");
  EXPECT_THAT(error(Chat(chat, R"(, "chat_template_kwargs": [1])")),
              HasSubstr("chat_template_kwargs: expected an object, got"));
  EXPECT_THAT(error(Chat(chat, R"(, "chat_template_kwargs": {"messages": []})")),
              HasSubstr("chat_template_kwargs: 'messages' is not a template argument here"));
  EXPECT_THAT(error(Chat(chat, R"(, "chat_template_kwargs": {"tools": []})")),
              HasSubstr("'tools'"));
  // Completions render no template: the field is not one of theirs.
  EXPECT_THAT(error(Completion(R"({"prompt": "x", "chat_template_kwargs": {}})")),
              HasSubstr("chat_template_kwargs: not a field /v1/completions serves"));
}

TEST_F(OpenAiRequestTest, ChatWithToolsParsesInTheTemplatesConvention) {
  const ChatPrompt chat = LoadChat(
      "<tool_call>{% for m in messages %}[{{ m.role }}]{% if m.content %}{{ m.content }}{% endif %}"
      "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments.city }}{% endif %}"
      "{% endfor %}");
  EXPECT_EQ(chat.tool_call_format(), ToolCallFormat::kHermes);
  const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "w"}}])";
  absl::StatusOr<GenerateCall> call = Chat(chat, tools);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->tool_format, ToolCallFormat::kHermes);
  EXPECT_EQ(Chat(chat, tools + R"(, "tool_choice": "none")")->tool_format, ToolCallFormat::kNone);
  EXPECT_EQ(Chat(chat, "")->tool_format, ToolCallFormat::kNone);  // no tools
  EXPECT_EQ(Chat(chat, R"(, "tools": [])")->tool_format, ToolCallFormat::kNone);

  // A call sent back in the history: its arguments (a JSON string, as
  // OpenAI's) reach the template as an object.
  call = ParseChatRequest(Json::parse(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]})"),
                          chat, body_limits_, limits_);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(tokenizer_->Decode(call->prompts[0].request.prompt, false),
            "<tool_call>[user]weather?[assistant]Paris[tool]sunny");
}

// The tool calls' arguments of all messages share the body's value bounds:
// a string of "0,0,..." parsed into a tree costs 16 bytes or more a number,
// so past what is left of the bound an argument stays the string it was.
TEST_F(OpenAiRequestTest, ToolCallArgumentsShareTheBodysValueBounds) {
  const ChatPrompt chat = LoadChat(
      "<tool_call>{% for m in messages %}{% if m.tool_calls %}"
      "{% if m.tool_calls[0].function.arguments is mapping %}object{% else %}string{% endif %};"
      "{% endif %}{% endfor %}");
  auto assistant = [](int numbers) {
    std::string list;
    for (int i = 0; i < numbers; ++i) absl::StrAppend(&list, i > 0 ? "," : "", i);
    return absl::StrCat(
        R"({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",)",
        R"("function": {"name": "w", "arguments": "{\"a\": [)", list, R"(]}"}}]})");
  };
  auto rendered = [&](const BodyLimits& limits, int first, int second) {
    absl::StatusOr<GenerateCall> call = ParseChatRequest(
        Json::parse(absl::StrCat(R"({"messages": [)", assistant(first), ",", assistant(second),
                                 R"(, {"role": "user", "content": "hi"}]})")),
        chat, limits, limits_);
    EXPECT_TRUE(call.ok()) << call.status();
    return call.ok() ? tokenizer_->Decode(call->prompts[0].request.prompt, false) : "";
  };
  BodyLimits limits;
  EXPECT_EQ(rendered(limits, 6, 6), "<tool_call>object;object;");
  limits.max_numbers = 10;
  EXPECT_EQ(rendered(limits, 6, 4), "<tool_call>object;object;");
  EXPECT_EQ(rendered(limits, 6, 5), "<tool_call>object;string;");
  EXPECT_EQ(rendered(limits, 11, 1), "<tool_call>string;object;");
  limits = BodyLimits{};
  limits.max_other_values = 5;  // each arguments object: {, "a", [ = 3
  EXPECT_EQ(rendered(limits, 1, 1), "<tool_call>object;string;");
}

TEST_F(OpenAiRequestTest, SeveralPromptsAreOneEngineRequestEach) {
  absl::StatusOr<GenerateCall> call = Completion(
      R"({"prompt": ["ab", [104, 105], "c"], "n": 2, "temperature": 1, "max_tokens": 5,
          "echo": true, "stop": "z"})");
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->prompts.size(), 3u);
  EXPECT_EQ(call->n, 2);
  EXPECT_EQ(call->choices(), 6);
  EXPECT_THAT(call->prompts[0].request.prompt, ElementsAre(257, 'a', 'b'));
  EXPECT_THAT(call->prompts[1].request.prompt, ElementsAre(104, 105));  // ids as given
  EXPECT_THAT(call->prompts[2].request.prompt, ElementsAre(257, 'c'));
  for (const PromptCall& p : call->prompts) {
    EXPECT_EQ(p.request.n, 2);
    EXPECT_EQ(p.request.max_new_tokens, 5);
    EXPECT_THAT(p.request.stop_strings, ElementsAre("z"));
  }
  EXPECT_EQ(call->prompts[1].echo_text, "hi");       // token ids decoded
  EXPECT_EQ(&call->PromptOf(3), &call->prompts[1]);  // choice 3 = prompt 1, sample 1
  EXPECT_EQ(&call->PromptOf(4), &call->prompts[2]);
}

// An explicit max_tokens (max_completion_tokens) past the context (64 here)
// is refused with OpenAI's message; without one the engine fills up to the
// context as for gRPC (the request is not strict).
TEST_F(OpenAiRequestTest, ExplicitMaxTokensPastTheContextIsRefused) {
  const std::string prompt = std::string(10, 'a');
  absl::StatusOr<GenerateCall> call =
      Completion(absl::StrCat(R"({"prompt": ")", prompt, R"(", "max_tokens": 55})"));
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_TRUE(call->prompts[0].request.strict_max_new_tokens);
  absl::Status checked = CheckGenerateRequest(call->prompts[0].request, config_, options_);
  EXPECT_EQ(checked.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(checked.message(),
            "This model's maximum context length is 64 tokens. However, you requested 66 tokens "
            "(11 in the prompt, 55 for the completion). Please reduce the length of the prompt "
            "or completion.");
  // At the context exactly (the prompt's 10 bytes and <bos>): served.
  call = Completion(absl::StrCat(R"({"prompt": ")", prompt, R"(", "max_tokens": 53})"));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_TRUE(CheckGenerateRequest(call->prompts[0].request, config_, options_).ok());
  // Not strict: the same overlong request is capped by the engine, as for gRPC.
  call->prompts[0].request.max_new_tokens = 55;
  call->prompts[0].request.strict_max_new_tokens = false;
  EXPECT_TRUE(CheckGenerateRequest(call->prompts[0].request, config_, options_).ok());
  // No max_tokens: not strict.
  call = Completion(absl::StrCat(R"({"prompt": ")", prompt, R"("})"));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_FALSE(call->prompts[0].request.strict_max_new_tokens);
  // Several prompts: the one past the context is named, before any is submitted.
  call = Completion(
      absl::StrCat(R"({"prompt": ["a", ")", std::string(60, 'b'), R"("], "max_tokens": 10})"));
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(call.status().message(), HasSubstr("prompt[1]"));
  EXPECT_THAT(call.status().message(), HasSubstr("(61 in the prompt, 10 for the completion)"));
  // Chat: max_completion_tokens (or max_tokens) makes it strict; neither does not.
  const ChatPrompt chat = LoadChat("{{ messages[0]['content'] }}");
  absl::StatusOr<GenerateCall> strict = Chat(chat, R"(, "max_completion_tokens": 63)");
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_TRUE(strict->prompts[0].request.strict_max_new_tokens);
  EXPECT_EQ(CheckGenerateRequest(strict->prompts[0].request, config_, options_).code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<GenerateCall> loose = Chat(chat, "");
  ASSERT_TRUE(loose.ok()) << loose.status();
  EXPECT_FALSE(loose->prompts[0].request.strict_max_new_tokens);
}

TEST_F(OpenAiRequestTest, SeveralPromptsAreBoundedBeforeAnyWork) {
  config_.max_positions = 512;  // max_tokens 100 fits the context: the call's cost is what binds
  auto error = [&](const std::string& body) {
    absl::StatusOr<GenerateCall> call = Completion(body);
    EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument) << body;
    return std::string(call.status().message());
  };
  body_limits_.max_prompts = 2;
  EXPECT_THAT(error(R"({"prompt": ["a", "b", "c"]})"),
              HasSubstr("a list of 3 prompts; at most 2 are allowed"));
  body_limits_.max_prompts = 32;
  // prompts x samples x max_tokens against max_new_tokens_cap x 16.
  options_.max_new_tokens_cap = 100;
  EXPECT_THAT(error(R"({"prompt": ["a", "b"], "n": 9, "temperature": 1, "max_tokens": 100})"),
              HasSubstr("2 prompts x 9 samples x max_tokens 100 = 1800 tokens to generate; "
                        "at most 1600"));
  EXPECT_THAT(error(R"({"prompt": ["a", "b"], "best_of": 16, "temperature": 1, "max_tokens": 51})"),
              HasSubstr("= 1632 tokens"));
  EXPECT_TRUE(
      Completion(R"({"prompt": ["a", "b"], "n": 8, "temperature": 1, "max_tokens": 100})").ok());
  // Each prompt is checked (and named) before any is submitted.
  EXPECT_THAT(error(R"({"prompt": ["a", 3]})"), HasSubstr("prompt[1]: expected a string"));
  EXPECT_THAT(error(R"({"prompt": ["a", [1, -2]]})"), HasSubstr("prompt[1][1]"));
  EXPECT_THAT(error(R"({"prompt": ["a", []]})"), HasSubstr("prompt[1]"));
  EXPECT_THAT(error(R"({"prompt": ["a", [300]]})"),
              HasSubstr("prompt[1][0] = 300 is not a token id: allowed 0..258"));
  EXPECT_THAT(error(R"({"prompt": [5, 259]})"),
              HasSubstr("prompt[1] = 259 is not a token id: allowed 0..258"));
  EXPECT_THAT(error(R"({"prompt": ["a", "b"], "max_tokens": 101})"),
              HasSubstr("max_tokens = 101 is out of range: allowed 1..100 (the server's "
                        "--max_new_tokens_cap), or unset for the default 16"));
  config_.max_positions = 64;  // the text limit below is max_positions x 32 bytes
  EXPECT_THAT(error(Json{{"prompt", {"a", std::string(64 * 32 + 1, 'x')}}}.dump()),
              HasSubstr("prompt[1]: input.text"));
}

// A response that must pass --max_response_bytes (echoed prompts with their
// logprobs in every choice, or logprobs of tokens every sample must make) is
// refused before anything is submitted; one that may stop early is not.
TEST_F(OpenAiRequestTest, ResponsesThatMustPassTheResponseBoundAreRefused) {
  config_.max_positions = 512;
  limits_.max_response_bytes = 64 << 10;
  const std::string prompt(300, 'p');  // 300 tokens with the byte tokenizer
  // 16 choices x (300 bytes of echo + 299 entries x (1 + 20 alternatives) x 7 bytes).
  const Json echoed = {
      {"prompt", prompt}, {"n", 16},        {"temperature", 1},           {"max_tokens", 1},
      {"echo", true},     {"logprobs", 20}, {"add_special_tokens", false}};
  absl::StatusOr<GenerateCall> refused = Completion(echoed.dump());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the response would take at least 708048 bytes (16 choices, echo, "
                        "logprobs), past the server's bound of 65536 bytes"));
  // Streamed, only one choice's echo must be whole (44253 bytes): taken.
  Json streamed = echoed;
  streamed["stream"] = true;
  EXPECT_TRUE(Completion(streamed.dump()).ok());
  // One choice's echo alone past the bound: refused streamed too.
  limits_.max_response_bytes = 32 << 10;
  EXPECT_THAT(std::string(Completion(streamed.dump()).status().message()),
              HasSubstr("(the echo of one choice, echo, logprobs)"));
  limits_.max_response_bytes = 64 << 10;
  // Tokens every sample must make: 16 x 200 x 21 entries x 7 bytes.
  const Json whole = {{"prompt", "a"},     {"n", 16},        {"temperature", 1},
                      {"max_tokens", 200}, {"logprobs", 20}, {"ignore_eos", true}};
  EXPECT_THAT(std::string(Completion(whole.dump()).status().message()),
              HasSubstr("at least 470400 bytes"));
  // The same that could stop early (EOS) is bounded as it runs instead.
  Json may_stop = whole;
  may_stop.erase("ignore_eos");
  EXPECT_TRUE(Completion(may_stop.dump()).ok());
  // Chat alike.
  const ChatPrompt chat = LoadChat("{% for m in messages %}{{ m.content }}{% endfor %}");
  absl::StatusOr<GenerateCall> chat_call =
      Chat(chat, R"(, "n": 16, "temperature": 1, "max_tokens": 200, "logprobs": true,
                  "top_logprobs": 20, "ignore_eos": true)");
  EXPECT_EQ(chat_call.status().code(), absl::StatusCode::kInvalidArgument) << chat_call.status();
}

TEST_F(OpenAiRequestTest, CompletionErrorsNameTheField) {
  auto error = [&](const std::string& body) {
    absl::StatusOr<GenerateCall> call = Completion(body);
    EXPECT_FALSE(call.ok()) << body;
    EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(call.status().message());
  };
  EXPECT_THAT(error(R"({})"), HasSubstr("prompt: required"));
  EXPECT_THAT(error(R"({"prompt": []})"), HasSubstr("an empty list"));
  EXPECT_THAT(error(R"({"prompt": {"a": 1}})"), HasSubstr("got an object"));
  EXPECT_THAT(error(R"({"prompt": [1, -2]})"), HasSubstr("prompt[1]"));
  EXPECT_THAT(error(R"({"prompt": "x", "temperature": "hot"})"),
              HasSubstr("temperature: expected a number, got a string"));
  EXPECT_THAT(error(R"({"prompt": "x", "max_tokens": 0})"), HasSubstr("max_tokens = 0"));
  EXPECT_THAT(error(R"({"prompt": "x", "stop": 3})"), HasSubstr("stop: expected a string"));
  EXPECT_THAT(error(R"({"prompt": "x", "stop": ["a", 1]})"), HasSubstr("stop[1]"));
  EXPECT_THAT(error(R"({"prompt": "x", "n": 99})"), HasSubstr("n = 99"));
  EXPECT_THAT(error(R"({"prompt": "x", "seed": -1})"), HasSubstr("seed = -1"));
  EXPECT_THAT(error(R"({"prompt": "x", "logprobs": 21})"), HasSubstr("logprobs = 21"));
  EXPECT_THAT(error(R"({"prompt": "x", "stream": "yes"})"), HasSubstr("stream: expected true"));
  // Past the text limit (max_positions x 32 bytes), refused before tokenizing.
  EXPECT_THAT(error(Json{{"prompt", std::string(64 * 32 + 1, 'x')}}.dump()),
              HasSubstr("max_text_bytes"));
  EXPECT_THAT(ModelName(Json::parse(R"({"model": 3})")).status().message(),
              HasSubstr("model: expected a string"));
}

// A text prompt is tokenized as vLLM (and `tokenizer(prompt)`) does: special
// tokens written in it are their ids, and <bos> is added before it unless
// the vLLM field add_special_tokens is false. Token ids are used as given.
TEST_F(OpenAiRequestTest, CompletionPromptsAreTokenizedAsTokenizerDoes) {
  absl::StatusOr<GenerateCall> call = Completion(R"({"prompt": "<bos>hi<eos>x"})");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_THAT(call->prompts[0].request.prompt, ElementsAre(257, 257, 'h', 'i', 258, 'x'));
  call = Completion(R"({"prompt": "<eos>hi", "add_special_tokens": false})");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_THAT(call->prompts[0].request.prompt, ElementsAre(258, 'h', 'i'));
  call = Completion(R"({"prompt": ["hi", [1, 2]], "add_special_tokens": true})");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_THAT(call->prompts[0].request.prompt, ElementsAre(257, 'h', 'i'));
  EXPECT_THAT(call->prompts[1].request.prompt, ElementsAre(1, 2));
  call = Completion(R"({"prompt": "hi", "add_special_tokens": 1})");
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(call.status().message(), HasSubstr("add_special_tokens: expected true or false"));
}

TEST_F(OpenAiRequestTest, ChatRendersTheTemplateWithoutAddingSpecialTokens) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "dikkat-openai-request-test";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json")
      << Json{{"bos_token", {{"content", "<s>"}}},
              {"chat_template",
               Json::array(
                   {{{"name", "tool_use"}, {"template", "wrong"}},
                    {{"name", "default"},
                     {"template",
                      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                      "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}}})}}
             .dump();
  absl::StatusOr<ChatPrompt> chat = ChatPrompt::Load(dir.string());
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_TRUE(chat->has_template());
  absl::StatusOr<GenerateCall> call = ParseChatRequest(
      Json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                              {"type": "text", "text": "b"}]}],
                      "logprobs": true, "top_logprobs": 3})"),
      *chat, BodyLimits{}, limits_);
  ASSERT_TRUE(call.ok()) << call.status();
  const std::string expected = "<s>[user]a\nb[assistant]";  // parts joined by "\n", as vLLM
  ASSERT_EQ(call->prompts.size(), 1u);
  const GenerateRequest& request = call->prompts[0].request;
  EXPECT_EQ(tokenizer_->Decode(request.prompt, false), expected);
  // No BOS id added; "<s>" is not this tokenizer's BOS, so it stays text.
  EXPECT_EQ(request.prompt.size(), expected.size());
  EXPECT_EQ(request.max_new_tokens, options_.default_max_new_tokens);
  EXPECT_EQ(request.sampling.top_logprobs, 3);

  BodyLimits one;
  one.max_chat_messages = 1;
  EXPECT_THAT(ParseChatRequest(Json::parse(R"({"messages": [{"role": "user", "content": "a"},
                                                           {"role": "user", "content": "b"}]})"),
                               *chat, one, limits_)
                  .status()
                  .message(),
              HasSubstr("at most 1"));
  // Parts of other types or shapes are refused (not thrown).
  for (const char* part : {R"({"type": 3, "text": "a"})", R"({"type": "image_url"})",
                           R"({"type": "text", "text": 1})", R"("a")"}) {
    EXPECT_THAT(
        ParseChatRequest(Json::parse(absl::StrCat(R"({"messages": [{"role": "user", "content": [)",
                                                  part, "]}]}")),
                         *chat, BodyLimits{}, limits_)
            .status()
            .message(),
        HasSubstr("content[0]"))
        << part;
  }
  EXPECT_THAT(ParseChatRequest(Json::parse(R"({"messages": [{"content": "a"}]})"), *chat,
                               BodyLimits{}, limits_)
                  .status()
                  .message(),
              HasSubstr("messages[0].role"));

  // chat_template.jinja (newer folders) is read in place of the config's.
  std::ofstream(dir / "chat_template.jinja")
      << "{% for m in messages %}<{{ m.content }}>{% endfor %}";
  absl::StatusOr<ChatPrompt> from_file = ChatPrompt::Load(dir.string());
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  absl::StatusOr<GenerateCall> rendered =
      ParseChatRequest(Json::parse(R"({"messages": [{"role": "user", "content": "q"}]})"),
                       *from_file, BodyLimits{}, limits_);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(tokenizer_->Decode(rendered->prompts[0].request.prompt, false), "<q>");
  // It needs no tokenizer_config.json.
  fs::remove(dir / "tokenizer_config.json");
  from_file = ChatPrompt::Load(dir.string());
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_TRUE(from_file->has_template());
  fs::remove(dir / "chat_template.jinja");

  // A folder without a tokenizer_config.json has no template: chat is refused.
  absl::StatusOr<ChatPrompt> none = ChatPrompt::Load(dir.string());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_template());
  absl::StatusOr<GenerateCall> refused =
      ParseChatRequest(Json::parse(R"({"messages": [{"role": "user", "content": "a"}]})"), *none,
                       BodyLimits{}, limits_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("no chat template"));
  fs::remove_all(dir);
}

// The template writes the tokenizer's special tokens as text ("<bos>" here,
// the byte tokenizer's BOS, id 257): they are tokenized as their ids, as
// apply_chat_template(tokenize=True) gives them.
TEST_F(OpenAiRequestTest, SpecialTokensTheTemplateWritesAreTheirIds) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "dikkat-openai-request-test-specials";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json")
      << Json{{"bos_token", "<bos>"},
              {"eos_token", "<eos>"},
              {"chat_template",
               "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}}
             .dump();
  absl::StatusOr<ChatPrompt> chat = ChatPrompt::Load(dir.string());
  ASSERT_TRUE(chat.ok()) << chat.status();
  absl::StatusOr<GenerateCall> call =
      ParseChatRequest(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"), *chat,
                       BodyLimits{}, limits_);
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->prompts.size(), 1u);
  EXPECT_THAT(call->prompts[0].request.prompt, ::testing::ElementsAre(257, 'h', 'i', 258));
  // vLLM's add_special_tokens adds the model's own around the rendered text.
  call = ParseChatRequest(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                      "add_special_tokens": true})"),
                          *chat, BodyLimits{}, limits_);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_THAT(call->prompts[0].request.prompt, ::testing::ElementsAre(257, 257, 'h', 'i', 258));
}

TEST_F(OpenAiRequestTest, AChatPastTheTemplateBoundsIs400NotRetryable) {
  // A template whose output passes the renderer's 4 MiB bound for this
  // conversation: the same on every retry, so 400 rather than 429.
  const ChatPrompt chat =
      LoadChat("{% for i in range(100000) %}{{ messages[0].content * 100 }}{% endfor %}");
  absl::StatusOr<GenerateCall> call = Chat(chat, "");
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().code(), absl::StatusCode::kResourceExhausted) << call.status();
  EXPECT_TRUE(NeverFits(call.status())) << call.status();
  EXPECT_EQ(HttpStatusOf(call.status()), 400);
}

TEST_F(OpenAiRequestTest, EmbeddingsInputsAndFormat) {
  absl::StatusOr<EmbeddingsCall> call =
      ParseEmbeddingsRequest(Json::parse(R"({"input": ["a", [5, 6]], "encoding_format":
                                             "base64"})"),
                             limits_);
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->request.inputs.size(), 2u);
  EXPECT_THAT(call->request.inputs[1], ElementsAre(5, 6));
  EXPECT_TRUE(call->request.normalize);
  EXPECT_TRUE(call->base64);
  EXPECT_THAT(ParseEmbeddingsRequest(Json::parse(R"({"input": ["a", "b", "c", "d"]})"), limits_)
                  .status()
                  .message(),
              HasSubstr("4"));
  EXPECT_THAT(
      ParseEmbeddingsRequest(Json::parse(R"({"input": "a", "encoding_format": "int8"})"), limits_)
          .status()
          .message(),
      HasSubstr("encoding_format"));
  EXPECT_THAT(ParseEmbeddingsRequest(Json::parse(R"({"input": "a", "dimensions": 4})"), limits_)
                  .status()
                  .message(),
              HasSubstr("dimensions"));
  // vLLM's truncate_prompt_tokens is Encode's truncate: token ids keep
  // their first N, text its first tokens after the BOS.
  call = ParseEmbeddingsRequest(
      Json::parse(R"({"input": [[5, 6, 7, 8], "abcdef"], "truncate_prompt_tokens": 3})"), limits_);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_THAT(call->request.inputs[0], ElementsAre(5, 6, 7));
  EXPECT_THAT(call->request.inputs[1], ElementsAre(257, 'a', 'b'));
  const std::string too_long(config_.max_positions + 5, 'x');
  call = ParseEmbeddingsRequest(Json{{"input", too_long}, {"truncate_prompt_tokens", -1}}, limits_);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(static_cast<int64_t>(call->request.inputs[0].size()), config_.max_positions);
  // Without it, too long is an error in this endpoint's terms.
  EXPECT_THAT(std::string(ParseEmbeddingsRequest(Json{{"input", too_long}}, limits_)
                              .status()
                              .message()),
              AllOf(HasSubstr("input has 70 tokens"), HasSubstr("truncate_prompt_tokens")));
  EXPECT_THAT(std::string(ParseEmbeddingsRequest(Json{{"input", {"a", too_long}}}, limits_)
                              .status()
                              .message()),
              HasSubstr("input[1] has 70 tokens"));
  // Token ids too: the conversion's error is in this endpoint's terms as well.
  const std::string ids_message(
      ParseEmbeddingsRequest(Json{{"input", std::vector<int>(70, 5)}}, limits_).status().message());
  EXPECT_THAT(ids_message,
              AllOf(HasSubstr("input has 70 tokens"), HasSubstr("set truncate_prompt_tokens"),
                    Not(HasSubstr("inputs[")), Not(HasSubstr("tokens.ids"))));
  for (const char* bad : {R"(0)", R"(-2)", R"("3")", R"(100000)"}) {
    EXPECT_THAT(std::string(ParseEmbeddingsRequest(
                                Json::parse(absl::StrCat(
                                    R"({"input": "a", "truncate_prompt_tokens": )", bad, "}")),
                                limits_)
                                .status()
                                .message()),
                HasSubstr("truncate_prompt_tokens"))
        << bad;
  }
}

TEST(OpenAiResponseTest, ErrorsAndFinishReasons) {
  EXPECT_EQ(HttpStatusOf(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::FailedPreconditionError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::UnauthenticatedError("x")), 401);
  EXPECT_EQ(HttpStatusOf(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("x")), 429);
  // A request this server can never hold: retrying cannot help.
  EXPECT_EQ(HttpStatusOf(NeverFitsError("the prompt needs 9 KV blocks but the cache has 8")), 400);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusOf(absl::InternalError("x")), 500);
  const Json error = Json::parse(ErrorBody(404, "no \"model\"", "model_not_found"));
  EXPECT_EQ(error["error"]["message"], "no \"model\"");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(error["error"]["param"].is_null());
  EXPECT_EQ(error["error"]["code"], "model_not_found");
  // Headers too large is the client's (431), as a body too large (413).
  EXPECT_EQ(Json::parse(ErrorBody(431, "x"))["error"]["type"], "invalid_request_error");
  EXPECT_EQ(Json::parse(ErrorBody(413, "x"))["error"]["type"], "invalid_request_error");
  EXPECT_EQ(Json::parse(ErrorBody(503, "x"))["error"]["type"], "server_error");
  // A 400 names the field its message starts with, as OpenAI's `param`.
  auto param = [](absl::string_view message) {
    return Json::parse(ErrorBody(400, message))["error"]["param"];
  };
  EXPECT_EQ(param("max_tokens: expected an integer, got a string"), "max_tokens");
  EXPECT_EQ(param("messages[1].content: expected a string or a list of parts"),
            "messages[1].content");
  EXPECT_TRUE(param("this model has no chat template (no chat_template in its "
                    "tokenizer_config.json): use /v1/completions")
                  .is_null());
  EXPECT_TRUE(param("JSON nested deeper than 32").is_null());
  EXPECT_EQ(param("n = 0 is out of range: allowed 1..16"), "n");
  EXPECT_EQ(param("prompt[1]: n = 0 is out of range: allowed 1..16"), "prompt[1]");
  EXPECT_TRUE(param("the request body holds 5 numbers; at most 4").is_null());
  EXPECT_TRUE(Json::parse(ErrorBody(429, "queue: full"))["error"]["param"].is_null());
  EXPECT_STREQ(FinishReasonString(FinishReason::kEos), "stop");
  EXPECT_STREQ(FinishReasonString(FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonString(FinishReason::kLength), "length");
}

// Found by an audit (session 41): the engine's checks name gRPC's fields,
// which an OpenAI caller never set ("max_new_tokens = 5000", "n = 2,
// best_of = 2 with sampling.temperature = 0").
TEST(OpenAiResponseTest, EngineErrorsAreInTheEndpointsTerms) {
  absl::Status cap = absl::InvalidArgumentError(
      "max_new_tokens = 5000 is out of range: allowed 1..4096 (the server's "
      "--max_new_tokens_cap)");
  SetRetryAfterMs(cap, 5);
  const absl::Status completions = InOpenAiTerms(cap, Api::kCompletions, "max_tokens");
  EXPECT_EQ(completions.message(),
            "max_tokens = 5000 is out of range: allowed 1..4096 (the server's "
            "--max_new_tokens_cap)");
  EXPECT_EQ(completions.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RetryAfterMs(completions), 5);  // payloads kept
  EXPECT_EQ(InOpenAiTerms(cap, Api::kChat, "max_completion_tokens").message().substr(0, 21),
            "max_completion_tokens");
  auto terms = [](const char* message, Api api) {
    return std::string(
        InOpenAiTerms(absl::InvalidArgumentError(message), api, "max_tokens").message());
  };
  EXPECT_EQ(terms("prompt[1]: n = 2, best_of = 2 with sampling.temperature = 0 (greedy)",
                  Api::kCompletions),
            "prompt[1]: n = 2, best_of = 2 with temperature = 0 (greedy)");
  EXPECT_EQ(terms("prompt_logprobs = 5 over a prompt of 9 tokens; top_logprobs", Api::kCompletions),
            "logprobs = 5 over a prompt of 9 tokens; logprobs");
  EXPECT_EQ(terms("top_logprobs = 30", Api::kChat), "top_logprobs = 30");
  // Only whole names: longer ones and flags stay.
  EXPECT_EQ(terms("strict_max_new_tokens is set; max_new_tokensx; nosampling.x", Api::kCompletions),
            "strict_max_new_tokens is set; max_new_tokensx; nosampling.x");
  EXPECT_TRUE(InOpenAiTerms(absl::OkStatus(), Api::kChat, "max_tokens").ok());
}

// A field the caller sent under a gRPC name is named as sent (the parser's
// own errors are not put in OpenAI's terms).
TEST_F(OpenAiRequestTest, FieldsSentUnderGrpcNamesAreNamedAsSent) {
  EXPECT_THAT(Completion(R"({"prompt": "x", "max_new_tokens": 5})").status().message(),
              HasSubstr("max_new_tokens: not a field /v1/completions serves"));
  EXPECT_THAT(Completion(R"({"prompt": "x", "top_logprobs": 2})").status().message(),
              HasSubstr("top_logprobs: not a field"));
  // The converter's and the engine's checks are in the caller's terms.
  EXPECT_EQ(Completion(R"({"prompt": ["x", "y"], "n": 2, "temperature": 0})").status().message(),
            "prompt[0]: n = 2, best_of = 2 with temperature = 0 (greedy): every sample would "
            "be the same; set a temperature > 0 or ask for one sample");
  // max_tokens past the cap: its own message, with the endpoint's default.
  EXPECT_EQ(Completion(R"({"prompt": "x", "max_tokens": 5000})").status().message(),
            "max_tokens = 5000 is out of range: allowed 1..4096 (the server's "
            "--max_new_tokens_cap), or unset for the default 16");
  const ChatPrompt chat = LoadChat("{% for m in messages %}{{ m.content }}{% endfor %}");
  absl::StatusOr<GenerateCall> call = Chat(chat, R"(, "max_tokens": 7)");
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_STREQ(call->max_tokens_field, "max_tokens");
  EXPECT_STREQ(Chat(chat, R"(, "max_completion_tokens": 7)")->max_tokens_field,
               "max_completion_tokens");
  EXPECT_EQ(Chat(chat, R"(, "max_tokens": 5000)").status().message(),
            "max_tokens = 5000 is out of range: allowed 1..4096 (the server's "
            "--max_new_tokens_cap), or unset for the default 64");
}

TEST(OpenAiResponseTest, ChunksBecomeChoicesAndEvents) {
  std::unique_ptr<model::Tokenizer> tokenizer = model::MakeByteTokenizer();
  GenerateCall call;
  call.n = 2;
  call.prompts.resize(1);
  call.prompts[0].request.n = 2;
  ChoiceBuilder whole(NewResponseMeta(Api::kChat, "m"), call, *tokenizer);
  ChoiceBuilder stream(NewResponseMeta(Api::kChat, "m"), call, *tokenizer);
  GeneratedChunk a{{{'h', 0, {}}}, "h", 0, std::nullopt, 0, {}, std::nullopt};
  GeneratedChunk b{{{'i', 0, {}}}, "i", 1, FinishReason::kStop, 0, {}, std::nullopt};
  GenerateSummary summary;
  summary.reason = FinishReason::kLength;
  summary.prompt_tokens = 3;
  summary.generated_tokens = 2;
  whole.Add(a);
  whole.Add(b);
  const Json response = whole.Response(summary);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["choices"][0]["message"]["content"], "h");
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");  // from the summary
  EXPECT_EQ(response["choices"][1]["message"]["content"], "i");
  EXPECT_EQ(response["choices"][1]["finish_reason"], "stop");  // its own
  EXPECT_EQ(response["usage"]["total_tokens"], 5);

  std::vector<Json> start = stream.StartEvents();
  ASSERT_EQ(start.size(), 2u);
  EXPECT_EQ(start[0]["choices"][0]["delta"]["role"], "assistant");
  std::vector<Json> events = stream.ChunkEvents(b);
  ASSERT_EQ(events.size(), 2u);  // the text, then sample 1's finish
  EXPECT_EQ(events[0]["choices"][0]["delta"]["content"], "i");
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "stop");
  events = stream.FinishEvents(summary);
  ASSERT_EQ(events.size(), 1u);  // only sample 0 is left
  EXPECT_EQ(events[0]["choices"][0]["index"], 0);
  EXPECT_EQ(events[0]["choices"][0]["finish_reason"], "length");
}

// Chat logprobs' `bytes` are what each token stands for: the two tokens of
// "é" (byte tokens C3 A9) are [195] and [169], which join into the
// character, not the bytes of their "<0xC3>" display text.
TEST(OpenAiResponseTest, ChatLogprobBytesAreTheTokensBytes) {
  std::unique_ptr<model::Tokenizer> tokenizer = model::MakeByteTokenizer();
  GenerateCall call;
  call.n = 1;
  call.want_logprobs = true;
  call.prompts.resize(1);
  ChoiceBuilder builder(NewResponseMeta(Api::kChat, "m"), call, *tokenizer);
  GeneratedChunk chunk{{{0xC3, -0.5f, {{0xC3, -0.5f}, {'x', -1.0f}}}, {0xA9, -0.25f, {}}},
                       "\xC3\xA9",
                       0,
                       FinishReason::kLength,
                       0,
                       {},
                       std::nullopt};
  builder.Add(chunk);
  GenerateSummary summary;
  summary.reason = FinishReason::kLength;
  const Json response = builder.Response(summary);
  const Json& content = response["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u) << response.dump();
  EXPECT_EQ(content[0]["token"], "<0xC3>");
  EXPECT_EQ(content[0]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(content[1]["bytes"], Json::array({0xA9}));
  EXPECT_EQ(content[0]["top_logprobs"][0]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(content[0]["top_logprobs"][1]["bytes"], Json::array({'x'}));
}

// approx_bytes follows what Response writes for the choices' text and
// logprobs (both JSON forms, with alternatives): within 0.7-1.3x of the
// dump, on top of the choices' own fields.
TEST(OpenAiResponseTest, ApproxBytesFollowTheResponsesSize) {
  std::unique_ptr<model::Tokenizer> tokenizer = model::MakeByteTokenizer();
  for (const auto& [api, alternatives] : {std::pair{Api::kCompletions, 5},
                                          {Api::kCompletions, 0},
                                          {Api::kChat, 5},
                                          {Api::kChat, 0}}) {
    GenerateCall call;
    call.n = 2;
    call.want_logprobs = true;
    call.prompts.resize(1);
    call.prompts[0].request.n = 2;
    ChoiceBuilder builder(NewResponseMeta(api, "m"), call, *tokenizer);
    GenerateSummary summary;
    summary.reason = FinishReason::kLength;
    const Json empty = ChoiceBuilder(NewResponseMeta(api, "m"), call, *tokenizer).Response(summary);
    const int64_t fixed = builder.approx_bytes();  // the choices' own fields
    for (int i = 0; i < 400; ++i) {
      GeneratedToken token{'a' + i % 26, -1.2345678f, {}};
      for (int k = 0; k < alternatives; ++k) token.top.push_back({'a' + (i + k) % 26, -2.3456789f});
      builder.Add(GeneratedChunk{
          {token}, std::string(1, 'a' + i % 26), i % 2, std::nullopt, 0, {}, std::nullopt});
    }
    const double written =
        static_cast<double>(builder.Response(summary).dump().size() - empty.dump().size());
    const double approx = static_cast<double>(builder.approx_bytes() - fixed);
    EXPECT_GT(approx, 0.7 * written) << static_cast<int>(api) << " " << alternatives;
    EXPECT_LT(approx, 1.3 * written) << static_cast<int>(api) << " " << alternatives;
    EXPECT_GT(fixed, 0);
  }
}

// What a target observer received, in order.
class RecordingObserver : public GenerateObserver {
 public:
  void OnChunk(GeneratedChunk chunk) override { chunks.push_back(std::move(chunk)); }
  void OnFinish(GenerateSummary s) override {
    ++finishes;
    summary = std::move(s);
  }
  std::vector<GeneratedChunk> chunks;
  int finishes = 0;
  GenerateSummary summary;
};

GeneratedChunk TextChunk(int32_t index, std::string text,
                         std::optional<FinishReason> finish = std::nullopt) {
  GeneratedChunk chunk;
  chunk.index = index;
  chunk.text = std::move(text);
  chunk.finish = finish;
  return chunk;
}

GenerateSummary Summary(FinishReason reason, int32_t prompt_tokens, int32_t generated) {
  GenerateSummary s;
  s.reason = reason;
  s.prompt_tokens = prompt_tokens;
  s.generated_tokens = generated;
  s.samples = 2;
  return s;
}

TEST(PromptFanOutTest, RenumbersChoicesFinishesEachPromptAndMergesSummaries) {
  auto target = std::make_shared<RecordingObserver>();
  std::shared_ptr<PromptFanOut> fan_out = PromptFanOut::Create(2, 2, target);
  std::shared_ptr<GenerateObserver> p0 = fan_out->ObserverFor(0);
  std::shared_ptr<GenerateObserver> p1 = fan_out->ObserverFor(1);
  fan_out.reset();  // the observers keep it
  p1->OnChunk(TextChunk(0, "x"));
  p0->OnChunk(TextChunk(1, "y", FinishReason::kStop));
  p1->OnChunk(TextChunk(1, "z"));
  p1->OnFinish(Summary(FinishReason::kLength, 3, 4));
  EXPECT_EQ(target->finishes, 0);  // prompt 0 still runs
  p0->OnFinish(Summary(FinishReason::kEos, 2, 5));
  ASSERT_EQ(target->finishes, 1);

  std::vector<std::tuple<int32_t, std::string, std::optional<FinishReason>>> got;
  for (const GeneratedChunk& c : target->chunks) got.emplace_back(c.index, c.text, c.finish);
  using R = FinishReason;
  EXPECT_THAT(got, ElementsAre(std::make_tuple(2, "x", std::nullopt),
                               std::make_tuple(1, "y", std::optional<R>(R::kStop)),
                               std::make_tuple(3, "z", std::nullopt),
                               // prompt 1 ends: both of its samples get its reason
                               std::make_tuple(2, "", std::optional<R>(R::kLength)),
                               std::make_tuple(3, "", std::optional<R>(R::kLength)),
                               // prompt 0 ends: sample 1 had its own finish
                               std::make_tuple(0, "", std::optional<R>(R::kEos))));
  EXPECT_EQ(target->summary.prompt_tokens, 5);
  EXPECT_EQ(target->summary.generated_tokens, 9);
  EXPECT_EQ(target->summary.samples, 4);
  EXPECT_EQ(target->summary.reason, FinishReason::kEos);
}

TEST(PromptFanOutTest, AFailedPromptFailsTheCall) {
  auto target = std::make_shared<RecordingObserver>();
  std::shared_ptr<PromptFanOut> fan_out = PromptFanOut::Create(3, 1, target);
  GenerateSummary error = Summary(FinishReason::kError, 1, 0);
  error.status = absl::InternalError("forward failed");
  fan_out->ObserverFor(0)->OnFinish(Summary(FinishReason::kCancelled, 1, 0));
  fan_out->ObserverFor(1)->OnFinish(error);
  fan_out->ObserverFor(2)->OnFinish(Summary(FinishReason::kLength, 1, 1));
  ASSERT_EQ(target->finishes, 1);
  EXPECT_EQ(target->summary.reason, FinishReason::kError);
  EXPECT_EQ(target->summary.status.message(), "forward failed");
  // No finish chunk for the failed prompts; one for the one that ended.
  ASSERT_EQ(target->chunks.size(), 1u);
  EXPECT_EQ(target->chunks[0].index, 2);

  auto cancelled = std::make_shared<RecordingObserver>();
  fan_out = PromptFanOut::Create(2, 1, cancelled);
  fan_out->ObserverFor(0)->OnFinish(Summary(FinishReason::kLength, 1, 1));
  fan_out->ObserverFor(1)->OnFinish(Summary(FinishReason::kCancelled, 1, 0));
  EXPECT_EQ(cancelled->summary.reason, FinishReason::kCancelled);
}

// The first failure while siblings still run calls on_error (the caller
// cancels them there), once; a failure of the last request left does not.
TEST(PromptFanOutTest, TheFirstFailureWithSiblingsLeftCallsOnError) {
  auto target = std::make_shared<RecordingObserver>();
  int errors = 0;
  std::shared_ptr<PromptFanOut> fan_out =
      PromptFanOut::Create(3, 2, target, [&errors] { ++errors; });
  GenerateSummary error = Summary(FinishReason::kError, 1, 0);
  error.status = absl::InternalError("forward failed");
  fan_out->ObserverFor(0)->OnFinish(Summary(FinishReason::kLength, 1, 1));
  EXPECT_EQ(errors, 0);
  fan_out->ObserverFor(2)->OnFinish(error);
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(target->finishes, 0);
  fan_out->ObserverFor(1)->OnFinish(Summary(FinishReason::kCancelled, 1, 0));
  EXPECT_EQ(errors, 1);
  ASSERT_EQ(target->finishes, 1);
  EXPECT_EQ(target->summary.reason, FinishReason::kError);
  EXPECT_EQ(target->summary.status.message(), "forward failed");

  errors = 0;
  fan_out =
      PromptFanOut::Create(2, 1, std::make_shared<RecordingObserver>(), [&errors] { ++errors; });
  fan_out->ObserverFor(0)->OnFinish(Summary(FinishReason::kEos, 1, 1));
  fan_out->ObserverFor(1)->OnFinish(error);
  EXPECT_EQ(errors, 0);
}

TEST(OpenAiResponseTest, ChoicesOfSeveralPromptsEchoTheirOwnPrompt) {
  std::unique_ptr<model::Tokenizer> tokenizer = model::MakeByteTokenizer();
  GenerateCall call;
  call.n = 2;
  call.echo = true;
  call.prompts.resize(2);
  call.prompts[0].echo_text = "A:";
  call.prompts[1].echo_text = "B:";
  ChoiceBuilder whole(NewResponseMeta(Api::kCompletions, "m"), call, *tokenizer);
  ChoiceBuilder stream(NewResponseMeta(Api::kCompletions, "m"), call, *tokenizer);
  const std::vector<GeneratedChunk> chunks = {
      TextChunk(3, "d"), TextChunk(0, "a"), TextChunk(1, "b", FinishReason::kStop),
      TextChunk(2, "c", FinishReason::kLength), TextChunk(3, "", FinishReason::kEos)};
  std::vector<std::string> streamed(4);
  for (const GeneratedChunk& c : chunks) {
    whole.Add(c);
    for (const Json& e : stream.ChunkEvents(c)) {
      for (const Json& choice : e["choices"]) {
        streamed[choice["index"].get<int>()] += choice["text"].get<std::string>();
      }
    }
  }
  const Json response = whole.Response(Summary(FinishReason::kLength, 4, 4));
  ASSERT_EQ(response["choices"].size(), 4u);
  const std::vector<std::string> texts = {"A:a", "A:b", "B:c", "B:d"};
  const std::vector<std::string> finishes = {"length", "stop", "length", "stop"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(response["choices"][i]["index"], i);
    EXPECT_EQ(response["choices"][i]["text"], texts[i]) << i;
    EXPECT_EQ(response["choices"][i]["finish_reason"], finishes[i]) << i;
    EXPECT_EQ(streamed[i], texts[i]) << i;
  }
}

TEST(OpenAiResponseTest, Base64EmbeddingsAreLittleEndianFloat32) {
  EncodeResult result;
  result.embeddings.push_back(DenseTensor{{2}, {1.0f, -2.5f}});
  result.prompt_tokens = 4;
  const Json floats = EmbeddingsResponse(result, false, "m");
  EXPECT_EQ(floats["data"][0]["embedding"], Json::array({1.0, -2.5}));
  EXPECT_EQ(floats["usage"]["prompt_tokens"], 4);
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(
      EmbeddingsResponse(result, true, "m")["data"][0]["embedding"].get<std::string>(), &bytes));
  // 1.0f = 0x3f800000, -2.5f = 0xc0200000, least significant byte first.
  EXPECT_EQ(bytes, std::string("\x00\x00\x80\x3f\x00\x00\x20\xc0", 8));
}

}  // namespace
}  // namespace dikkat::server::openai
