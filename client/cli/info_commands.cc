// Small commands: `info`, `tokenize`, `detokenize`, `health`.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"

namespace dikkat::client::cli {
namespace {

int PrintProtoJson(const google::protobuf::Message& message, const CommandContext& context) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return ReportError(absl::InternalError(std::string(status.message())), context);
  }
  std::cout << json;
  return kExitOk;
}

class InfoCommand : public Command {
 public:
  std::string name() const override { return "info"; }
  std::string summary() const override { return "what the server hosts: models, sizes, caches"; }
  std::string description() const override {
    return "usage: dikkat info [flags]\n\n"
           "Prints every hosted model (or only --model) with its architecture, sizes,\n"
           "tokenizer, weights fingerprint and KV cache.";
  }
  void RegisterFlags(FlagSet* f) override {
    f->Bool("json", &json_, "print the response as JSON");
  }
  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    if (!args.empty()) return UsageError(name(), "takes no arguments");
    v1::GetModelInfoRequest request;
    request.set_model(context.globals->model);
    absl::StatusOr<v1::GetModelInfoResponse> response =
        context.client->GetModelInfo(request, context.Call());
    if (!response.ok()) return ReportError(response.status(), context);
    if (json_) return PrintProtoJson(*response, context);
    std::cout << "server version: " << response->server_version() << "\n";
    for (const v1::ModelInfo& m : response->models()) {
      std::cout << "\n" << m.name() << (m.is_default() ? "  (default)" : "") << "\n";
      const auto row = [](const std::string& key, const std::string& value) {
        if (!value.empty()) std::cout << absl::StrFormat("  %-18s %s\n", key, value);
      };
      row("architecture", m.architecture());
      row("weight layout", m.weight_layout());
      if (m.architecture() == "encoder-decoder") {
        row("layers", absl::StrFormat("%d encoder + %d decoder", m.n_encoder_layers(),
                                      m.n_decoder_layers()));
      } else {
        row("layers", absl::StrCat(m.n_layers()));
      }
      row("d_model", absl::StrCat(m.d_model()));
      if (m.embedding_dim() != 0 && m.embedding_dim() != m.d_model()) {
        row("embedding dim", absl::StrCat(m.embedding_dim(), " (sentence-transformers Dense)"));
      }
      if (!m.prompts().empty()) {
        std::vector<std::string> names;
        for (const auto& [name, text] : m.prompts()) names.push_back(name);
        std::sort(names.begin(), names.end());
        row("prompts", absl::StrCat(absl::StrJoin(names, ", "),
                                    m.default_prompt_name().empty()
                                        ? ""
                                        : " (default " + m.default_prompt_name() + ")"));
      }
      row("heads", absl::StrFormat("%d (kv %d, head dim %d)", m.n_heads(), m.n_kv_heads(),
                                   m.head_dim()));
      row("ffn dim", absl::StrCat(m.ffn_dim()));
      row("vocab size", absl::StrCat(m.vocab_size()));
      row("max context", absl::StrCat(m.max_context()));
      row("positions", m.positions());
      row("activation", m.activation());
      row("norm", absl::StrCat(m.norm(), m.pre_norm() ? " (pre-norm)" : " (post-norm)"));
      row("dtype / device", absl::StrCat(m.dtype(), " / ", m.device(),
                                         m.cpu_isa().empty() ? "" : " (" + m.cpu_isa() + ")"));
      row("tokenizer", m.tokenizer());
      const v1::SpecialTokens& s = m.special_tokens();
      row("special tokens", absl::StrFormat("bos %d eos %d pad %d unk %d cls %d sep %d mask %d",
                                            s.bos(), s.eos(), s.pad(), s.unk(), s.cls(), s.sep(),
                                            s.mask()));
      if (s.eos_ids_size() > 1) row("ends at (eos)", absl::StrJoin(s.eos_ids(), ", "));
      row("weights", absl::StrFormat("%d bytes, sha256 %s", m.weights_bytes(),
                                     m.weights_sha256()));
      row("kv cache", absl::StrFormat("%d bytes of %s in %d blocks of %d tokens",
                                      m.kv_cache_bytes(), m.kv_cache_dtype(), m.kv_blocks(),
                                      m.kv_block_size()));
      row("capabilities", absl::StrJoin(m.capabilities(), ", "));
    }
    return kExitOk;
  }

 private:
  bool json_ = false;
};

class TokenizeCommand : public Command {
 public:
  std::string name() const override { return "tokenize"; }
  std::string summary() const override { return "text -> token ids with the model's tokenizer"; }
  std::string description() const override {
    return "usage: dikkat tokenize [flags] TEXT...\n\n"
           "Prints the token ids of TEXT (arguments joined by spaces; '-' reads stdin), one\n"
           "line per token: position, id, vocabulary entry.";
  }
  void RegisterFlags(FlagSet* f) override {
    f->Bool("add-special-tokens", &add_special_tokens_, "add the model's special tokens");
    f->Bool("parse-special-tokens", &parse_special_tokens_,
            "special tokens written in the text (<s>, <|im_start|>) as their ids, as the chat "
            "endpoint tokenizes a rendered template");
    f->Bool("ids-only", &ids_only_, "print only the ids, comma-separated");
    f->Bool("json", &json_, "print the response as JSON");
  }
  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    v1::TokenizeRequest request;
    request.set_text(JoinedText(args));
    request.set_add_special_tokens(add_special_tokens_);
    request.set_parse_special_tokens(parse_special_tokens_);
    absl::StatusOr<v1::TokenizeResponse> response =
        context.client->Tokenize(request, context.Call());
    if (!response.ok()) return ReportError(response.status(), context);
    if (json_) return PrintProtoJson(*response, context);
    if (ids_only_) {
      std::cout << absl::StrJoin(response->ids(), ",") << "\n";
      return kExitOk;
    }
    std::cout << response->ids_size() << " tokens\n";
    for (int i = 0; i < response->ids_size(); ++i) {
      std::cout << absl::StrFormat("%5d %8d  %s\n", i, response->ids(i),
                                   i < response->tokens_size() ? Quoted(response->tokens(i)) : "");
    }
    return kExitOk;
  }

 private:
  bool add_special_tokens_ = false;
  bool parse_special_tokens_ = false;
  bool ids_only_ = false;
  bool json_ = false;
};

class DetokenizeCommand : public Command {
 public:
  std::string name() const override { return "detokenize"; }
  std::string summary() const override { return "token ids -> text"; }
  std::string description() const override {
    return "usage: dikkat detokenize [flags] ID...\n\n"
           "Prints the text of the token ids (separated by spaces or commas).";
  }
  void RegisterFlags(FlagSet* f) override {
    f->Bool("skip-special-tokens", &skip_special_tokens_, "leave special tokens out");
  }
  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    std::vector<int> ids;
    if (absl::Status s = ParseIntList(absl::StrJoin(args, ","), &ids); !s.ok()) {
      return UsageError(name(), std::string(s.message()));
    }
    if (ids.empty()) return UsageError(name(), "no token ids given");
    v1::DetokenizeRequest request;
    request.mutable_ids()->Add(ids.begin(), ids.end());
    request.set_skip_special_tokens(skip_special_tokens_);
    absl::StatusOr<v1::DetokenizeResponse> response =
        context.client->Detokenize(request, context.Call());
    if (!response.ok()) return ReportError(response.status(), context);
    std::cout << response->text() << "\n";
    return kExitOk;
  }

 private:
  bool skip_special_tokens_ = false;
};

class HealthCommand : public Command {
 public:
  std::string name() const override { return "health"; }
  std::string summary() const override {
    return "grpc.health.v1 check; exit code 0 only when SERVING";
  }
  std::string description() const override {
    return "usage: dikkat health [flags]\n\n"
           "Asks the server's standard gRPC health service and prints the status\n"
           "(SERVING, NOT_SERVING, ...). Exits 0 only when the status is SERVING, 1\n"
           "otherwise (including when the server cannot be reached), which makes it a\n"
           "container HEALTHCHECK: dikkat health --timeout=3";
  }
  void RegisterFlags(FlagSet* f) override {
    f->String("service", &service_,
              "service to ask about; empty = the whole server (e.g. dikkat.v1.Dikkat)", "NAME");
  }
  int Run(const CommandContext& context, const std::vector<std::string>& args) override {
    if (!args.empty()) return UsageError(name(), "takes no arguments");
    absl::StatusOr<HealthStatus> status = context.client->HealthCheck(service_, context.Call());
    if (!status.ok()) return ReportError(status.status(), context);
    std::cout << HealthStatusName(*status) << "\n";
    return *status == ::grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitFailure;
  }

 private:
  std::string service_;
};

}  // namespace

std::unique_ptr<Command> NewInfoCommand() { return std::make_unique<InfoCommand>(); }
std::unique_ptr<Command> NewTokenizeCommand() { return std::make_unique<TokenizeCommand>(); }
std::unique_ptr<Command> NewDetokenizeCommand() { return std::make_unique<DetokenizeCommand>(); }
std::unique_ptr<Command> NewHealthCommand() { return std::make_unique<HealthCommand>(); }

}  // namespace dikkat::client::cli
