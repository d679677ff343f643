// The engine's prefill-only jobs: Encode (pooled embeddings and hidden
// states) and Attention (attention maps), plus the encoder pass an
// encoder-decoder Generate request needs before it decodes. Each runs whole
// on the engine thread, without the KV cache, and turns tensors into the
// engine's plain result structs.
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

// One forward over every input (decoder-only models use their causal stack),
// pooled and optionally normalized per input. `request` is already checked.
// LibTorch errors come back as INTERNAL ("forward failed: ...").
absl::StatusOr<EncodeResult> RunEncode(const model::Transformer& transformer,
                                       const EncodeRequest& request);

// One forward with attention capture; returns the selected layers' maps,
// per head or aggregated over heads. `request` is already checked.
// LibTorch errors come back as INTERNAL ("forward failed: ...").
absl::StatusOr<AttentionResult> RunAttention(const model::Transformer& transformer,
                                             const AttentionRequest& request);

// Encoder-decoder Generate: the encoder's output for `source` as the
// decoder's cross-attention K/V. Throws what LibTorch throws.
std::unique_ptr<model::CrossAttentionCache> EncodeSource(const model::Transformer& transformer,
                                                         const std::vector<int32_t>& source);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_AUXILIARY_JOBS_H_
