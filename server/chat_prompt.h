// ChatPrompt: a hosted model's chat template (the `chat_template` of its
// tokenizer_config.json, model/chat/chat_template.h) with the BOS and EOS
// token strings the template may refer to, loaded once per model at start.
//
// Immutable after Load; Render may run on many threads at once.
#ifndef DIKKAT_SERVER_CHAT_PROMPT_H_
#define DIKKAT_SERVER_CHAT_PROMPT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat/chat_template.h"
#include "nlohmann/json.hpp"
#include "server/tool_calls.h"

namespace dikkat::server {

class ChatPrompt {
 public:
  // Reads <model_dir>/tokenizer_config.json. A folder without the file or
  // without a `chat_template` gives a ChatPrompt without a template (chat is
  // then refused, completions work). `chat_template` is a string or a list
  // of {name, template} (the one named "default" is used). bos_token and
  // eos_token may be strings or {content: ...} objects. INVALID_ARGUMENT
  // (naming the file) for a config that is not JSON or a template that
  // does not parse.
  static absl::StatusOr<ChatPrompt> Load(const std::string& model_dir);

  bool has_template() const { return template_.has_value(); }
  // How the template teaches the model to write tool calls (kNone without
  // a template).
  ToolCallFormat tool_call_format() const { return tool_call_format_; }

  // The prompt for `messages` (a JSON array of {role, content, ...}) and
  // `tools` (null when none), with add_generation_prompt true. `extra` (an
  // object, or null) holds further variables for the template, as
  // apply_chat_template's keyword arguments (Qwen3's enable_thinking); they
  // may replace add_generation_prompt, bos_token and eos_token, never
  // messages or tools (the caller refuses those names).
  // FAILED_PRECONDITION when the model has no template; the template's own
  // errors (INVALID_ARGUMENT, RESOURCE_EXHAUSTED) otherwise.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& messages,
                                     const nlohmann::ordered_json& tools,
                                     const nlohmann::ordered_json& extra = nullptr) const;

 private:
  std::optional<chat::ChatTemplate> template_;
  ToolCallFormat tool_call_format_ = ToolCallFormat::kNone;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_CHAT_PROMPT_H_
