#include "model/chat/chat_template.h"

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "model/chat/ast.h"
#include "model/chat/interpreter.h"
#include "model/chat/lexer.h"
#include "model/chat/parser.h"
#include "nlohmann/json.hpp"

namespace dikkat::chat {

struct ParsedTemplate {
  Body body;
  // jinja2's and Hugging Face's global functions; read-only once built.
  std::shared_ptr<Scope> globals;
};

namespace {

std::shared_ptr<Scope> MakeGlobals() {
  auto globals = std::make_shared<Scope>();
  for (const char* name : {"namespace", "range", "dict", "raise_exception", "strftime_now"}) {
    Callable c;
    c.type = Callable::Type::kGlobal;
    c.name = name;
    globals->vars[name] = Value::MakeCallable(std::move(c));
  }
  return globals;
}

absl::Status ToStatus(const TemplateError& e) {
  switch (e.kind) {
    case TemplateError::Kind::kRaised:
      return absl::InvalidArgumentError("chat template raised: " + e.message);
    case TemplateError::Kind::kLimit:
      return absl::ResourceExhaustedError("chat template: " + e.message);
    case TemplateError::Kind::kInvalid:
      break;
  }
  return absl::InvalidArgumentError("chat template error: " + e.message);
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const ParsedTemplate> parsed)
    : parsed_(std::move(parsed)) {}

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  try {
    auto parsed = std::make_shared<ParsedTemplate>();
    parsed->body = chat::Parse(Lex(source));
    parsed->globals = MakeGlobals();
    return ChatTemplate(std::move(parsed));
  } catch (const TemplateError& e) {
    return absl::InvalidArgumentError("chat template syntax error: " + e.message);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("chat template: out of memory while parsing");
  }
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 const RenderLimits& limits) const {
  if (!context.is_object()) {
    return absl::InvalidArgumentError("chat template context must be a JSON object");
  }
  // The context's variables sit between the globals and the template's own
  // top-level scope (they may shadow a global, as in jinja2).
  try {
    auto variables = std::make_shared<Scope>();
    variables->parent = parsed_->globals;
    for (const auto& [name, value] : context.items()) {
      variables->vars[name] = Value::FromJson(value);
    }
    Interpreter interpreter(limits, std::move(variables));
    return interpreter.Render(parsed_->body);
  } catch (const TemplateError& e) {
    return ToStatus(e);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("chat template: out of memory while rendering");
  }
}

}  // namespace dikkat::chat
