// Request conversion (server/convert.h) and the request check the engine
// runs at Submit (server/request_checks.h) on arbitrary protobuf bytes: the
// gRPC path. The first byte picks the RPC and the model's architecture; the
// rest is parsed as that dikkat.v1 request. Never crashes, and whatever
// converts and passes the check satisfies what the engine relies on:
// non-empty sequences of in-vocabulary ids no longer than max_positions, at
// most max_batch_entries inputs, valid sampling parameters, an answer within
// max_response_bytes. Accepted Encode and Attention requests are then
// answered with synthetic results of the right shapes through the response
// builders.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dikkat/v1/dikkat.pb.h"
#include "fuzz/fuzz_util.h"
#include "model/io/config.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/tokenizer.h"
#include "server/convert.h"
#include "server/request_checks.h"

namespace {

using dikkat::model::Architecture;
namespace server = dikkat::server;
namespace v1 = dikkat::v1;

constexpr int64_t kMaxResponseBytes = 1 << 16;

struct Model {
  dikkat::model::ModelConfig config;
  server::EngineOptions options;
};

Model MakeModel(Architecture arch) {
  Model m;
  m.config.architecture = arch;
  m.config.name = "fuzz";
  m.config.vocab_size = 259;  // the byte tokenizer's
  m.config.d_model = 8;
  m.config.n_heads = 2;
  m.config.ffn_dim = 16;
  if (arch == Architecture::kEncoderDecoder) {
    m.config.n_encoder_layers = 2;
    m.config.n_decoder_layers = 3;
    m.config.decoder_start_token_id = 0;
  } else {
    m.config.n_layers = 2;
  }
  m.config.max_positions = 64;
  m.options.max_new_tokens_cap = 100;
  m.options.max_batch_entries = 8;
  return m;
}

void CheckIds(const std::vector<int32_t>& ids, const Model& m, const char* what, bool may_be_empty) {
  DIKKAT_FUZZ_CHECK(may_be_empty || !ids.empty(), "%s is empty", what);
  DIKKAT_FUZZ_CHECK(static_cast<int64_t>(ids.size()) <= m.config.max_positions,
                    "%s has %zu tokens > max_positions", what, ids.size());
  for (int32_t id : ids) {
    DIKKAT_FUZZ_CHECK(id >= 0 && id < m.config.vocab_size, "%s holds id %d", what, id);
  }
}

server::DenseTensor Filled(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return server::DenseTensor{std::move(shape), std::vector<float>(n, 0.25f)};
}

void Generate(const std::string& bytes, const Model& m, const server::ModelLimits& limits) {
  v1::GenerateRequest request;
  if (!request.ParseFromString(bytes)) return;
  absl::StatusOr<server::GenerateConversion> out = server::ToGenerateRequest(request, limits);
  if (!out.ok() || !server::CheckGenerateRequest(out->request, m.config, m.options).ok()) return;
  const server::GenerateRequest& r = out->request;
  if (m.config.architecture == Architecture::kDecoderOnly) {
    CheckIds(r.prompt, m, "prompt", false);
    DIKKAT_FUZZ_CHECK(static_cast<int64_t>(r.prompt.size()) < m.config.max_positions,
                      "no room to generate");
  } else {
    CheckIds(r.source, m, "source", false);
    CheckIds(r.prompt, m, "decoder prefix", true);
  }
  DIKKAT_FUZZ_CHECK(static_cast<int64_t>(r.stop_token_ids.size()) <= m.options.max_stop_token_ids,
                    "%zu stop token ids", r.stop_token_ids.size());
  for (int32_t id : r.stop_token_ids) {
    DIKKAT_FUZZ_CHECK(id >= 0 && id < m.config.vocab_size, "stop token id %d", id);
  }
  DIKKAT_FUZZ_CHECK(static_cast<int64_t>(r.stop_strings.size()) <= m.options.max_stop_strings,
                    "%zu stop strings", r.stop_strings.size());
  DIKKAT_FUZZ_CHECK(r.max_new_tokens >= 1 && r.max_new_tokens <= m.options.max_new_tokens_cap,
                    "max_new_tokens %d", r.max_new_tokens);
  DIKKAT_FUZZ_CHECK(dikkat::model::Validate(r.sampling).ok(), "invalid sampling params accepted");
  for (const std::string& s : r.stop_strings) {
    DIKKAT_FUZZ_CHECK(!s.empty() && dikkat::model::IsValidUtf8(s) &&
                          static_cast<int64_t>(s.size()) <= m.options.max_stop_string_bytes,
                      "bad stop string accepted");
  }
}

void Encode(const std::string& bytes, const Model& m, const server::ModelLimits& limits) {
  v1::EncodeRequest request;
  if (!request.ParseFromString(bytes)) return;
  absl::StatusOr<server::EncodeRequest> r = server::ToEncodeRequest(request, limits);
  if (!r.ok() || !server::CheckEncodeRequest(*r, m.config, m.options).ok()) return;
  DIKKAT_FUZZ_CHECK(!r->inputs.empty() &&
                        static_cast<int64_t>(r->inputs.size()) <= m.options.max_batch_entries,
                    "%zu inputs", r->inputs.size());
  for (const auto& ids : r->inputs) CheckIds(ids, m, "input", false);
  DIKKAT_FUZZ_CHECK(r->type_ids.empty() || r->type_ids.size() == r->inputs.size(),
                    "type_ids per input");
  server::EncodeResult result;
  for (const auto& ids : r->inputs) {
    result.embeddings.push_back(Filled({m.config.d_model}));
    if (r->return_hidden_states) {
      result.hidden_states.push_back(Filled({static_cast<int64_t>(ids.size()), m.config.d_model}));
    }
  }
  v1::EncodeResponse response;
  absl::Status filled = server::FillEncodeResponse(*r, result, request.output_dtype(), &response);
  DIKKAT_FUZZ_CHECK(filled.ok(), "FillEncodeResponse: %s", std::string(filled.message()).c_str());
  DIKKAT_FUZZ_CHECK(static_cast<int64_t>(response.ByteSizeLong()) <= kMaxResponseBytes + 4096,
                    "response of %zu bytes passed the estimate", response.ByteSizeLong());
}

void Attention(const std::string& bytes, const Model& m, const server::ModelLimits& limits) {
  v1::AttentionRequest request;
  if (!request.ParseFromString(bytes)) return;
  absl::StatusOr<server::AttentionRequest> r = server::ToAttentionRequest(request, limits);
  if (!r.ok() || !server::CheckAttentionRequest(*r, m.config, m.options).ok()) return;
  CheckIds(r->input, m, "input", false);
  const bool needs_target = r->kind == server::AttentionKind::kDecoderSelf ||
                            r->kind == server::AttentionKind::kCross;
  CheckIds(r->target, m, "target", !needs_target);
  const int64_t in = static_cast<int64_t>(r->input.size());
  const int64_t tg = static_cast<int64_t>(r->target.size());
  const int64_t q = needs_target ? tg : in;
  const int64_t k = r->kind == server::AttentionKind::kDecoderSelf ? tg : in;
  server::AttentionResult result;
  std::vector<int32_t> layers = r->layers;
  if (layers.empty()) layers = {0};
  for (int32_t layer : layers) {
    server::AttentionMap map;
    map.layer = layer;
    map.kind = r->kind;
    map.weights = Filled({q, k});
    result.maps.push_back(std::move(map));
  }
  static const std::unique_ptr<dikkat::model::Tokenizer> tokenizer =
      dikkat::model::MakeByteTokenizer();
  v1::AttentionResponse response;
  absl::Status filled =
      server::FillAttentionResponse(*r, result, request.output_dtype(), *tokenizer, &response);
  DIKKAT_FUZZ_CHECK(filled.ok(), "FillAttentionResponse: %s",
                    std::string(filled.message()).c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::unique_ptr<dikkat::model::Tokenizer> tokenizer =
      dikkat::model::MakeByteTokenizer();
  static const Model models[3] = {MakeModel(Architecture::kDecoderOnly),
                                  MakeModel(Architecture::kEncoderOnly),
                                  MakeModel(Architecture::kEncoderDecoder)};
  const Model& m = models[(data[0] >> 2) % 3];
  const server::ModelLimits limits{&m.config, tokenizer.get(), &m.options, kMaxResponseBytes};
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] & 3) {
    case 0:
      Generate(bytes, m, limits);
      break;
    case 1:
      Encode(bytes, m, limits);
      break;
    default:
      Attention(bytes, m, limits);
      break;
  }
  return 0;
}
