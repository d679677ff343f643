// Conversion between the wire messages (proto/dikkat/v1/dikkat.proto) and the
// engine's request/result structs (server/engine.h).
//
// The To*Request functions map a message to the engine's struct, rejecting
// what the wire form makes wrong (unset oneofs, unknown enum values, text
// that does not tokenize, an explicit max_new_tokens of 0) and what must be
// bounded before the work of conversion itself (text bytes before
// tokenizing, the number of Encode inputs) or before the engine's (the
// response size). The values' check against the model and the server's
// limits (server/request_checks.h) is not repeated here: Engine::Submit*
// runs it, once, for every caller, so what these return is ready to submit
// and the engine answers INVALID_ARGUMENT for invalid values.
//
// Every function is pure (no gRPC call state, no engine): the service calls
// them on gRPC threads and the tests call them directly. Invalid input gives
// INVALID_ARGUMENT whose message names the field, the value and what is
// allowed. Thread-safe (the tokenizer is immutable and thread-safe).
#ifndef DIKKAT_SERVER_CONVERT_H_
#define DIKKAT_SERVER_CONVERT_H_

#include <cstdint>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dikkat/v1/dikkat.pb.h"
#include "model/io/config.h"
#include "model/sampling_params.h"
#include "model/text/tokenizer.h"
#include "server/engine.h"
#include "server/request_checks.h"

namespace dikkat::server {

// What a request is checked against: one hosted model.
struct ModelLimits {
  const model::ModelConfig* config = nullptr;   // not owned
  const model::Tokenizer* tokenizer = nullptr;  // not owned
  const EngineOptions* options = nullptr;       // not owned
  // Largest response message (bytes) the server sends; 0 = no limit. Encode
  // and Attention requests whose answer would be larger are refused before
  // any work is done (INVALID_ARGUMENT naming the size and the limit).
  int64_t max_response_bytes = 0;
  // Largest text (bytes) of one request field, refused before it is
  // tokenized; 0 = config->max_positions x kTextBytesPerToken (no limit when
  // the model has no max_positions).
  int64_t max_text_bytes = 0;
};

// The default text budget per token position: generous (English averages ~4
// bytes per BPE token; the longest GPT-2 tokens are runs of 32-64 bytes), so
// that a text refused by bytes would almost surely have been refused by its
// token count too, only after seconds of tokenizing.
inline constexpr int64_t kTextBytesPerToken = 32;

// The text limit in effect for `limits` (0 = none).
int64_t TextByteLimit(const ModelLimits& limits);

// INVALID_ARGUMENT when `bytes` of text in `field` exceed TextByteLimit,
// naming the field, both sizes and --max_text_bytes. Cheap: call it before
// tokenizing.
absl::Status CheckTextBytes(size_t bytes, absl::string_view field, const ModelLimits& limits);

// ---- inputs -----------------------------------------------------------------

// Text (checked against TextByteLimit, then tokenized, with special tokens
// unless the request says otherwise;
// `default_add_special_tokens` applies when add_special_tokens is unset) or
// token ids (as given, but no more than the model's max_positions, checked
// before they are copied; their range is the request check's).
// Never returns an empty sequence. `type_ids` (optional) receives the
// tokenizer's segment ids for text input (empty for token input).
// `truncate_to` > 0 cuts a longer input to that many tokens: text keeps its
// first tokens and the special tokens the tokenizer added at both ends (as
// Hugging Face's truncation=True keeps them; INVALID_ARGUMENT when they
// leave no room), token ids keep their first `truncate_to` (only those are
// copied).
absl::StatusOr<std::vector<int32_t>> InputToIds(const v1::Input& input, absl::string_view field,
                                                bool default_add_special_tokens,
                                                const ModelLimits& limits,
                                                std::vector<int32_t>* type_ids = nullptr,
                                                int64_t truncate_to = 0);

// ---- Generate ---------------------------------------------------------------

// Unset optionals take their documented defaults (temperature, top_p and
// repetition_penalty 1.0; seed random). `top_logprobs` is the request's value
// after mapping "none" (-1 / unset) to 0. Not checked here: the engine's
// CheckGenerateRequest runs model::Validate.
model::SamplingParams ToSamplingParams(const v1::SamplingOptions& options, int32_t top_logprobs,
                                       const model::ModelConfig::SamplingDefaults& defaults = {});

struct GenerateConversion {
  GenerateRequest request;            // deadline left infinite: the caller sets it
  bool want_logprobs = false;         // top_logprobs >= 0 was asked for
  std::vector<int32_t> input_ids;     // the tokenized `input` (for echo_prompt_tokens)
};

// Decoder-only: `input` is the prompt; `decoder_prefix` must be unset.
// Encoder-decoder: `input` is the source, `decoder_prefix` the decoder start.
// Encoder-only models cannot generate (INVALID_ARGUMENT).
absl::StatusOr<GenerateConversion> ToGenerateRequest(const v1::GenerateRequest& request,
                                                     const ModelLimits& limits);

v1::FinishReason ToProtoFinishReason(FinishReason reason);

// Appends one chunk's tokens, text, prompt logprobs and sample finish to
// `response` (several chunks of one sample may be merged into one message).
// Token logprobs are copied only when `want_logprobs`.
void AppendChunk(const GeneratedChunk& chunk, bool want_logprobs,
                 const model::Tokenizer& tokenizer, v1::GenerateResponse* response);

// Sets finish_reason and stats on the last message.
void FillFinish(const GenerateSummary& summary, v1::GenerateResponse* response);

// ---- Encode -----------------------------------------------------------------

absl::StatusOr<EncodeRequest> ToEncodeRequest(const v1::EncodeRequest& request,
                                              const ModelLimits& limits);

// `engine_request` is what ToEncodeRequest produced (its token ids are echoed).
absl::Status FillEncodeResponse(const EncodeRequest& engine_request, const EncodeResult& result,
                                v1::DType dtype, v1::EncodeResponse* response);

// ---- Attention --------------------------------------------------------------

absl::StatusOr<AttentionRequest> ToAttentionRequest(const v1::AttentionRequest& request,
                                                    const ModelLimits& limits);

// ---- response size ----------------------------------------------------------

// Bytes one tensor value takes on the wire in `dtype` (unknown: 4).
int64_t DTypeBytes(v1::DType dtype);

// Tensor payload bytes of the Encode / Attention response these (converted)
// requests produce: a lower bound of the message size that ignores the few
// bytes of framing, shapes and labels per entry.
int64_t EstimateEncodeResponseBytes(const EncodeRequest& request, const model::ModelConfig& config,
                                    v1::DType dtype);
int64_t EstimateAttentionResponseBytes(const AttentionRequest& request,
                                       const model::ModelConfig& config, v1::DType dtype);

// INVALID_ARGUMENT when `bytes` exceeds `limit` (> 0), naming `what`, both
// sizes, the flag and `advice`.
absl::Status CheckResponseBytes(int64_t bytes, int64_t limit, absl::string_view what,
                                absl::string_view advice);

// Fills maps and the axis labels (token ids and readable token text).
absl::Status FillAttentionResponse(const AttentionRequest& engine_request,
                                   const AttentionResult& result, v1::DType dtype,
                                   const model::Tokenizer& tokenizer,
                                   v1::AttentionResponse* response);

model::Pooling FromProtoPooling(v1::Pooling pooling, model::Pooling model_default);
v1::AttentionKind ToProtoAttentionKind(AttentionKind kind);

// ---- tensors ----------------------------------------------------------------

// DTYPE_UNSPECIFIED means float32. Unknown enum values are INVALID_ARGUMENT.
absl::StatusOr<v1::DType> ResolveDType(v1::DType dtype, absl::string_view field);

// Packs `tensor` as little-endian `dtype` (bfloat16 and float16 round to
// nearest even; NaN stays NaN, overflow becomes infinity). INTERNAL if the
// values do not match the shape.
absl::Status ToProtoTensor(const DenseTensor& tensor, v1::DType dtype, v1::Tensor* out);

// ---- model info -------------------------------------------------------------

void FillModelInfo(const ModelDescription& description, const EngineStats& stats,
                   const model::Tokenizer& tokenizer, bool is_default, v1::ModelInfo* info);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_CONVERT_H_
