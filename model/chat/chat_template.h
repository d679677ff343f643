// Hugging Face chat templates: the Jinja2 `chat_template` of a model's
// tokenizer_config.json, compiled once and rendered per request into the
// prompt text, byte for byte as transformers' apply_chat_template renders it
// (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
// loop controls; tojson as json.dumps(ensure_ascii=False); the globals
// raise_exception and strftime_now). The supported subset of Jinja and its
// limits: docs/chat-templates.md.
//
//   absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
//   nlohmann::ordered_json context = {{"messages", ...},
//                                     {"add_generation_prompt", true},
//                                     {"bos_token", "<s>"}, {"eos_token", "</s>"}};
//   absl::StatusOr<std::string> prompt = t->Render(context);
//
// The context is an nlohmann::ordered_json, not nlohmann::json: templates see
// dict order (`tool | tojson`, `for k, v in d | items`), and Python keeps the
// order the request had, which nlohmann::json (sorted keys) would lose. Parse
// the request with ordered_json and pass its parts on.
//
// Thread safety: a ChatTemplate is immutable after Parse; Render is const and
// may run on many threads at once. Copies share the parsed tree.
#ifndef DIKKAT_MODEL_CHAT_CHAT_TEMPLATE_H_
#define DIKKAT_MODEL_CHAT_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/chat/render_limits.h"
#include "nlohmann/json_fwd.hpp"

namespace dikkat::chat {

struct ParsedTemplate;

class ChatTemplate {
 public:
  // INVALID_ARGUMENT "chat template syntax error: line L, column C: ..." for
  // source that is not valid (in our subset). Never crashes on any input.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  // Renders with the top-level variables of `context` (a JSON object):
  // usually messages, add_generation_prompt, bos_token, eos_token and, where
  // the template uses them, tools, documents, date_string.
  //  - INVALID_ARGUMENT "chat template raised: <message>" when the template
  //    calls raise_exception (e.g. roles that do not alternate);
  //  - INVALID_ARGUMENT "chat template error: line N: ..." where jinja2 would
  //    raise too (undefined.attr, 'a' + 1, tojson of a generator, ...);
  //  - RESOURCE_EXHAUSTED when the render exceeds `limits`.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderLimits& limits = RenderLimits()) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const ParsedTemplate> parsed);
  std::shared_ptr<const ParsedTemplate> parsed_;
};

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_CHAT_TEMPLATE_H_
