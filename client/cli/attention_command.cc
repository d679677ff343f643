// `dikkat attention`: attention weights as a table of the strongest links and
// as SVG heatmaps.
#include <fstream>
#include <iostream>

#include "absl/strings/str_format.h"
#include "client/attention_render.h"
#include "client/cli/commands.h"
#include "client/tensor.h"

namespace dikkat::client::cli {
namespace {

class AttentionCommand : public Command {
 public:
  std::string name() const override { return "attention"; }
  std::string summary() const override {
    return "inspect attention: strongest links per layer/head, SVG heatmaps";
  }
  std::string description() const override {
    return "usage: dikkat attention [flags] TEXT...\n\n"
           "Runs TEXT (or --ids) through the model and prints, for every selected layer and\n"
           "head, the --top strongest attention links: query token, key token, weight.\n"
           "--svg FILE writes one SVG file holding a grid of heatmaps, one per map, each\n"
           "titled 'layer L head H' (or 'layer L (heads aggregated)'), with query tokens as\n"
           "row labels, key tokens as rotated column labels, and a color bar from 0 to that\n"
           "map's largest weight. Hover a cell for its exact weight.\n"
           "Encoder-decoder models: TEXT is the source; --target-text the decoder input\n"
           "(needed for --kind=decoder-self and --kind=cross).";
  }

  void RegisterFlags(FlagSet* f) override {
    f->IntList("ids", &ids_, "the input as token ids (instead of TEXT)");
    f->String("target-text", &target_text_, "encoder-decoder: decoder input text");
    f->IntList("layers", &layers_, "0-based layers to show, e.g. 0,5 (default: all)");
    f->IntList("heads", &heads_, "0-based heads to show (default: all)");
    f->String("kind", &kind_, "self | encoder-self | decoder-self | cross (default: self)",
              "KIND");
    f->String("aggregate", &aggregate_,
              "none = one map per head; mean or max = one map per layer over the heads", "MODE");
    f->Int("top", &top_, "links to list per map");
    f->String("svg", &svg_file_, "write the heatmaps as one SVG file", "FILE");
    f->Int("svg-columns", &svg_columns_, "heatmaps per row in the SVG; 0 = about square");
    f->String("dtype", &dtype_, "response dtype: float32 | bfloat16 | float16", "DTYPE");
    f->Bool("special-tokens", &special_tokens_,
            "add the model's special tokens (--no-special-tokens to leave them out)");
  }

  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    v1::AttentionRequest request;
    const std::string text = JoinedText(args);
    if (!ids_.empty() && !text.empty()) return UsageError(name(), "give TEXT or --ids, not both");
    if (ids_.empty() && text.empty()) return UsageError(name(), "no input given");
    *request.mutable_input() = ids_.empty() ? TextInput(text) : TokenInput(ids_);
    if (ids_.empty()) request.mutable_input()->set_add_special_tokens(special_tokens_);
    if (!target_text_.empty()) {
      *request.mutable_target() = TextInput(target_text_);
      request.mutable_target()->set_add_special_tokens(special_tokens_);
    }
    for (int layer : layers_) request.add_layers(layer);
    for (int head : heads_) request.add_heads(head);
    if (kind_ == "self") {
      request.set_kind(v1::ATTENTION_KIND_SELF);
    } else if (kind_ == "encoder-self") {
      request.set_kind(v1::ATTENTION_KIND_ENCODER_SELF);
    } else if (kind_ == "decoder-self") {
      request.set_kind(v1::ATTENTION_KIND_DECODER_SELF);
    } else if (kind_ == "cross") {
      request.set_kind(v1::ATTENTION_KIND_CROSS);
    } else if (!kind_.empty()) {
      return UsageError(name(),
                        "--kind=" + kind_ + ": allowed self, encoder-self, decoder-self, cross");
    }
    if (aggregate_ == "mean") {
      request.set_aggregation(v1::HEAD_AGGREGATION_MEAN);
    } else if (aggregate_ == "max") {
      request.set_aggregation(v1::HEAD_AGGREGATION_MAX);
    } else if (aggregate_ != "none") {
      return UsageError(name(), "--aggregate=" + aggregate_ + ": allowed none, mean, max");
    }
    absl::StatusOr<v1::DType> dtype = ParseDType(dtype_);
    if (!dtype.ok()) return UsageError(name(), std::string(dtype.status().message()));
    request.set_output_dtype(*dtype);

    absl::StatusOr<v1::AttentionResponse> response =
        context.client->Attention(request, context.Call());
    if (!response.ok()) return ReportError(response.status(), context);
    if (int rc = PrintLinks(*response, context); rc != kExitOk) return rc;
    if (!svg_file_.empty()) return WriteSvg(*response, context);
    return kExitOk;
  }

 private:
  int PrintLinks(const v1::AttentionResponse& response, const CommandContext& context) {
    const auto label = [](const auto& tokens, int i) {
      return absl::StrFormat("[%d] %s", i, i < tokens.size() ? Quoted(tokens[i]) : "?");
    };
    std::cout << "model: " << response.model() << "  query tokens: "
              << response.query_tokens_size() << "  key tokens: " << response.key_tokens_size()
              << "  maps: " << response.maps_size() << "\n";
    for (const v1::AttentionMap& map : response.maps()) {
      absl::StatusOr<DecodedTensor> weights = DecodeTensor(map.weights());
      if (!weights.ok()) return ReportError(weights.status(), context);
      if (weights->shape.size() != 2) {
        return ReportError(absl::InternalError("the server sent a map that is not 2-D"), context);
      }
      std::cout << "\n" << AttentionMapTitle(map) << "\n";
      std::cout << absl::StrFormat("  %-28s %-28s %s\n", "query", "key", "weight");
      for (const AttentionLink& link : StrongestLinks(*weights, top_)) {
        std::cout << absl::StrFormat("  %-28s %-28s %.4f\n",
                                     label(response.query_tokens(), link.query),
                                     label(response.key_tokens(), link.key), link.weight);
      }
    }
    return kExitOk;
  }

  int WriteSvg(const v1::AttentionResponse& response, const CommandContext& context) {
    SvgOptions options;
    options.columns = svg_columns_;
    absl::StatusOr<std::string> svg = AttentionResponseToSvg(response, options);
    if (!svg.ok()) return ReportError(svg.status(), context);
    std::ofstream out(svg_file_, std::ios::binary);
    out << *svg;
    out.close();
    if (!out) {
      return ReportError(absl::PermissionDeniedError("cannot write --svg=" + svg_file_), context);
    }
    std::cerr << "wrote " << response.maps_size() << " heatmaps to " << svg_file_ << "\n";
    return kExitOk;
  }

  std::vector<int> ids_;
  std::string target_text_;
  std::vector<int> layers_;
  std::vector<int> heads_;
  std::string kind_;
  std::string aggregate_ = "none";
  int top_ = 5;
  std::string svg_file_;
  int svg_columns_ = 0;
  std::string dtype_ = "float32";
  bool special_tokens_ = true;
};

}  // namespace

std::unique_ptr<Command> NewAttentionCommand() { return std::make_unique<AttentionCommand>(); }

}  // namespace dikkat::client::cli
