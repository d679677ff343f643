#!/usr/bin/python3
"""Hugging Face model folders and PyTorch reference outputs for dikkat's
hf_*_test suites.

  make_hf_fixtures.py OUT_DIR SUITE...

SUITE is one or more of:
  gpt2     GPT-2 built from nn.TransformerEncoderLayer(norm_first=True,
           tanh-GELU) + causal mask, learned positions, final LayerNorm,
           tied head; weights saved under GPT-2's HF names (Conv1D [in, out]).
  bert     BERT: word + position + token-type embeddings, LayerNorm, then
           post-LN nn.TransformerEncoderLayer layers (exact GELU).
  llama    Llama written plainly below: RMSNorm, RoPE rotate-half with
           rope_theta and linear rope_scaling, SwiGLU, GQA (2 kv heads for
           4 query heads), untied lm_head.
  mistral  the same reference with a sliding window, one kv head (MQA) and a
           head_dim that is not hidden_size / heads.
  qwen2    the same reference with q/k/v biases (o_proj none), tied head,
           rope_scaling in the newer {"rope_type": ...} spelling.
  yarn     the qwen2 reference with YaRN's rope_scaling (frequencies blended
           between extrapolation and interpolation by a ramp over the
           dimensions, cos/sin scaled by 0.1 ln(factor) + 1), as the YaRN
           paper (arXiv 2309.00071, "NTK-by-parts" + the attention scale)
           defines it.
  phi3     the same reference saved under Phi-3's names: q/k/v stacked into
           qkv_proj and gate/up into gate_up_proj, a sliding window.
  qwen3    the same reference with Qwen3's q_norm / k_norm (an RMSNorm over
           each head of q and k before RoPE), a head_dim that is not
           hidden_size / heads, no biases, tied head.
  gemma3   Gemma 3's text model written plainly (Gemma3Reference below):
           (1 + w) RMSNorms before and after each sublayer, q/k norms,
           tanh-GeGLU, scaled tokens, query_pre_attn_scalar, local layers
           with a window and their own RoPE base between global ones.
  embeddinggemma  the gemma3 reference attending both ways, in a
           sentence-transformers folder (mean pooling, two Dense modules,
           Normalize): hidden states and embeddings.

Each suite writes OUT_DIR/SUITE/ with cases.json (the layouts and counts),
expected.safetensors (prompts, reference logits or hidden states, greedy
tokens) and one folder per layout, each a config.json plus:
  st/       model.safetensors
  bin/      pytorch_model.bin (torch.save of the state_dict, zip format)
  sharded/  two safetensors shards + model.safetensors.index.json
The GPT-2 st/ folder also gets a tiny byte-level vocab.json + merges.txt so
that the whole folder loads through LoadModelFolder. Names vary between
layouts the way HF's own classes vary (with and without the
transformer./bert./model. prefix, a tied lm_head saved or not, buffers like
attn.bias and rotary_emb.inv_freq present or not).

There is no safetensors package here: the format is written by hand (8-byte
little-endian header length, JSON header, raw little-endian bytes). Seeds
are fixed.
"""
import collections
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F
from torch import nn

STEPS = 32  # greedy tokens generated per prompt

ST_DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32",
             torch.uint8: "U8", torch.bool: "BOOL"}


def write_safetensors(path, tensors):
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def save_folder(folder, layout, config, state):
    """One HF folder: config.json + the weights in `layout`."""
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "config.json"), config)
    if layout == "st":
        write_safetensors(os.path.join(folder, "model.safetensors"), state)
    elif layout == "bin":
        torch.save(collections.OrderedDict(state), os.path.join(folder, "pytorch_model.bin"))
    elif layout == "sharded":
        names = sorted(state)
        half = len(names) // 2
        weight_map = {}
        for i, part in enumerate((names[:half], names[half:])):
            file = "model-%05d-of-00002.safetensors" % (i + 1)
            write_safetensors(os.path.join(folder, file), {n: state[n] for n in part})
            weight_map.update({n: file for n in part})
        total = sum(t.numel() * t.element_size() for t in state.values())
        write_json(os.path.join(folder, "model.safetensors.index.json"),
                   {"metadata": {"total_size": total}, "weight_map": weight_map})
    else:
        raise ValueError(layout)


def perturbed_norm(norm, gen):
    """LayerNorm/RMSNorm parameters away from 1/0 so swapped norms show up."""
    with torch.no_grad():
        norm.weight.copy_(1 + 0.2 * torch.randn(norm.weight.shape, generator=gen))
        if getattr(norm, "bias", None) is not None:
            norm.bias.copy_(0.1 * torch.randn(norm.bias.shape, generator=gen))


def greedy(logits_fn, prompt, steps=STEPS):
    """Greedy decoding by recomputing the whole sequence each step."""
    ids = list(prompt)
    out = []
    for _ in range(steps):
        nxt = int(logits_fn(ids)[-1].argmax())
        out.append(nxt)
        ids.append(nxt)
    return out


def top2_gap(logits_fn, prompt, tokens):
    """Smallest top-1/top-2 logit gap along a greedy run (how safe the
    comparison of generated tokens is against rounding)."""
    ids = list(prompt)
    gap = float("inf")
    for t in tokens:
        top = logits_fn(ids)[-1].topk(2).values
        gap = min(gap, float(top[0] - top[1]))
        ids.append(t)
    return gap


def prompts(gen, vocab, lengths):
    return [torch.randint(0, vocab, (n,), generator=gen) for n in lengths]


# ---------------------------------------------------------------------------
# GPT-2
def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the published algorithm)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_gpt2_tokenizer(folder):
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    merges = [("h", "e"), ("\u0120", "t"), ("\u0120t", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    write_json(os.path.join(folder, "vocab.json"), vocab)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write("%s %s\n" % (a, b))
    return vocab["<|endoftext|>"]


def suite_gpt2(out):
    gen = torch.Generator().manual_seed(1234)
    torch.manual_seed(1234)
    d, heads, layers, vocab, positions, eps = 64, 4, 2, 300, 64, 1e-5
    blocks = nn.ModuleList(
        nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0,
                                   activation=lambda x: F.gelu(x, approximate="tanh"),
                                   layer_norm_eps=eps, batch_first=True, norm_first=True)
        for _ in range(layers)).eval()
    wte = 0.3 * torch.randn(vocab, d, generator=gen)
    wpe = 0.3 * torch.randn(positions, d, generator=gen)
    ln_f = nn.LayerNorm(d, eps=eps)
    for block in blocks:
        perturbed_norm(block.norm1, gen)
        perturbed_norm(block.norm2, gen)
        with torch.no_grad():  # nn.MultiheadAttention starts with zero biases
            block.self_attn.in_proj_bias.copy_(0.1 * torch.randn(3 * d, generator=gen))
            block.self_attn.out_proj.bias.copy_(0.1 * torch.randn(d, generator=gen))
            # Stronger sublayer outputs: with a tied head and the token's own
            # embedding dominating the residual stream, greedy decoding would
            # just repeat the last token, which tests little.
            block.self_attn.out_proj.weight.mul_(8)
            block.linear2.weight.mul_(8)
    perturbed_norm(ln_f, gen)

    @torch.no_grad()
    def logits_fn(ids):
        t = len(ids)
        x = (wte[torch.tensor(ids)] + wpe[:t]).unsqueeze(0)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        for block in blocks:
            x = block(x, src_mask=mask)
        return ln_f(x[0]) @ wte.t()  # [T, V]

    # HF names: Conv1D stores [in, out], i.e. the transposed Linear weight.
    hf = {"wte.weight": wte, "wpe.weight": wpe,
          "ln_f.weight": ln_f.weight, "ln_f.bias": ln_f.bias}
    for i, block in enumerate(blocks):
        p = "h.%d." % i
        attn = block.self_attn
        hf.update({
            p + "ln_1.weight": block.norm1.weight, p + "ln_1.bias": block.norm1.bias,
            p + "attn.c_attn.weight": attn.in_proj_weight.t(),
            p + "attn.c_attn.bias": attn.in_proj_bias,
            p + "attn.c_proj.weight": attn.out_proj.weight.t(),
            p + "attn.c_proj.bias": attn.out_proj.bias,
            p + "ln_2.weight": block.norm2.weight, p + "ln_2.bias": block.norm2.bias,
            p + "mlp.c_fc.weight": block.linear1.weight.t(),
            p + "mlp.c_fc.bias": block.linear1.bias,
            p + "mlp.c_proj.weight": block.linear2.weight.t(),
            p + "mlp.c_proj.bias": block.linear2.bias,
            # GPT2Attention's causal-mask buffers, present in older checkpoints.
            p + "attn.bias": torch.tril(torch.ones(positions, positions, dtype=torch.uint8))
                                  .view(1, 1, positions, positions),
            p + "attn.masked_bias": torch.tensor(-1e4),
        })
    hf = {k: v.detach().contiguous().clone() for k, v in hf.items()}
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
              "activation_function": "gelu_new", "n_embd": d, "n_head": heads,
              "n_layer": layers, "n_positions": positions, "n_inner": None,
              "layer_norm_epsilon": eps, "vocab_size": vocab,
              "bos_token_id": vocab - 1, "eos_token_id": vocab - 1,
              "torch_dtype": "float32", "transformers_version": "4.40.0"}
    prefixed = {"transformer." + k: v for k, v in hf.items()}
    # safetensors: GPT2LMHeadModel names, the tied lm_head left out (as HF does).
    save_folder(os.path.join(out, "st"), "st", config, prefixed)
    # pytorch_model.bin: lm_head.weight saved too, sharing wte's storage.
    with_head = dict(prefixed)
    with_head["lm_head.weight"] = prefixed["transformer.wte.weight"]
    save_folder(os.path.join(out, "bin"), "bin", config, with_head)
    # sharded: GPT2Model names (no prefix).
    save_folder(os.path.join(out, "sharded"), "sharded", config, hf)
    eot = write_gpt2_tokenizer(os.path.join(out, "st"))
    assert eot < vocab

    expected = {}
    lengths = [7, 12]
    for b, prompt in enumerate(prompts(gen, vocab, lengths)):
        ids = prompt.tolist()
        expected["prompt_%d" % b] = prompt.to(torch.int64)
        expected["logits_%d" % b] = logits_fn(ids)
        tokens = greedy(logits_fn, ids)
        expected["greedy_%d" % b] = torch.tensor(tokens, dtype=torch.int64)
        print("gpt2 prompt %d: greedy top-2 gap %.3g" % (b, top2_gap(logits_fn, ids, tokens)))
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "cases.json"),
               {"layouts": ["st", "bin", "sharded"], "sequences": len(lengths), "steps": STEPS})


# ---------------------------------------------------------------------------
# BERT
def suite_bert(out):
    gen = torch.Generator().manual_seed(4321)
    torch.manual_seed(4321)
    d, heads, layers, ffn, vocab, positions, types, eps = 64, 4, 2, 96, 200, 40, 2, 1e-12
    word = 0.5 * torch.randn(vocab, d, generator=gen)
    pos = 0.5 * torch.randn(positions, d, generator=gen)
    typ = 0.5 * torch.randn(types, d, generator=gen)
    embed_norm = nn.LayerNorm(d, eps=eps)
    perturbed_norm(embed_norm, gen)
    blocks = nn.ModuleList(
        nn.TransformerEncoderLayer(d, heads, dim_feedforward=ffn, dropout=0.0, activation="gelu",
                                   layer_norm_eps=eps, batch_first=True, norm_first=False)
        for _ in range(layers)).eval()
    for block in blocks:
        perturbed_norm(block.norm1, gen)
        perturbed_norm(block.norm2, gen)
        with torch.no_grad():
            block.self_attn.in_proj_bias.copy_(0.1 * torch.randn(3 * d, generator=gen))
            block.self_attn.out_proj.bias.copy_(0.1 * torch.randn(d, generator=gen))

    @torch.no_grad()
    def hidden_fn(ids, type_ids):
        t = len(ids)
        x = word[torch.tensor(ids)] + pos[:t] + typ[torch.tensor(type_ids)]
        x = embed_norm(x).unsqueeze(0)
        for block in blocks:
            x = block(x)
        return x[0]  # [T, d]: BertModel's last_hidden_state

    hf = {"embeddings.word_embeddings.weight": word,
          "embeddings.position_embeddings.weight": pos,
          "embeddings.token_type_embeddings.weight": typ,
          "embeddings.LayerNorm.weight": embed_norm.weight,
          "embeddings.LayerNorm.bias": embed_norm.bias,
          # heads dikkat does not run: reported unused
          "pooler.dense.weight": torch.randn(d, d, generator=gen),
          "pooler.dense.bias": torch.randn(d, generator=gen)}
    for i, block in enumerate(blocks):
        p = "encoder.layer.%d." % i
        attn = block.self_attn
        qw, kw, vw = attn.in_proj_weight.chunk(3)
        qb, kb, vb = attn.in_proj_bias.chunk(3)
        hf.update({
            p + "attention.self.query.weight": qw, p + "attention.self.query.bias": qb,
            p + "attention.self.key.weight": kw, p + "attention.self.key.bias": kb,
            p + "attention.self.value.weight": vw, p + "attention.self.value.bias": vb,
            p + "attention.output.dense.weight": attn.out_proj.weight,
            p + "attention.output.dense.bias": attn.out_proj.bias,
            p + "attention.output.LayerNorm.weight": block.norm1.weight,
            p + "attention.output.LayerNorm.bias": block.norm1.bias,
            p + "intermediate.dense.weight": block.linear1.weight,
            p + "intermediate.dense.bias": block.linear1.bias,
            p + "output.dense.weight": block.linear2.weight,
            p + "output.dense.bias": block.linear2.bias,
            p + "output.LayerNorm.weight": block.norm2.weight,
            p + "output.LayerNorm.bias": block.norm2.bias,
        })
    hf = {k: v.detach().contiguous().clone() for k, v in hf.items()}
    config = {"architectures": ["BertForMaskedLM"], "model_type": "bert",
              "hidden_size": d, "num_attention_heads": heads, "num_hidden_layers": layers,
              "intermediate_size": ffn, "hidden_act": "gelu", "max_position_embeddings": positions,
              "type_vocab_size": types, "layer_norm_eps": eps, "vocab_size": vocab,
              "pad_token_id": 0, "position_embedding_type": "absolute",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "torch_dtype": "float32", "transformers_version": "4.40.0"}
    prefixed = {"bert." + k: v for k, v in hf.items()}
    # BertForMaskedLM: bert. prefix, an MLM head, the position_ids buffer.
    st = dict(prefixed)
    st["bert.embeddings.position_ids"] = torch.arange(positions).unsqueeze(0)
    st["cls.predictions.bias"] = torch.zeros(vocab)
    st["cls.predictions.transform.dense.weight"] = torch.randn(d, d, generator=gen)
    save_folder(os.path.join(out, "st"), "st", config, st)
    save_folder(os.path.join(out, "bin"), "bin", config, hf)  # BertModel names
    save_folder(os.path.join(out, "sharded"), "sharded", config, prefixed)

    expected = {}
    lengths = [9, 17]
    for b, prompt in enumerate(prompts(gen, vocab, lengths)):
        ids = prompt.tolist()
        split = len(ids) // 2  # sentence A then sentence B
        type_ids = [0] * split + [1] * (len(ids) - split)
        expected["prompt_%d" % b] = prompt.to(torch.int64)
        expected["types_%d" % b] = torch.tensor(type_ids, dtype=torch.int64)
        expected["hidden_%d" % b] = hidden_fn(ids, type_ids)
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "cases.json"),
               {"layouts": ["st", "bin", "sharded"], "sequences": len(lengths)})


# ---------------------------------------------------------------------------
# Llama family: a plain reference, not a library model.
def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def llama3_inv_freq(inv_freq, factor, low_freq_factor, high_freq_factor,
                    original_max_position_embeddings):
    """Llama 3.1's RoPE frequency scaling, as Meta's model card code gives it
    (apply_scaling in llama-models): frequencies with wavelength under
    old_context / high_freq_factor kept, over old_context / low_freq_factor
    divided by factor, and between them a linear blend of the two in
    old_context / wavelength."""
    old = original_max_position_embeddings
    out = []
    for f in inv_freq.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / high_freq_factor:
            out.append(f)
        elif wavelen > old / low_freq_factor:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def yarn_inv_freq(inv_freq, dim, theta, factor, original_max_position_embeddings,
                  beta_fast=32.0, beta_slow=1.0):
    """YaRN's frequencies: dimension pair i keeps its frequency when it
    turns more than beta_fast times over the original context, is divided by
    factor when it turns fewer than beta_slow times, and blends linearly
    between (the turning counts given as dims, rounded outwards)."""
    def dim_of(rotations):  # the dim whose wavelength fits `rotations` times
        return dim * math.log(original_max_position_embeddings / (rotations * 2 * math.pi)) / (
            2 * math.log(theta))
    low = max(math.floor(dim_of(beta_fast)), 0)
    high = min(math.ceil(dim_of(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i, f in enumerate(inv_freq.tolist()):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: keep, 1: interpolate
        out.append(f * (1 - ramp) + f / factor * ramp)
    return torch.tensor(out, dtype=torch.float64)


class LlamaReference:
    def __init__(self, gen, vocab, d, heads, kv_heads, head_dim, layers, ffn, eps, theta,
                 scaling, window, qkv_bias, tied, llama3=None, qk_norm=False, yarn=None):
        self.__dict__.update(dict(vocab=vocab, d=d, heads=heads, kv_heads=kv_heads,
                                  head_dim=head_dim, layers=layers, ffn=ffn, eps=eps,
                                  theta=theta, scaling=scaling, window=window, tied=tied,
                                  llama3=llama3, qk_norm=qk_norm, yarn=yarn))

        def lin(out_f, in_f):
            return torch.randn(out_f, in_f, generator=gen) / math.sqrt(in_f)

        def norm_w():
            return 1 + 0.2 * torch.randn(d, generator=gen)

        # A tied head reads the embedding back: keep it small next to the
        # layers' outputs, or greedy decoding just repeats the last token.
        embed_scale = 0.05 if tied else 1.0
        self.w = {"model.embed_tokens.weight": embed_scale * torch.randn(vocab, d, generator=gen),
                  "model.norm.weight": norm_w()}
        if not tied:
            self.w["lm_head.weight"] = lin(vocab, d)
        for i in range(layers):
            p = "model.layers.%d." % i
            self.w.update({
                p + "input_layernorm.weight": norm_w(),
                p + "post_attention_layernorm.weight": norm_w(),
                p + "self_attn.q_proj.weight": lin(heads * head_dim, d),
                p + "self_attn.k_proj.weight": lin(kv_heads * head_dim, d),
                p + "self_attn.v_proj.weight": lin(kv_heads * head_dim, d),
                p + "self_attn.o_proj.weight": lin(d, heads * head_dim),
                p + "mlp.gate_proj.weight": lin(ffn, d),
                p + "mlp.up_proj.weight": lin(ffn, d),
                p + "mlp.down_proj.weight": lin(d, ffn),
            })
            if qk_norm:
                for n in ("q", "k"):
                    self.w[p + "self_attn.%s_norm.weight" % n] = \
                        1 + 0.3 * torch.randn(head_dim, generator=gen)
            if qkv_bias:
                for n, rows in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
                    self.w[p + "self_attn.%s_proj.bias" % n] = \
                        0.1 * torch.randn(rows * head_dim, generator=gen)

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].t()
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    @torch.no_grad()
    def logits(self, ids):
        t, hd = len(ids), self.head_dim
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]  # [T, d]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        if self.llama3:
            inv_freq = llama3_inv_freq(inv_freq, **self.llama3)
        table_scale = 1.0
        if self.yarn:
            inv_freq = yarn_inv_freq(inv_freq, hd, self.theta, **self.yarn)
            table_scale = 0.1 * math.log(self.yarn["factor"]) + 1.0  # the paper's sqrt(1/t)
        angles = torch.outer(torch.arange(t, dtype=torch.float64) / self.scaling, inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        cos, sin = (emb.cos() * table_scale).float(), (emb.sin() * table_scale).float()  # [T, hd]
        i = torch.arange(t).unsqueeze(1)
        j = torch.arange(t).unsqueeze(0)
        allowed = j <= i
        if self.window:
            allowed &= j > i - self.window  # the last `window` keys, itself included
        rep = self.heads // self.kv_heads
        for layer in range(self.layers):
            p = "model.layers.%d." % layer
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            q = self.linear(h, p + "self_attn.q_proj").view(t, self.heads, hd).transpose(0, 1)
            k = self.linear(h, p + "self_attn.k_proj").view(t, self.kv_heads, hd).transpose(0, 1)
            v = self.linear(h, p + "self_attn.v_proj").view(t, self.kv_heads, hd).transpose(0, 1)
            if self.qk_norm:  # over each head's hd values ([H, T, hd]), before RoPE
                q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, self.w[p + "self_attn.k_norm.weight"], self.eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            # kv head g serves query heads g*rep .. g*rep + rep - 1 (HF repeat_kv)
            k = k.repeat_interleave(rep, dim=0)
            v = v.repeat_interleave(rep, dim=0)
            scores = q @ k.transpose(-1, -2) / math.sqrt(hd)  # [H, T, T]
            scores = scores.masked_fill(~allowed, float("-inf"))
            a = torch.softmax(scores, dim=-1) @ v  # [H, T, hd]
            x = x + self.linear(a.transpose(0, 1).reshape(t, self.heads * hd),
                                p + "self_attn.o_proj")
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], self.eps)
            gated = F.silu(self.linear(h, p + "mlp.gate_proj")) * self.linear(h, p + "mlp.up_proj")
            x = x + self.linear(gated, p + "mlp.down_proj")
        x = rms_norm(x, self.w["model.norm.weight"], self.eps)
        head = self.w["model.embed_tokens.weight" if self.tied else "lm_head.weight"]
        return x @ head.t()  # [T, V]


def llama_like(out, name, seed, model_type, config_extra, layouts, lengths, state_fn=None, **kw):
    gen = torch.Generator().manual_seed(seed)
    ref = LlamaReference(gen, **kw)
    config = {"architectures": [config_extra.pop("architecture")], "model_type": model_type,
              "vocab_size": ref.vocab, "hidden_size": ref.d, "intermediate_size": ref.ffn,
              "num_attention_heads": ref.heads, "num_key_value_heads": ref.kv_heads,
              "num_hidden_layers": ref.layers, "rms_norm_eps": ref.eps,
              "rope_theta": ref.theta, "hidden_act": "silu",
              "tie_word_embeddings": ref.tied, "bos_token_id": 1, "eos_token_id": 2,
              "torch_dtype": "float32", "transformers_version": "4.40.0"}
    config.update(config_extra)
    state = dict(ref.w)
    if state_fn:
        state = state_fn(state, ref.layers)
    for layout in layouts:
        saved = dict(state)
        if layout == "bin":  # older checkpoints saved RoPE's inv_freq buffers
            for i in range(ref.layers):
                saved["model.layers.%d.self_attn.rotary_emb.inv_freq" % i] = torch.ones(
                    ref.head_dim // 2)
        if layout == "sharded":  # LlamaModel names: no "model." prefix
            saved = {k[len("model."):] if k.startswith("model.") else k: v
                     for k, v in saved.items()}
        save_folder(os.path.join(out, layout), layout, config, saved)
    expected = {}
    for b, prompt in enumerate(prompts(gen, ref.vocab, lengths)):
        ids = prompt.tolist()
        expected["prompt_%d" % b] = prompt.to(torch.int64)
        expected["logits_%d" % b] = ref.logits(ids)
        tokens = greedy(ref.logits, ids)
        expected["greedy_%d" % b] = torch.tensor(tokens, dtype=torch.int64)
        print("%s prompt %d: greedy top-2 gap %.3g" %
              (name, b, top2_gap(ref.logits, ids, tokens)))
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "cases.json"),
               {"layouts": layouts, "sequences": len(lengths), "steps": STEPS})


def suite_llama(out):
    llama_like(out, "llama", 77, "llama",
               {"architecture": "LlamaForCausalLM", "max_position_embeddings": 64,
                "rope_scaling": {"type": "linear", "factor": 2.0},
                "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1},
               ["st", "bin", "sharded"], [6, 11],
               vocab=320, d=64, heads=4, kv_heads=2, head_dim=16, layers=2, ffn=96,
               eps=1e-5, theta=500.0, scaling=2.0, window=0, qkv_bias=False, tied=False)


def suite_llama3(out):
    # Llama 3.1's rope_scaling at a small scale: with head_dim 16 and theta
    # 500 the 8 wavelengths run from 6.3 to 1440, so an original context of
    # 32 keeps 1 (under 8), blends 2 (8-32) and stretches 5 (over 32).
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
    llama_like(out, "llama3", 83, "llama",
               {"architecture": "LlamaForCausalLM", "max_position_embeddings": 64,
                "rope_scaling": dict(scaling, rope_type="llama3"),
                "attention_bias": False, "mlp_bias": False},
               ["st"], [7, 12],
               vocab=300, d=64, heads=4, kv_heads=2, head_dim=16, layers=2, ffn=96,
               eps=1e-5, theta=500.0, scaling=1.0, window=0, qkv_bias=False, tied=False,
               llama3=scaling)


def suite_mistral(out):
    llama_like(out, "mistral", 78, "mistral",
               {"architecture": "MistralForCausalLM", "max_position_embeddings": 64,
                "head_dim": 24, "sliding_window": 6, "rope_scaling": None},
               ["st"], [9, 4],
               vocab=256, d=64, heads=4, kv_heads=1, head_dim=24, layers=2, ffn=80,
               eps=1e-6, theta=10000.0, scaling=1.0, window=6, qkv_bias=False, tied=False)


def suite_qwen2(out):
    llama_like(out, "qwen2", 79, "qwen2",
               {"architecture": "Qwen2ForCausalLM", "max_position_embeddings": 64,
                "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                "use_sliding_window": False, "sliding_window": 32, "max_window_layers": 2},
               ["st"], [5, 10],
               vocab=288, d=64, heads=4, kv_heads=2, head_dim=16, layers=2, ffn=112,
               eps=1e-6, theta=1e6, scaling=4.0, window=0, qkv_bias=True, tied=True)


def suite_yarn(out):
    # With head_dim 16, theta 100 and an original context of 64, the ramp
    # runs from dim 0 to 5: one pair kept, four blended, three interpolated.
    yarn = {"factor": 4.0, "original_max_position_embeddings": 64}
    llama_like(out, "yarn", 84, "qwen2",
               {"architecture": "Qwen2ForCausalLM", "max_position_embeddings": 64,
                "rope_scaling": dict(yarn, rope_type="yarn"), "use_sliding_window": False},
               ["st"], [9, 14],
               vocab=288, d=64, heads=4, kv_heads=2, head_dim=16, layers=2, ffn=112,
               eps=1e-6, theta=100.0, scaling=1.0, window=0, qkv_bias=True, tied=True,
               yarn=yarn)


def phi3_names(state, layers):
    """Phi-3 stores [q; k; v] as qkv_proj and [gate; up] as gate_up_proj."""
    out = dict(state)
    for i in range(layers):
        p = "model.layers.%d." % i
        out[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [out.pop(p + "self_attn.%s_proj.weight" % n) for n in ("q", "k", "v")], 0)
        out[p + "mlp.gate_up_proj.weight"] = torch.cat(
            [out.pop(p + "mlp.gate_proj.weight"), out.pop(p + "mlp.up_proj.weight")], 0)
    return out


def suite_phi3(out):
    llama_like(out, "phi3", 86, "phi3",
               {"architecture": "Phi3ForCausalLM", "max_position_embeddings": 64,
                "original_max_position_embeddings": 64, "sliding_window": 5,
                "rope_scaling": None, "partial_rotary_factor": 1.0, "pad_token_id": 0,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0},
               ["st"], [7, 12], state_fn=phi3_names,
               vocab=300, d=64, heads=4, kv_heads=2, head_dim=16, layers=2, ffn=96,
               eps=1e-5, theta=10000.0, scaling=1.0, window=5, qkv_bias=False, tied=False)


def suite_qwen3(out):
    llama_like(out, "qwen3", 80, "qwen3",
               {"architecture": "Qwen3ForCausalLM", "max_position_embeddings": 64,
                "head_dim": 24, "attention_bias": False, "rope_scaling": None,
                "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
                "layer_types": ["full_attention", "full_attention"]},
               ["st"], [8, 13],
               vocab=272, d=64, heads=4, kv_heads=2, head_dim=24, layers=2, ffn=96,
               eps=1e-6, theta=1e6, scaling=1.0, window=0, qkv_bias=False, tied=True,
               qk_norm=True)


# ---------------------------------------------------------------------------
# Gemma 3 (gemma3_text), written plainly from its description (the Gemma 3
# technical report and the model card): Gemma's RMSNorm x * (1 + w), a norm
# before and after each sublayer, q_norm / k_norm, GeGLU with the tanh GELU,
# tokens times sqrt(hidden), scores times query_pre_attn_scalar^-1/2, and
# local layers (a sliding window, their own RoPE base, no scaling) between
# global ones (every sliding_window_pattern-th layer).
def gemma_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)


def rope_tables(t, hd, theta, scaling):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    angles = torch.outer(torch.arange(t, dtype=torch.float64) / scaling, inv_freq)
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().float(), emb.sin().float()


class Gemma3Reference:
    def __init__(self, gen, vocab, d, heads, kv_heads, head_dim, layers, ffn, eps, theta,
                 local_theta, scaling, window, pattern, qpas, bidirectional=False):
        self.__dict__.update(dict(vocab=vocab, d=d, heads=heads, kv_heads=kv_heads,
                                  head_dim=head_dim, layers=layers, ffn=ffn, eps=eps,
                                  theta=theta, local_theta=local_theta, scaling=scaling,
                                  window=window, pattern=pattern, qpas=qpas,
                                  bidirectional=bidirectional))

        def lin(out_f, in_f):
            return torch.randn(out_f, in_f, generator=gen) / math.sqrt(in_f)

        def norm_w(n=d):  # stored as offsets from 1
            return 0.3 * torch.randn(n, generator=gen)

        # Tied head: the embedding, read back, stays small next to the layers.
        self.w = {"model.embed_tokens.weight": 0.05 * torch.randn(vocab, d, generator=gen),
                  "model.norm.weight": norm_w()}
        for i in range(layers):
            p = "model.layers.%d." % i
            self.w.update({
                p + "input_layernorm.weight": norm_w(),
                p + "post_attention_layernorm.weight": norm_w(),
                p + "pre_feedforward_layernorm.weight": norm_w(),
                p + "post_feedforward_layernorm.weight": norm_w(),
                p + "self_attn.q_proj.weight": lin(heads * head_dim, d),
                p + "self_attn.k_proj.weight": lin(kv_heads * head_dim, d),
                p + "self_attn.v_proj.weight": lin(kv_heads * head_dim, d),
                p + "self_attn.o_proj.weight": lin(d, heads * head_dim),
                p + "self_attn.q_norm.weight": norm_w(head_dim),
                p + "self_attn.k_norm.weight": norm_w(head_dim),
                p + "mlp.gate_proj.weight": lin(ffn, d),
                p + "mlp.up_proj.weight": lin(ffn, d),
                p + "mlp.down_proj.weight": lin(d, ffn),
            })

    def linear(self, x, name):
        return x @ self.w[name + ".weight"].t()

    @torch.no_grad()
    def logits(self, ids):
        return self.hidden(ids) @ self.w["model.embed_tokens.weight"].t()

    @torch.no_grad()
    def hidden(self, ids):
        """The final norm's output [T, d]."""
        t, hd = len(ids), self.head_dim
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        x = x * torch.tensor(self.d ** 0.5, dtype=torch.float32)
        global_rope = rope_tables(t, hd, self.theta, self.scaling)
        local_rope = rope_tables(t, hd, self.local_theta, 1.0)
        i = torch.arange(t).unsqueeze(1)
        j = torch.arange(t).unsqueeze(0)
        causal = j <= i
        local = causal & (j > i - self.window)
        if self.bidirectional:
            # EmbeddingGemma (Gemma3TextConfig with use_bidirectional_attention):
            # every key for the global layers; for the local ones the keys
            # less than window // 2 + 1 positions away, either way.
            causal = torch.ones(t, t, dtype=torch.bool)
            local = (i - j).abs() < self.window // 2 + 1
        rep = self.heads // self.kv_heads
        for layer in range(self.layers):
            p = "model.layers.%d." % layer
            sliding = (layer + 1) % self.pattern != 0
            cos, sin = local_rope if sliding else global_rope
            h = gemma_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            q = self.linear(h, p + "self_attn.q_proj").view(t, self.heads, hd).transpose(0, 1)
            k = self.linear(h, p + "self_attn.k_proj").view(t, self.kv_heads, hd).transpose(0, 1)
            v = self.linear(h, p + "self_attn.v_proj").view(t, self.kv_heads, hd).transpose(0, 1)
            q = gemma_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps)
            k = gemma_norm(k, self.w[p + "self_attn.k_norm.weight"], self.eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(rep, dim=0)
            v = v.repeat_interleave(rep, dim=0)
            scores = (q @ k.transpose(-1, -2)) * self.qpas ** -0.5
            scores = scores.masked_fill(~(local if sliding else causal), float("-inf"))
            a = torch.softmax(scores, dim=-1) @ v
            a = self.linear(a.transpose(0, 1).reshape(t, self.heads * hd), p + "self_attn.o_proj")
            x = x + gemma_norm(a, self.w[p + "post_attention_layernorm.weight"], self.eps)
            h = gemma_norm(x, self.w[p + "pre_feedforward_layernorm.weight"], self.eps)
            gated = F.gelu(self.linear(h, p + "mlp.gate_proj"), approximate="tanh") * \
                self.linear(h, p + "mlp.up_proj")
            m = self.linear(gated, p + "mlp.down_proj")
            x = x + gemma_norm(m, self.w[p + "post_feedforward_layernorm.weight"], self.eps)
        return gemma_norm(x, self.w["model.norm.weight"], self.eps)


def suite_gemma3(out):
    # Three layers with pattern 3: two local (window 4, RoPE base 100) and a
    # global one (base 10000, linear scaling 2); head_dim 32 != hidden /
    # heads, query_pre_attn_scalar 24 != head_dim. The second layout spells
    # the same with transformers 4.53's layer_types and no "model." prefix,
    # the third as the multimodal Gemma 3 (text_config, language_model.).
    gen = torch.Generator().manual_seed(97)
    ref = Gemma3Reference(gen, vocab=320, d=64, heads=4, kv_heads=2, head_dim=32, layers=3,
                          ffn=128, eps=1e-6, theta=10000.0, local_theta=100.0, scaling=2.0,
                          window=4, pattern=3, qpas=24.0)
    config = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
              "vocab_size": ref.vocab, "hidden_size": ref.d, "intermediate_size": ref.ffn,
              "num_attention_heads": ref.heads, "num_key_value_heads": ref.kv_heads,
              "head_dim": ref.head_dim, "num_hidden_layers": ref.layers,
              "rms_norm_eps": ref.eps, "rope_theta": ref.theta,
              "rope_local_base_freq": ref.local_theta,
              "rope_scaling": {"rope_type": "linear", "factor": ref.scaling},
              "sliding_window": ref.window, "sliding_window_pattern": ref.pattern,
              "query_pre_attn_scalar": ref.qpas, "hidden_activation": "gelu_pytorch_tanh",
              "max_position_embeddings": 64, "attention_bias": False,
              "final_logit_softcapping": None, "attn_logit_softcapping": None,
              "cache_implementation": "hybrid", "pad_token_id": 0, "bos_token_id": 2,
              "eos_token_id": [1, 106], "torch_dtype": "float32",
              "transformers_version": "4.50.0"}
    save_folder(os.path.join(out, "st"), "st", config, ref.w)
    typed = dict(config, layer_types=["sliding_attention", "sliding_attention",
                                      "full_attention"], transformers_version="4.53.0")
    del typed["sliding_window_pattern"]
    save_folder(os.path.join(out, "typed"), "st", typed,
                {k[len("model."):]: v for k, v in ref.w.items()})
    # Gemma3ForConditionalGeneration (4B and up): the same text model under
    # text_config and language_model.model., beside an image encoder.
    # Its text_config lists what differs from Gemma3TextConfig's defaults
    # only, as the Hub's 4B does (no attention_bias, hidden_activation, ...).
    text = {k: v for k, v in config.items() if k not in (
        "architectures", "eos_token_id", "bos_token_id", "pad_token_id", "torch_dtype",
        "transformers_version", "attention_bias", "hidden_activation", "cache_implementation",
        "final_logit_softcapping", "attn_logit_softcapping")}
    text["model_type"] = "gemma3_text"
    multimodal = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                  "text_config": text, "eos_token_id": [1, 106],
                  "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8},
                  "mm_tokens_per_image": 4, "image_token_index": ref.vocab - 1,
                  "torch_dtype": "float32", "transformers_version": "4.50.0"}
    mm_state = {"language_model." + k: v for k, v in ref.w.items()}
    other = torch.Generator().manual_seed(1)  # leaves `gen` to the prompts
    mm_state["vision_tower.vision_model.embeddings.patch_embedding.weight"] = \
        torch.randn(8, 3, 2, 2, generator=other)
    mm_state["multi_modal_projector.mm_input_projection_weight"] = torch.randn(8, ref.d,
                                                                               generator=other)
    save_folder(os.path.join(out, "mm"), "st", multimodal, mm_state)
    expected = {}
    for b, prompt in enumerate(prompts(gen, ref.vocab, [9, 14])):
        ids = prompt.tolist()
        expected["prompt_%d" % b] = prompt.to(torch.int64)
        expected["logits_%d" % b] = ref.logits(ids)
        tokens = greedy(ref.logits, ids)
        expected["greedy_%d" % b] = torch.tensor(tokens, dtype=torch.int64)
        print("gemma3 prompt %d: greedy top-2 gap %.3g" %
              (b, top2_gap(ref.logits, ids, tokens)))
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "cases.json"),
               {"layouts": ["st", "typed", "mm"], "sequences": 2, "steps": STEPS})


def suite_embeddinggemma(out):
    # EmbeddingGemma's shape at a small scale: the gemma3 reference run both
    # ways (window 6: the local layers see 3 keys each side), saved as
    # sentence-transformers saves it (Gemma3TextModel's names, no "model."),
    # with mean pooling, a Dense without bias and with the module's default
    # activation (tanh), a Dense with bias and Identity, and Normalize.
    gen = torch.Generator().manual_seed(93)
    ref = Gemma3Reference(gen, vocab=300, d=64, heads=4, kv_heads=1, head_dim=32, layers=3,
                          ffn=128, eps=1e-6, theta=10000.0, local_theta=100.0, scaling=1.0,
                          window=6, pattern=3, qpas=32.0, bidirectional=True)
    dense = [(torch.randn(96, 64, generator=gen) / 8.0, None, True),
             (torch.randn(48, 96, generator=gen) / math.sqrt(96),
              0.1 * torch.randn(48, generator=gen), False)]
    config = {"architectures": ["Gemma3TextModel"], "model_type": "gemma3_text",
              "vocab_size": ref.vocab, "hidden_size": ref.d, "intermediate_size": ref.ffn,
              "num_attention_heads": ref.heads, "num_key_value_heads": ref.kv_heads,
              "head_dim": ref.head_dim, "num_hidden_layers": ref.layers,
              "rms_norm_eps": ref.eps, "rope_theta": ref.theta,
              "rope_local_base_freq": ref.local_theta, "rope_scaling": None,
              "sliding_window": ref.window, "query_pre_attn_scalar": ref.qpas,
              "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
              "use_bidirectional_attention": True, "hidden_activation": "gelu_pytorch_tanh",
              "max_position_embeddings": 64, "attention_bias": False,
              "final_logit_softcapping": None, "attn_logit_softcapping": None,
              "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1,
              "torch_dtype": "float32", "transformers_version": "4.56.0"}
    folder = os.path.join(out, "st")
    save_folder(folder, "st", config, {k[len("model."):]: v for k, v in ref.w.items()})
    write_json(os.path.join(folder, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 4, "name": "4", "path": "4_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    os.makedirs(os.path.join(folder, "1_Pooling"))
    write_json(os.path.join(folder, "1_Pooling", "config.json"),
               {"word_embedding_dimension": ref.d, "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_lasttoken": False,
                "include_prompt": True})
    for k, (w, b, tanh) in enumerate(dense):
        module = os.path.join(folder, "%d_Dense" % (k + 2))
        os.makedirs(module)
        dense_config = {"in_features": w.shape[1], "out_features": w.shape[0],
                        "bias": b is not None}
        if not tanh:  # absent: Dense's default, Tanh
            dense_config["activation_function"] = "torch.nn.modules.linear.Identity"
        write_json(os.path.join(module, "config.json"), dense_config)
        state = {"linear.weight": w}
        if b is not None:
            state["linear.bias"] = b
        # the first as safetensors, the second as an older pytorch_model.bin
        save_folder(module, "st" if k == 0 else "bin", dense_config, state)
    write_json(os.path.join(folder, "sentence_bert_config.json"), {"max_seq_length": 64})
    expected = {}
    for b, prompt in enumerate(prompts(gen, ref.vocab, [9, 14])):
        ids = prompt.tolist()
        hidden = ref.hidden(ids)
        e = hidden.mean(0)
        for w, bias, tanh in dense:
            e = e @ w.t()
            if bias is not None:
                e = e + bias
            if tanh:
                e = torch.tanh(e)
        expected["prompt_%d" % b] = prompt.to(torch.int64)
        expected["hidden_%d" % b] = hidden
        expected["embedding_%d" % b] = e / e.norm()
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "cases.json"), {"layouts": ["st"], "sequences": 2, "steps": 0})


SUITES = {"gpt2": suite_gpt2, "bert": suite_bert, "llama": suite_llama, "llama3": suite_llama3,
          "mistral": suite_mistral, "qwen2": suite_qwen2, "qwen3": suite_qwen3,
          "yarn": suite_yarn, "phi3": suite_phi3, "gemma3": suite_gemma3,
          "embeddinggemma": suite_embeddinggemma}


def main():
    if len(sys.argv) < 3 or any(s not in SUITES for s in sys.argv[2:]):
        sys.exit("usage: make_hf_fixtures.py OUT_DIR {%s}..." % "|".join(SUITES))
    torch.set_num_threads(1)
    for suite in sys.argv[2:]:
        out = os.path.join(sys.argv[1], suite)
        os.makedirs(out, exist_ok=True)
        SUITES[suite](out)


if __name__ == "__main__":
    main()
