// Transformer: every architecture of ModelConfig behind one forward API that
// takes a *batch of sequences of different lengths at different positions*:
// several prompts in one prefill, one decode step for many sequences, or a
// mix. Linear layers run once over all tokens of the batch packed together
// ([N, d], no padding); attention runs per sequence over its own KV blocks.
//
// Weights use dikkat's canonical names (docs/model-format.md), which for the
// layers are PyTorch's own: a `torch.nn.Transformer` state_dict loads as is.
//
// Ownership and threads: a Transformer owns its weights and is immutable after
// Load(); Forward calls mutate only the KvCache they are given. Calls with the
// same KvCache must not overlap (the engine thread serializes them).
#ifndef DIKKAT_MODEL_TRANSFORMER_H_
#define DIKKAT_MODEL_TRANSFORMER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "model/forward_batch.h"
#include "model/io/config.h"
#include "model/io/weights.h"
#include "model/kv_cache.h"

namespace dikkat::model {

struct LoadOptions {
  // Storage dtype of the weight matrices: Float, BFloat16, Half, or Char for
  // int8 weight-only quantization (CPU only; linear weights, LM head and token
  // embeddings as int8 with a float32 scale per row and 32 inputs, see
  // linear_weight.h; everything else float32).
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // CPU: the weights in memory advised for 2 MiB pages (HugePageArena,
  // huge_pages.h); false keeps them in ordinary allocations.
  bool huge_pages = true;
  // The longest context served (e.g. --max_context), when shorter than the
  // model's max_positions: RoPE tables are built for that many positions
  // and longer sequences are refused. 0: the model's.
  int64_t max_positions = 0;
};

struct LoadReport {
  std::vector<std::string> unused_tensors;  // in the file but not used by the model
  int64_t parameter_bytes = 0;              // bytes of the loaded weights (in the chosen dtype)
  int64_t parameter_count = 0;
  int64_t huge_page_bytes = 0;  // of those, in memory advised for 2 MiB pages (huge_pages)
};

// Attention weights recorded during a forward of a single chunk, handed out
// layer by layer as the forward reaches them: the forward keeps none, so a
// request for one layer of a long sequence holds one layer's weights at a
// time, never the whole stack's.
struct AttentionCapture {
  bool self = false;   // self-attention of the stack being run
  bool cross = false;  // decoder -> encoder (encoder-decoder decoder only)
  std::vector<int64_t> layers;  // 0-based layers to record, ascending; empty = every layer
  // Receives (layer, weights [Hq, Tq, Tk] float32) for each recorded layer,
  // in layer order, on the calling thread.
  std::function<void(int64_t layer, const at::Tensor& probs)> sink;
};

struct ForwardOptions {
  // Logits of each chunk's last token (of every token for a chunk with
  // SequenceChunk::all_logits), chunk after chunk.
  bool last_logits = true;
  bool all_logits = false;   // logits of every token (overrides last_logits)
  // Hidden states to return per chunk: kNoHidden, 0 = embeddings, i = after
  // layer i (1-based), kFinalHidden = the stack's output after its final norm.
  int64_t hidden_layer = kNoHidden;
  // Only with a single chunk. A forward that returns nothing else (no
  // logits, no hidden states) stops after the last layer it records.
  AttentionCapture* capture = nullptr;

  static constexpr int64_t kNoHidden = -2;
  static constexpr int64_t kFinalHidden = -1;
};

struct ForwardResult {
  // [rows, V] float32: one row per chunk (its last token), or per token for
  // chunks with all_logits; [total tokens, V] with ForwardOptions::all_logits.
  at::Tensor logits;
  std::vector<at::Tensor> hidden;  // per chunk [n, d] (when asked)
};

// Forwards run under LibTorch's inference mode (c10::InferenceMode): no
// autograd dispatch, views without autograd metadata, no version counters.
// The tensors a forward returns are inference tensors (read them, do not
// modify them in place outside inference mode). For benchmarks: false runs
// the forwards as before. Default true.
void SetForwardInferenceMode(bool on);

class Transformer {
 public:
  // Binds every tensor the config calls for (dtype/device converted) and
  // checks shapes. Errors name the tensor and the expected and found shape.
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(const ModelConfig& config,
                                                           const TensorMap& weights,
                                                           const LoadOptions& options,
                                                           LoadReport* report);
  ~Transformer();

  const ModelConfig& config() const;

  // Encode's pooled embeddings [N, d_model] (or [d_model]) through
  // config().embedding_dense (sentence-transformers Dense modules), float32
  // [..., embedding_dim()]; unchanged without them.
  at::Tensor ProjectEmbedding(const at::Tensor& pooled) const;
  const LoadOptions& options() const;

  // The causal stack (decoder-only, or the decoder of an encoder-decoder).
  ForwardResult Decode(const std::vector<SequenceChunk>& chunks, KvCache* cache,
                       const ForwardOptions& options) const;

  // The bidirectional stack (encoder-only, or the encoder of an
  // encoder-decoder). No logits.
  ForwardResult Encode(const std::vector<SequenceChunk>& chunks,
                       const ForwardOptions& options) const;

  // Encoder-decoder: cross-attention K/V from an encoder output [S, d].
  CrossAttentionCache MakeCrossCache(const at::Tensor& memory) const;

 private:
  struct Impl;
  explicit Transformer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_TRANSFORMER_H_
