// `dikkat encode`: embeddings of one or more inputs.
#include <cmath>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/tensor.h"

namespace dikkat::client::cli {
namespace {

nlohmann::json TensorJson(const DecodedTensor& t) {
  return {{"shape", t.shape}, {"values", t.values}};
}

class EncodeCommand : public Command {
 public:
  std::string name() const override { return "encode"; }
  std::string summary() const override { return "embed texts (pooled embeddings, hidden states)"; }
  std::string description() const override {
    return "usage: dikkat encode [flags] TEXT [TEXT...]\n\n"
           "Encodes each TEXT argument as one input of a batch (or --ids as one input) and\n"
           "prints, per input, the embedding's dimensions, L2 norm and first values.\n"
           "--json prints everything (all values, token ids, hidden states) as JSON.";
  }

  void RegisterFlags(FlagSet* f) override {
    f->IntList("ids", &ids_, "one input given as token ids (instead of TEXT)");
    f->String("pooling", &pooling_, "mean | first | last; empty = the model's default", "MODE");
    f->OptionalBool("normalize", &normalize_,
                    "L2-normalize each embedding (--no-normalize: not); unset: as the model's "
                    "folder says (sentence-transformers' Normalize module)");
    f->Int("truncate", &truncate_,
           "an input longer than the model accepts: 0 = an error, -1 = cut to the model's "
           "limit, N = cut to N tokens (its first ones, special tokens kept)");
    f->String("prompt-name", &prompt_name_,
              "one of the model's named prompts (dikkat info: e.g. EmbeddingGemma's query) put "
              "before each TEXT; empty = the model's default prompt, if any",
              "NAME");
    f->Bool("default-prompt", &default_prompt_,
            "without --prompt-name, the model's default prompt (--no-default-prompt: none)");
    f->Bool("hidden-states", &hidden_states_, "also return per-token hidden states");
    f->OptionalInt("hidden-layer", &hidden_layer_,
                   "layer of the hidden states: 0 = embeddings, 1..L = after layer i, -1 = final");
    f->String("dtype", &dtype_, "response dtype: float32 | bfloat16 | float16", "DTYPE");
    f->Bool("special-tokens", &special_tokens_,
            "add the model's special tokens (--no-special-tokens to leave them out)");
    f->Int("values", &values_, "how many leading values to print per embedding");
    f->Bool("json", &json_, "print the full response as JSON");
  }

  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    v1::EncodeRequest request;
    if (!ids_.empty() && !args.empty()) return UsageError(name(), "give TEXT or --ids, not both");
    if (ids_.empty() && args.empty()) return UsageError(name(), "nothing to encode");
    if (!ids_.empty()) {
      *request.add_inputs() = TokenInput(ids_);
    } else {
      for (const std::string& text : args) {
        v1::Input* input = request.add_inputs();
        *input = TextInput(text == "-" ? JoinedText({"-"}) : text);
        input->set_add_special_tokens(special_tokens_);
      }
    }
    if (pooling_ == "mean") {
      request.set_pooling(v1::POOLING_MEAN);
    } else if (pooling_ == "first") {
      request.set_pooling(v1::POOLING_FIRST);
    } else if (pooling_ == "last") {
      request.set_pooling(v1::POOLING_LAST);
    } else if (!pooling_.empty()) {
      return UsageError(name(), "--pooling=" + pooling_ + ": allowed mean, first, last");
    }
    absl::StatusOr<v1::DType> dtype = ParseDType(dtype_);
    if (!dtype.ok()) return UsageError(name(), std::string(dtype.status().message()));
    request.set_output_dtype(*dtype);
    if (normalize_.has_value()) request.set_normalize(*normalize_);
    request.set_truncate(truncate_);
    if (!prompt_name_.empty()) {
      request.set_prompt_name(prompt_name_);
    } else if (!default_prompt_) {
      request.set_prompt_name("");
    }
    request.set_return_hidden_states(hidden_states_);
    if (hidden_layer_) request.set_hidden_layer(*hidden_layer_);

    absl::StatusOr<v1::EncodeResponse> response = context.client->Encode(request, context.Call());
    if (!response.ok()) return ReportError(response.status(), context);
    return json_ ? PrintJson(*response, context) : PrintSummary(request, *response, context);
  }

 private:
  int PrintSummary(const v1::EncodeRequest& request, const v1::EncodeResponse& response,
                   const CommandContext& context) {
    std::cout << "model: " << response.model() << "  prompt tokens: " << response.prompt_tokens()
              << "\n";
    for (int i = 0; i < response.results_size(); ++i) {
      const v1::EncodeResult& result = response.results(i);
      absl::StatusOr<DecodedTensor> embedding = DecodeTensor(result.embedding());
      if (!embedding.ok()) return ReportError(embedding.status(), context);
      double norm = 0;
      for (float v : embedding->values) norm += static_cast<double>(v) * v;
      const std::string label = i < request.inputs_size() && request.inputs(i).has_text()
                                    ? Quoted(request.inputs(i).text())
                                    : "(ids)";
      std::cout << absl::StrFormat("[%d] %s\n    tokens: %d  dims: [%s]  norm: %.6g\n", i, label,
                                   result.token_ids_size(), absl::StrJoin(embedding->shape, ", "),
                                   std::sqrt(norm));
      const size_t shown = std::min<size_t>(std::max(values_, 0), embedding->values.size());
      std::vector<std::string> values;
      for (size_t k = 0; k < shown; ++k) values.push_back(absl::StrFormat("%.6g", embedding->values[k]));
      std::cout << "    first " << shown << ": [" << absl::StrJoin(values, ", ")
                << (shown < embedding->values.size() ? ", ..." : "") << "]\n";
      if (result.has_hidden_states()) {
        absl::StatusOr<DecodedTensor> hidden = DecodeTensor(result.hidden_states());
        if (!hidden.ok()) return ReportError(hidden.status(), context);
        std::cout << "    hidden states: [" << absl::StrJoin(hidden->shape, ", ") << "]\n";
      }
    }
    return kExitOk;
  }

  int PrintJson(const v1::EncodeResponse& response, const CommandContext& context) {
    nlohmann::json out = {{"model", response.model()},
                          {"prompt_tokens", response.prompt_tokens()},
                          {"results", nlohmann::json::array()}};
    for (const v1::EncodeResult& result : response.results()) {
      absl::StatusOr<DecodedTensor> embedding = DecodeTensor(result.embedding());
      if (!embedding.ok()) return ReportError(embedding.status(), context);
      nlohmann::json item = {
          {"token_ids", std::vector<int>(result.token_ids().begin(), result.token_ids().end())},
          {"embedding", TensorJson(*embedding)}};
      if (result.has_hidden_states()) {
        absl::StatusOr<DecodedTensor> hidden = DecodeTensor(result.hidden_states());
        if (!hidden.ok()) return ReportError(hidden.status(), context);
        item["hidden_states"] = TensorJson(*hidden);
      }
      out["results"].push_back(std::move(item));
    }
    std::cout << out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }

  std::vector<int> ids_;
  std::string pooling_;
  std::optional<bool> normalize_;
  int truncate_ = 0;
  std::string prompt_name_;
  bool default_prompt_ = true;
  bool hidden_states_ = false;
  std::optional<int> hidden_layer_;
  std::string dtype_ = "float32";
  bool special_tokens_ = true;
  int values_ = 8;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> NewEncodeCommand() { return std::make_unique<EncodeCommand>(); }

}  // namespace dikkat::client::cli
