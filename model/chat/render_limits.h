// The bounds of one chat-template render (ChatTemplate::Render). Callers
// control the messages a template loops over, so every render is bounded in
// time (steps), memory (bytes built) and stack (call depth).
#ifndef DIKKAT_MODEL_CHAT_RENDER_LIMITS_H_
#define DIKKAT_MODEL_CHAT_RENDER_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace dikkat::chat {

// What one render may do; exceeding any is RESOURCE_EXHAUSTED. The defaults
// leave room for a long conversation with large tool schemas (the largest
// real template here renders a 50-message chat in about 20 000 steps).
struct RenderLimits {
  // The rendered prompt, and also any single string or list built on the
  // way (checked before it is allocated, so `'x' * 10**12` fails at once).
  size_t max_output_bytes = 4 << 20;
  // Bytes of strings and list slots created during the render, in total:
  // bounds the memory a render can hold however the template loops.
  size_t max_total_bytes = 64 << 20;
  // Evaluation steps: every expression node, statement and loop iteration.
  int64_t max_steps = 2'000'000;
  // Nested macro calls (recursion) and nested blocks at run time.
  int max_call_depth = 32;
};

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_RENDER_LIMITS_H_
