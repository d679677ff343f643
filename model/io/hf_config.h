// Hugging Face `config.json` -> ModelConfig.
//
// A Hugging Face model folder describes its architecture with a config.json
// whose keys depend on `model_type`. TranslateHfConfig maps the supported
// types onto dikkat's one ModelConfig and sets `weight_layout`, which tells
// ConvertHfWeights (hf_weights.h) how the tensors are named:
//
//   model_type  architecture   weight_layout  notes
//   gpt2        decoder-only   gpt2           pre-LN, learned positions, tanh GELU
//   bert        encoder-only   bert           post-LN, token types, embedding LayerNorm
//   llama       decoder-only   llama          RMSNorm, RoPE (+ linear, llama3 or yarn
//                                             scaling), SwiGLU, GQA
//   mistral     decoder-only   llama          llama + sliding-window attention
//   qwen2       decoder-only   llama          llama + q/k/v biases
//   qwen3       decoder-only   llama          llama + q_norm / k_norm per head
//   phi3        decoder-only   phi3           llama with fused qkv_proj / gate_up_proj
//
// Keys a config.json leaves out take the defaults of the matching
// transformers config class (GPT2Config, BertConfig, LlamaConfig, ...), as
// `from_pretrained` does. Options that change the maths in a way dikkat does
// not implement (another rope scaling type, relative position embeddings,
// cross-attention, ...) are INVALID_ARGUMENT naming the key, its value and
// what is supported; they are never silently ignored. docs/models.md lists
// the supported keys and limits.
//
// Torch-free; the functions are pure and thread-safe.
#ifndef DIKKAT_MODEL_IO_HF_CONFIG_H_
#define DIKKAT_MODEL_IO_HF_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/io/config.h"

namespace dikkat::model {

// The model_type values TranslateHfConfig accepts, in documentation order.
const std::vector<std::string>& SupportedHfModelTypes();

// Translates the text of a config.json and validates the result.
absl::StatusOr<ModelConfig> TranslateHfConfig(const std::string& config_json_text);

// Adds the end-of-sequence ids of a Hugging Face `generation_config.json`
// (`eos_token_id`: an id or a list, as `generate()` reads them) to the
// config's EOS ids. Its other keys are sampling defaults, which dikkat takes
// from each request instead. A malformed file or an id outside the
// vocabulary is INVALID_ARGUMENT.
absl::Status MergeHfGenerationConfig(const std::string& generation_config_json_text,
                                     ModelConfig* config);

// Reads the pooling of a sentence-transformers folder (`1_Pooling/config.json`:
// pooling_mode_cls_token -> kFirst, pooling_mode_mean_tokens -> kMean,
// pooling_mode_lasttoken -> kLast). Other modes (max, weighted mean) or more
// than one mode at once are INVALID_ARGUMENT.
// `include_prompt`, when given, receives the file's include_prompt (default
// true): whether the pooling covers the prompt's tokens.
absl::StatusOr<Pooling> ParseSentenceTransformersPooling(const std::string& pooling_json_text,
                                                         bool* include_prompt = nullptr);

// Reads `config_sentence_transformers.json`'s named prompts and
// default_prompt_name into the config. Malformed: INVALID_ARGUMENT.
absl::Status MergeSentenceTransformersPrompts(const std::string& json_text, ModelConfig* config);

// Reads a sentence-transformers folder's `modules.json`: Transformer and
// Pooling modules are what dikkat runs, Normalize sets default_normalize,
// Dense modules (their folders in `dense_paths`, in order) are read by
// ParseSentenceTransformersDense. A module dikkat does not apply (another
// kind, or one before the Pooling that should follow it) is INVALID_ARGUMENT
// naming it: its embeddings would not be the model's.
absl::Status MergeSentenceTransformersModules(const std::string& modules_json_text,
                                              ModelConfig* config,
                                              std::vector<std::string>* dense_paths = nullptr);

// A Dense module's `config.json` (in_features, out_features, bias,
// activation_function: torch.nn.modules.linear.Identity or
// torch.nn.modules.activation.Tanh, the default).
absl::StatusOr<EmbeddingDense> ParseSentenceTransformersDense(const std::string& json_text);

// Reads `sentence_bert_config.json`'s max_seq_length into the config (an
// integer >= 1; absent: unchanged). Malformed: INVALID_ARGUMENT.
absl::Status MergeSentenceBertConfig(const std::string& json_text, ModelConfig* config);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_HF_CONFIG_H_
