#include "server/chat_prompt.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/status_util.h"

namespace dikkat::server {
namespace {

// A special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::string TokenString(const nlohmann::ordered_json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return "";
}

// The template source: a string, or the entry named "default" of a list of
// {name, template}. Empty when there is none.
absl::StatusOr<std::string> TemplateSource(const nlohmann::ordered_json& config,
                                           const std::string& file) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object()) continue;
      auto name = entry.find("name");
      auto source = entry.find("template");
      if (name != entry.end() && *name == "default" && source != entry.end() &&
          source->is_string()) {
        return source->get<std::string>();
      }
    }
    return std::string();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": chat_template must be a string or a list of {name, template}"));
}

}  // namespace

absl::StatusOr<ChatPrompt> ChatPrompt::Load(const std::string& model_dir) {
  std::string file = model_dir + "/tokenizer_config.json";
  ChatPrompt prompt;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::ifstream in(file, std::ios::binary); in) {
    std::stringstream text;
    text << in.rdbuf();
    config = nlohmann::ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
    }
  }
  // Newer folders keep the template in its own file, which transformers
  // reads in place of tokenizer_config.json's chat_template.
  absl::StatusOr<std::string> source;
  const std::string jinja = model_dir + "/chat_template.jinja";
  if (std::ifstream in(jinja, std::ios::binary); in) {
    std::stringstream text;
    text << in.rdbuf();
    source = text.str();
    file = jinja;
  } else {
    source = TemplateSource(config, file);
  }
  if (!source.ok()) return source.status();
  if (source->empty()) return prompt;
  absl::StatusOr<chat::ChatTemplate> parsed = chat::ChatTemplate::Parse(*source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", parsed.status().message()));
  }
  prompt.template_ = std::move(*parsed);
  prompt.tool_call_format_ = DetectToolCallFormat(*source);
  prompt.bos_token_ = TokenString(config, "bos_token");
  prompt.eos_token_ = TokenString(config, "eos_token");
  return prompt;
}

absl::StatusOr<std::string> ChatPrompt::Render(const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& tools,
                                               const nlohmann::ordered_json& extra) const {
  if (!template_.has_value()) {
    return absl::FailedPreconditionError(
        "this model has no chat template (no chat_template.jinja, and no chat_template in its "
        "tokenizer_config.json): use "
        "/v1/completions with a prompt instead");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["add_generation_prompt"] = true;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() != "messages" && it.key() != "tools") context[it.key()] = it.value();
    }
  }
  absl::StatusOr<std::string> text = template_->Render(context);
  // The renderer's bounds (output size, steps, depth) are hit by this
  // conversation whenever it is sent: no retry can help (not 429).
  if (text.status().code() == absl::StatusCode::kResourceExhausted) {
    return NeverFitsError(text.status().message());
  }
  return text;
}

}  // namespace dikkat::server
