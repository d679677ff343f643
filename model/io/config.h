// ModelConfig: the one description of every architecture dikkat serves.
// Parsed from a model folder's `dikkat.json` (see docs/model-format.md);
// Hugging Face `config.json` files are translated into it by hf_config.h.
// Torch-free on purpose: the server and the tests include it.
#ifndef DIKKAT_MODEL_IO_CONFIG_H_
#define DIKKAT_MODEL_IO_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dikkat::model {

enum class Architecture {
  kDecoderOnly,     // GPT-style causal LM: prompt -> next tokens
  kEncoderOnly,     // BERT-style: text -> hidden states / pooled embedding
  kEncoderDecoder,  // "Attention Is All You Need": source -> target tokens
};

enum class NormKind { kLayerNorm, kRmsNorm };
enum class PositionKind {
  kLearned,     // a [max_positions, d_model] embedding added to tokens
  kSinusoidal,  // the fixed sin/cos table of Vaswani et al., added to tokens
  kRotary,      // RoPE applied to q and k inside attention (Llama)
  kNone,
};
enum class Activation {
  kRelu,
  kGelu,      // exact erf GELU
  kGeluTanh,  // tanh approximation (GPT-2 "gelu_new")
  kSilu,
  kSwiGlu,    // down(silu(gate(x)) * up(x)) (Llama)
  kGeGlu,     // down(gelu(gate(x)) * up(x))
  kGeGluTanh, // down(gelu_tanh(gate(x)) * up(x)) (Gemma: gelu_pytorch_tanh)
};

// How hidden states become one embedding per input (Encode).
enum class Pooling { kMean, kFirst, kLast };

// A linear layer on the pooled embedding (a sentence-transformers Dense
// module: EmbeddingGemma's 768 -> 3072 -> 768), y = act(W x + b), weights
// embedding_dense.{k}.weight [out, in] and .bias [out].
struct EmbeddingDense {
  int64_t in = 0;
  int64_t out = 0;
  bool bias = true;
  bool tanh = false;  // the activation: tanh, else identity
};

// Llama 3.1's RoPE frequency scaling (Hugging Face rope_type "llama3"):
// wavelengths under original_max_positions / high_freq_factor are kept,
// those over original_max_positions / low_freq_factor are stretched by
// `factor`, and the ones between blend the two. factor 0: off.
struct RopeLlama3Scaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_positions = 8192.0;
};

// YaRN's RoPE scaling (Hugging Face rope_type "yarn": Qwen2.5 / Qwen3 long
// context): frequency i blends between itself (extrapolated) and
// itself / factor (interpolated), by a ramp over the dimensions between the
// correction dims of beta_fast and beta_slow rotations in
// original_max_positions; cos and sin are scaled by the attention factor
// (attention_factor, or derived: 0.1 ln(factor) + 1, or with mscale and
// mscale_all_dim the ratio of those of each). factor 0: off.
struct RopeYarnScaling {
  double factor = 0.0;
  double original_max_positions = 0.0;  // the pre-YaRN context; > 0 when on
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0: unset
  double mscale_all_dim = 0.0;  // 0: unset
  double attention_factor = 0.0;  // 0: derived as above
  bool truncate = true;           // the correction range rounded outwards to whole dims
};

// The factor YaRN scales cos and sin by (RopeYarnScaling::attention_factor
// or the one derived from factor and mscale).
double YarnAttentionFactor(const RopeYarnScaling& yarn);

struct ModelConfig {
  Architecture architecture = Architecture::kDecoderOnly;

  // ---- sizes --------------------------------------------------------------
  int64_t vocab_size = 0;       // rows of the token embedding
  int64_t d_model = 0;          // hidden size
  int64_t n_heads = 0;          // query heads; d_model % n_heads == 0 unless head_dim set
  int64_t n_kv_heads = 0;       // 0 -> n_heads (MHA); 1 -> MQA; else GQA (n_heads % n_kv_heads == 0)
  int64_t head_dim = 0;         // 0 -> d_model / n_heads
  int64_t ffn_dim = 0;          // inner size of the feed-forward block
  int64_t n_layers = 0;         // decoder-only / encoder-only stack depth
  int64_t n_encoder_layers = 0; // encoder-decoder only
  int64_t n_decoder_layers = 0; // encoder-decoder only
  int64_t max_positions = 0;    // longest sequence (prompt + generated) the model accepts

  // ---- layer structure ----------------------------------------------------
  bool pre_norm = true;         // true: x + f(norm(x)); false (post-LN): norm(x + f(x))
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  bool final_norm = true;       // a norm after the last layer (decoder-only / encoder-only)
  bool encoder_final_norm = true;  // encoder-decoder: nn.Transformer always has both
  bool decoder_final_norm = true;
  Activation activation = Activation::kGelu;
  bool attention_bias = true;   // q/k/v/out projections carry biases
  bool qkv_bias_only = false;   // Qwen2: q/k/v biased, out projection not
  // Qwen3: each head of q and k goes through an RMSNorm over head_dim (its
  // own weight [head_dim], eps norm_eps) after the projection, before RoPE.
  bool qk_norm = false;
  // Gemma 2 / 3: each sublayer's output is normalized too before it joins
  // the residual: x + post_norm(f(norm(x))) (weights post_norm1 after
  // self-attention, post_norm2 after the feed-forward). pre_norm only.
  bool sandwich_norm = false;
  // RMSNorms scale by (norm_weight_offset + weight): Gemma stores its norm
  // weights as offsets from 1 (its RMSNorm computes x * (1 + w)). 0 for
  // every other family. Added once at load (model_weights.cc). RMSNorm
  // only: refused with LayerNorms unless qk_norm's RMSNorms take it.
  double norm_weight_offset = 0.0;
  // Attention scores scaled by 1/sqrt(query_pre_attn_scalar) instead of
  // 1/sqrt(head_dim) (Gemma's query_pre_attn_scalar); 0 = head_dim.
  double query_pre_attn_scalar = 0.0;
  bool mlp_bias = true;
  bool norm_bias = true;        // LayerNorm with a bias (RMSNorm never has one)

  // ---- positions ----------------------------------------------------------
  PositionKind positions = PositionKind::kLearned;
  double rope_theta = 10000.0;
  double rope_scaling = 1.0;    // linear RoPE scaling: positions divided by this factor
  RopeLlama3Scaling rope_llama3;  // Llama 3.1's frequency scaling (off by default)
  RopeYarnScaling rope_yarn;      // YaRN (off by default)
  int64_t sliding_window = 0;   // 0 = full attention; else keys within the last N positions
  // With a sliding window, the layers (0-based, ascending) that attend to
  // every key all the same (Gemma 3: every 6th); empty: every layer slides.
  std::vector<int64_t> full_attention_layers;
  // The sliding layers' own RoPE base, without the scalings above (Gemma 3's
  // rope_local_base_freq); 0: every layer rotates by the same table.
  double rope_local_theta = 0.0;

  // ---- embeddings and output ----------------------------------------------
  bool tie_embeddings = true;   // lm_head shares the token embedding matrix
  bool share_encoder_decoder_embeddings = false;  // encoder-decoder: one table for both
  double embedding_scale = 1.0; // tokens scaled by this (Vaswani et al. use sqrt(d_model))
  // The scale rounded to the token table's dtype first, as Gemma's
  // embedding does (sqrt(3072) = 55.43 is 55.5 in bfloat16); float32 and
  // int8 tables keep it exact.
  bool embedding_scale_in_weight_dtype = false;
  int64_t type_vocab_size = 0;  // BERT token types (0 = none)
  bool embedding_norm = false;  // BERT: LayerNorm after summing the embeddings
  Pooling default_pooling = Pooling::kMean;
  // sentence-transformers folders: embeddings L2-normalized unless a request
  // says otherwise (modules.json lists Normalize), and the longest input it
  // embeds (sentence_bert_config.json's max_seq_length; 0 = max_positions):
  // the engine serves no longer a context, as vLLM does.
  bool default_normalize = false;
  int64_t max_seq_length = 0;
  // Linear layers Encode applies to the pooled embedding, in order, before
  // normalizing (sentence-transformers Dense modules); empty: none.
  std::vector<EmbeddingDense> embedding_dense;
  // sentence-transformers' named prompts (config_sentence_transformers.json:
  // EmbeddingGemma's "query": "task: search result | query: "), put before a
  // text input's text when an Encode request names one, or by default
  // default_prompt_name (empty: none). pooling_includes_prompt false (a
  // Pooling module with include_prompt false) leaves the prompt's tokens
  // out of the pooling, which dikkat does not do: prompts are refused then.
  std::map<std::string, std::string> prompts;
  std::string default_prompt_name;
  bool pooling_includes_prompt = true;

  // The dtype the checkpoint was saved in (config.json's torch_dtype, or its
  // newer name dtype: "float32", "bfloat16", "float16"); empty: not said.
  // `--dtype auto` loads the weights in it.
  std::string saved_dtype;

  // ---- sampling defaults ----------------------------------------------------
  // generation_config.json's recommended sampling (Qwen2.5: temperature 0.7,
  // top_p 0.8, top_k 20, repetition_penalty 1.05): what a request that does
  // not set one gets, as vLLM applies them. Unset: the server's defaults.
  struct SamplingDefaults {
    std::optional<float> temperature;
    std::optional<float> top_p;
    std::optional<int32_t> top_k;
    std::optional<float> repetition_penalty;
  };
  SamplingDefaults sampling_defaults;

  // ---- special tokens (-1 = none) -----------------------------------------
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  int64_t pad_token_id = -1;
  int64_t decoder_start_token_id = -1;  // encoder-decoder: first decoder input
  // Further ids that end generation as eos_token_id does (Llama-3 Instruct's
  // <|eot_id|>, Qwen2's <|endoftext|> beside <|im_end|>): config.json's and
  // generation_config.json's lists past their first id, and the tokenizer's
  // own end-of-sequence token. Never holds eos_token_id or a duplicate.
  std::vector<int64_t> more_eos_token_ids;

  // ---- provenance ---------------------------------------------------------
  std::string name;             // human name, e.g. "gpt2" or "dikkat-tiny-lm"
  std::string weight_layout = "dikkat";  // dikkat | gpt2 | bert | llama | phi3 | gemma3 (name mapping)

  // Derived helpers (valid after Validate()).
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  bool is_gated() const {
    return activation == Activation::kSwiGlu || activation == Activation::kGeGlu ||
           activation == Activation::kGeGluTanh;
  }
  // Whether layer `l` of the decoder-only / encoder-only stack attends
  // through sliding_window.
  bool layer_slides(int64_t l) const;
  // Number of layers that own a KV cache (decoder self-attention).
  int64_t cached_layers() const {
    switch (architecture) {
      case Architecture::kEncoderDecoder:
        return n_decoder_layers;
      case Architecture::kDecoderOnly:
        return n_layers;
      case Architecture::kEncoderOnly:
        return 0;  // never generates: no KV cache
    }
    return 0;
  }
  bool has_decoder() const { return architecture != Architecture::kEncoderOnly; }
  // The width of Encode's pooled embeddings (after embedding_dense).
  int64_t embedding_dim() const {
    return embedding_dense.empty() ? d_model : embedding_dense.back().out;
  }
  bool has_encoder() const { return architecture != Architecture::kDecoderOnly; }
};

// Every id that ends generation as EOS: eos_token_id (when set) first, then
// more_eos_token_ids.
std::vector<int64_t> EosTokenIds(const ModelConfig& config);
bool IsEosToken(const ModelConfig& config, int64_t id);
// Adds `id` to the config's EOS ids (as eos_token_id when that is unset)
// unless it is -1 or already one of them.
void AddEosTokenId(ModelConfig* config, int64_t id);

// Checks every invariant; the message names the field, its value and what is allowed.
absl::Status Validate(const ModelConfig& config);

// Parses dikkat's own JSON format (docs/model-format.md) and validates it.
absl::StatusOr<ModelConfig> ParseModelConfigJson(const std::string& json_text);
// Serializes to the same format (round-trips through ParseModelConfigJson).
std::string ModelConfigToJson(const ModelConfig& config);

const char* ArchitectureName(Architecture a);
const char* ActivationName(Activation a);
const char* PoolingName(Pooling p);
const char* NormName(NormKind n);
const char* PositionName(PositionKind p);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_IO_CONFIG_H_
