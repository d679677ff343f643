// The engine's prefill-only jobs: Encode (pooled embeddings and hidden
// states) and Attention (attention maps), plus the encoder pass an
// encoder-decoder Generate request needs before it decodes. Each runs on the
// engine thread, without the KV cache, and turns tensors into the engine's
// plain result structs. Encode runs in groups of inputs under a token budget
// (one group per engine step); Attention runs only the layers it records and
// reduces each layer's weights as the forward produces them.
//
// Stateless functions; the caller (the engine thread) owns the Transformer.
// Torch-free header: LibTorch stays in auxiliary_jobs.cc.
#ifndef DIKKAT_SERVER_AUXILIARY_JOBS_H_
#define DIKKAT_SERVER_AUXILIARY_JOBS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine.h"

namespace dikkat::model {
class Transformer;
struct CrossAttentionCache;
}  // namespace dikkat::model

namespace dikkat::server {

// One forward over the inputs [first, first + k) of `request` (decoder-only
// models use their causal stack), pooled and optionally normalized per input,
// appended to `result`; returns k. k >= 1 is the most inputs whose tokens fit
// in `token_budget`; the first always runs, however long (at most the model's
// max_positions, which the request checks hold). `request` is already
// checked. LibTorch errors come back as INTERNAL ("forward failed: ...").
absl::StatusOr<size_t> RunEncodeGroup(const model::Transformer& transformer,
                                      const EncodeRequest& request, size_t first,
                                      int64_t token_budget, EncodeResult* result);

// One forward with attention capture, through the last selected layer only;
// returns the selected layers' maps (in the request's order), per head or
// aggregated over heads. At most one layer's full weights [H, q, k] exist at
// a time. `request` is already checked.
// LibTorch errors come back as INTERNAL ("forward failed: ...").
absl::StatusOr<AttentionResult> RunAttention(const model::Transformer& transformer,
                                             const AttentionRequest& request);

// Encoder-decoder Generate: the encoder's output for `source` as the
// decoder's cross-attention K/V. Throws what LibTorch throws.
std::unique_ptr<model::CrossAttentionCache> EncodeSource(const model::Transformer& transformer,
                                                         const std::vector<int32_t>& source);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_AUXILIARY_JOBS_H_
