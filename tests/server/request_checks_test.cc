// The one request check over the engine's structs: what every caller of the
// engine (the gRPC service after conversion, or code building the structs)
// is refused, and how the message names field, value and what is allowed.
#include "server/request_checks.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dikkat::server {
namespace {

using ::testing::HasSubstr;

model::ModelConfig Config(model::Architecture arch) {
  model::ModelConfig c;
  c.architecture = arch;
  c.name = "m";
  c.vocab_size = 259;
  c.d_model = 8;
  c.n_heads = 4;
  if (arch == model::Architecture::kEncoderDecoder) {
    c.n_encoder_layers = 2;
    c.n_decoder_layers = 3;
  } else {
    c.n_layers = 2;
  }
  c.max_positions = 16;
  return c;
}

void ExpectInvalid(const absl::Status& status, std::initializer_list<std::string> parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& p : parts) EXPECT_THAT(std::string(status.message()), HasSubstr(p));
}

class RequestChecksTest : public ::testing::Test {
 protected:
  RequestChecksTest() {
    options_.max_new_tokens_cap = 50;
    options_.default_max_new_tokens = 9;
    options_.max_batch_entries = 3;
  }
  static GenerateRequest Prompt(size_t n) {
    GenerateRequest r;
    r.prompt.assign(n, 'a');
    return r;
  }

  model::ModelConfig lm_ = Config(model::Architecture::kDecoderOnly);
  model::ModelConfig s2s_ = Config(model::Architecture::kEncoderDecoder);
  model::ModelConfig enc_ = Config(model::Architecture::kEncoderOnly);
  EngineOptions options_;
};

TEST_F(RequestChecksTest, TokenIdsAndLengthsNameTheField) {
  // Moved from convert_test (InputToIds checked these before).
  ExpectInvalid(ValidateTokenIds({1, 259}, "input", 259), {"input[1] = 259", "0..258"});
  ExpectInvalid(ValidateTokenIds({-1}, "target", 259), {"target[0] = -1"});
  AttentionRequest attention;
  attention.input.assign(17, 'a');
  ExpectInvalid(CheckAttentionRequest(attention, lm_, options_),
                {"input has 17 tokens", "max_positions=16"});
}

TEST_F(RequestChecksTest, GenerateNeedsRoomToGenerate) {
  EXPECT_TRUE(CheckGenerateRequest(Prompt(15), lm_, options_).ok());
  ExpectInvalid(CheckGenerateRequest(Prompt(16), lm_, options_),
                {"input has 16 tokens", "no room", "context", "max_positions=16"});
  // Encoder-decoder: the decoder start token takes a position too.
  GenerateRequest s2s = Prompt(15);
  s2s.source = {'x'};
  ExpectInvalid(CheckGenerateRequest(s2s, s2s_, options_), {"decoder_prefix has 15 tokens"});
  s2s.prompt.pop_back();
  EXPECT_TRUE(CheckGenerateRequest(s2s, s2s_, options_).ok());
  ExpectInvalid(CheckGenerateRequest(Prompt(3), enc_, options_),
                {"encoder-only", "cannot generate"});
}

TEST_F(RequestChecksTest, GenerateLimitsSamplingAndStops) {
  GenerateRequest r = Prompt(3);
  r.max_new_tokens = 0;  // the server default
  EXPECT_TRUE(CheckGenerateRequest(r, lm_, options_).ok());
  r.max_new_tokens = 51;
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"max_new_tokens = 51", "1..50"});
  r.max_new_tokens = -3;
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"max_new_tokens = -3"});
  ExpectInvalid(CheckMaxNewTokens(0, options_), {"max_new_tokens = 0", "unset for the default 9"});

  r = Prompt(3);
  r.sampling.top_p = 0;
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"sampling", "top_p"});

  r = Prompt(3);
  r.priority = 100;
  EXPECT_TRUE(CheckGenerateRequest(r, lm_, options_).ok());
  r.priority = -101;
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"priority = -101", "-100..100"});

  r = Prompt(3);
  r.stop_strings = {"ok", ""};
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"stop[1]", "empty"});
  r.stop_strings = {"\xff"};
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"stop[0]", "UTF-8"});
  r.stop_strings = {std::string(options_.max_stop_string_bytes + 1, 'x')};
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"stop[0] has 257 bytes", "at most 256"});
  r.stop_strings.clear();
  r.stop_token_ids = {259};
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"stop_token_ids[0] = 259"});
  r.stop_token_ids.assign(options_.max_stop_token_ids + 1, 1);
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_),
                {"stop_token_ids has 33 entries", "at most 32"});

  r = Prompt(3);
  r.sampling.logit_bias = {{0, -100.0f}, {258, 100.0f}};
  EXPECT_TRUE(CheckGenerateRequest(r, lm_, options_).ok());
  r.sampling.logit_bias = {{259, 1.0f}};
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_),
                {"logit_bias: token id 259 is not in the vocabulary", "0..258"});
  r.sampling.logit_bias = {{4, 1.0f}, {4, 2.0f}};
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"token id 4 is listed twice"});
  r.sampling.logit_bias = {{4, 1.0f}};
  r.beam_width = 2;
  ExpectInvalid(CheckGenerateRequest(r, lm_, options_), {"logit_bias", "beam search"});
}

TEST_F(RequestChecksTest, EncodeBatchInputsTypeIdsAndLayer) {
  EncodeRequest r;
  ExpectInvalid(CheckEncodeRequest(r, enc_, options_), {"inputs is empty"});
  r.inputs = {{1, 2}, {3}};
  EXPECT_TRUE(CheckEncodeRequest(r, enc_, options_).ok());
  r.inputs.push_back({});
  ExpectInvalid(CheckEncodeRequest(r, enc_, options_), {"inputs[2] is empty"});
  r.inputs.push_back({1});
  ExpectInvalid(CheckEncodeRequest(r, enc_, options_),
                {"inputs has 4 entries", "at most 3", "--max_batch_entries"});
  r.inputs = {{1, 2}, {3}};
  r.type_ids = {{0, 0}};
  ExpectInvalid(CheckEncodeRequest(r, enc_, options_), {"type_ids has 1 lists for 2 inputs"});
  r.type_ids = {{0, 0}, {0, 0}};
  ExpectInvalid(CheckEncodeRequest(r, enc_, options_), {"type_ids[1] has 2 entries for 1 tokens"});
  r.type_ids.clear();
  r.hidden_layer = 3;
  ExpectInvalid(CheckEncodeRequest(r, enc_, options_), {"hidden_layer = 3", "1..2"});
  r.hidden_layer = 2;
  EXPECT_TRUE(CheckEncodeRequest(r, enc_, options_).ok());
}

TEST_F(RequestChecksTest, AttentionKindTargetIndicesAndSize) {
  AttentionRequest r;
  r.input = {1, 2, 3};
  r.kind = AttentionKind::kCross;
  ExpectInvalid(CheckAttentionRequest(r, lm_, options_),
                {"kind", "ATTENTION_KIND_CROSS", "encoder-decoder", "model 'm'"});
  ExpectInvalid(CheckAttentionRequest(r, s2s_, options_), {"target is required"});
  r.target = {4};
  EXPECT_TRUE(CheckAttentionRequest(r, s2s_, options_).ok());
  r.kind = AttentionKind::kEncoderSelf;
  ExpectInvalid(CheckAttentionRequest(r, s2s_, options_), {"target is only used with"});
  r.target.clear();
  r.kind = AttentionKind::kSelf;
  ExpectInvalid(CheckAttentionRequest(r, s2s_, options_), {"ATTENTION_KIND_SELF"});

  r.layers = {1, 1};
  ExpectInvalid(CheckAttentionRequest(r, lm_, options_), {"layers[1] = 1", "repeated"});
  r.layers = {2};
  ExpectInvalid(CheckAttentionRequest(r, lm_, options_), {"layers[0] = 2", "0..1"});
  r.layers.clear();
  r.heads = {4};
  ExpectInvalid(CheckAttentionRequest(r, lm_, options_), {"heads[0] = 4", "0..3"});
  r.heads.clear();
  // 2 layers x 4 heads x 3 x 3 = 72 values.
  r.max_values = 71;
  ExpectInvalid(CheckAttentionRequest(r, lm_, options_),
                {"72 attention weights", "the limit is 71"});
  r.aggregation = HeadAggregation::kMean;  // 18 values
  EXPECT_TRUE(CheckAttentionRequest(r, lm_, options_).ok());
  // The mean of one head still computes all 4 heads of a layer (36 values):
  // bounded by the server's limit, not the response's size.
  r.max_values = 0;
  r.layers = {0};
  r.heads = {0};
  options_.max_attention_values = 35;
  ExpectInvalid(CheckAttentionRequest(r, lm_, options_),
                {"holds 36 values (all 4 heads x 3 x 3", "limit is 35", "--max_attention_values"});
  options_.max_attention_values = 36;
  EXPECT_TRUE(CheckAttentionRequest(r, lm_, options_).ok());
}

}  // namespace
}  // namespace dikkat::server
