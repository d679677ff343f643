#!/usr/bin/python3
"""Reference outputs from PyTorch's own modules for dikkat's parity tests.

  make_parity_fixtures.py OUT_DIR SUITE...

SUITE is one or more of:
  attention  nn.MultiheadAttention(batch_first=True): key_padding_mask, causal
             attn_mask, cross-attention, one head, no biases; outputs and
             per-head weights.
  layers     nn.TransformerEncoderLayer / nn.TransformerDecoderLayer, post-LN
             and pre-LN, relu and gelu, as single-layer dikkat models whose
             token embedding table holds the input activations.
  seq2seq    a whole nn.Transformer (d_model 64, 4 heads, 2+2 layers) with
             token embeddings * sqrt(d), sinusoidal positions, an output
             projection: encoder output, decoder logits, greedy decoding.
  decoder    a GPT-style decoder-only model built from
             nn.TransformerEncoderLayer(norm_first=True, gelu) + causal mask,
             learned positions, final LayerNorm, tied head.
  llama      a Llama-style model (GQA, RoPE rotate-half, RMSNorm, SwiGLU, no
             biases) written plainly below, with and without a sliding window.
  int8       int8 weight quantization: torch.quantize_per_channel(...).int_repr()
             of matrices with each group of 32 inputs as a channel, and the
             shipped models/dikkat-lm with every matrix quantized the way
             llama.cpp's Q8_0 does (float16 block scales), dequantized to float32.

Each suite writes OUT_DIR/SUITE/ with a cases.json manifest, and for every
model a dikkat.json and a model.safetensors (plus inputs/expected tensors in
*.safetensors). Run with Debian's /usr/bin/python3 (python3-torch): there is
no safetensors package, so the format is written by hand (8-byte
little-endian header length, JSON header, raw little-endian bytes).
Seeds are fixed: the same torch build always writes the same bytes.
"""
import json
import math
import os
import struct
import sys

import torch
from torch import nn

ST_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
             torch.uint8: "U8", torch.int8: "I8", torch.bool: "BOOL"}


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
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


def write_model(folder, config, state):
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "dikkat.json"), config)
    write_safetensors(os.path.join(folder, "model.safetensors"), state)


def prefixed(prefix, module):
    return {prefix + k: v for k, v in module.state_dict().items()}


def causal_mask(t):
    """nn.MultiheadAttention's bool attn_mask: True = may NOT attend."""
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def greedy_margin(logits):
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


# ---- a) nn.MultiheadAttention ------------------------------------------------

def suite_attention(out):
    cases = [
        # name, d, heads, bias, B, Tq, Tk, key lengths (None = no padding), causal, self
        ("self_padding", 32, 4, True, 3, 7, 7, [7, 4, 1], False, True),
        ("causal", 32, 4, True, 2, 6, 6, None, True, True),
        ("causal_padding", 32, 4, True, 3, 8, 8, [8, 5, 2], True, True),
        ("cross_padding", 32, 4, True, 2, 5, 9, [9, 3], False, False),
        ("single_head", 16, 1, True, 2, 5, 5, [5, 3], False, True),
        ("no_bias_causal", 24, 3, False, 2, 6, 6, None, True, True),
    ]
    manifest = []
    for i, (name, d, heads, bias, b, tq, tk, lens, causal, is_self) in enumerate(cases):
        torch.manual_seed(100 + i)
        mha = nn.MultiheadAttention(d, heads, bias=bias, batch_first=True).eval()
        if bias:  # PyTorch initialises the biases to zero; make them matter.
            with torch.no_grad():
                mha.in_proj_bias.normal_(0, 0.2)
                mha.out_proj.bias.normal_(0, 0.2)
        query = torch.randn(b, tq, d)
        key = query if is_self else torch.randn(b, tk, d)
        value = query if is_self else torch.randn(b, tk, d)
        kwargs = {"need_weights": True, "average_attn_weights": False}
        tensors = dict(mha.state_dict())
        if lens is not None:
            pad = torch.arange(tk).unsqueeze(0) >= torch.tensor(lens).unsqueeze(1)  # [B, Tk]
            kwargs["key_padding_mask"] = pad
            tensors["key_padding_mask"] = pad
        if causal:
            kwargs["attn_mask"] = causal_mask(tq)
        with torch.no_grad():
            o, w = mha(query, key, value, **kwargs)
        assert not torch.isnan(o).any() and not torch.isnan(w).any(), name
        tensors.update({"query": query, "key": key, "value": value,
                        "expected_out": o, "expected_weights": w})
        write_safetensors(os.path.join(out, name + ".safetensors"), tensors)
        manifest.append({"name": name, "n_heads": heads, "causal": causal,
                         "padding": lens is not None, "bias": bias})
    write_json(os.path.join(out, "cases.json"), manifest)


# ---- b) single encoder / decoder layers ------------------------------------

def layer_config(arch, d, heads, ffn, vocab, norm_first, activation):
    c = {"architecture": arch, "vocab_size": vocab, "d_model": d, "n_heads": heads,
         "ffn_dim": ffn, "max_positions": 32, "pre_norm": norm_first,
         "activation": activation, "positions": "none", "tie_embeddings": True}
    if arch == "encoder-only":
        c.update({"n_layers": 1, "final_norm": False})
    else:
        c.update({"n_encoder_layers": 1, "n_decoder_layers": 1, "encoder_final_norm": False,
                  "decoder_final_norm": False, "decoder_start_token_id": 0})
    return c


def randomize_norms(module):
    """LayerNorms start as the identity; random affine parameters test them."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)
            if isinstance(m, nn.MultiheadAttention):
                m.in_proj_bias.normal_(0, 0.1)


def suite_layers(out):
    d, heads, ffn = 32, 4, 64
    manifest = []
    seed = 200
    for kind in ("encoder", "decoder"):
        for norm_first in (False, True):
            for act in ("relu", "gelu"):
                seed += 1
                torch.manual_seed(seed)
                name = "%s_%s_%s" % (kind, "preln" if norm_first else "postln", act)
                folder = os.path.join(out, name)
                if kind == "encoder":
                    layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation=act,
                                                       batch_first=True, norm_first=norm_first)
                    randomize_norms(layer)
                    layer.eval()
                    lens = [7, 5, 2]
                    x = torch.randn(len(lens), max(lens), d)
                    pad = torch.arange(max(lens)).unsqueeze(0) >= torch.tensor(lens).unsqueeze(1)
                    # Grad mode keeps PyTorch on its plain Python path (the
                    # fused fast path needs no_grad); both are PyTorch's own.
                    y = layer(x, src_key_padding_mask=pad).detach()
                    inputs = torch.cat([x[b, :n] for b, n in enumerate(lens)])
                    state = {"embed_tokens.weight": inputs}
                    state.update(prefixed("layers.0.", layer))
                    config = layer_config("encoder-only", d, heads, ffn, inputs.shape[0],
                                          norm_first, act)
                    expected = {"expected_%d" % b: y[b, :n] for b, n in enumerate(lens)}
                else:
                    layer = nn.TransformerDecoderLayer(d, heads, ffn, dropout=0.0, activation=act,
                                                       batch_first=True, norm_first=norm_first)
                    randomize_norms(layer)
                    layer.eval()
                    # Required by the encoder-decoder config, unused here: the
                    # memory comes straight from PyTorch via MakeCrossCache.
                    dummy = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0,
                                                       batch_first=True)
                    lens, src_lens = [6, 3], [5, 8]
                    expected, inputs = {}, []
                    for b, (n, s) in enumerate(zip(lens, src_lens)):
                        tgt = torch.randn(1, n, d)
                        memory = torch.randn(1, s, d)
                        y = layer(tgt, memory, tgt_mask=causal_mask(n)).detach()
                        inputs.append(tgt[0])
                        expected["memory_%d" % b] = memory[0]
                        expected["expected_%d" % b] = y[0]
                    inputs = torch.cat(inputs)
                    state = {"decoder.embed_tokens.weight": inputs,
                             "encoder.embed_tokens.weight": torch.randn(inputs.shape[0], d)}
                    state.update(prefixed("encoder.layers.0.", dummy))
                    state.update(prefixed("decoder.layers.0.", layer))
                    config = layer_config("encoder-decoder", d, heads, ffn, inputs.shape[0],
                                          norm_first, act)
                write_model(folder, config, state)
                write_safetensors(os.path.join(folder, "expected.safetensors"), expected)
                manifest.append({"name": name, "kind": kind, "lens": lens})
    write_json(os.path.join(out, "cases.json"), manifest)


# ---- c) a whole nn.Transformer ----------------------------------------------

def sinusoidal_table(positions, d):
    """Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)."""
    table = torch.zeros(positions, d, dtype=torch.float64)
    for p in range(positions):
        for i in range(0, d, 2):
            angle = p / (10000.0 ** (i / d))
            table[p, i] = math.sin(angle)
            if i + 1 < d:
                table[p, i + 1] = math.cos(angle)
    return table.float()


class Seq2Seq(nn.Module):
    def __init__(self, vocab, d, heads, layers, ffn, positions):
        super().__init__()
        self.d = d
        self.src_embed = nn.Embedding(vocab, d)
        self.tgt_embed = nn.Embedding(vocab, d)
        self.transformer = nn.Transformer(d, heads, layers, layers, ffn, dropout=0.0,
                                          batch_first=True)
        self.lm_head = nn.Linear(d, vocab, bias=True)
        self.register_buffer("pe", sinusoidal_table(positions, d))

    def encode(self, src):  # [1, S] -> [1, S, d]
        x = self.src_embed(src) * math.sqrt(self.d) + self.pe[: src.shape[1]]
        return self.transformer.encoder(x)

    def decode(self, tgt, memory):  # [1, T] -> [1, T, V]
        t = tgt.shape[1]
        y = self.tgt_embed(tgt) * math.sqrt(self.d) + self.pe[:t]
        h = self.transformer.decoder(y, memory, tgt_mask=causal_mask(t))
        return self.lm_head(h)


def sharpen_seq2seq(model):
    """An untrained model greedily repeats one token; sharper decoder attention
    and a larger output projection make each step depend on the tokens before
    it, so that greedy decoding exercises the cache at every position."""
    with torch.no_grad():
        model.lm_head.weight.mul_(4)
        model.tgt_embed.weight.mul_(0.3)
        for layer in model.transformer.decoder.layers:
            layer.self_attn.in_proj_weight.mul_(4)
            layer.linear1.weight.mul_(4)


def suite_seq2seq(out):
    vocab, d, heads, layers, ffn, positions, start, steps = 40, 64, 4, 2, 128, 64, 1, 32
    torch.manual_seed(300)
    model = Seq2Seq(vocab, d, heads, layers, ffn, positions)
    randomize_norms(model)
    sharpen_seq2seq(model)
    model.eval()
    sources = [torch.randint(2, vocab, (1, n)) for n in (11, 6)]
    targets = [torch.cat([torch.tensor([[start]]), torch.randint(2, vocab, (1, n))], 1)
               for n in (9, 4)]
    expected, manifest = {}, {"cases": [], "steps": steps, "start": start}
    with torch.no_grad():
        for b, (src, tgt) in enumerate(zip(sources, targets)):
            memory = model.encode(src)
            expected["source_%d" % b] = src[0].int()
            expected["target_%d" % b] = tgt[0].int()
            expected["encoder_out_%d" % b] = memory[0]
            expected["logits_%d" % b] = model.decode(tgt, memory)[0]
            seq, step_logits, margin = [start], [], float("inf")
            for _ in range(steps):  # recompute the whole target every step
                logits = model.decode(torch.tensor([seq]), memory)[0, -1]
                margin = min(margin, greedy_margin(logits))
                step_logits.append(logits)
                seq.append(int(logits.argmax()))
            expected["greedy_%d" % b] = torch.tensor(seq[1:], dtype=torch.int32)
            expected["greedy_logits_%d" % b] = torch.stack(step_logits)
            manifest["cases"].append({"source_len": src.shape[1], "target_len": tgt.shape[1],
                                      "greedy_min_margin": margin})
    state = prefixed("", model.transformer)  # exactly an nn.Transformer state_dict
    state["encoder.embed_tokens.weight"] = model.src_embed.weight
    state["decoder.embed_tokens.weight"] = model.tgt_embed.weight
    state["lm_head.weight"] = model.lm_head.weight
    state["lm_head.bias"] = model.lm_head.bias
    config = {"architecture": "encoder-decoder", "name": "parity-seq2seq", "vocab_size": vocab,
              "d_model": d, "n_heads": heads, "ffn_dim": ffn, "n_encoder_layers": layers,
              "n_decoder_layers": layers, "max_positions": positions, "pre_norm": False,
              "activation": "relu", "positions": "sinusoidal", "embedding_scale": math.sqrt(d),
              "tie_embeddings": False, "decoder_start_token_id": start}
    folder = os.path.join(out, "model")
    write_model(folder, config, state)
    torch.save({k: v.clone() for k, v in state.items()}, os.path.join(out, "model.pt"))
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "cases.json"), manifest)


# ---- d) GPT-style decoder-only from nn.TransformerEncoderLayer ----------------

class GptLike(nn.Module):
    def __init__(self, vocab, d, heads, layers, ffn, positions):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.embed_positions = nn.Embedding(positions, d)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers)])
        self.final_norm = nn.LayerNorm(d)

    def forward(self, ids):  # [1, T] -> [1, T, V]
        t = ids.shape[1]
        x = self.embed_tokens(ids) + self.embed_positions(torch.arange(t)).unsqueeze(0)
        for layer in self.layers:
            x = layer(x, src_mask=causal_mask(t))
        return self.final_norm(x) @ self.embed_tokens.weight.t()  # tied head


def greedy(forward, prompt, steps):
    seq, step_logits, margin = list(prompt), [], float("inf")
    for _ in range(steps):  # recompute the whole sequence every step
        logits = forward(torch.tensor([seq]))[0, -1]
        margin = min(margin, greedy_margin(logits))
        step_logits.append(logits)
        seq.append(int(logits.argmax()))
    return seq[len(prompt):], torch.stack(step_logits), margin


def write_decoder_case(out, name, config, state, forward, prompt_len, steps, seed):
    torch.manual_seed(seed)
    prompt = torch.randint(0, config["vocab_size"], (prompt_len,)).tolist()
    with torch.no_grad():
        logits = forward(torch.tensor([prompt]))[0]
        tokens, step_logits, margin = greedy(forward, prompt, steps)
    folder = os.path.join(out, name)
    write_model(folder, config, state)
    write_safetensors(os.path.join(folder, "expected.safetensors"), {
        "prompt": torch.tensor(prompt, dtype=torch.int32), "logits": logits,
        "greedy": torch.tensor(tokens, dtype=torch.int32), "greedy_logits": step_logits})
    return {"name": name, "prompt_len": prompt_len, "steps": steps, "greedy_min_margin": margin}


def suite_decoder(out):
    vocab, d, heads, layers, ffn, positions = 64, 64, 4, 2, 256, 48
    torch.manual_seed(400)
    model = GptLike(vocab, d, heads, layers, ffn, positions)
    randomize_norms(model)
    # With unit-scale tied embeddings an untrained model repeats its last token
    # (the residual stream is mostly that token's own embedding); small
    # embeddings and stronger sublayers give a greedy path that varies.
    with torch.no_grad():
        model.embed_tokens.weight.normal_(0, 0.05)
        model.embed_positions.weight.normal_(0, 0.05)
        for layer in model.layers:
            layer.linear2.weight.mul_(3)
            layer.self_attn.out_proj.weight.mul_(3)
    model.eval()
    config = {"architecture": "decoder-only", "name": "parity-gpt", "vocab_size": vocab,
              "d_model": d, "n_heads": heads, "ffn_dim": ffn, "n_layers": layers,
              "max_positions": positions, "pre_norm": True, "activation": "gelu",
              "positions": "learned", "tie_embeddings": True, "final_norm": True}
    case = write_decoder_case(out, "gpt", config, prefixed("", model), model, 12, 32, 401)
    write_json(os.path.join(out, "cases.json"), [case])


# ---- e) Llama-style, written plainly -----------------------------------------

class LlamaRef:
    """RMSNorm -> GQA attention with RoPE -> RMSNorm -> SwiGLU, pre-norm, no biases."""

    def __init__(self, cfg, w):
        self.c, self.w = cfg, w

    def rms(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["norm_eps"]) * weight

    def rope(self, x, positions):  # x [H, T, D], rotate-half convention
        dh = x.shape[-1]
        inv_freq = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
        angles = torch.outer(positions.double() / self.c["rope_scaling"], inv_freq)  # [T, D/2]
        cos, sin = torch.cos(angles).float(), torch.sin(angles).float()
        x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def attention(self, x, i):
        c, w, p = self.c, self.w, "layers.%d.self_attn." % i
        t, hq, hkv = x.shape[0], c["n_heads"], c["n_kv_heads"]
        dh = c["d_model"] // hq
        q = (x @ w[p + "q_proj.weight"].t()).view(t, hq, dh).transpose(0, 1)   # [Hq, T, D]
        k = (x @ w[p + "k_proj.weight"].t()).view(t, hkv, dh).transpose(0, 1)  # [Hkv, T, D]
        v = (x @ w[p + "v_proj.weight"].t()).view(t, hkv, dh).transpose(0, 1)
        pos = torch.arange(t)
        q, k = self.rope(q, pos), self.rope(k, pos)
        # KV head j serves query heads j*G .. j*G+G-1.
        k = k.repeat_interleave(hq // hkv, 0)
        v = v.repeat_interleave(hq // hkv, 0)
        scores = q @ k.transpose(1, 2) / math.sqrt(dh)  # [Hq, T, T]
        qi, kj = pos.unsqueeze(1), pos.unsqueeze(0)
        allowed = kj <= qi
        if c.get("sliding_window", 0) > 0:
            allowed &= kj > qi - c["sliding_window"]
        scores = scores.masked_fill(~allowed, float("-inf"))
        o = torch.softmax(scores, -1) @ v  # [Hq, T, D]
        return o.transpose(0, 1).reshape(t, hq * dh) @ w[p + "out_proj.weight"].t()

    def mlp(self, x, i):
        w, p = self.w, "layers.%d." % i
        gate = torch.nn.functional.silu(x @ w[p + "linear_gate.weight"].t())
        up = x @ w[p + "linear1.weight"].t()
        return (gate * up) @ w[p + "linear2.weight"].t()

    def __call__(self, ids):  # [1, T] -> [1, T, V]
        w = self.w
        x = w["embed_tokens.weight"][ids[0]]
        for i in range(self.c["n_layers"]):
            x = x + self.attention(self.rms(x, w["layers.%d.norm1.weight" % i]), i)
            x = x + self.mlp(self.rms(x, w["layers.%d.norm2.weight" % i]), i)
        return (self.rms(x, w["final_norm.weight"]) @ w["lm_head.weight"].t()).unsqueeze(0)


def llama_weights(c, seed):
    g = torch.Generator().manual_seed(seed)
    d, f, v = c["d_model"], c["ffn_dim"], c["vocab_size"]
    kv = c["n_kv_heads"] * (d // c["n_heads"])

    def rand(*shape, scale):
        return torch.randn(*shape, generator=g) * scale

    w = {"embed_tokens.weight": rand(v, d, scale=1.0),
         "final_norm.weight": 1.0 + rand(d, scale=0.1),
         "lm_head.weight": rand(v, d, scale=d ** -0.5)}
    for i in range(c["n_layers"]):
        p = "layers.%d." % i
        w.update({p + "norm1.weight": 1.0 + rand(d, scale=0.1),
                  p + "norm2.weight": 1.0 + rand(d, scale=0.1),
                  p + "self_attn.q_proj.weight": rand(d, d, scale=d ** -0.5),
                  p + "self_attn.k_proj.weight": rand(kv, d, scale=d ** -0.5),
                  p + "self_attn.v_proj.weight": rand(kv, d, scale=d ** -0.5),
                  p + "self_attn.out_proj.weight": rand(d, d, scale=d ** -0.5),
                  p + "linear_gate.weight": rand(f, d, scale=d ** -0.5),
                  p + "linear1.weight": rand(f, d, scale=d ** -0.5),
                  p + "linear2.weight": rand(d, f, scale=f ** -0.5)})
    return w


def suite_llama(out):
    base = {"architecture": "decoder-only", "vocab_size": 80, "d_model": 64, "n_heads": 4,
            "n_kv_heads": 2, "ffn_dim": 96, "n_layers": 2, "max_positions": 64,
            "pre_norm": True, "norm": "rmsnorm", "norm_eps": 1e-6, "activation": "swiglu",
            "attention_bias": False, "mlp_bias": False, "positions": "rotary",
            "rope_theta": 10000.0, "rope_scaling": 1.0, "sliding_window": 0,
            "tie_embeddings": False, "final_norm": True}
    variants = [("llama", {"name": "parity-llama"}, 16),
                ("llama_window", {"name": "parity-llama-window", "sliding_window": 6,
                                  "rope_theta": 1000.0, "rope_scaling": 2.0}, 10)]
    manifest = []
    for i, (name, extra, prompt_len) in enumerate(variants):
        config = dict(base, **extra)
        weights = llama_weights(config, 500 + i)
        manifest.append(write_decoder_case(out, name, config, weights,
                                           LlamaRef(config, weights), prompt_len, 32,
                                           600 + i))
    write_json(os.path.join(out, "cases.json"), manifest)

# ---- f) int8 weights -----------------------------------------------------------

INT8_GROUP = 32


def int8_reference(w):
    """PyTorch's own per-channel quantizer with each (row, group of 32 inputs)
    as a channel: symmetric, scale = absmax / 127 (1 for an all-zero group)."""
    out, n = w.shape
    groups = (n + INT8_GROUP - 1) // INT8_GROUP
    padded = torch.zeros(out, groups * INT8_GROUP)
    padded[:, :n] = w
    channels = padded.reshape(out * groups, INT8_GROUP)
    scales = channels.abs().amax(1) / 127
    scales[scales == 0] = 1
    q = torch.quantize_per_channel(channels, scales.double(),
                                   torch.zeros(out * groups, dtype=torch.long), 0, torch.qint8)
    return q.int_repr().reshape(out, groups * INT8_GROUP)[:, :n].contiguous(), \
        scales.reshape(out, groups)


def q8_0_dequantized(w):
    """llama.cpp's Q8_0 (blocks of 32 along a row: d = absmax / 127 stored as
    float16, q = round(x / d)), dequantized: q * float16(d). In 32 blocks of
    whole rows; d_model and ffn widths here are multiples of 32."""
    out, n = w.shape
    assert n % INT8_GROUP == 0
    blocks = w.reshape(out, n // INT8_GROUP, INT8_GROUP)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    q = torch.round(blocks * inv).clamp(-127, 127)
    return (q * d.half().float()).reshape(out, n)


def read_safetensors_as_f32(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": torch.float32, "F16": torch.float16}[meta["dtype"]]
        a, b = meta["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtype).reshape(meta["shape"])
        out[name] = t.float()
    return out


def suite_int8(out):
    gen = torch.Generator().manual_seed(800)
    cases = {}
    # Rows of very different magnitudes, an all-zero group, a short last group
    # (100 = 3 * 32 + 4), and a row width of GPT-2's.
    for name, (rows, cols) in {"odd": (37, 100), "wide": (64, 768)}.items():
        w = torch.randn(rows, cols, generator=gen) * torch.logspace(-3, 1, rows).unsqueeze(1)
        w[3, 32:64] = 0
        q, scales = int8_reference(w)
        cases[name + ".w"], cases[name + ".q"], cases[name + ".scales"] = w, q, scales
    write_safetensors(os.path.join(out, "quantizer.safetensors"), cases)

    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "dikkat-lm")
    state = read_safetensors_as_f32(os.path.join(src, "model.safetensors"))
    # The matrices dikkat quantizes: every 2-D weight but position/type tables.
    q8 = {k: (q8_0_dequantized(v) if v.dim() == 2 and "embed_positions" not in k
              and "embed_types" not in k else v) for k, v in state.items()}
    with open(os.path.join(src, "dikkat.json")) as f:
        write_model(os.path.join(out, "q8_0"), json.load(f), q8)


SUITES = {"attention": suite_attention, "layers": suite_layers, "seq2seq": suite_seq2seq,
          "decoder": suite_decoder, "llama": suite_llama, "int8": suite_int8}


def main(argv):
    if len(argv) < 3 or any(s not in SUITES for s in argv[2:]):
        sys.exit("usage: %s OUT_DIR {%s}..." % (argv[0], "|".join(SUITES)))
    torch.set_num_threads(1)
    for suite in argv[2:]:
        out = os.path.join(argv[1], suite)
        os.makedirs(out, exist_ok=True)
        SUITES[suite](out)


if __name__ == "__main__":
    main(sys.argv)
