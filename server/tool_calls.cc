#include "server/tool_calls.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "nlohmann/json.hpp"

namespace dikkat::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

size_t TrimmedEnd(std::string_view s, size_t end) {
  while (end > 0 && IsBlank(s[end - 1])) --end;
  return end;
}

// Generated arguments are serialized again (nlohmann's dump recurses once
// a level): arguments nested deeper than a request body may be (32) are
// not a call. The call object itself is one level more.
constexpr int kMaxCallDepth = 32 + 1;

// Calls `on(c, i)` for each character of text[begin..] outside JSON
// strings (escapes skipped); stops when it returns true. Returns the index
// it stopped at, or npos.
template <typename On>
size_t ScanOutsideStrings(std::string_view text, size_t begin, On on) {
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (on(c, i)) {
      return i;
    }
  }
  return std::string_view::npos;
}

// Whether the arrays and objects of `text` (JSON or not) nest deeper than
// `max_depth`; brackets inside strings do not count.
bool NestedDeeperThan(std::string_view text, int max_depth) {
  int depth = 0;
  return ScanOutsideStrings(text, 0, [&](char c, size_t) {
           if (c == '[' || c == '{') return ++depth > max_depth;
           if (c == ']' || c == '}') --depth;
           return false;
         }) != std::string_view::npos;
}

// One call object: {"name": string, <arguments_key> or "arguments": value}.
// Arguments that are a string are taken as already serialized.
std::optional<ToolCall> CallFromJson(std::string_view text, const char* arguments_key) {
  if (NestedDeeperThan(text, kMaxCallDepth)) return std::nullopt;
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return std::nullopt;
  auto name = json.find("name");
  if (name == json.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  auto arguments = json.find(arguments_key);
  if (arguments == json.end()) arguments = json.find("arguments");
  ToolCall call;
  call.name = name->get<std::string>();
  if (arguments == json.end() || arguments->is_null()) {
    call.arguments = "{}";
  } else if (arguments->is_string()) {
    call.arguments = arguments->get<std::string>();
  } else {
    call.arguments = arguments->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return call;
}

ParsedToolCalls ParseHermes(std::string_view text) {
  ParsedToolCalls out;
  std::string content;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    const size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) return {};  // unclosed: not a call
    std::optional<ToolCall> call = CallFromJson(
        Trim(text.substr(open + kOpen.size(), close - open - kOpen.size())), "arguments");
    if (!call.has_value()) return {};
    content.append(text.substr(pos, open - pos));
    out.calls.push_back(std::move(*call));
    pos = close + kClose.size();
  }
  if (out.calls.empty()) return {};
  content.append(text.substr(pos));
  content.resize(TrimmedEnd(content, content.size()));
  out.content = std::move(content);
  return out;
}

// The end of the JSON object starting at text[begin] == '{' (one past its
// closing brace), or npos when it does not close.
size_t ObjectEnd(std::string_view text, size_t begin) {
  int depth = 0;
  const size_t close = ScanOutsideStrings(text, begin, [&](char c, size_t) {
    if (c == '{') ++depth;
    return c == '}' && --depth == 0;
  });
  return close == std::string_view::npos ? close : close + 1;
}

ParsedToolCalls ParseLlama3Json(std::string_view text) {
  std::string_view rest = Trim(text);
  if (rest.substr(0, kPythonTag.size()) == kPythonTag) rest = Trim(rest.substr(kPythonTag.size()));
  ParsedToolCalls out;
  while (!rest.empty()) {
    if (rest.front() != '{') return {};
    const size_t end = ObjectEnd(rest, 0);
    if (end == std::string_view::npos) return {};
    std::optional<ToolCall> call = CallFromJson(rest.substr(0, end), "parameters");
    if (!call.has_value()) return {};
    out.calls.push_back(std::move(*call));
    rest.remove_prefix(end);
    while (!rest.empty() && (IsBlank(rest.front()) || rest.front() == ';')) rest.remove_prefix(1);
  }
  return out;
}

}  // namespace

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
  }
  return "none";
}

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  if (source.find(kOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find("Environment: ipython") != std::string_view::npos &&
      source.find("\"parameters\"") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

ParsedToolCalls ParseToolCalls(std::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kLlama3Json:
      return ParseLlama3Json(text);
    case ToolCallFormat::kNone:
      break;
  }
  return {};
}

size_t StreamableContent(std::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return text.size();
    case ToolCallFormat::kLlama3Json: {
      size_t first = 0;
      while (first < text.size() && IsBlank(text[first])) ++first;
      if (first == text.size() || text[first] == '{' || text[first] == '<') return 0;
      return text.size();
    }
    case ToolCallFormat::kHermes: {
      size_t end = text.find(kOpen);
      if (end == std::string_view::npos) {
        // Hold a suffix that may be the start of "<tool_call>".
        end = text.size();
        for (size_t n = std::min(kOpen.size() - 1, text.size()); n > 0; --n) {
          if (text.substr(text.size() - n) == kOpen.substr(0, n)) {
            end = text.size() - n;
            break;
          }
        }
      }
      return TrimmedEnd(text, end);
    }
  }
  return text.size();
}

}  // namespace dikkat::server
