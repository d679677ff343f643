// The OpenAI-compatible port's request path (server/openai_request.h) on
// arbitrary bytes as the body of POST /v1/completions, /v1/chat/completions
// or /v1/embeddings, exactly as the HTTP handlers run it: ParseBody (JSON
// nesting bound), ModelName, the endpoint's Parse*Request (chat renders the
// messages through a real chat template: Qwen2.5's, Llama 3.1's with tool
// calls, Gemma 2's that raises on bad role order, or none), then the
// engine's own request check (server/request_checks.h) on each prompt's
// request. An accepted call is
// answered with synthetic engine output through the response builders
// (server/openai_response.h): the whole JSON response and the SSE events of
// a stream, with the caller's prompts, echo, sample count and logprob
// counts (and, for chat with tools, the tool-call parsing of the output).
//
// The first byte picks the endpoint (bits 0-1), the chat template (bits
// 2-3) and, for chat, the reasoning parsing (bit 4 on, bit 5 opened by the
// prompt); the rest is the body. No LibTorch: the byte tokenizer, and a
// decoder-only (generation) or encoder-only (embeddings) config.
//
// Properties besides "no crash, no leak, no UB, no unbounded allocation":
//   - what ParseBody accepts is within its nesting, object-member and value
//     bounds, and it counts the values it parsed;
//   - every refusal is one the handlers answer 400 (INVALID_ARGUMENT or
//     FAILED_PRECONDITION) with a message;
//   - what passes the engine's check has in-vocabulary prompts within
//     max_positions, 1..kMaxSamples samples, valid sampling;
//   - responses and SSE events serialize to JSON that parses back, with one
//     choice per sample and the echo first; embeddings have one entry per
//     input of d_model floats (base64: 4 bytes each).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "fuzz/fuzz_util.h"
#include "model/io/config.h"
#include "model/text/byte_tokenizer.h"
#include "model/text/tokenizer.h"
#include "server/chat_prompt.h"
#include "server/convert.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_checks.h"

namespace {

namespace fs = std::filesystem;
namespace server = dikkat::server;
namespace openai = dikkat::server::openai;
using dikkat::model::Architecture;
using openai::Json;

constexpr int64_t kMaxResponseBytes = 1 << 20;

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
  m.config.n_layers = 2;
  // Room for a rendered chat prompt (Qwen2.5's default system prompt alone
  // is ~100 bytes) so that chat calls reach the response builders.
  m.config.max_positions = 2048;
  m.options.max_new_tokens_cap = 100;
  m.options.max_batch_entries = 16;
  return m;
}

// The chat templates, loaded once through ChatPrompt::Load from a folder
// holding a tokenizer_config.json (removed once loaded).
std::vector<server::ChatPrompt> LoadTemplates() {
  const fs::path dir = fs::temp_directory_path() /
                       ("dikkat_fuzz_openai_" + std::to_string(static_cast<long>(getpid())));
  std::vector<server::ChatPrompt> prompts;
  for (const char* file :
       {"Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "google-gemma-2-2b-it.jinja", ""}) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    Json config = {{"bos_token", {{"content", "<s>"}}}, {"eos_token", "</s>"}};
    if (*file != '\0') {
      std::ifstream in(std::string(DIKKAT_FUZZ_CHAT_TEMPLATES) + "/" + file);
      std::stringstream text;
      text << in.rdbuf();
      DIKKAT_FUZZ_CHECK(in.is_open() && !text.str().empty(), "cannot read the template %s", file);
      config["chat_template"] = text.str();
    }
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    absl::StatusOr<server::ChatPrompt> prompt = server::ChatPrompt::Load(dir.string());
    DIKKAT_FUZZ_CHECK(prompt.ok(), "ChatPrompt::Load(%s): %s", file,
                      std::string(prompt.status().message()).c_str());
    prompts.push_back(std::move(*prompt));
  }
  fs::remove_all(dir);
  return prompts;
}

// A refusal the handlers answer 400 with a message.
void CheckRefusal(const absl::Status& status, const char* what) {
  DIKKAT_FUZZ_CHECK(openai::HttpStatusOf(status) == 400 && !status.message().empty(),
                    "%s refused with HTTP %d: %s", what, openai::HttpStatusOf(status),
                    status.ToString().c_str());
}

// What ParseBody accepts is within its bounds: nesting and members per
// object (an ordered object's parse is quadratic in its members). Adds the
// values under `value` to `counted` (keys as values that are not numbers).
void CheckBounded(const Json& value, const openai::BodyLimits& limits, int depth,
                  openai::BodyValues& counted) {
  ++(value.is_number() ? counted.numbers : counted.others);
  if (!value.is_structured()) return;
  DIKKAT_FUZZ_CHECK(depth <= limits.max_json_depth, "accepted JSON %d deep", depth);
  DIKKAT_FUZZ_CHECK(
      !value.is_object() || value.size() <= static_cast<size_t>(limits.max_object_members),
      "accepted an object of %zu members", value.size());
  if (value.is_object()) counted.others += static_cast<int64_t>(value.size());
  for (const Json& child : value) CheckBounded(child, limits, depth + 1, counted);
}

Json Reparsed(const Json& value, const char* what) {
  const std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  Json back = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  DIKKAT_FUZZ_CHECK(!back.is_discarded(), "%s does not parse back: %s", what, text.c_str());
  return back;
}

// Deterministic "engine output" drawn from the input's bytes.
class Output {
 public:
  explicit Output(const std::string& bytes) : bytes_(bytes) {}
  uint8_t Next() {
    return bytes_.empty() ? 0 : static_cast<uint8_t>(bytes_[pos_++ % bytes_.size()]);
  }
  server::GeneratedToken Token(int alternatives) {
    server::GeneratedToken t;
    t.token_id = Next() % 259;
    t.logprob = -static_cast<float>(Next()) / 16.0f;
    for (int i = 0; i < alternatives; ++i) {
      t.top.push_back({static_cast<int32_t>(Next() % 259), -static_cast<float>(Next()) / 8.0f});
    }
    return t;
  }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

// The chunks an engine could send for prompt `p` of a call (its request
// `r`), numbered as the HTTP handler renumbers them (p * n + sample): per
// sample, two chunks of one or two tokens whose text is their decoding; the
// last ends the sample when there are several; the first carries the
// prompt's logprobs when asked.
void AddChunks(const server::GenerateRequest& r, int32_t p, int32_t n,
               const dikkat::model::Tokenizer& tokenizer, Output& out,
               std::vector<server::GeneratedChunk>& chunks) {
  const int samples = std::max(n, 1);
  for (int step = 0; step < 2; ++step) {
    for (int s = 0; s < samples; ++s) {
      server::GeneratedChunk c;
      c.index = p * samples + s;
      std::vector<int32_t> ids;
      const int tokens = 1 + out.Next() % 2;
      for (int k = 0; k < tokens; ++k) {
        c.tokens.push_back(out.Token(r.sampling.top_logprobs));
        ids.push_back(c.tokens.back().token_id);
      }
      c.text = tokenizer.Decode(ids, /*skip_special_tokens=*/true);
      if (step == 0 && s == 0 && r.prompt_logprobs >= 0) {
        for (size_t i = 1; i < r.prompt.size(); ++i) {
          server::GeneratedToken t = out.Token(r.prompt_logprobs);
          t.token_id = r.prompt[i];
          c.prompt_logprobs.push_back(std::move(t));
        }
      }
      if (step == 1 && samples > 1) c.finish = server::FinishReason::kStop;
      chunks.push_back(std::move(c));
    }
  }
}

void Respond(openai::Api api, const openai::GenerateCall& call,
             const dikkat::model::Tokenizer& tokenizer, const std::string& bytes) {
  Output out(bytes);
  std::vector<server::GeneratedChunk> chunks;
  server::GenerateSummary summary;
  for (size_t p = 0; p < call.prompts.size(); ++p) {
    const server::GenerateRequest& r = call.prompts[p].request;
    AddChunks(r, static_cast<int32_t>(p), call.n, tokenizer, out, chunks);
    summary.prompt_tokens += static_cast<int32_t>(r.prompt.size());
  }
  summary.reason = out.Next() % 2 == 0 ? server::FinishReason::kLength : server::FinishReason::kEos;
  summary.generated_tokens = 4;
  summary.samples = std::max(call.n, 1);
  const size_t expected = static_cast<size_t>(call.choices());

  openai::ChoiceBuilder whole(openai::NewResponseMeta(api, "fuzz"), call, tokenizer);
  for (const server::GeneratedChunk& c : chunks) whole.Add(c);
  const Json response = Reparsed(whole.Response(summary), "the response");
  const Json& choices = response["choices"];
  DIKKAT_FUZZ_CHECK(choices.is_array() && choices.size() == expected,
                    "%zu choices for %zu prompts x n = %d", choices.size(), call.prompts.size(),
                    call.n);
  if (api == openai::Api::kCompletions && call.echo) {
    for (size_t i = 0; i < choices.size(); ++i) {
      const std::string text = choices[i]["text"].get<std::string>();
      const std::string& echo = call.PromptOf(static_cast<int32_t>(i)).echo_text;
      DIKKAT_FUZZ_CHECK(text.compare(0, echo.size(), echo) == 0,
                        "choice %zu does not start with its prompt's echo", i);
    }
  }

  openai::ChoiceBuilder stream(openai::NewResponseMeta(api, "fuzz"), call, tokenizer);
  std::vector<Json> events = stream.StartEvents();
  for (const server::GeneratedChunk& c : chunks) {
    for (Json& e : stream.ChunkEvents(c)) events.push_back(std::move(e));
  }
  for (Json& e : stream.FinishEvents(summary)) events.push_back(std::move(e));
  size_t finishes = 0;
  for (const Json& e : events) {
    const Json back = Reparsed(e, "an SSE event");
    for (const Json& choice : back["choices"]) {
      if (!choice["finish_reason"].is_null()) ++finishes;
    }
  }
  DIKKAT_FUZZ_CHECK(finishes == expected, "%zu finish events for %zu choices", finishes, expected);
}

void Generate(openai::Api api, const Json& body, const server::ChatPrompt& chat,
              const openai::BodyLimits& body_limits, const Model& m,
              const server::ModelLimits& limits, const std::string& bytes, uint8_t selector) {
  absl::StatusOr<openai::GenerateCall> call =
      api == openai::Api::kChat ? openai::ParseChatRequest(body, chat, body_limits, limits)
                                : openai::ParseCompletionRequest(body, body_limits, limits);
  if (!call.ok()) return CheckRefusal(call.status(), "Parse*Request");
  if (api == openai::Api::kChat) {  // as the HTTP handler sets it from its flag
    call->parse_reasoning = (selector & 16) != 0;
    call->prompt_opens_reasoning = call->prompt_opens_reasoning || (selector & 32) != 0;
  }
  DIKKAT_FUZZ_CHECK(!call->prompts.empty() &&
                        call->prompts.size() <= static_cast<size_t>(body_limits.max_prompts),
                    "%zu prompts", call->prompts.size());
  for (const openai::PromptCall& prompt : call->prompts) {
    const server::GenerateRequest& r = prompt.request;
    const absl::Status checked = server::CheckGenerateRequest(r, m.config, m.options);
    if (!checked.ok()) return CheckRefusal(checked, "CheckGenerateRequest");
    DIKKAT_FUZZ_CHECK(
        !r.prompt.empty() && static_cast<int64_t>(r.prompt.size()) < m.config.max_positions,
        "prompt of %zu tokens", r.prompt.size());
    for (int32_t id : r.prompt) {
      DIKKAT_FUZZ_CHECK(id >= 0 && id < m.config.vocab_size, "prompt id %d", id);
    }
    DIKKAT_FUZZ_CHECK(r.n >= 1 && r.n <= server::kMaxSamples && r.n == call->n, "n = %d", r.n);
    DIKKAT_FUZZ_CHECK(dikkat::model::Validate(r.sampling).ok(), "invalid sampling accepted");
  }
  Respond(api, *call, *limits.tokenizer, bytes);
}

void Embeddings(const Json& body, const Model& m, const server::ModelLimits& limits,
                const std::string& bytes) {
  absl::StatusOr<openai::EmbeddingsCall> call = openai::ParseEmbeddingsRequest(body, limits);
  if (!call.ok()) return CheckRefusal(call.status(), "ParseEmbeddingsRequest");
  const absl::Status checked = server::CheckEncodeRequest(call->request, m.config, m.options);
  if (!checked.ok()) return CheckRefusal(checked, "CheckEncodeRequest");
  const size_t inputs = call->request.inputs.size();
  DIKKAT_FUZZ_CHECK(inputs >= 1 && static_cast<int64_t>(inputs) <= m.options.max_batch_entries,
                    "%zu inputs", inputs);
  Output out(bytes);
  server::EncodeResult result;
  for (size_t i = 0; i < inputs; ++i) {
    server::DenseTensor t{{m.config.d_model}, {}};
    for (int64_t d = 0; d < m.config.d_model; ++d) {
      t.values.push_back(static_cast<float>(out.Next()) / 255.0f - 0.5f);
    }
    result.embeddings.push_back(std::move(t));
    result.prompt_tokens += static_cast<int32_t>(call->request.inputs[i].size());
  }
  const Json response =
      Reparsed(openai::EmbeddingsResponse(result, call->base64, "fuzz"), "the embeddings");
  DIKKAT_FUZZ_CHECK(response["data"].size() == inputs, "%zu embeddings for %zu inputs",
                    response["data"].size(), inputs);
  for (const Json& e : response["data"]) {
    if (call->base64) {
      std::string raw;
      DIKKAT_FUZZ_CHECK(absl::Base64Unescape(e["embedding"].get<std::string>(), &raw) &&
                            raw.size() == static_cast<size_t>(m.config.d_model) * 4,
                        "base64 embedding of %zu bytes", raw.size());
    } else {
      DIKKAT_FUZZ_CHECK(e["embedding"].size() == static_cast<size_t>(m.config.d_model),
                        "embedding of %zu floats", e["embedding"].size());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::unique_ptr<dikkat::model::Tokenizer> tokenizer =
      dikkat::model::MakeByteTokenizer();
  static const Model decoder = MakeModel(Architecture::kDecoderOnly);
  static const Model encoder = MakeModel(Architecture::kEncoderOnly);
  static const std::vector<server::ChatPrompt>* templates =
      new std::vector<server::ChatPrompt>(LoadTemplates());
  // The handlers' bounds (OpenAiHttpOptions' defaults, but fewer messages,
  // object members and values, so that inputs of a few KiB reach them).
  static const openai::BodyLimits body_limits = [] {
    openai::BodyLimits limits;
    limits.max_json_depth = 32;
    limits.max_chat_messages = 64;
    limits.max_object_members = 64;
    limits.max_prompts = 4;
    limits.max_numbers = 256;
    limits.max_other_values = 256;
    return limits;
  }();

  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  openai::BodyValues reported;
  absl::StatusOr<Json> body = openai::ParseBody(bytes, body_limits, &reported);
  if (!body.ok()) {
    CheckRefusal(body.status(), "ParseBody");
    return 0;
  }
  DIKKAT_FUZZ_CHECK(body->is_object(), "ParseBody accepted a non-object");
  openai::BodyValues counted;
  CheckBounded(*body, body_limits, 1, counted);
  // At most what was counted (a repeated key keeps one member).
  DIKKAT_FUZZ_CHECK(counted.numbers <= reported.numbers && counted.others <= reported.others,
                    "ParseBody counted %lld numbers and %lld other values; the tree holds "
                    "%lld and %lld",
                    static_cast<long long>(reported.numbers),
                    static_cast<long long>(reported.others),
                    static_cast<long long>(counted.numbers), static_cast<long long>(counted.others));
  DIKKAT_FUZZ_CHECK(counted.numbers <= body_limits.max_numbers &&
                        counted.others <= body_limits.max_other_values,
                    "accepted %lld numbers and %lld other values",
                    static_cast<long long>(counted.numbers),
                    static_cast<long long>(counted.others));
  absl::StatusOr<std::string> name = openai::ModelName(*body);
  if (!name.ok()) {
    CheckRefusal(name.status(), "ModelName");
    return 0;
  }

  const int endpoint = data[0] & 3;
  const Model& m = endpoint == 2 ? encoder : decoder;
  const server::ModelLimits limits{&m.config, tokenizer.get(), &m.options, kMaxResponseBytes};
  switch (endpoint) {
    case 0:
      Generate(openai::Api::kCompletions, *body, (*templates)[0], body_limits, m, limits, bytes,
               data[0]);
      break;
    case 2:
      Embeddings(*body, m, limits, bytes);
      break;
    default:
      Generate(openai::Api::kChat, *body, (*templates)[(data[0] >> 2) & 3], body_limits, m, limits,
               bytes, data[0]);
      break;
  }
  return 0;
}
