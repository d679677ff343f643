// The bounds of one chat-template render (ChatTemplate::Render). Callers
// control the messages a template loops over, so every render is bounded in
// time (steps), memory (bytes built) and stack (call depth).
#ifndef DIKKAT_MODEL_CHAT_RENDER_LIMITS_H_
#define DIKKAT_MODEL_CHAT_RENDER_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace dikkat::chat {

// What one render may do; exceeding any is RESOURCE_EXHAUSTED. The defaults
// leave room for long conversations: a 100-message chat with tool calls and
// two tool schemas takes 4 000-8 000 steps with the real templates in
// tests/chat/data/, and 39 000 with Command R7B's, whose tool-result lookup
// is quadratic in the messages (chat_template_test
// DefaultLimitsLeaveRoomForLongConversations prints them). A step costs
// about 0.25 us on the project's machine, so max_steps bounds a render to
// about a quarter of a second of CPU.
struct RenderLimits {
  // The rendered prompt, and also any single string or list built on the
  // way (checked before it is allocated, so `'x' * 10**12` fails at once).
  size_t max_output_bytes = 4 << 20;
  // Bytes of strings and list slots created during the render, in total:
  // bounds the memory a render can hold however the template loops.
  size_t max_total_bytes = 64 << 20;
  // Evaluation steps: every expression node, statement and loop iteration.
  int64_t max_steps = 1'000'000;
  // Nested macro calls (recursion). Blocks nested at run time, inside and
  // across macro calls, stop at 256 whatever this says.
  int max_call_depth = 32;
};

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_RENDER_LIMITS_H_
