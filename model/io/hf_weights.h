// Hugging Face tensor names -> dikkat's canonical names (docs/model-format.md).
//
// ConvertHfWeights renames the tensors of a Hugging Face checkpoint according
// to ModelConfig::weight_layout (set by TranslateHfConfig):
//   gpt2   `transformer.` prefix optional; Conv1D weights ([in, out]) are
//          transposed into Linear's [out, in]; c_attn becomes the fused
//          in_proj; the attn.bias / attn.masked_bias mask buffers are dropped.
//   bert   `bert.` prefix optional; query/key/value -> q/k/v_proj, the
//          post-LN LayerNorms -> norm1/norm2, embeddings.LayerNorm ->
//          embed_norm (old gamma/beta names accepted); position_ids dropped.
//   llama  (also mistral, qwen2, qwen3) `model.` prefix optional; o_proj ->
//          out_proj, gate/up/down_proj -> linear_gate/linear1/linear2,
//          q_norm / k_norm kept (qwen3); rotary_emb.inv_freq buffers dropped.
//   phi3   as llama, but qkv_proj -> the fused in_proj and gate_up_proj split
//          (views) into linear_gate (first half) and linear1 (second).
//   gemma3 as llama, but post_attention_layernorm -> post_norm1 (on the
//          attention's output), pre_/post_feedforward_layernorm -> norm2 /
//          post_norm2; the multimodal checkpoints' language_model.model.,
//          model.language_model. and language_model. prefixes are optional
//          too, and their image encoder is an allowed unused tensor.
// Tensors the layout does not know (BERT's pooler and MLM head, ...) are
// kept under their own name, so Transformer::Load reports them as unused
// (and CheckUnusedHfTensors says whether that is fine).
// With tied embeddings a separate lm_head.weight is dropped as a duplicate.
//
// No tensor data is copied: renamed tensors share their storage (a mapped
// safetensors file stays mapped), transposed ones are strided views that
// Transformer::Load makes contiguous once. Thread-safe (pure function).
#ifndef DIKKAT_MODEL_IO_HF_WEIGHTS_H_
#define DIKKAT_MODEL_IO_HF_WEIGHTS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/io/config.h"
#include "model/io/weights.h"

namespace dikkat::model {

struct HfWeights {
  TensorMap tensors;                          // canonical names (+ unknown HF names as they were)
  std::map<std::string, std::string> source;  // canonical name -> the HF name it came from
  std::vector<std::string> dropped;           // HF buffers and tied duplicates, not weights
};

// Renames `hf` for config.weight_layout. INVALID_ARGUMENT for a layout that is
// not gpt2 / bert / llama, for two HF names that map to the same tensor (e.g.
// with and without the optional prefix), and for a GPT-2 Conv1D weight that
// is not 2-D.
absl::StatusOr<HfWeights> ConvertHfWeights(const ModelConfig& config, const TensorMap& hf);

// Adds the HF origin to an error from Transformer::Load: a canonical tensor
// name quoted in the message gets "(Hugging Face tensor 'x')" after it, and
// every message says which layout the names were translated from.
// The checkpoint's tensors the model did not take (`unused`, as
// LoadReport::unused_tensors names them): a head dikkat does not run (BERT's
// pooler, pre-training and classifier heads) is fine; anything else means the
// checkpoint is not the model dikkat would run (norms, biases or
// projections config.json does not describe) and would answer wrongly
// without a word: INVALID_ARGUMENT naming them, by their Hugging Face names.
absl::Status CheckUnusedHfTensors(const std::vector<std::string>& unused, const HfWeights& hf,
                                  const ModelConfig& config);

absl::Status DescribeHfLoadError(const absl::Status& status, const ModelConfig& config,
                                 const HfWeights& weights);

// The weights of a sentence-transformers folder's Dense modules
// (DenseModulePaths: each module folder's model.safetensors or
// pytorch_model.bin, `linear.weight` and `linear.bias`), added to `weights`
// as embedding_dense.{k}.weight / .bias with their source names. Any other
// tensor in a module, a missing one (the bias per config.embedding_dense)
// or a missing file is an error naming the module's file.
absl::Status AddDenseModuleWeights(const std::string& folder, const ModelConfig& config,
                                   HfWeights* weights);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_HF_WEIGHTS_H_
