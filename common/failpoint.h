// Failpoints: named places where a test can make the code fail the way a real
// failure there would (an exception from LibTorch, say) without a fault the
// test cannot cause on demand, such as running out of memory mid-forward.
// Off unless a test arms one with SetFailpoint; an unarmed check costs one
// relaxed atomic load. Thread-safe.
//
// Armed failpoints in the server: "engine.encode_source" (the encoder pass of
// an encoder-decoder Generate request throws), "engine.emit" (emitting a
// generated token throws std::bad_alloc), "engine.nan_logits" (a forward's
// logits, sampled or searched, are all NaN).
#ifndef DIKKAT_COMMON_FAILPOINT_H_
#define DIKKAT_COMMON_FAILPOINT_H_

#include <string_view>

namespace dikkat {

void SetFailpoint(std::string_view name, bool armed);
bool FailpointArmed(std::string_view name);

}  // namespace dikkat

#endif  // DIKKAT_COMMON_FAILPOINT_H_
