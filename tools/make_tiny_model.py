#!/usr/bin/python3
"""Writes a small model folder with random weights (fixed seed) for `make run`
and the integration tests, until the trained demo models ship.

The folder holds dikkat.json (byte tokenizer) and model.safetensors with
dikkat's canonical tensor names (docs/model-format.md). Random weights make
the model's output meaningless, but every code path is real.

usage: make_tiny_model.py OUT_DIR [--arch decoder-only|encoder-decoder|encoder-only] [--seed N]
"""
import argparse
import json
import math
import os
import struct

import torch

BYTE_VOCAB = 259  # 256 bytes + <pad>=256, <bos>=257, <eos>=258


def write_safetensors(path, tensors, metadata=None):
    header = {}
    offset = 0
    blobs = []
    dtypes = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def layer_tensors(prefix, d, ffn, cross, gen):
    def w(*shape):
        return torch.randn(*shape, generator=gen) * 0.08

    t = {}
    for attn in ["self_attn"] + (["multihead_attn"] if cross else []):
        t[f"{prefix}.{attn}.in_proj_weight"] = w(3 * d, d)
        t[f"{prefix}.{attn}.in_proj_bias"] = w(3 * d) * 0.1
        t[f"{prefix}.{attn}.out_proj.weight"] = w(d, d)
        t[f"{prefix}.{attn}.out_proj.bias"] = w(d) * 0.1
    for n in ["norm1", "norm2"] + (["norm3"] if cross else []):
        t[f"{prefix}.{n}.weight"] = 1 + w(d) * 0.1
        t[f"{prefix}.{n}.bias"] = w(d) * 0.1
    t[f"{prefix}.linear1.weight"] = w(ffn, d)
    t[f"{prefix}.linear1.bias"] = w(ffn) * 0.1
    t[f"{prefix}.linear2.weight"] = w(d, ffn)
    t[f"{prefix}.linear2.bias"] = w(d) * 0.1
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="decoder-only")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--max-positions", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=BYTE_VOCAB,
                    help="vocabulary size (ids >= 259 have no byte meaning; for benchmarks)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    d, ffn, L, P = args.d_model, 4 * args.d_model, args.layers, args.max_positions
    V = args.vocab
    config = {
        "name": os.path.basename(os.path.normpath(args.out)),
        "architecture": args.arch,
        "vocab_size": V,
        "d_model": d,
        "n_heads": args.heads,
        "ffn_dim": ffn,
        "max_positions": P,
        "tokenizer": "byte",
        "pad_token_id": 256,
        "bos_token_id": 257,
        "eos_token_id": 258,
    }
    tensors = {}
    if args.arch == "encoder-decoder":
        # The notebooks' shape: post-LN, sinusoidal positions, ReLU, sqrt(d) scale.
        config.update({"n_encoder_layers": L, "n_decoder_layers": L, "pre_norm": False,
                       "positions": "sinusoidal", "activation": "relu",
                       "embedding_scale": math.sqrt(d), "decoder_start_token_id": 257,
                       "tie_embeddings": True})
        tensors["encoder.embed_tokens.weight"] = torch.randn(V, d, generator=gen) * 0.3
        tensors["decoder.embed_tokens.weight"] = torch.randn(V, d, generator=gen) * 0.3
        for i in range(L):
            tensors.update(layer_tensors(f"encoder.layers.{i}", d, ffn, False, gen))
            tensors.update(layer_tensors(f"decoder.layers.{i}", d, ffn, True, gen))
        for n in ["encoder.norm", "decoder.norm"]:
            tensors[f"{n}.weight"] = torch.ones(d)
            tensors[f"{n}.bias"] = torch.zeros(d)
    else:
        config.update({"n_layers": L, "pre_norm": args.arch == "decoder-only",
                       "positions": "learned", "activation": "gelu",
                       "tie_embeddings": True})
        if args.arch == "encoder-only":
            config.update({"embedding_norm": True, "final_norm": False, "type_vocab_size": 2})
            tensors["embed_types.weight"] = torch.randn(2, d, generator=gen) * 0.1
            tensors["embed_norm.weight"] = torch.ones(d)
            tensors["embed_norm.bias"] = torch.zeros(d)
        tensors["embed_tokens.weight"] = torch.randn(V, d, generator=gen) * 0.3
        tensors["embed_positions.weight"] = torch.randn(P, d, generator=gen) * 0.05
        for i in range(L):
            tensors.update(layer_tensors(f"layers.{i}", d, ffn, False, gen))
        if args.arch == "decoder-only":
            tensors["final_norm.weight"] = torch.ones(d)
            tensors["final_norm.bias"] = torch.zeros(d)
    dtype = getattr(torch, args.dtype)
    tensors = {k: v.to(dtype) for k, v in tensors.items()}
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors,
                      {"generator": "tools/make_tiny_model.py", "seed": str(args.seed)})
    with open(os.path.join(args.out, "dikkat.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main()
