// Request conversion and validation (server/convert.h): every invalid input
// is INVALID_ARGUMENT naming the field and value; tensors are packed the
// way the proto documents (little-endian, bfloat16/float16 rounded to
// nearest even, checked against c10's own conversions).
#include "server/convert.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/cpu_isa.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/tokenizer.h"
#include "model/text/wordpiece_tokenizer.h"

namespace dikkat::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

model::ModelConfig Config(model::Architecture arch) {
  model::ModelConfig c;
  c.architecture = arch;
  c.name = "m";
  c.vocab_size = 259;  // the byte tokenizer's
  c.d_model = 8;
  c.n_heads = 4;
  c.ffn_dim = 16;
  if (arch == model::Architecture::kEncoderDecoder) {
    c.n_encoder_layers = 2;
    c.n_decoder_layers = 3;
  } else {
    c.n_layers = 2;
  }
  c.max_positions = 16;
  c.default_pooling = model::Pooling::kLast;
  return c;
}

class ConvertTest : public ::testing::Test {
 protected:
  ConvertTest() : tokenizer_(model::MakeByteTokenizer()) {
    options_.max_new_tokens_cap = 50;
    options_.default_max_new_tokens = 9;
    options_.max_batch_entries = 3;
    Use(model::Architecture::kDecoderOnly);
  }
  void Use(model::Architecture arch) {
    config_ = Config(arch);
    limits_ = ModelLimits{&config_, tokenizer_.get(), &options_};
  }
  static v1::Input Text(const std::string& s) {
    v1::Input in;
    in.set_text(s);
    return in;
  }
  static v1::Input Ids(std::initializer_list<int32_t> ids) {
    v1::Input in;
    in.mutable_tokens();  // set even when empty
    for (int32_t id : ids) in.mutable_tokens()->add_ids(id);
    return in;
  }
  // Asserts INVALID_ARGUMENT with every substring in the message.
  template <typename T>
  static void ExpectInvalid(const absl::StatusOr<T>& result,
                            std::initializer_list<std::string> parts) {
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    const std::string message(result.status().message());
    for (const std::string& p : parts) EXPECT_THAT(message, HasSubstr(p));
  }
  // What the gRPC path does with a request: conversion, then the engine's
  // request check at Submit* (server/request_checks.h), which conversion
  // leaves to the engine so that it runs once.
  absl::StatusOr<GenerateConversion> Checked(absl::StatusOr<GenerateConversion> c) const {
    if (c.ok()) DIKKAT_RETURN_IF_ERROR(CheckGenerateRequest(c->request, config_, options_));
    return c;
  }
  absl::StatusOr<EncodeRequest> Checked(absl::StatusOr<EncodeRequest> r) const {
    if (r.ok()) DIKKAT_RETURN_IF_ERROR(CheckEncodeRequest(*r, config_, options_));
    return r;
  }
  absl::StatusOr<AttentionRequest> Checked(absl::StatusOr<AttentionRequest> r) const {
    if (r.ok()) DIKKAT_RETURN_IF_ERROR(CheckAttentionRequest(*r, config_, options_));
    return r;
  }
  v1::GenerateRequest Prompt(const std::string& text) {
    v1::GenerateRequest r;
    *r.mutable_input() = Text(text);
    return r;
  }

  std::unique_ptr<model::Tokenizer> tokenizer_;
  model::ModelConfig config_;
  EngineOptions options_;
  ModelLimits limits_;
};

// ---- the request check runs once --------------------------------------------

TEST_F(ConvertTest, ConversionLeavesTheValueChecksToTheEngine) {
  // Values the wire form allows but the model or the server's limits do not
  // are the engine's check (Engine::Submit*), run once per request: on main
  // conversion ran it too, so the gRPC path checked every request twice.
  v1::GenerateRequest g = Prompt("abc");
  g.mutable_sampling()->set_top_p(1.5f);
  g.add_stop_token_ids(1000);
  absl::StatusOr<GenerateConversion> converted = ToGenerateRequest(g, limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  ExpectInvalid(Checked(std::move(converted)), {"top_p"});

  v1::EncodeRequest e;
  *e.add_inputs() = Ids({1, 999});
  ASSERT_TRUE(ToEncodeRequest(e, limits_).ok());
  ExpectInvalid(Checked(ToEncodeRequest(e, limits_)), {"inputs[0][1] = 999"});

  v1::AttentionRequest a;
  *a.mutable_input() = Text("abc");
  a.add_layers(7);
  ASSERT_TRUE(ToAttentionRequest(a, limits_).ok());
  ExpectInvalid(Checked(ToAttentionRequest(a, limits_)), {"layers[0] = 7"});

  // What conversion still refuses itself: the wire's own rules and the
  // bounds due before tokenizing.
  g = Prompt("abc");
  g.set_max_new_tokens(0);
  ExpectInvalid(ToGenerateRequest(g, limits_), {"max_new_tokens = 0"});
  v1::EncodeRequest many;
  for (int i = 0; i < 4; ++i) *many.add_inputs() = Text("x");
  ExpectInvalid(ToEncodeRequest(many, limits_), {"inputs has 4 entries"});
}

// ---- inputs -----------------------------------------------------------------

TEST_F(ConvertTest, TextInputIsTokenizedWithOrWithoutSpecialTokens) {
  auto ids = InputToIds(Text("hi"), "input", false, limits_);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre('h', 'i'));
  ids = InputToIds(Text("hi"), "input", true, limits_);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(257, 'h', 'i'));  // <bos> first
  v1::Input explicit_off = Text("hi");
  explicit_off.set_add_special_tokens(false);
  ids = InputToIds(explicit_off, "input", true, limits_);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre('h', 'i'));
}

TEST_F(ConvertTest, ParsedSpecialTokensInTheTextBecomeTheirIds) {
  v1::Input rendered = Text("<bos>hi<eos>");
  auto ids = InputToIds(rendered, "input", true, limits_);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 13u);  // as text, after the <bos> Encode adds
  rendered.set_parse_special_tokens(true);
  ids = InputToIds(rendered, "input", true, limits_);  // nothing added around it
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(257, 'h', 'i', 258));
  // Asked for, both: the parsed text wrapped as tokenizer(text) wraps it
  // (a BOS written in the text and the one added: two, as Hugging Face gives).
  rendered.set_add_special_tokens(true);
  ids = InputToIds(rendered, "input", false, limits_);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(257, 257, 'h', 'i', 258));
}

TEST_F(ConvertTest, TokenInputIsUsedAsGiven) {
  auto ids = InputToIds(Ids({0, 5, 258}), "input", true, limits_);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(0, 5, 258));
}

TEST_F(ConvertTest, InvalidInputsNameTheField) {
  ExpectInvalid(InputToIds(v1::Input(), "input", false, limits_),
                {"input is empty", "input.text", "input.tokens"});
  ExpectInvalid(InputToIds(Text(""), "input", false, limits_), {"input.text is empty"});
  ExpectInvalid(InputToIds(Ids({}), "input", false, limits_), {"input.tokens.ids is empty"});
  ExpectInvalid(InputToIds(Text("\xff\xfe"), "input", false, limits_), {"input.text", "UTF-8"});
  // Token ids out of range and text inputs longer than the model's positions
  // are the request check's (tests/server/request_checks_test.cc); a
  // converted request has passed it. (More token ids than max_positions are
  // refused here, before the copy: tests/server/limits_test.cc.)
  v1::AttentionRequest attention;
  *attention.mutable_input() = Ids({1, 259});
  ExpectInvalid(Checked(ToAttentionRequest(attention, limits_)), {"input[1] = 259", "0..258"});
  *attention.mutable_input() = Text(std::string(17, 'a'));
  attention.mutable_input()->set_add_special_tokens(false);
  ExpectInvalid(Checked(ToAttentionRequest(attention, limits_)),
                {"input has 17 tokens", "max_positions=16"});
}

// ---- Generate ---------------------------------------------------------------

TEST_F(ConvertTest, SamplingDefaultsApplyToUnsetFields) {
  model::SamplingParams params = ToSamplingParams(v1::SamplingOptions(), 0);
  EXPECT_EQ(params.temperature, 1.0f);
  EXPECT_EQ(params.top_p, 1.0f);
  EXPECT_EQ(params.repetition_penalty, 1.0f);
  EXPECT_EQ(params.top_k, 0);
  EXPECT_FALSE(params.seed.has_value());

  v1::SamplingOptions greedy;
  greedy.set_temperature(0.0f);  // explicitly 0 is greedy, not "unset"
  greedy.set_seed(7);
  greedy.set_top_k(5);
  params = ToSamplingParams(greedy, 3);
  EXPECT_TRUE(params.greedy());
  EXPECT_EQ(params.seed, std::optional<uint64_t>(7));
  EXPECT_EQ(params.top_k, 5);
  EXPECT_EQ(params.top_logprobs, 3);
  EXPECT_TRUE(params.logit_bias.empty());

  v1::SamplingOptions biased;
  (*biased.mutable_logit_bias())[40] = -100.0f;
  (*biased.mutable_logit_bias())[3] = 2.5f;
  (*biased.mutable_logit_bias())[17] = 100.0f;
  params = ToSamplingParams(biased, 0);
  ASSERT_EQ(params.logit_bias.size(), 3u);  // in id order
  EXPECT_EQ(params.logit_bias[0].token_id, 3);
  EXPECT_EQ(params.logit_bias[0].bias, 2.5f);
  EXPECT_EQ(params.logit_bias[1].token_id, 17);
  EXPECT_EQ(params.logit_bias[2].token_id, 40);
  EXPECT_EQ(params.logit_bias[2].bias, -100.0f);

  // The model's recommended sampling (generation_config.json) for the
  // fields left unset; set ones win, top_k -1 is off whatever the model says.
  model::ModelConfig::SamplingDefaults qwen;
  qwen.temperature = 0.7f;
  qwen.top_p = 0.8f;
  qwen.top_k = 20;
  qwen.repetition_penalty = 1.05f;
  params = ToSamplingParams(v1::SamplingOptions(), 0, qwen);
  EXPECT_EQ(params.temperature, 0.7f);
  EXPECT_EQ(params.top_p, 0.8f);
  EXPECT_EQ(params.top_k, 20);
  EXPECT_EQ(params.repetition_penalty, 1.05f);
  params = ToSamplingParams(greedy, 0, qwen);
  EXPECT_TRUE(params.greedy());
  EXPECT_EQ(params.top_k, 5);
  EXPECT_EQ(params.top_p, 0.8f);
  v1::SamplingOptions off;
  off.set_top_k(-1);
  off.set_top_p(1.0f);
  off.set_repetition_penalty(1.0f);
  params = ToSamplingParams(off, 0, qwen);
  EXPECT_EQ(params.top_k, 0);
  EXPECT_EQ(params.top_p, 1.0f);
  EXPECT_EQ(params.repetition_penalty, 1.0f);
  EXPECT_EQ(params.temperature, 0.7f);
  // A Generate request gets the served model's.
  config_.sampling_defaults = qwen;
  absl::StatusOr<GenerateConversion> converted = ToGenerateRequest(Prompt("ab"), limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->request.sampling.top_k, 20);
  EXPECT_EQ(converted->request.sampling.temperature, 0.7f);
}

TEST_F(ConvertTest, InvalidSamplingFieldsAreRejected) {
  struct Case {
    std::function<void(v1::SamplingOptions*)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::SamplingOptions* o) { o->set_temperature(-0.5f); }, "temperature"},
      {[](v1::SamplingOptions* o) { o->set_temperature(NAN); }, "temperature"},
      {[](v1::SamplingOptions* o) { o->set_top_k(-2); }, "top_k"},
      {[](v1::SamplingOptions* o) { o->set_top_p(0.0f); }, "top_p"},
      {[](v1::SamplingOptions* o) { o->set_top_p(1.5f); }, "top_p"},
      {[](v1::SamplingOptions* o) { o->set_min_p(1.5f); }, "min_p"},
      {[](v1::SamplingOptions* o) { o->set_repetition_penalty(0.0f); }, "repetition_penalty"},
      {[](v1::SamplingOptions* o) { o->set_presence_penalty(2.5f); }, "presence_penalty"},
      {[](v1::SamplingOptions* o) { o->set_frequency_penalty(-3.0f); }, "frequency_penalty"},
      {[](v1::SamplingOptions* o) { (*o->mutable_logit_bias())[5] = 100.5f; },
       "logit_bias[5] = 100.5 is out of range"},
      {[](v1::SamplingOptions* o) { (*o->mutable_logit_bias())[5] = NAN; }, "logit_bias[5]"},
      {[](v1::SamplingOptions* o) { (*o->mutable_logit_bias())[-1] = 1.0f; },
       "logit_bias: token id -1"},
      {[](v1::SamplingOptions* o) { (*o->mutable_logit_bias())[100000] = 1.0f; },
       "logit_bias: token id 100000 is not in the vocabulary"},
      {[](v1::SamplingOptions* o) {
         for (int id = 0; id < 301; ++id) (*o->mutable_logit_bias())[id] = 1.0f;
       },
       "logit_bias has 301 entries; at most 300"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest r = Prompt("ab");
    c.set(r.mutable_sampling());
    SCOPED_TRACE(c.field);
    ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"sampling", c.field});
  }
}

TEST_F(ConvertTest, GenerateDecoderOnly) {
  v1::GenerateRequest r = Prompt("abc");
  r.add_stop("\n\n");
  r.add_stop_token_ids(258);
  r.set_ignore_eos(true);
  r.set_top_logprobs(2);
  auto out = Checked(ToGenerateRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->request.prompt, ElementsAre('a', 'b', 'c'));  // no <bos> by default
  EXPECT_TRUE(out->request.source.empty());
  EXPECT_EQ(out->request.max_new_tokens, 9);  // the server default
  EXPECT_THAT(out->request.stop_strings, ElementsAre("\n\n"));
  EXPECT_THAT(out->request.stop_token_ids, ElementsAre(258));
  EXPECT_TRUE(out->request.ignore_eos);
  EXPECT_TRUE(out->want_logprobs);
  EXPECT_EQ(out->request.sampling.top_logprobs, 2);
  EXPECT_THAT(out->input_ids, ElementsAre('a', 'b', 'c'));

  r.set_top_logprobs(-1);
  r.set_max_new_tokens(50);
  out = Checked(ToGenerateRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->want_logprobs);
  EXPECT_EQ(out->request.sampling.top_logprobs, 0);
  EXPECT_EQ(out->request.max_new_tokens, 50);
}

TEST_F(ConvertTest, GenerateRejectsBadLimitsAndStops) {
  v1::GenerateRequest r = Prompt("abc");
  r.set_max_new_tokens(51);
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"max_new_tokens = 51", "1..50"});
  r.set_max_new_tokens(0);
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"max_new_tokens = 0"});
  r.set_max_new_tokens(-3);
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"max_new_tokens = -3"});

  r = Prompt("abc");
  r.set_top_logprobs(21);
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"top_logprobs = 21", "0..20"});
  r.set_top_logprobs(-2);
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"top_logprobs = -2"});

  r = Prompt("abc");
  r.add_stop("x");
  r.add_stop("");
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"stop[1]", "empty"});

  r = Prompt("abc");
  r.add_stop_token_ids(1000);
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"stop_token_ids[0] = 1000"});

  // A prompt that fills the whole context leaves nothing to generate.
  ExpectInvalid(Checked(ToGenerateRequest(Prompt(std::string(16, 'a')), limits_)),
                {"input has 16 tokens", "max_positions=16"});
  EXPECT_TRUE(Checked(ToGenerateRequest(Prompt(std::string(15, 'a')), limits_)).ok());

  v1::GenerateRequest missing;
  ExpectInvalid(Checked(ToGenerateRequest(missing, limits_)), {"input is empty"});
}

// prompt + max_new_tokens past the context (max_positions 16): stopped at the
// context by default, refused with strict_max_new_tokens.
TEST_F(ConvertTest, StrictMaxNewTokensRefusesWhatCannotFit) {
  v1::GenerateRequest r = Prompt("abc");
  r.set_max_new_tokens(14);
  auto loose = Checked(ToGenerateRequest(r, limits_));
  ASSERT_TRUE(loose.ok()) << loose.status();
  EXPECT_FALSE(loose->request.strict_max_new_tokens);
  r.set_strict_max_new_tokens(true);
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)),
                {"maximum context length is 16 tokens", "requested 17 tokens",
                 "3 in the prompt, 14 for the completion"});
  r.set_max_new_tokens(13);  // exactly the context
  auto fits = Checked(ToGenerateRequest(r, limits_));
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_TRUE(fits->request.strict_max_new_tokens);

  r.clear_max_new_tokens();
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"strict_max_new_tokens", "without"});

  // Encoder-decoder: the decoder's start token and prefix count.
  Use(model::Architecture::kEncoderDecoder);
  v1::GenerateRequest e = Prompt("a 15-byte input");  // the source does not count
  *e.mutable_decoder_prefix() = Ids({1, 2});
  e.set_max_new_tokens(13);
  e.set_strict_max_new_tokens(true);
  EXPECT_TRUE(Checked(ToGenerateRequest(e, limits_)).ok());
  e.set_max_new_tokens(14);
  ExpectInvalid(Checked(ToGenerateRequest(e, limits_)),
                {"requested 17 tokens", "3 in the decoder's start and prefix"});
}

TEST_F(ConvertTest, GenerateRespectsTheArchitecture) {
  v1::GenerateRequest r = Prompt("abc");
  *r.mutable_decoder_prefix() = Ids({1});
  ExpectInvalid(Checked(ToGenerateRequest(r, limits_)), {"decoder_prefix", "decoder-only"});

  Use(model::Architecture::kEncoderOnly);
  ExpectInvalid(Checked(ToGenerateRequest(Prompt("abc"), limits_)),
                {"encoder-only", "cannot generate"});

  Use(model::Architecture::kEncoderDecoder);
  auto out = Checked(ToGenerateRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->request.source, ElementsAre('a', 'b', 'c'));
  EXPECT_THAT(out->request.prompt, ElementsAre(1));
  out = Checked(ToGenerateRequest(Prompt("abc"), limits_));
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->request.prompt.empty());  // the engine starts from decoder_start
}

TEST_F(ConvertTest, ChunksAndFinishFillTheResponse) {
  GeneratedChunk chunk;
  chunk.tokens = {{'h', -0.25f, {{'h', -0.25f}, {'j', -1.5f}}}, {'i', -0.5f, {}}};
  chunk.text = "hi";
  v1::GenerateResponse with;
  AppendChunk(chunk, true, *tokenizer_, &with);
  AppendChunk(chunk, true, *tokenizer_, &with);  // merged messages append
  ASSERT_EQ(with.tokens_size(), 4);
  EXPECT_EQ(with.text(), "hihi");
  EXPECT_EQ(with.tokens(0).id(), 'h');
  EXPECT_FLOAT_EQ(with.tokens(0).logprob(), -0.25f);
  ASSERT_EQ(with.tokens(0).top_logprobs_size(), 2);
  EXPECT_EQ(with.tokens(0).top_logprobs(1).text(), "j");
  EXPECT_FLOAT_EQ(with.tokens(0).top_logprobs(1).logprob(), -1.5f);

  v1::GenerateResponse without;
  AppendChunk(chunk, false, *tokenizer_, &without);
  EXPECT_EQ(without.tokens(0).logprob(), 0.0f);
  EXPECT_EQ(without.tokens(0).top_logprobs_size(), 0);

  GenerateSummary s;
  s.reason = FinishReason::kStop;
  s.prompt_tokens = 3;
  s.generated_tokens = 4;
  s.seed = 99;
  s.total_time = absl::Milliseconds(1500);
  FillFinish(s, &without);
  EXPECT_EQ(without.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(without.stats().generated_tokens(), 4);
  EXPECT_EQ(without.stats().seed(), 99u);
  EXPECT_DOUBLE_EQ(without.stats().total_seconds(), 1.5);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kEos), v1::FINISH_REASON_EOS);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kLength), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kCancelled), v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kDeadline), v1::FINISH_REASON_DEADLINE);
}

// ---- Encode -----------------------------------------------------------------

TEST_F(ConvertTest, EncodeConvertsInputsAndDefaults) {
  v1::EncodeRequest r;
  *r.add_inputs() = Text("ab");
  *r.add_inputs() = Ids({7});
  r.set_return_hidden_states(true);
  r.set_hidden_layer(0);
  auto out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->inputs.size(), 2u);
  EXPECT_THAT(out->inputs[0], ElementsAre(257, 'a', 'b'));  // special tokens by default
  EXPECT_THAT(out->inputs[1], ElementsAre(7));
  EXPECT_EQ(out->pooling, model::Pooling::kLast);  // the model's default
  EXPECT_EQ(out->hidden_layer, 0);
  EXPECT_TRUE(out->type_ids.empty());

  r.set_pooling(v1::POOLING_FIRST);
  r.clear_hidden_layer();
  out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->pooling, model::Pooling::kFirst);
  EXPECT_EQ(out->hidden_layer, -1);
}

// Named prompts (a sentence-transformers folder's; EmbeddingGemma's query
// prompt): put before each text input, the model's default when the request
// names none, none for "".
TEST_F(ConvertTest, EncodePutsTheNamedPromptBeforeText) {
  config_.prompts = {{"query", "q: "}, {"document", "d: "}};
  v1::EncodeRequest r;
  *r.add_inputs() = Text("ab");
  auto out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(257, 'a', 'b'));  // no default: no prompt
  r.set_prompt_name("query");
  out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(257, 'q', ':', ' ', 'a', 'b'));
  config_.default_prompt_name = "document";
  r.clear_prompt_name();
  out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(257, 'd', ':', ' ', 'a', 'b'));
  r.set_prompt_name("");  // none, over the default
  out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(257, 'a', 'b'));
  // Truncation keeps the prompt (it comes first), but not at the cost of
  // all of the caller's text.
  r.set_prompt_name("query");
  r.set_truncate(5);
  out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(257, 'q', ':', ' ', 'a'));
  r.set_truncate(4);
  ExpectInvalid(ToEncodeRequest(r, limits_), {"leaves none of its text", "3-token prompt 'query'"});
  r.clear_truncate();
  // Empty text stays an error with a prompt; the prompt counts towards the
  // text's bytes (16 positions x 32 bytes here).
  v1::EncodeRequest empty = r;
  empty.mutable_inputs(0)->set_text("");
  ExpectInvalid(ToEncodeRequest(empty, limits_), {"inputs[0].text is empty"});
  v1::EncodeRequest big = r;
  big.mutable_inputs(0)->set_text(std::string(510, 'x'));
  ExpectInvalid(ToEncodeRequest(big, limits_), {"510 bytes, 513 with the 3-byte prompt 'query'"});
  // The default prompt leaves token-id inputs as they are; a named one is
  // for text only.
  *r.add_inputs() = Ids({7});
  r.clear_prompt_name();
  out = Checked(ToEncodeRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[1], ElementsAre(7));
  r.set_prompt_name("query");
  ExpectInvalid(ToEncodeRequest(r, limits_), {"prompt_name 'query' applies to text", "inputs[1]"});
  r.mutable_inputs()->RemoveLast();
  r.set_prompt_name("passage");
  ExpectInvalid(ToEncodeRequest(r, limits_), {"prompt_name 'passage'", "document, query"});
  r.set_prompt_name("query");
  config_.pooling_includes_prompt = false;
  ExpectInvalid(ToEncodeRequest(r, limits_), {"include_prompt false"});
  // ... only where a prompt would be added: token ids take the default as is.
  v1::EncodeRequest ids_only;
  *ids_only.add_inputs() = Ids({7});
  EXPECT_TRUE(Checked(ToEncodeRequest(ids_only, limits_)).ok());
}

TEST_F(ConvertTest, EncodeRejectsInvalidRequests) {
  v1::EncodeRequest empty;
  ExpectInvalid(Checked(ToEncodeRequest(empty, limits_)), {"inputs is empty"});

  v1::EncodeRequest many;
  for (int i = 0; i < 4; ++i) *many.add_inputs() = Text("a");
  ExpectInvalid(Checked(ToEncodeRequest(many, limits_)), {"inputs has 4 entries", "at most 3"});
  // The count is refused before any input is tokenized or checked: an
  // invalid first input does not change the error.
  v1::EncodeRequest many_bad;
  *many_bad.add_inputs() = Ids({300});
  for (int i = 0; i < 3; ++i) *many_bad.add_inputs() = Text("a");
  ExpectInvalid(Checked(ToEncodeRequest(many_bad, limits_)), {"inputs has 4 entries", "at most 3"});

  v1::EncodeRequest r;
  *r.add_inputs() = Text("a");
  *r.add_inputs() = Ids({300});
  ExpectInvalid(Checked(ToEncodeRequest(r, limits_)), {"inputs[1][0] = 300"});

  r.mutable_inputs(1)->mutable_tokens()->set_ids(0, 3);
  r.set_hidden_layer(3);
  ExpectInvalid(Checked(ToEncodeRequest(r, limits_)), {"hidden_layer = 3", "1..2"});
  r.set_hidden_layer(-2);
  ExpectInvalid(Checked(ToEncodeRequest(r, limits_)), {"hidden_layer = -2"});
  r.set_hidden_layer(2);
  EXPECT_TRUE(Checked(ToEncodeRequest(r, limits_)).ok());

  r.set_pooling(static_cast<v1::Pooling>(9));
  ExpectInvalid(Checked(ToEncodeRequest(r, limits_)), {"pooling", "9"});
  r.set_pooling(v1::POOLING_MEAN);
  r.set_output_dtype(static_cast<v1::DType>(7));
  ExpectInvalid(Checked(ToEncodeRequest(r, limits_)), {"output_dtype", "7"});
}

// Encode's truncate: a longer input is cut to the model's limit (-1) or to N
// tokens, text keeping its first tokens between the special tokens its
// tokenizer adds (BERT's [CLS] ... [SEP], as Hugging Face's truncation=True
// keeps them), token ids their first N; without it, too long is an error
// that names the option.
TEST_F(ConvertTest, EncodeTruncatesOnlyWhenAsked) {
  Use(model::Architecture::kEncoderOnly);  // max_positions 16
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> bert = model::MakeWordPiece(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e"}, {}, {});
  ASSERT_TRUE(bert.ok()) << bert.status();
  ModelLimits limits = limits_;
  limits.tokenizer = bert->get();
  std::string text;
  for (int i = 0; i < 20; ++i) text += std::string(1, static_cast<char>('a' + i % 5)) + " ";
  v1::EncodeRequest r;
  *r.add_inputs() = Text(text);  // [CLS] + 20 words + [SEP] = 22 tokens
  auto checked = [&](const v1::EncodeRequest& request) -> absl::StatusOr<EncodeRequest> {
    absl::StatusOr<EncodeRequest> out = ToEncodeRequest(request, limits);
    if (out.ok()) DIKKAT_RETURN_IF_ERROR(CheckEncodeRequest(*out, config_, options_));
    return out;
  };
  ExpectInvalid(checked(r), {"inputs[0] has 22 tokens", "max_positions=16", "set truncate"});

  r.set_truncate(-1);
  absl::StatusOr<EncodeRequest> out = checked(r);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->inputs[0].size(), 16u);
  EXPECT_EQ(out->inputs[0].front(), 2);  // [CLS]
  EXPECT_EQ(out->inputs[0].back(), 3);   // [SEP]
  EXPECT_THAT(std::vector<int32_t>(out->inputs[0].begin() + 1, out->inputs[0].begin() + 7),
              ElementsAre(5, 6, 7, 8, 9, 5));  // the text's first words
  if (!out->type_ids.empty()) {
    EXPECT_EQ(out->type_ids[0].size(), 16u);
  }

  r.set_truncate(5);
  out = checked(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(2, 5, 6, 7, 3));
  // Without the special tokens: just the first words.
  r.mutable_inputs(0)->set_add_special_tokens(false);
  out = checked(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(5, 6, 7, 8, 9));
  r.mutable_inputs(0)->clear_add_special_tokens();
  // A short input is left as it is.
  *r.add_inputs() = Text("b c");
  out = checked(r);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[1], ElementsAre(2, 6, 7, 3));
  // Token ids keep their first N (only those are copied).
  v1::EncodeRequest ids;
  v1::Input* long_ids = ids.add_inputs();
  for (int i = 0; i < 40; ++i) long_ids->mutable_tokens()->add_ids(5 + i % 5);
  ExpectInvalid(checked(ids), {"inputs[0].tokens.ids has 40 tokens", "set truncate"});
  ids.set_truncate(3);
  out = checked(ids);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->inputs[0], ElementsAre(5, 6, 7));

  r.set_truncate(2);  // [CLS] and [SEP] alone
  ExpectInvalid(checked(r), {"truncating inputs[0] to 2 tokens leaves no room", "2 special"});
  for (int bad : {17, -2}) {
    r.set_truncate(bad);
    ExpectInvalid(checked(r),
                  {absl::StrCat("truncate = ", bad), "-1 (to the model's limit) or 1..16"});
  }
}

TEST_F(ConvertTest, EncodeResponseEchoesIdsAndPacksTensors) {
  EncodeRequest req;
  req.inputs = {{1, 2}, {3}};
  req.return_hidden_states = true;
  EncodeResult result;
  result.embeddings = {DenseTensor{{2}, {1.0f, 2.0f}}, DenseTensor{{2}, {3.0f, 4.0f}}};
  result.hidden_states = {DenseTensor{{2, 2}, {1, 2, 3, 4}}, DenseTensor{{1, 2}, {5, 6}}};
  result.prompt_tokens = 3;
  v1::EncodeResponse response;
  ASSERT_TRUE(FillEncodeResponse(req, result, v1::DTYPE_BFLOAT16, &response).ok());
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.prompt_tokens(), 3);
  EXPECT_THAT(response.results(0).token_ids(), ElementsAre(1, 2));
  EXPECT_EQ(response.results(1).embedding().dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(response.results(1).embedding().data().size(), 4u);
  EXPECT_THAT(response.results(0).hidden_states().shape(), ElementsAre(2, 2));

  result.hidden_states.pop_back();  // engine bug: one missing
  v1::EncodeResponse bad;
  EXPECT_EQ(FillEncodeResponse(req, result, v1::DTYPE_FLOAT32, &bad).code(),
            absl::StatusCode::kInternal);
}

// ---- Attention --------------------------------------------------------------

TEST_F(ConvertTest, AttentionDefaultsAndLabels) {
  v1::AttentionRequest r;
  *r.mutable_input() = Text("ab");
  r.add_layers(1);
  r.add_heads(3);
  r.set_aggregation(v1::HEAD_AGGREGATION_MAX);
  auto out = Checked(ToAttentionRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->kind, AttentionKind::kSelf);
  EXPECT_EQ(out->aggregation, HeadAggregation::kMax);
  EXPECT_THAT(out->input, ElementsAre(257, 'a', 'b'));
  EXPECT_THAT(out->layers, ElementsAre(1));
  EXPECT_THAT(out->heads, ElementsAre(3));

  Use(model::Architecture::kEncoderDecoder);
  r.set_kind(v1::ATTENTION_KIND_CROSS);
  r.clear_layers();
  r.add_layers(2);  // the decoder has 3 layers
  *r.mutable_target() = Ids({5, 6, 7});
  out = Checked(ToAttentionRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->kind, AttentionKind::kCross);
  EXPECT_THAT(out->target, ElementsAre(5, 6, 7));

  AttentionResult result;
  result.q_len = 3;
  result.k_len = 3;
  result.maps.push_back(AttentionMap{2, -1, AttentionKind::kCross,
                                     DenseTensor{{3, 3}, std::vector<float>(9, 0.25f)}});
  v1::AttentionResponse response;
  ASSERT_TRUE(FillAttentionResponse(*out, result, v1::DTYPE_FLOAT16, *tokenizer_, &response).ok());
  // Cross attention: rows are the decoder (target), columns the encoder.
  EXPECT_THAT(response.query_token_ids(), ElementsAre(5, 6, 7));
  EXPECT_THAT(response.key_token_ids(), ElementsAre(257, 'a', 'b'));
  EXPECT_THAT(response.key_tokens(), ElementsAre("<bos>", "a", "b"));
  EXPECT_THAT(response.query_tokens(), ElementsAre("<0x05>", "<0x06>", "<0x07>"));
  ASSERT_EQ(response.maps_size(), 1);
  EXPECT_EQ(response.maps(0).kind(), v1::ATTENTION_KIND_CROSS);
  EXPECT_EQ(response.maps(0).head(), -1);
  EXPECT_EQ(response.maps(0).weights().data().size(), 18u);

  r.set_kind(v1::ATTENTION_KIND_UNSPECIFIED);
  r.clear_target();
  r.clear_layers();
  out = Checked(ToAttentionRequest(r, limits_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->kind, AttentionKind::kEncoderSelf);
}

TEST_F(ConvertTest, AttentionRejectsInvalidRequests) {
  v1::AttentionRequest r;
  *r.mutable_input() = Text("ab");
  r.add_layers(2);
  ExpectInvalid(Checked(ToAttentionRequest(r, limits_)), {"layers[0] = 2", "0..1"});
  r.set_layers(0, 1);
  r.add_layers(1);
  ExpectInvalid(Checked(ToAttentionRequest(r, limits_)), {"layers[1] = 1", "repeated"});
  r.clear_layers();
  r.add_heads(4);
  ExpectInvalid(Checked(ToAttentionRequest(r, limits_)), {"heads[0] = 4", "0..3"});
  r.clear_heads();
  r.set_kind(v1::ATTENTION_KIND_CROSS);
  ExpectInvalid(Checked(ToAttentionRequest(r, limits_)),
                {"ATTENTION_KIND_CROSS", "encoder-decoder", "decoder-only"});
  r.set_kind(static_cast<v1::AttentionKind>(11));
  ExpectInvalid(Checked(ToAttentionRequest(r, limits_)), {"kind", "11"});
  r.set_kind(v1::ATTENTION_KIND_SELF);
  *r.mutable_target() = Text("x");
  ExpectInvalid(Checked(ToAttentionRequest(r, limits_)), {"target", "ATTENTION_KIND_SELF"});
  r.clear_target();
  r.set_aggregation(static_cast<v1::HeadAggregation>(5));
  ExpectInvalid(Checked(ToAttentionRequest(r, limits_)), {"aggregation", "5"});

  Use(model::Architecture::kEncoderDecoder);
  v1::AttentionRequest e;
  *e.mutable_input() = Text("ab");
  e.set_kind(v1::ATTENTION_KIND_SELF);
  ExpectInvalid(Checked(ToAttentionRequest(e, limits_)),
                {"ATTENTION_KIND_SELF", "encoder-decoder"});
  e.set_kind(v1::ATTENTION_KIND_DECODER_SELF);
  ExpectInvalid(Checked(ToAttentionRequest(e, limits_)), {"target is required"});
  e.set_kind(v1::ATTENTION_KIND_ENCODER_SELF);
  e.add_layers(2);  // the encoder has 2 layers
  ExpectInvalid(Checked(ToAttentionRequest(e, limits_)), {"layers[0] = 2"});
}

// ---- tensors ----------------------------------------------------------------

TEST_F(ConvertTest, Float32IsPackedLittleEndian) {
  DenseTensor t{{2, 2}, {1.0f, -2.5f, 0.0f, 3.25f}};
  v1::Tensor out;
  ASSERT_TRUE(ToProtoTensor(t, v1::DTYPE_UNSPECIFIED, &out).ok());
  EXPECT_EQ(out.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_THAT(out.shape(), ElementsAre(2, 2));
  ASSERT_EQ(out.data().size(), 16u);
  // 1.0f = 0x3f800000: little-endian bytes 00 00 80 3f.
  EXPECT_EQ(static_cast<uint8_t>(out.data()[2]), 0x80);
  EXPECT_EQ(static_cast<uint8_t>(out.data()[3]), 0x3f);
  float back[4];
  std::memcpy(back, out.data().data(), 16);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_EQ(back[3], 3.25f);

  DenseTensor wrong{{3}, {1.0f}};
  EXPECT_EQ(ToProtoTensor(wrong, v1::DTYPE_FLOAT32, &out).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ToProtoTensor(t, static_cast<v1::DType>(9), &out).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- model info -------------------------------------------------------------

TEST_F(ConvertTest, ModelInfoReportsConfigAndCapabilities) {
  ModelDescription d;
  d.name = "m";
  d.config = Config(model::Architecture::kEncoderOnly);
  d.dtype = "bfloat16";
  d.kv_cache_dtype = "float16";
  d.device = "cpu";
  d.weights_bytes = 1000;
  EngineStats stats;
  stats.kv_blocks_total = 12;
  stats.kv_block_size = 16;
  stats.kv_cache_bytes = 4096;
  v1::ModelInfo info;
  FillModelInfo(d, stats, *tokenizer_, true, &info);
  EXPECT_EQ(info.architecture(), "encoder-only");
  EXPECT_TRUE(info.is_default());
  EXPECT_EQ(info.vocab_size(), 259);
  EXPECT_EQ(info.head_dim(), 2);
  EXPECT_EQ(info.n_kv_heads(), 4);
  EXPECT_EQ(info.kv_blocks(), 12);
  EXPECT_EQ(info.kv_cache_dtype(), "float16");
  EXPECT_EQ(info.tokenizer(), "byte");
  EXPECT_EQ(info.special_tokens().bos(), 257);
  EXPECT_EQ(info.special_tokens().cls(), -1);
  EXPECT_THAT(info.capabilities(), ElementsAre("encode", "attention"));
  EXPECT_EQ(info.cpu_isa(), model::IsaName(model::ActiveIsa()));

  d.config = Config(model::Architecture::kDecoderOnly);
  d.config.eos_token_id = 258;
  d.config.more_eos_token_ids = {5, 9};
  v1::ModelInfo lm;
  FillModelInfo(d, stats, *tokenizer_, false, &lm);
  EXPECT_THAT(lm.capabilities(), ElementsAre("generate", "encode", "attention"));
  EXPECT_EQ(lm.special_tokens().eos(), 258);
  EXPECT_THAT(lm.special_tokens().eos_ids(), ElementsAre(258, 5, 9));
  EXPECT_EQ(lm.norm(), "layernorm");
  EXPECT_EQ(lm.positions(), "learned");
  // Defaults: none said (neutral sampling, no normalizing; a decoder's
  // pooling is its last token's).
  EXPECT_FALSE(lm.default_sampling().has_temperature());
  EXPECT_EQ(lm.default_sampling().top_k(), 0);
  EXPECT_FALSE(lm.default_normalize());
  EXPECT_EQ(lm.default_pooling(), v1::POOLING_LAST);
  // The folder's: generation_config.json's sampling (a top_k of 0 there is
  // off: -1 on the wire), sentence-transformers' pooling and Normalize.
  d.config.sampling_defaults.temperature = 0.7f;
  d.config.sampling_defaults.top_k = 0;
  d.config.default_normalize = true;
  d.config.default_pooling = model::Pooling::kFirst;
  v1::ModelInfo st;
  FillModelInfo(d, stats, *tokenizer_, false, &st);
  EXPECT_FLOAT_EQ(st.default_sampling().temperature(), 0.7f);
  EXPECT_FALSE(st.default_sampling().has_top_p());
  EXPECT_EQ(st.default_sampling().top_k(), -1);
  EXPECT_TRUE(st.default_normalize());
  EXPECT_EQ(st.default_pooling(), v1::POOLING_FIRST);
}

}  // namespace
}  // namespace dikkat::server
