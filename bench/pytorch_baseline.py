#!/usr/bin/python3
"""PyTorch eager baseline for bench/run.sh: the notebooks' way of running a
GPT-style decoder (pre-LN, fused QKV, learned positions, KV cache kept as
tensors that grow with torch.cat), on the very same weights file as dikkat.

Measures, like bench/engine_bench.cc: prefill of a 512-token prompt, and one
decode step at batch 1/8/32 (a static batch) with a fixed context of 128 and
1024 tokens. Prints one JSON object (tokens/s).

usage: pytorch_baseline.py MODEL_DIR [--threads 2] [--dtype float32|bfloat16] [--seconds 2]
"""
import argparse
import json
import math
import os
import struct
import time

import torch
import torch.nn.functional as F


def read_safetensors(path):
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[meta["dtype"]])
        out[name] = t.reshape(meta["shape"])
    return out


class Gpt:
    """Pre-LN decoder with a KV cache, written as eager PyTorch code."""

    def __init__(self, cfg, w, dtype):
        self.cfg = cfg
        self.w = {k: v.to(dtype) for k, v in w.items()}
        self.h = cfg["n_heads"]
        self.d = cfg["d_model"]
        self.L = cfg["n_layers"]

    def layer(self, x, i, past):
        w, p = self.w, f"layers.{i}."
        B, T, d = x.shape
        hd = d // self.h
        h = F.layer_norm(x, (d,), w[p + "norm1.weight"], w[p + "norm1.bias"])
        qkv = F.linear(h, w[p + "self_attn.in_proj_weight"], w[p + "self_attn.in_proj_bias"])
        q, k, v = qkv.split(d, dim=-1)
        q = q.view(B, T, self.h, hd).transpose(1, 2)
        k = k.view(B, T, self.h, hd).transpose(1, 2)
        v = v.view(B, T, self.h, hd).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        if T > 1:
            S = k.shape[2]
            mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
            att = att.masked_fill(~mask, float("-inf"))
        att = att.softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, d)
        x = x + F.linear(y, w[p + "self_attn.out_proj.weight"], w[p + "self_attn.out_proj.bias"])
        h = F.layer_norm(x, (d,), w[p + "norm2.weight"], w[p + "norm2.bias"])
        h = F.gelu(F.linear(h, w[p + "linear1.weight"], w[p + "linear1.bias"]))
        x = x + F.linear(h, w[p + "linear2.weight"], w[p + "linear2.bias"])
        return x, (k, v)

    @torch.no_grad()
    def forward(self, ids, start, past):
        w = self.w
        T = ids.shape[1]
        x = w["embed_tokens.weight"][ids] + w["embed_positions.weight"][start:start + T]
        new = []
        for i in range(self.L):
            x, kv = self.layer(x, i, past[i] if past else None)
            new.append(kv)
        x = F.layer_norm(x[:, -1], (self.d,), w["final_norm.weight"], w["final_norm.bias"])
        return F.linear(x, w["embed_tokens.weight"]), new


def timed(fn, seconds):
    fn()  # warm-up
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and n >= 3:
            return elapsed / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--only-batch1", action="store_true",
                    help="prefill and batch-1 decode only (bfloat16 eager is slow)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = json.load(open(os.path.join(args.model, "dikkat.json")))
    model = Gpt(cfg, read_safetensors(os.path.join(args.model, "model.safetensors")),
                getattr(torch, args.dtype))
    V = cfg["vocab_size"]
    g = torch.Generator().manual_seed(0)
    results = {"threads": args.threads, "dtype": args.dtype}

    prompt = torch.randint(0, V, (1, 512), generator=g)
    sec = timed(lambda: model.forward(prompt, 0, None), args.seconds)
    results["prefill_512_tokens_per_s"] = 512 / sec

    for ctx in (128, 1023):
        for batch in ((1,) if args.only_batch1 else (1, 8, 32)):
            ids = torch.randint(0, V, (batch, ctx), generator=g)
            _, past = model.forward(ids, 0, None)
            step = torch.randint(0, V, (batch, 1), generator=g)
            # Fixed context: the grown cache is thrown away after each step.
            sec = timed(lambda: model.forward(step, ctx, past), args.seconds)
            results[f"decode_b{batch}_ctx{ctx}_tokens_per_s"] = batch / sec
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
