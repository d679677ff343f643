// DikkatService over a real in-process gRPC server (127.0.0.1:0) with a
// FakeEngine test double behind it: streaming, merging and finishing of
// Generate, client cancel and deadline reaching the engine, status mapping
// (with the retry hint), and the unary RPCs.
#include "server/service.h"

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "fake_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/status_util.h"

namespace dikkat::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FakeEngine;
using testing::TextChunk;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto lm = std::make_unique<FakeEngine>("lm", model::Architecture::kDecoderOnly);
    auto enc = std::make_unique<FakeEngine>("enc", model::Architecture::kEncoderOnly);
    lm_ = lm.get();
    enc_ = enc.get();
    ASSERT_TRUE(registry_.Add("lm", std::move(lm)).ok());
    ASSERT_TRUE(registry_.Add("enc", std::move(enc)).ok());
    metrics_ = std::make_unique<Metrics>("test");
    metrics_->AddModel("lm");
    metrics_->AddModel("enc");
    service_ =
        std::make_unique<DikkatService>(&registry_, metrics_.get(), "test-version", options_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::Dikkat::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    registry_.ShutdownAll(absl::ZeroDuration());
  }

  static v1::GenerateRequest Prompt(const std::string& text) {
    v1::GenerateRequest r;
    r.mutable_input()->set_text(text);
    return r;
  }

  struct StreamResult {
    std::vector<v1::GenerateResponse> messages;
    grpc::Status status;
    std::multimap<grpc::string_ref, grpc::string_ref> trailers;
  };

  StreamResult ReadAll(const v1::GenerateRequest& request, grpc::ClientContext* context) {
    StreamResult out;
    auto reader = stub_->Generate(context, request);
    v1::GenerateResponse message;
    while (reader->Read(&message)) out.messages.push_back(message);
    out.status = reader->Finish();
    out.trailers = context->GetServerTrailingMetadata();
    return out;
  }

  std::string Text(const StreamResult& r) {
    std::string text;
    for (const auto& m : r.messages) text += m.text();
    return text;
  }

  std::string Scrape() { return metrics_->Scrape(); }
  // Metrics recorded after the status reached the client (the reactor's
  // end runs on a gRPC thread): polls for up to 5 s instead of sleeping a
  // fixed time that a loaded machine may overrun.
  std::string ScrapeUntilContains(const std::string& needle) {
    std::string text = Scrape();
    for (int i = 0; i < 500 && text.find(needle) == std::string::npos; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
      text = Scrape();
    }
    return text;
  }

  ServiceOptions options_;  // set before SetUp by fixtures that need other limits
  ModelRegistry registry_;
  FakeEngine* lm_ = nullptr;
  FakeEngine* enc_ = nullptr;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<DikkatService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Dikkat::Stub> stub_;
};

TEST_F(ServiceTest, GenerateStreamsChunksThenTheFinishMessage) {
  lm_->set_script({{TextChunk("he"), TextChunk("ll"), TextChunk("o")},
                   absl::Milliseconds(30), FinishReason::kEos, {}});
  v1::GenerateRequest request = Prompt("abc");
  request.set_echo_prompt_tokens(true);
  grpc::ClientContext context;
  StreamResult r = ReadAll(request, &context);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(Text(r), "hello");
  ASSERT_GE(r.messages.size(), 2u);
  // Chunks 30 ms apart arrive as separate messages.
  EXPECT_GE(r.messages.size(), 3u);
  EXPECT_THAT(r.messages.front().prompt_token_ids(), ElementsAre('a', 'b', 'c'));
  for (size_t i = 1; i < r.messages.size(); ++i) {
    EXPECT_EQ(r.messages[i].prompt_token_ids_size(), 0);
  }
  std::vector<int32_t> ids;
  for (const auto& m : r.messages) {
    for (const auto& t : m.tokens()) ids.push_back(t.id());
  }
  EXPECT_THAT(ids, ElementsAre('h', 'e', 'l', 'l', 'o'));
  for (size_t i = 0; i + 1 < r.messages.size(); ++i) {
    EXPECT_EQ(r.messages[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  }
  const v1::GenerateResponse& last = r.messages.back();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_EOS);
  EXPECT_EQ(last.stats().generated_tokens(), 5);
  EXPECT_EQ(last.stats().seed(), 42u);
  // No logprobs unless asked for.
  EXPECT_EQ(r.messages.front().tokens(0).top_logprobs_size(), 0);

  // What reached the engine.
  std::optional<GenerateRequest> submitted = lm_->last_generate();
  ASSERT_TRUE(submitted.has_value());
  EXPECT_THAT(submitted->prompt, ElementsAre('a', 'b', 'c'));
  EXPECT_EQ(submitted->max_new_tokens, 7);  // the engine's default_max_new_tokens
  EXPECT_EQ(submitted->deadline, absl::InfiniteFuture());
  EXPECT_THAT(Scrape(), HasSubstr("dikkat_requests_total{code=\"OK\",model=\"lm\",rpc=\"Generate\"} 1"));
}

TEST_F(ServiceTest, GenerateWithLogprobsAndAnImmediateFinish) {
  lm_->set_script({{TextChunk("x")}, absl::ZeroDuration(), FinishReason::kLength, {}});
  v1::GenerateRequest request = Prompt("abc");
  request.set_top_logprobs(2);
  grpc::ClientContext context;
  StreamResult r = ReadAll(request, &context);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_FALSE(r.messages.empty());
  EXPECT_EQ(r.messages.back().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(Text(r), "x");
  const v1::GeneratedToken& token = r.messages.front().tokens(0);
  EXPECT_FLOAT_EQ(token.logprob(), -0.5f);
  ASSERT_EQ(token.top_logprobs_size(), 2);
  EXPECT_EQ(token.top_logprobs(1).text(), "?");
}

// The engine thread only hands results over; the responses (here: token
// text for logprob alternatives and attention axis labels) are built on gRPC
// threads, so packing a large response never stalls the engine's batch.
// (Only a first message of tokens and text alone is started on the engine
// thread: service.cc, OnEngineChunk.)
TEST_F(ServiceTest, ResponsesAreBuiltOffTheEngineThread) {
  lm_->set_script({{TextChunk("ab"), TextChunk("c")}, absl::Milliseconds(1),
                   FinishReason::kLength, {}});
  v1::GenerateRequest request = Prompt("abc");
  request.set_top_logprobs(2);
  grpc::ClientContext c1;
  StreamResult r = ReadAll(request, &c1);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(Text(r), "abc");

  v1::AttentionRequest attention;
  attention.mutable_input()->set_text("hi");
  attention.add_layers(0);
  v1::AttentionResponse response;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->Attention(&c2, attention, &response).ok());
  EXPECT_THAT(response.query_tokens(), ElementsAre("<bos>", "h", "i"));

  EXPECT_GT(lm_->noting_tokenizer().token_text_calls(), 0);
  EXPECT_EQ(lm_->noting_tokenizer().token_text_calls_on_engine_thread(), 0);
}

TEST_F(ServiceTest, ClientCancelCancelsTheEngineRequest) {
  std::vector<GeneratedChunk> many(200, TextChunk("a"));
  lm_->set_script({many, absl::Milliseconds(20), FinishReason::kLength, {}});
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, Prompt("abc"));
  v1::GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_TRUE(reader->Read(&message));
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(lm_->WaitCancelled(lm_->last_id(), absl::Seconds(5)));
  EXPECT_TRUE(lm_->WaitIdle(absl::Seconds(5)));
}

TEST_F(ServiceTest, DeadlineReachesTheEngineAndEndsTheStream) {
  std::vector<GeneratedChunk> many(200, TextChunk("a"));
  lm_->set_script({many, absl::Milliseconds(20), FinishReason::kLength, {}});
  grpc::ClientContext context;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(300);
  context.set_deadline(deadline);
  StreamResult r = ReadAll(Prompt("abc"), &context);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_FALSE(r.messages.empty());  // tokens before the deadline were delivered
  std::optional<GenerateRequest> submitted = lm_->last_generate();
  ASSERT_TRUE(submitted.has_value());
  // The call's deadline travels into the engine request (gRPC sends it as a
  // timeout and re-anchors it on arrival: a few ms of skew on a busy machine).
  EXPECT_LT(absl::AbsDuration(submitted->deadline - absl::FromChrono(deadline)),
            absl::Milliseconds(50));
  // The engine request ends (by its deadline or the cancel) instead of
  // generating all 200 chunks.
  EXPECT_TRUE(lm_->WaitIdle(absl::Seconds(2)));
  // Recorded as a deadline failure, not a cancel.
  const std::string failure = "dikkat_request_failures_total{model=\"lm\",reason=\"deadline\"} 1";
  EXPECT_THAT(ScrapeUntilContains(failure), HasSubstr(failure));
}

TEST_F(ServiceTest, DeadlineCancelsAnEngineThatIgnoresIt) {
  // The engine does not watch the deadline here (infinite in its view);
  // gRPC's deadline must still cancel the engine request via OnCancel.
  std::vector<GeneratedChunk> many(200, TextChunk("a"));
  lm_->set_script({many, absl::Milliseconds(20), FinishReason::kLength, {}});
  lm_->set_ignore_deadlines(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  auto reader = stub_->Generate(&context, Prompt("abc"));
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(lm_->WaitCancelled(lm_->last_id(), absl::Seconds(2)));
  EXPECT_TRUE(lm_->WaitIdle(absl::Seconds(2)));
}

TEST_F(ServiceTest, OverloadMapsToResourceExhaustedWithRetryHint) {
  absl::Status full = absl::ResourceExhaustedError("queue full: 256 waiting (max_queue)");
  SetRetryAfterMs(full, 750);
  lm_->set_submit_error(full);
  grpc::ClientContext context;
  StreamResult r = ReadAll(Prompt("abc"), &context);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("queue full"));
  auto it = r.trailers.find("retry-after-ms");
  ASSERT_NE(it, r.trailers.end());
  EXPECT_EQ(std::string(it->second.data(), it->second.size()), "750");
  EXPECT_TRUE(r.messages.empty());

  lm_->set_submit_error(absl::UnavailableError("shutting down"));
  grpc::ClientContext context2;
  EXPECT_EQ(ReadAll(Prompt("abc"), &context2).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(Scrape(), HasSubstr("dikkat_request_failures_total{model=\"lm\",reason=\"overloaded\"} 2"));
}

// Invalid values are refused by the engine's Submit check, before anything
// is queued (the fake engine checks like the real one and counts only what
// it accepted).
TEST_F(ServiceTest, InvalidRequestsAreNeverQueued) {
  v1::GenerateRequest request;
  request.set_model("lm");
  request.mutable_input()->mutable_tokens()->add_ids(1);
  request.mutable_input()->mutable_tokens()->add_ids(5000);
  grpc::ClientContext c1;
  StreamResult r = ReadAll(request, &c1);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("input[1] = 5000"));

  request.set_model("gpt-7");
  grpc::ClientContext c2;
  r = ReadAll(request, &c2);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(r.status.error_message(), HasSubstr("hosted: lm, enc"));

  grpc::ClientContext c3;
  v1::GenerateRequest to_encoder = Prompt("abc");
  to_encoder.set_model("enc");
  r = ReadAll(to_encoder, &c3);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("encoder-only"));

  EXPECT_EQ(lm_->submits(), 0);
  EXPECT_EQ(enc_->submits(), 0);
}

TEST_F(ServiceTest, EngineErrorAfterChunksEndsWithThatStatus) {
  lm_->set_script({{TextChunk("ab")}, absl::Milliseconds(1), FinishReason::kError,
                   absl::InternalError("forward failed: out of memory")});
  grpc::ClientContext context;
  StreamResult r = ReadAll(Prompt("abc"), &context);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(r.status.error_message(), HasSubstr("out of memory"));
  EXPECT_EQ(Text(r), "ab");
  for (const auto& m : r.messages) EXPECT_EQ(m.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
}

TEST_F(ServiceTest, ServerSideCancelWhileDrainingIsUnavailable) {
  std::vector<GeneratedChunk> many(200, TextChunk("a"));
  lm_->set_script({many, absl::Milliseconds(20), FinishReason::kLength, {}});
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, Prompt("abc"));
  v1::GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  lm_->Cancel(lm_->last_id());  // what Engine::Shutdown does after the grace period
  v1::GenerateResponse last;
  while (reader->Read(&message)) last = message;
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_CANCELLED);
}

TEST_F(ServiceTest, ManyConcurrentStreams) {
  lm_->set_script({{TextChunk("a"), TextChunk("b"), TextChunk("c")}, absl::Milliseconds(2),
                   FinishReason::kEos, {}});
  constexpr int kCalls = 16;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&] {
      grpc::ClientContext context;
      StreamResult r = ReadAll(Prompt("abc"), &context);
      if (r.status.ok() && Text(r) == "abc" &&
          r.messages.back().finish_reason() == v1::FINISH_REASON_EOS) {
        ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kCalls);
}

TEST_F(ServiceTest, EncodeReturnsPackedTensorsAndIds) {
  v1::EncodeRequest request;
  request.set_model("enc");
  request.add_inputs()->set_text("ab");
  request.add_inputs()->mutable_tokens()->add_ids(9);
  request.set_return_hidden_states(true);
  request.set_output_dtype(v1::DTYPE_FLOAT16);
  v1::EncodeResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->Encode(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model(), "enc");
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_THAT(response.results(0).token_ids(), ElementsAre(257, 'a', 'b'));
  EXPECT_THAT(response.results(1).token_ids(), ElementsAre(9));
  const v1::Tensor& e = response.results(0).embedding();
  EXPECT_EQ(e.dtype(), v1::DTYPE_FLOAT16);
  EXPECT_THAT(e.shape(), ElementsAre(8));
  ASSERT_EQ(e.data().size(), 16u);
  // The fake puts the first id (257) in value 0: float16 0x5C04, little-endian.
  EXPECT_EQ(static_cast<uint8_t>(e.data()[0]), 0x04);
  EXPECT_EQ(static_cast<uint8_t>(e.data()[1]), 0x5C);
  EXPECT_THAT(response.results(0).hidden_states().shape(), ElementsAre(3, 8));
  EXPECT_EQ(response.prompt_tokens(), 4);
  EXPECT_THAT(Scrape(), HasSubstr("dikkat_prompt_tokens_total{model=\"enc\"} 4"));

  v1::EncodeRequest empty;
  v1::EncodeResponse ignored;
  grpc::ClientContext c2;
  status = stub_->Encode(&c2, empty, &ignored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("inputs is empty"));
}

TEST_F(ServiceTest, AttentionLabelsAxesWithTokenText) {
  v1::AttentionRequest request;
  request.mutable_input()->set_text("hi");
  request.add_layers(1);
  request.set_aggregation(v1::HEAD_AGGREGATION_MEAN);
  v1::AttentionResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->Attention(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model(), "lm");
  EXPECT_THAT(response.query_tokens(), ElementsAre("<bos>", "h", "i"));
  EXPECT_THAT(response.key_token_ids(), ElementsAre(257, 'h', 'i'));
  ASSERT_EQ(response.maps_size(), 1);
  EXPECT_EQ(response.maps(0).layer(), 1);
  EXPECT_THAT(response.maps(0).weights().shape(), ElementsAre(3, 3));

  request.set_kind(v1::ATTENTION_KIND_CROSS);
  grpc::ClientContext c2;
  status = stub_->Attention(&c2, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ATTENTION_KIND_CROSS"));
}

TEST_F(ServiceTest, ModelInfoTokenizeDetokenize) {
  v1::GetModelInfoResponse info;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->GetModelInfo(&c1, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.server_version(), "test-version");
  ASSERT_EQ(info.models_size(), 2);
  EXPECT_EQ(info.models(0).name(), "lm");
  EXPECT_TRUE(info.models(0).is_default());
  EXPECT_FALSE(info.models(1).is_default());
  EXPECT_THAT(info.models(1).capabilities(), ElementsAre("encode", "attention"));

  v1::GetModelInfoRequest one;
  one.set_model("enc");
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->GetModelInfo(&c2, one, &info).ok());
  ASSERT_EQ(info.models_size(), 1);
  EXPECT_EQ(info.models(0).architecture(), "encoder-only");
  one.set_model("nope");
  grpc::ClientContext c3;
  EXPECT_EQ(stub_->GetModelInfo(&c3, one, &info).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::TokenizeRequest tok;
  tok.set_text("a\n");
  tok.set_add_special_tokens(true);
  v1::TokenizeResponse tokens;
  grpc::ClientContext c4;
  ASSERT_TRUE(stub_->Tokenize(&c4, tok, &tokens).ok());
  EXPECT_THAT(tokens.ids(), ElementsAre(257, 'a', '\n'));
  EXPECT_THAT(tokens.tokens(), ElementsAre("<bos>", "a", "<0x0A>"));
  // (Invalid UTF-8 never gets this far: protobuf rejects it in string fields.)
  tok.set_model("nope");
  grpc::ClientContext c5;
  grpc::Status bad = stub_->Tokenize(&c5, tok, &tokens);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::NOT_FOUND);

  v1::DetokenizeRequest detok;
  for (int32_t id : {257, int32_t{'o'}, int32_t{'k'}}) detok.add_ids(id);
  detok.set_skip_special_tokens(true);
  v1::DetokenizeResponse text;
  grpc::ClientContext c6;
  ASSERT_TRUE(stub_->Detokenize(&c6, detok, &text).ok());
  EXPECT_EQ(text.text(), "ok");
  detok.add_ids(-4);
  grpc::ClientContext c7;
  bad = stub_->Detokenize(&c7, detok, &text);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("ids[3] = -4"));
}

// Detokenize's text is bounded before it is built: ids that would decode past
// --max_response_bytes are refused after a piece of the text, not the whole.
class DetokenizeLimitTest : public ServiceTest {
 protected:
  DetokenizeLimitTest() { options_.max_response_bytes = 20000; }

  grpc::Status Detokenize(int32_t id, int count, bool skip, std::string* text) {
    v1::DetokenizeRequest r;
    for (int i = 0; i < count; ++i) r.add_ids(id);
    r.set_skip_special_tokens(skip);
    v1::DetokenizeResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub_->Detokenize(&context, r, &response);
    *text = response.text();
    return status;
  }
};

TEST_F(DetokenizeLimitTest, TextPastTheLimitIsRefusedBeforeItIsBuilt) {
  std::string text;
  // 12000 one-byte tokens (three pieces of 4096 ids): within the limit.
  ASSERT_TRUE(Detokenize('a', 12000, false, &text).ok());
  EXPECT_EQ(text, std::string(12000, 'a'));
  // "<bos>" is 5 bytes: 1,000,000 of them would be 5 MB of text. Refused
  // after the first piece (4096 x 5 bytes > 20000 + 16).
  grpc::Status status = Detokenize(257, 1000000, false, &text);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr("the Detokenize response would be larger than 20000 bytes"),
                    HasSubstr("the first 4096 of 1000000 ids"), HasSubstr("--max_response_bytes")));
  // The same ids with special tokens skipped decode to nothing: allowed.
  ASSERT_TRUE(Detokenize(257, 1000000, true, &text).ok());
  EXPECT_EQ(text, "");
  // Just past the limit, within the pieces' allowance: the built message is
  // checked exactly.
  status = Detokenize('a', 20010, false, &text);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("the Detokenize response would be at least"));
  // A bad id anywhere is named by its index, before any decoding.
  v1::DetokenizeRequest bad;
  for (int i = 0; i < 9000; ++i) bad.add_ids('a');
  bad.set_ids(8999, -1);
  v1::DetokenizeResponse response;
  grpc::ClientContext context;
  status = stub_->Detokenize(&context, bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ids[8999] = -1"));
}

TEST_F(ServiceTest, TextIsBoundedBeforeTokenizing) {
  // The fake model has max_positions=32: by default 32 x 32 = 1024 bytes of
  // text per field. Past it, Tokenize and Generate refuse without running
  // the tokenizer (Tokenize used to take anything up to the message limit
  // and tokenize it on the gRPC thread; Generate refused only after).
  const int64_t encodes = lm_->noting_tokenizer().encode_calls();
  v1::TokenizeRequest tok;
  tok.set_text(std::string(1025, 'x'));
  v1::TokenizeResponse tokens;
  grpc::ClientContext c1;
  grpc::Status s = stub_->Tokenize(&c1, tok, &tokens);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("text has 1025 bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("at most 1024 bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("--max_text_bytes"));
  EXPECT_EQ(tokens.ids_size(), 0);

  grpc::ClientContext c2;
  const StreamResult r = ReadAll(Prompt(std::string(1025, 'y')), &c2);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("input.text has 1025 bytes"));
  EXPECT_EQ(lm_->noting_tokenizer().encode_calls(), encodes) << "tokenized before refusing";
  EXPECT_EQ(lm_->submits(), 0);

  // At the limit, Tokenize works (and may return more ids than a model input takes).
  tok.set_text(std::string(1024, 'x'));
  grpc::ClientContext c3;
  ASSERT_TRUE(stub_->Tokenize(&c3, tok, &tokens).ok());
  EXPECT_EQ(tokens.ids_size(), 1024);
}

// Issue "Hardening II" item 6: a client that stops reading left its stream's
// output piling up in the server (one write in flight, the rest merged into
// the next message) for as long as the generation ran, with no bound on how
// many such streams there were. Now a stream past its bound (or the stream
// that would take all streams' output past the server's) is cut: the
// generation is cancelled, the call ends, and the held bytes are released.
class SlowReaderTest : public ServiceTest {
 protected:
  SlowReaderTest() {
    options_.max_stream_pending_bytes = 256 << 10;
    options_.max_pending_bytes = 0;
  }

  // Starts a long generation, reads one message and then stops reading.
  struct Stalled {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  };
  std::unique_ptr<Stalled> Stall() {
    auto s = std::make_unique<Stalled>();
    s->reader = stub_->Generate(&s->context, Prompt("abc"));
    v1::GenerateResponse first;
    EXPECT_TRUE(s->reader->Read(&first));
    return s;
  }

  static FakeEngine::GenerateScript Endless() {
    // ~3.6 KB held per chunk (64 tokens with 2 alternatives each): 30000 of
    // them are ~100 MB, far past any bound under test and any transport window.
    return {std::vector<GeneratedChunk>(30000, TextChunk(std::string(64, 'z'))),
            absl::Microseconds(50), FinishReason::kLength, {}};
  }
};

TEST_F(SlowReaderTest, AStreamThatIsNotReadIsCutAtItsBound) {
  lm_->set_script(Endless());
  std::unique_ptr<Stalled> stalled = Stall();
  // The server cancels the generation on its own: the client never cancels.
  ASSERT_TRUE(lm_->WaitCancelled(lm_->last_id(), absl::Seconds(60)));
  v1::GenerateResponse message;
  while (stalled->reader->Read(&message)) {
  }
  EXPECT_EQ(stalled->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const std::string text = ScrapeUntilContains("code=\"RESOURCE_EXHAUSTED\"");
  EXPECT_THAT(text, HasSubstr("code=\"RESOURCE_EXHAUSTED\""));
  EXPECT_TRUE(lm_->WaitIdle(absl::Seconds(5)));
  for (int i = 0; i < 500 && service_->pending_bytes() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(service_->pending_bytes(), 0);
}

// Output the engine held back to the end (the best of best_of samples, the
// final beams: GeneratedChunk::held) comes in one burst, here 4 chunks of
// ~0.4 MB each (8192 tokens with 2 alternatives) against a bound of 256 KiB:
// a client that reads gets all of it. It used to cut the call (CANCELLED
// after all the compute was done).
TEST_F(SlowReaderTest, HeldOutputReleasedAtTheEndIsNotCut) {
  GeneratedChunk chunk = TextChunk(std::string(8192, 'z'));
  chunk.held = true;
  lm_->set_script({std::vector<GeneratedChunk>(4, chunk), absl::ZeroDuration(),
                   FinishReason::kLength, {}});
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, Prompt("abc"));
  v1::GenerateResponse message;
  std::string text;
  while (reader->Read(&message)) text += message.text();
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(text.size(), 4u * 8192u);  // (not the text itself: 32 KiB in a failure message)
  EXPECT_EQ(text.find_first_not_of('z'), std::string::npos);
  for (int i = 0; i < 500 && service_->pending_bytes() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(service_->pending_bytes(), 0);
}

class SlowReadersTogetherTest : public SlowReaderTest {
 protected:
  SlowReadersTogetherTest() {
    options_.max_stream_pending_bytes = 0;
    options_.max_pending_bytes = 1 << 20;
  }
};

TEST_F(SlowReadersTogetherTest, StreamsThatAreNotReadShareOneServerBound) {
  lm_->set_script(Endless());
  // Streams with no bound of their own: the server-wide one cuts them.
  std::vector<std::unique_ptr<Stalled>> stalled;
  std::vector<RequestId> ids;
  for (int i = 0; i < 3; ++i) {
    stalled.push_back(Stall());
    ids.push_back(lm_->last_id());
  }
  // Every one is cut before any is read again.
  for (RequestId id : ids) ASSERT_TRUE(lm_->WaitCancelled(id, absl::Seconds(60)));
  for (auto& s : stalled) {
    v1::GenerateResponse message;
    while (s->reader->Read(&message)) {
    }
    EXPECT_EQ(s->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(lm_->WaitIdle(absl::Seconds(10)));
  for (int i = 0; i < 500 && service_->pending_bytes() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(service_->pending_bytes(), 0);
}

// Engine's default SubmitGenerateAll (what an Engine other than
// EngineImpl gets): the requests one by one, those before a refused one
// cancelled, the refusal returned.
TEST(EngineDefaultTest, SubmitGenerateAllCancelsThoseBeforeARefusal) {
  class Quiet final : public GenerateObserver {
    void OnChunk(GeneratedChunk) override {}
    void OnFinish(GenerateSummary) override {}
  };
  FakeEngine engine("lm", model::Architecture::kDecoderOnly);
  engine.set_ignore_deadlines(true);
  FakeEngine::GenerateScript slow;
  slow.chunks.resize(1000);
  slow.interval = absl::Milliseconds(5);
  engine.set_script(slow);
  GenerateRequest ok;
  ok.prompt = {1, 2, 3};
  GenerateRequest bad;  // no prompt
  absl::StatusOr<std::vector<RequestId>> refused = engine.SubmitGenerateAll(
      {ok, bad}, {std::make_shared<Quiet>(), std::make_shared<Quiet>()});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_TRUE(engine.WaitCancelled(engine.last_id(), absl::Seconds(10)));
  absl::StatusOr<std::vector<RequestId>> taken = engine.SubmitGenerateAll(
      {ok, ok}, {std::make_shared<Quiet>(), std::make_shared<Quiet>()});
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->size(), 2u);
  EXPECT_NE(taken->at(0), taken->at(1));
  for (RequestId id : *taken) engine.Cancel(id);
  EXPECT_TRUE(engine.WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(engine.SubmitGenerateAll({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dikkat::server
