#!/usr/bin/env python3
"""Beam search written from the textbook algorithm on PyTorch's own modules,
the reference for tests/parity/beam_search_parity_test.cc.

The shipped models are rebuilt from their weights as PyTorch modules:
dikkat-numbers as an nn.Transformer (post-norm, final norms, shared and tied
embeddings scaled by sqrt(d), sinusoidal positions) and dikkat-lm as an
nn.TransformerEncoder of pre-norm layers with a causal mask, learned positions
and a final LayerNorm. Every step recomputes each hypothesis from scratch (no
cache). The algorithm is the one server/beam_search.h states:
  * scores are sums of log_softmax(logits) of the generated tokens (each
    rounded to float32, as the engine reports them);
  * each live beam proposes its 2k most likely tokens (ties: lower id); the
    proposals are ranked by the new sum (ties: lower beam, lower token) and
    walked in order: an ending token (EOS unless ignore_eos, or a stop id)
    finishes a hypothesis if its rank is below k and is dropped otherwise; the
    rest become the next live beams until there are k;
  * finished hypotheses are ranked by sum / length^length_penalty (length:
    generated tokens including the ending one); the k best are kept, equal
    scores in the order they finished;
  * done when k are finished and early_stopping, or the best live beam's
    sum / length^penalty cannot beat the worst kept; at max_new the live beams
    finish with reason "length".

usage: beam_reference.py MODELS_DIR CASES_JSON  -> results as JSON on stdout
"""
import json
import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_parity_fixtures import causal_mask, read_safetensors_as_f32, sinusoidal_table  # noqa: E402


def load(models, name):
    folder = os.path.join(models, name)
    config = json.load(open(os.path.join(folder, "dikkat.json")))
    w = read_safetensors_as_f32(os.path.join(folder, "model.safetensors"))
    d, heads, ffn = config["d_model"], config["n_heads"], config["ffn_dim"]
    emb = w["embed_tokens.weight"]
    if config["architecture"] == "encoder-decoder":
        tr = nn.Transformer(d, heads, config["n_encoder_layers"], config["n_decoder_layers"], ffn,
                            dropout=0.0, activation=config["activation"], batch_first=True,
                            norm_first=config["pre_norm"], layer_norm_eps=config["norm_eps"])
        tr.load_state_dict({k: v for k, v in w.items() if k.startswith(("encoder.", "decoder."))})
        tr.eval()
        pe = sinusoidal_table(config["max_positions"], d)
        scale = config["embedding_scale"]

        def make(source):
            src = torch.tensor([source])
            memory = tr.encoder(emb[src] * scale + pe[: src.shape[1]])

            def logits(decoder_tokens):
                t = len(decoder_tokens)
                y = emb[torch.tensor([decoder_tokens])] * scale + pe[:t]
                h = tr.decoder(y, memory, tgt_mask=causal_mask(t))
                return (h @ emb.t())[0, -1]
            return logits
        return config, make
    layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation=config["activation"],
                                       batch_first=True, norm_first=config["pre_norm"],
                                       layer_norm_eps=config["norm_eps"])
    stack = nn.TransformerEncoder(layer, config["n_layers"], enable_nested_tensor=False)
    stack.load_state_dict({k: v for k, v in w.items() if k.startswith("layers.")})
    stack.eval()
    final = nn.LayerNorm(d, eps=config["norm_eps"])
    final.load_state_dict({"weight": w["final_norm.weight"], "bias": w["final_norm.bias"]})
    pos = w["embed_positions.weight"]

    def make(_source):
        def logits(tokens):
            t = len(tokens)
            x = emb[torch.tensor([tokens])] + pos[:t]
            h = stack(x, mask=causal_mask(t))
            return (final(h) @ emb.t())[0, -1]
        return logits
    return config, make


def beam_search(logits_fn, prefix, k, max_new, end_tokens, eos, penalty, early):
    def score(total, length):
        return total / (max(length, 1) ** penalty)

    finished = []  # best first, at most k: (score, sum, tokens, logprobs, reason)

    def add(h):
        i = 0
        while i < len(finished) and finished[i][0] >= h[0]:
            i += 1
        finished.insert(i, h)
        del finished[k:]

    live = [([], [], 0.0)]  # tokens, their logprobs, sum
    generated, min_gap = 0, float("inf")
    while True:
        proposals = []
        for b, (tokens, _, total) in enumerate(live):
            lp = torch.log_softmax(logits_fn(prefix + tokens).double(), -1).float().double()
            order = sorted(range(lp.shape[0]), key=lambda i: (-float(lp[i]), i))[: 2 * k]
            for i in order:
                proposals.append((total + float(lp[i]), b, i, float(lp[i])))
        proposals.sort(key=lambda p: (-p[0], p[1], p[2]))
        generated += 1
        nxt = []
        cut = len(proposals)
        for rank, (total, b, tok, lp) in enumerate(proposals):
            if len(nxt) == k:
                cut = rank
                break
            tokens, lps = live[b][0] + [tok], live[b][1] + [lp]
            if tok in end_tokens:
                if rank >= k:
                    continue
                add((score(total, generated), total, tokens, lps, "eos" if tok == eos else "stop"))
                continue
            nxt.append((tokens, lps, total))
        # How close the selection came to another outcome: the gaps at the
        # cut (kept / not reached) and at rank k (where an ending token stops
        # counting).
        for j in (cut, k):
            if 0 < j < len(proposals):
                min_gap = min(min_gap, proposals[j - 1][0] - proposals[j][0])
        live = nxt
        if generated >= max_new:
            for tokens, lps, total in live:
                add((score(total, len(tokens)), total, tokens, lps, "length"))
            live = []
        if not live:
            break
        if len(finished) >= k and (early or finished[-1][0] >= score(live[0][2], generated)):
            break
    return finished, min_gap


def main(argv):
    models, cases = argv[1], json.load(open(argv[2]))
    out, loaded = [], {}
    with torch.no_grad():
        for case in cases:
            if case["model"] not in loaded:
                loaded[case["model"]] = load(models, case["model"])
            config, make = loaded[case["model"]]
            enc_dec = config["architecture"] == "encoder-decoder"
            logits_fn = make(case.get("source"))
            prefix = ([config["decoder_start_token_id"]] if enc_dec else []) + case["prompt"]
            end = list(case.get("stop_token_ids", []))
            if not case.get("ignore_eos", False):
                end.append(config["eos_token_id"])
            best, gap = beam_search(logits_fn, prefix, case["beam_width"], case["max_new"], end,
                                    config["eos_token_id"], case["length_penalty"],
                                    case["early_stopping"])
            out.append({"min_gap": gap, "hypotheses": [
                {"score": h[0], "sum": h[1], "tokens": h[2], "logprobs": h[3], "reason": h[4]}
                for h in best[: case["n"]]]})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
