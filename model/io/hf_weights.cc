#include "model/io/hf_weights.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "model/io/model_folder.h"

namespace dikkat::model {
namespace {

// One HF module -> one canonical module; `param` ("weight", "bias") is joined
// with `sep` ("." normally, "_" for nn.MultiheadAttention's in_proj_weight).
struct ModuleRule {
  absl::string_view hf;
  absl::string_view dikkat;
  bool transpose_weight = false;  // GPT-2 Conv1D: [in, out] -> [out, in]
  absl::string_view sep = ".";
  // Set: the tensor is two stacked along dim 0 (Phi-3's gate_up_proj):
  // its first half is `dikkat`, its second this module (views, no copy).
  absl::string_view second_half = {};
};

struct Layout {
  absl::string_view prefix;        // optional on every name (HF's *Model vs *ForXxx)
  absl::string_view layer_prefix;  // before the layer index
  std::vector<ModuleRule> top;     // outside the layers
  std::vector<ModuleRule> layer;   // inside layer i (after "<layer_prefix>i.")
  std::vector<absl::string_view> drop_top;    // buffers, whole names after the prefix
  std::vector<absl::string_view> drop_layer;  // buffers, names after "<layer_prefix>i."
  // Further optional prefixes, tried before `prefix` in this order (Gemma
  // 3's multimodal checkpoints keep the text model under language_model.).
  std::vector<absl::string_view> more_prefixes = {};
};

const Layout& Gpt2Layout() {
  static const auto* layout = new Layout{
      "transformer.",
      "h.",
      {{"wte", "embed_tokens"}, {"wpe", "embed_positions"}, {"ln_f", "final_norm"},
       {"lm_head", "lm_head"}},
      {{"ln_1", "norm1"},
       {"ln_2", "norm2"},
       {"attn.c_attn", "self_attn.in_proj", true, "_"},
       {"attn.c_proj", "self_attn.out_proj", true},
       {"mlp.c_fc", "linear1", true},
       {"mlp.c_proj", "linear2", true}},
      {},
      {"attn.bias", "attn.masked_bias"},  // causal-mask buffers
  };
  return *layout;
}

const Layout& BertLayout() {
  static const auto* layout = new Layout{
      "bert.",
      "encoder.layer.",
      {{"embeddings.word_embeddings", "embed_tokens"},
       {"embeddings.position_embeddings", "embed_positions"},
       {"embeddings.token_type_embeddings", "embed_types"},
       {"embeddings.LayerNorm", "embed_norm"}},
      {{"attention.self.query", "self_attn.q_proj"},
       {"attention.self.key", "self_attn.k_proj"},
       {"attention.self.value", "self_attn.v_proj"},
       {"attention.output.dense", "self_attn.out_proj"},
       {"attention.output.LayerNorm", "norm1"},  // post-LN after attention
       {"intermediate.dense", "linear1"},
       {"output.dense", "linear2"},
       {"output.LayerNorm", "norm2"}},  // post-LN after the feed-forward
      {"embeddings.position_ids"},
      {},
  };
  return *layout;
}

const Layout& LlamaLayout() {
  static const auto* layout = new Layout{
      "model.",
      "layers.",
      {{"embed_tokens", "embed_tokens"}, {"norm", "final_norm"}, {"lm_head", "lm_head"}},
      {{"self_attn.q_proj", "self_attn.q_proj"},
       {"self_attn.k_proj", "self_attn.k_proj"},
       {"self_attn.v_proj", "self_attn.v_proj"},
       {"self_attn.o_proj", "self_attn.out_proj"},
       {"self_attn.q_norm", "self_attn.q_norm"},  // Qwen3 (qk_norm)
       {"self_attn.k_norm", "self_attn.k_norm"},
       {"mlp.gate_proj", "linear_gate"},
       {"mlp.up_proj", "linear1"},
       {"mlp.down_proj", "linear2"},
       {"input_layernorm", "norm1"},
       {"post_attention_layernorm", "norm2"}},
      {},
      {"self_attn.rotary_emb.inv_freq"},
  };
  return *layout;
}

// Phi-3: Llama's blocks with q/k/v fused into qkv_proj ([q; k; v] rows, as
// nn.MultiheadAttention's in_proj) and gate/up into gate_up_proj ([gate; up]).
const Layout& Phi3Layout() {
  static const auto* layout = new Layout{
      "model.",
      "layers.",
      {{"embed_tokens", "embed_tokens"}, {"norm", "final_norm"}, {"lm_head", "lm_head"}},
      {{"self_attn.qkv_proj", "self_attn.in_proj", false, "_"},
       {"self_attn.o_proj", "self_attn.out_proj"},
       {"mlp.gate_up_proj", "linear_gate", false, ".", "linear1"},
       {"mlp.down_proj", "linear2"},
       {"input_layernorm", "norm1"},
       {"post_attention_layernorm", "norm2"}},
      {},
      {"self_attn.rotary_emb.inv_freq"},
  };
  return *layout;
}

// Gemma 3: Llama's names, but post_attention_layernorm is the norm on the
// attention's output (sandwich), and the feed-forward has its own pair.
const Layout& Gemma3Layout() {
  static const auto* layout = new Layout{
      "model.",
      "layers.",
      {{"embed_tokens", "embed_tokens"}, {"norm", "final_norm"}, {"lm_head", "lm_head"}},
      {{"self_attn.q_proj", "self_attn.q_proj"},
       {"self_attn.k_proj", "self_attn.k_proj"},
       {"self_attn.v_proj", "self_attn.v_proj"},
       {"self_attn.o_proj", "self_attn.out_proj"},
       {"self_attn.q_norm", "self_attn.q_norm"},
       {"self_attn.k_norm", "self_attn.k_norm"},
       {"mlp.gate_proj", "linear_gate"},
       {"mlp.up_proj", "linear1"},
       {"mlp.down_proj", "linear2"},
       {"input_layernorm", "norm1"},
       {"post_attention_layernorm", "post_norm1"},
       {"pre_feedforward_layernorm", "norm2"},
       {"post_feedforward_layernorm", "post_norm2"}},
      {"rotary_emb.inv_freq", "rotary_emb_local.inv_freq"},
      {},
      // Gemma3ForConditionalGeneration (4B and up): transformers < 4.52
      // saved the text model as language_model.model.*, later ones as
      // model.language_model.*; its lm_head as language_model.lm_head.
      {"language_model.model.", "model.language_model.", "language_model."},
  };
  return *layout;
}

bool Contains(const std::vector<absl::string_view>& names, absl::string_view name) {
  for (absl::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

// "module.param" -> the rule for `module`, or null.
const ModuleRule* FindRule(const std::vector<ModuleRule>& rules, absl::string_view module) {
  for (const ModuleRule& rule : rules) {
    if (rule.hf == module) return &rule;
  }
  return nullptr;
}

enum class Outcome { kRenamed, kDropped, kUnknown };

struct Mapped {
  Outcome outcome = Outcome::kUnknown;
  std::string name;
  bool transpose = false;
  std::string second_half;  // set: `name` is the first half (dim 0), this the second
};

Mapped MapName(const Layout& layout, std::string name) {
  Mapped m;
  // TF-converted BERT checkpoints name LayerNorm parameters gamma/beta.
  if (absl::EndsWith(name, "LayerNorm.gamma")) {
    name = absl::StrCat(name.substr(0, name.size() - 5), "weight");
  } else if (absl::EndsWith(name, "LayerNorm.beta")) {
    name = absl::StrCat(name.substr(0, name.size() - 4), "bias");
  }
  absl::string_view rest = name;
  bool consumed = false;
  for (absl::string_view p : layout.more_prefixes) {
    if (!consumed) consumed = absl::ConsumePrefix(&rest, p);
  }
  if (!consumed) absl::ConsumePrefix(&rest, layout.prefix);
  const std::vector<ModuleRule>* rules = &layout.top;
  const std::vector<absl::string_view>* drops = &layout.drop_top;
  std::string out_prefix;
  if (absl::ConsumePrefix(&rest, layout.layer_prefix)) {
    const size_t dot = rest.find('.');
    int64_t index = 0;
    if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &index) ||
        index < 0) {
      return m;
    }
    rest.remove_prefix(dot + 1);
    rules = &layout.layer;
    drops = &layout.drop_layer;
    out_prefix = absl::StrCat("layers.", index, ".");
  }
  if (Contains(*drops, rest)) {
    m.outcome = Outcome::kDropped;
    return m;
  }
  const size_t dot = rest.rfind('.');
  if (dot == absl::string_view::npos) return m;
  const absl::string_view param = rest.substr(dot + 1);
  if (param != "weight" && param != "bias") return m;
  const ModuleRule* rule = FindRule(*rules, rest.substr(0, dot));
  if (rule == nullptr) return m;
  m.outcome = Outcome::kRenamed;
  m.name = absl::StrCat(out_prefix, rule->dikkat, rule->sep, param);
  m.transpose = rule->transpose_weight && param == "weight";
  if (!rule->second_half.empty()) {
    m.second_half = absl::StrCat(out_prefix, rule->second_half, rule->sep, param);
  }
  return m;
}

const Layout* LayoutFor(const std::string& weight_layout) {
  if (weight_layout == "gpt2") return &Gpt2Layout();
  if (weight_layout == "bert") return &BertLayout();
  if (weight_layout == "llama") return &LlamaLayout();
  if (weight_layout == "phi3") return &Phi3Layout();
  if (weight_layout == "gemma3") return &Gemma3Layout();
  return nullptr;
}

}  // namespace

absl::StatusOr<HfWeights> ConvertHfWeights(const ModelConfig& config, const TensorMap& hf) {
  const Layout* layout = LayoutFor(config.weight_layout);
  if (layout == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_layout '", config.weight_layout,
                     "' has no Hugging Face name mapping; supported: gpt2, bert, llama, phi3, gemma3"));
  }
  HfWeights out;
  for (const auto& [hf_name, tensor] : hf) {
    Mapped m = MapName(*layout, hf_name);
    if (m.outcome == Outcome::kDropped ||
        (m.outcome == Outcome::kRenamed && m.name == "lm_head.weight" && config.tie_embeddings)) {
      out.dropped.push_back(hf_name);
      continue;
    }
    const std::string& name = m.outcome == Outcome::kRenamed ? m.name : hf_name;
    at::Tensor t = tensor;
    if (m.transpose) {
      if (t.dim() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", hf_name, "' is a GPT-2 Conv1D weight and must be 2-D [in, out]; "
                         "it has ", t.dim(), " dimensions"));
      }
      t = t.t();  // [in, out] -> [out, in], a strided view
    }
    std::vector<std::pair<std::string, at::Tensor>> parts;
    if (!m.second_half.empty()) {
      if (t.dim() < 1 || t.size(0) % 2 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", hf_name, "' holds two stacked weights and needs an even first dimension; "
            "its shape is [", absl::StrJoin(t.sizes(), ", "), "]"));
      }
      const int64_t half = t.size(0) / 2;
      parts.emplace_back(name, t.narrow(0, 0, half));
      parts.emplace_back(m.second_half, t.narrow(0, half, half));
    } else {
      parts.emplace_back(name, std::move(t));
    }
    for (auto& [part_name, part] : parts) {
      auto [it, inserted] = out.tensors.emplace(part_name, std::move(part));
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensors '", out.source.count(part_name) ? out.source[part_name] : part_name,
            "' and '", hf_name, "' both map to '", part_name,
            "'; a checkpoint must name each weight once"));
      }
      if (m.outcome == Outcome::kRenamed) out.source[part_name] = hf_name;
    }
  }
  return out;
}

absl::Status DescribeHfLoadError(const absl::Status& status, const ModelConfig& config,
                                 const HfWeights& weights) {
  if (status.ok()) return status;
  std::string message(status.message());
  for (const auto& [name, hf_name] : weights.source) {
    const std::string quoted = absl::StrCat("'", name, "'");
    if (absl::StrContains(message, quoted)) {
      message = absl::StrReplaceAll(
          message, {{quoted, absl::StrCat(quoted, " (Hugging Face tensor '", hf_name, "')")}});
      break;
    }
  }
  return absl::Status(status.code(),
                      absl::StrCat(message, " [tensor names translated from the Hugging Face ",
                                   config.weight_layout, " layout; see docs/models.md]"));
}

absl::Status AddDenseModuleWeights(const std::string& folder, const ModelConfig& config,
                                   HfWeights* weights) {
  DIKKAT_ASSIGN_OR_RETURN(const std::vector<std::string> modules, DenseModulePaths(folder));
  if (modules.size() != config.embedding_dense.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        folder, ": modules.json lists ", modules.size(), " Dense modules, the config ",
        config.embedding_dense.size()));
  }
  for (size_t k = 0; k < modules.size(); ++k) {
    const std::string module = (std::filesystem::path(folder) / modules[k]).string();
    DIKKAT_ASSIGN_OR_RETURN(const std::string path, FindWeightsFile(module));
    absl::StatusOr<TensorMap> tensors = ReadWeights(path);
    if (!tensors.ok()) {
      return absl::Status(tensors.status().code(),
                          absl::StrCat(path, ": ", tensors.status().message()));
    }
    for (auto& [name, tensor] : *tensors) {
      if (name != "linear.weight" && name != "linear.bias") {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor '", name,
            "' is not a Dense module's (linear.weight, linear.bias); dikkat would not apply it"));
      }
      const std::string canonical =
          absl::StrCat("embedding_dense.", k, name == "linear.weight" ? ".weight" : ".bias");
      weights->source[canonical] = absl::StrCat(modules[k], "/", name);
      weights->tensors[canonical] = std::move(tensor);
    }
    const bool bias = config.embedding_dense[k].bias;
    if (tensors->count("linear.weight") == 0 || (tensors->count("linear.bias") != 0) != bias) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": a Dense module ", bias ? "with" : "without",
          " a bias (its config.json) needs linear.weight", bias ? " and linear.bias" : " only",
          "; the file holds ", tensors->size(), " tensor(s)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckUnusedHfTensors(const std::vector<std::string>& unused, const HfWeights& hf,
                                  const ModelConfig& config) {
  std::vector<std::string> named;
  for (const std::string& name : unused) {
    auto it = hf.source.find(name);
    const std::string& original = it != hf.source.end() ? it->second : name;
    // Task heads on top of the body dikkat runs (BERT's pooler and
    // pre-training heads; classification, question-answering and
    // multiple-choice heads of any layout): not applied, and they change
    // nothing the body computes.
    bool head = false;
    for (const char* prefix : {"pooler.", "bert.pooler.", "cls.", "classifier.", "qa_outputs.",
                               "score.", "multiple_choice_head."}) {
      head = head || absl::StartsWith(original, prefix);
    }
    // Gemma 3's image encoder and projector (4B and up): dikkat serves the
    // text model alone, which they do not change.
    if (config.weight_layout == "gemma3") {
      for (const char* prefix : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                 "model.multi_modal_projector."}) {
        head = head || absl::StartsWith(original, prefix);
      }
    }
    if (head) continue;
    named.push_back(original);
  }
  if (named.empty()) return absl::OkStatus();
  std::sort(named.begin(), named.end());
  // Both halves of a split tensor (Phi-3's gate_up_proj) name it once.
  named.erase(std::unique(named.begin(), named.end()), named.end());
  const size_t shown = std::min<size_t>(named.size(), 5);
  return absl::InvalidArgumentError(absl::StrCat(
      "the checkpoint has ", named.size(), " tensor(s) the '", config.weight_layout,
      "' model built from config.json does not use (",
      absl::StrJoin(named.begin(), named.begin() + shown, ", "),
      named.size() > shown ? ", ..." : "",
      "): it is not the model dikkat would run (a variant with weights of its own), and would "
      "answer wrongly"));
}

}  // namespace dikkat::model
