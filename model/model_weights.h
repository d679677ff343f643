// ModelWeights: every weight a ModelConfig calls for, bound into the layer
// structs the forward walks (model/layers.h). BindModelWeights is the one
// place that knows dikkat's canonical tensor names (docs/model-format.md),
// which for the layers are PyTorch's own: a `torch.nn.Transformer` state_dict
// binds as is.
#ifndef DIKKAT_MODEL_MODEL_WEIGHTS_H_
#define DIKKAT_MODEL_MODEL_WEIGHTS_H_

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "model/attention.h"
#include "model/io/config.h"
#include "model/layers.h"
#include "model/linear_weight.h"
#include "model/weight_binder.h"

namespace dikkat::model {

struct ModelWeights {
  Stack encoder;  // encoder-only, or the encoder of an encoder-decoder
  Stack decoder;  // decoder-only, or the decoder of an encoder-decoder
  LinearWeight lm_head_w;  // models with a decoder
  at::Tensor lm_head_b;
  RotaryEmbedding rope;  // PositionKind::kRotary only
  // The sliding layers' own table (rope_local_theta); else undefined.
  RotaryEmbedding rope_local;
  // config.embedding_dense, in order.
  struct Dense {
    LinearWeight w;
    at::Tensor b;
    bool tanh = false;
  };
  std::vector<Dense> embedding_dense;
};

// Binds `config`'s tensors from `binder` into `out`, on `device`; derived
// tables (sinusoidal positions, rotary angles) are computed here, the rotary
// ones for the first `rope_positions` positions (<= config.max_positions: the
// context served). Errors name the tensor (WeightBinder). May throw what
// LibTorch throws.
absl::Status BindModelWeights(const ModelConfig& config, c10::Device device,
                              c10::ScalarType compute_dtype, int64_t rope_positions,
                              WeightBinder& binder, ModelWeights* out);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_MODEL_WEIGHTS_H_
