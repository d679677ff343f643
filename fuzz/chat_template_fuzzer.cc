// Hugging Face chat templates (model/chat/): arbitrary text parsed as a
// template, then rendered with a conversation that has tools, tool calls and
// non-ASCII text, under small limits so that each input stays fast.
// Properties: parse errors are INVALID_ARGUMENT; a render ends OK,
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED (never a crash, a hang or unbounded
// memory); the output stays within max_output_bytes; rendering is
// deterministic (twice the same result) unless the template reads the clock.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "model/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

const nlohmann::ordered_json& Context() {
  static const nlohmann::ordered_json* context =
      new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
        "messages": [
          {"role": "system", "content": "Be brief."},
          {"role": "user", "content": " Merhaba dünya 🙂 "},
          {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "İzmir", "days": 2}}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21.5}"},
          {"role": "assistant", "content": "Sunny."}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
          "description": "Weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}, "days": {"type": ["integer", "null"]}},
          "required": ["city"]}}}],
        "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
        "date_string": "24 Nov 2026", "n": 3, "f": 0.5
      })"));
  return *context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<dikkat::chat::ChatTemplate> parsed =
      dikkat::chat::ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    DIKKAT_FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument,
                      "parse error with code %d", static_cast<int>(parsed.status().code()));
    return 0;
  }
  dikkat::chat::RenderLimits limits;
  limits.max_output_bytes = 64 << 10;
  limits.max_total_bytes = 4 << 20;
  limits.max_steps = 50'000;
  limits.max_call_depth = 16;
  const absl::StatusOr<std::string> first = parsed->Render(Context(), limits);
  if (first.ok()) {
    DIKKAT_FUZZ_CHECK(first->size() <= limits.max_output_bytes, "output of %zu bytes",
                      first->size());
  } else {
    const absl::StatusCode code = first.status().code();
    DIKKAT_FUZZ_CHECK(
        code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kResourceExhausted,
        "render error with code %d: %s", static_cast<int>(code),
        std::string(first.status().message()).c_str());
  }
  if (source.find("strftime") == std::string::npos) {
    const absl::StatusOr<std::string> second = parsed->Render(Context(), limits);
    DIKKAT_FUZZ_CHECK(first.status() == second.status() && (!first.ok() || *first == *second),
                      "two renders differ");
  }
  return 0;
}
