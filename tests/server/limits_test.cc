// Response-size and batch limits applied during request conversion
// (server/convert.h): oversized Encode and Attention answers are refused
// before any work with a message naming the size, the limit and the flag.
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/tokenizer.h"
#include "server/convert.h"

namespace dikkat::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class LimitsTest : public ::testing::Test {
 protected:
  LimitsTest() : tokenizer_(model::MakeByteTokenizer()) {
    config_.architecture = model::Architecture::kDecoderOnly;
    config_.name = "lm";
    config_.vocab_size = 259;
    config_.d_model = 16;
    config_.n_heads = 4;
    config_.n_layers = 3;
    config_.ffn_dim = 32;
    config_.max_positions = 512;
    options_.max_batch_entries = 4;
    limits_ = ModelLimits{&config_, tokenizer_.get(), &options_, 0};
  }

  static v1::EncodeRequest Encode(int inputs, int length, bool hidden) {
    v1::EncodeRequest r;
    for (int i = 0; i < inputs; ++i) {
      r.add_inputs()->mutable_tokens();
      for (int t = 0; t < length; ++t) r.mutable_inputs(i)->mutable_tokens()->add_ids(65);
    }
    r.set_return_hidden_states(hidden);
    return r;
  }

  // Conversion, then the request check the engine runs at Submit: the
  // gRPC path (the stop limits are the engine's check).
  absl::Status ConvertAndCheck(const v1::GenerateRequest& request) const {
    absl::StatusOr<GenerateConversion> c = ToGenerateRequest(request, limits_);
    if (!c.ok()) return c.status();
    return CheckGenerateRequest(c->request, config_, options_);
  }

  model::ModelConfig config_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  EngineOptions options_;
  ModelLimits limits_;
};

TEST_F(LimitsTest, EncodeBatchEntries) {
  EXPECT_TRUE(ToEncodeRequest(Encode(4, 1, false), limits_).ok());
  absl::Status s = ToEncodeRequest(Encode(5, 1, false), limits_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("inputs has 5 entries"), HasSubstr("at most 4"),
                    HasSubstr("--max_batch_entries")));
}

TEST_F(LimitsTest, EncodeResponseBytesMatchTheFilledResponse) {
  // The estimate is what FillEncodeResponse really produces, minus framing.
  const v1::EncodeRequest request = Encode(3, 10, true);
  absl::StatusOr<EncodeRequest> converted = ToEncodeRequest(request, limits_);
  ASSERT_TRUE(converted.ok());
  EncodeResult result;
  for (int i = 0; i < 3; ++i) {
    result.embeddings.push_back(DenseTensor{{16}, std::vector<float>(16, 0.5f)});
    result.hidden_states.push_back(DenseTensor{{10, 16}, std::vector<float>(160, 0.5f)});
  }
  for (v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16}) {
    v1::EncodeResponse response;
    ASSERT_TRUE(FillEncodeResponse(*converted, result, dtype, &response).ok());
    const int64_t estimate = EstimateEncodeResponseBytes(*converted, config_, dtype);
    EXPECT_EQ(estimate, 3 * (16 + 160) * DTypeBytes(dtype) + 30);
    EXPECT_LE(estimate, static_cast<int64_t>(response.ByteSizeLong()));
    EXPECT_GE(estimate, static_cast<int64_t>(response.ByteSizeLong()) * 9 / 10);
  }

  limits_.max_response_bytes = 3 * (16 + 160) * 4;  // just below the float32 answer
  absl::Status s = ToEncodeRequest(request, limits_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("2142 bytes"), HasSubstr("at most 2112"),
                    HasSubstr("--max_response_bytes"), HasSubstr("return_hidden_states")));
  // bfloat16 halves it and fits.
  v1::EncodeRequest half = request;
  half.set_output_dtype(v1::DTYPE_BFLOAT16);
  EXPECT_TRUE(ToEncodeRequest(half, limits_).ok());
}

TEST_F(LimitsTest, AttentionResponseBytes) {
  v1::AttentionRequest request;
  request.mutable_input()->mutable_tokens();
  for (int t = 0; t < 8; ++t) request.mutable_input()->mutable_tokens()->add_ids(66);
  limits_.max_response_bytes = 3 * 4 * 8 * 8 * 4 - 1;  // all layers and heads, float32
  absl::Status s = ToAttentionRequest(request, limits_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("3072 bytes"), HasSubstr("--max_response_bytes"),
                    HasSubstr("aggregate heads")));
  request.add_layers(1);
  absl::StatusOr<AttentionRequest> one_layer = ToAttentionRequest(request, limits_);
  ASSERT_TRUE(one_layer.ok()) << one_layer.status();
  EXPECT_EQ(EstimateAttentionResponseBytes(*one_layer, config_, v1::DTYPE_FLOAT32), 4 * 8 * 8 * 4);
  request.set_aggregation(v1::HEAD_AGGREGATION_MAX);
  one_layer = ToAttentionRequest(request, limits_);
  ASSERT_TRUE(one_layer.ok());
  EXPECT_EQ(EstimateAttentionResponseBytes(*one_layer, config_, v1::DTYPE_FLOAT16), 8 * 8 * 2);
}

// The caller's lists of layers and heads are only checked for range and
// repeats after the estimate: 2^20 of each over 2^20 positions is 2^82 bytes,
// which wrapped around int64 (to 0: "fits"); now it saturates and is refused.
TEST_F(LimitsTest, AttentionResponseEstimateSaturates) {
  AttentionRequest r;
  r.kind = AttentionKind::kSelf;
  r.input.assign(1 << 20, 66);
  r.layers.assign(1 << 20, 0);
  r.heads.assign(1 << 20, 0);
  EXPECT_EQ(EstimateAttentionResponseBytes(r, config_, v1::DTYPE_FLOAT32),
            std::numeric_limits<int64_t>::max());
  limits_.max_response_bytes = 64 << 20;
  const absl::Status s =
      CheckResponseBytes(EstimateAttentionResponseBytes(r, config_, v1::DTYPE_FLOAT32),
                         limits_.max_response_bytes, "the Attention response", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("would be more than 2^63 bytes"));
}

// Token ids past max_positions are refused before they are copied (a message
// of 1-byte ids would otherwise be held several times over, 4 bytes each).
TEST_F(LimitsTest, TokenIdsPastMaxPositionsAreRefusedBeforeTheCopy) {
  v1::EncodeRequest request;
  v1::Input* input = request.add_inputs();
  for (int t = 0; t < 513; ++t) input->mutable_tokens()->add_ids(66);
  absl::Status s = ToEncodeRequest(request, limits_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("inputs[0].tokens.ids has 513 tokens, more than model 'lm'"),
                    HasSubstr("max_positions=512")));
  input->mutable_tokens()->mutable_ids()->RemoveLast();
  EXPECT_TRUE(ToEncodeRequest(request, limits_).ok());
}

// Found by fuzz/request_fuzzer: stop conditions are scanned on the engine
// thread for every generated token, and nothing bounded them (4 M stop ids
// made each token of a tiny model cost 1.6 ms instead of 0.15 ms, 2 M stop
// strings 11 ms). The fuzzer's input: a Generate request with 65 stop ids.
TEST_F(LimitsTest, StopConditionsAreBounded) {
  std::ifstream in(DIKKAT_SOURCE_DIR "/tests/server/data/fuzz_request_many_stop_token_ids.bin",
                   std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream bytes;
  bytes << in.rdbuf();
  v1::GenerateRequest fuzzed;
  // The fuzzer's first byte chose the RPC (Generate) and the model.
  ASSERT_TRUE(fuzzed.ParseFromString(bytes.str().substr(1)));
  ASSERT_EQ(fuzzed.stop_token_ids_size(), 65);
  absl::Status s = ConvertAndCheck(fuzzed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("stop_token_ids has 65 entries"), HasSubstr("at most 32")));

  v1::GenerateRequest request;
  request.mutable_input()->set_text("hello");
  for (int i = 0; i < 32; ++i) request.add_stop_token_ids(i);
  for (int i = 0; i < 16; ++i) request.add_stop(std::string(256, 'a' + i % 26));
  EXPECT_TRUE(ConvertAndCheck(request).ok());
  v1::GenerateRequest more = request;
  more.add_stop("one too many");
  EXPECT_THAT(std::string(ConvertAndCheck(more).message()),
              HasSubstr("stop has 17 strings; at most 16"));
  more = request;
  more.set_stop(3, std::string(257, 'x'));
  EXPECT_THAT(std::string(ConvertAndCheck(more).message()),
              HasSubstr("stop[3] has 257 bytes; at most 256"));
}

// Counts Encode calls of the byte tokenizer it wraps.
class CountingTokenizer final : public model::Tokenizer {
 public:
  CountingTokenizer() : inner_(model::MakeByteTokenizer()) {}
  std::string kind() const override { return inner_->kind(); }
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  const model::SpecialTokens& special_tokens() const override { return inner_->special_tokens(); }
  absl::StatusOr<model::Encoding> Encode(std::string_view text, bool add_special) const override {
    ++encodes_;
    return inner_->Encode(text, add_special);
  }
  std::string Decode(absl::Span<const int32_t> ids, bool skip) const override {
    return inner_->Decode(ids, skip);
  }
  std::string TokenText(int32_t id) const override { return inner_->TokenText(id); }
  bool IsSpecial(int32_t id) const override { return inner_->IsSpecial(id); }
  AddedTokens SpecialTokensAround() const override { return inner_->SpecialTokensAround(); }
  int encodes() const { return encodes_; }

 private:
  std::unique_ptr<model::Tokenizer> inner_;
  mutable int encodes_ = 0;
};

TEST_F(LimitsTest, TextBytesAreRefusedBeforeTokenizing) {
  CountingTokenizer counting;
  ModelLimits limits = limits_;
  limits.tokenizer = &counting;
  // Default: max_positions=512 x 32 bytes per token = 16384 bytes per field.
  EXPECT_EQ(TextByteLimit(limits), 512 * kTextBytesPerToken);
  v1::GenerateRequest generate;
  generate.mutable_input()->set_text(std::string(16385, 'a'));
  absl::Status s = ToGenerateRequest(generate, limits).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("input.text has 16385 bytes"), HasSubstr("at most 16384"),
                    HasSubstr("--max_text_bytes"), HasSubstr("max_positions=512 x 32"),
                    HasSubstr("before tokenizing")));
  EXPECT_EQ(counting.encodes(), 0);

  // The operator's limit, on every text field.
  limits.max_text_bytes = 100;
  v1::EncodeRequest encode;
  encode.add_inputs()->set_text("short");
  encode.add_inputs()->set_text(std::string(101, 'b'));
  s = ToEncodeRequest(encode, limits).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("inputs[1].text has 101 bytes"), HasSubstr("at most 100"),
                    HasSubstr("(--max_text_bytes)")));
  v1::AttentionRequest attention;
  attention.mutable_input()->set_text(std::string(101, 'c'));
  s = ToAttentionRequest(attention, limits).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("input.text has 101 bytes"));
  EXPECT_EQ(counting.encodes(), 1) << "only the short Encode input may be tokenized";
  EXPECT_TRUE(CheckTextBytes(100, "text", limits).ok());
  EXPECT_FALSE(CheckTextBytes(101, "text", limits).ok());
}

// The lists' counts are checked on the message, before the prompt is
// tokenized or the entries copied and sorted (a 64 MB message holds ~9M
// logit_bias entries: seconds of a gRPC thread before the refusal).
TEST_F(LimitsTest, ListCountsAreRefusedBeforeAnyWork) {
  CountingTokenizer counting;
  ModelLimits limits = limits_;
  limits.tokenizer = &counting;
  v1::GenerateRequest bias;
  bias.mutable_input()->set_text("hello");
  for (int i = 0; i < 301; ++i) (*bias.mutable_sampling()->mutable_logit_bias())[i] = 1.0f;
  absl::Status s = ToGenerateRequest(bias, limits).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("logit_bias has 301 entries; at most 300"));
  v1::GenerateRequest stops;
  stops.mutable_input()->set_text("hello");
  for (int i = 0; i < 17; ++i) stops.add_stop("s");
  s = ToGenerateRequest(stops, limits).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("stop has 17 strings; at most 16"));
  v1::GenerateRequest ids;
  ids.mutable_input()->set_text("hello");
  for (int i = 0; i < 33; ++i) ids.add_stop_token_ids(i);
  s = ToGenerateRequest(ids, limits).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("stop_token_ids has 33 entries; at most 32"));
  EXPECT_EQ(counting.encodes(), 0);
}

}  // namespace
}  // namespace dikkat::server
