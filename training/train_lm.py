#!/usr/bin/python3
"""Trains models/dikkat-lm: a small decoder-only language model with a
SentencePiece tokenizer, on English text that Debian packages ship.

Corpus (both from Debian main, see docs/models.md for licenses):
  * bible-kjv-text: the King James Version (1611, public domain), read with
    the `bible` program of bible-kjv; one document per chapter.
  * fortunes (+ fortunes-min): the fortune-mod cookie databases (BSD licence
    in /usr/share/doc/fortunes/copyright); one document per cookie.
Every 50th document is held out for the validation loss.

The model is GPT-shaped in dikkat's decoder-only layout: learned positions,
pre-LN layers that are exactly torch.nn.TransformerEncoderLayer(norm_first=True,
activation="gelu") under a causal mask, a final LayerNorm and an output layer
tied to the token embedding. Documents are packed into one stream as
<bos> text <eos> <bos> text <eos> ... and trained on random windows, so a
prompt works with or without a leading <bos>.

Reproducible: fixed seeds, one torch thread, a fixed number of steps.
usage: nice -n 10 /usr/bin/python3 training/train_lm.py [--steps N] [--out models/dikkat-lm]
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

import sentencepiece as spm
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORTUNE_DIR = "/usr/share/games/fortunes"
# Cookie files that are pictures or not English prose.
FORTUNE_SKIP = {"ascii-art", "translate-me", "debian"}


# ---- corpus -------------------------------------------------------------------

def squash(text):
    return re.sub(r"\s+", " ", text).strip()


def kjv_documents():
    """One document per chapter: the verses joined by spaces, verse numbers removed."""
    out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    docs, verses = [], []
    for line in out.splitlines():
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            verses.append(m.group(1))
        elif line.strip():  # a chapter heading such as "Genesis 1"
            if verses:
                docs.append(squash(" ".join(verses)))
            verses = []
    if verses:
        docs.append(squash(" ".join(verses)))
    return docs


def fortune_documents():
    docs = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if "." in name or name in FORTUNE_SKIP or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for cookie in f.read().split("\n%\n"):
                text = squash(cookie.replace("%", ""))
                letters = sum(c.isalpha() or c.isspace() for c in text)
                # Drop pictures, tables and code: prose is mostly letters and spaces.
                if len(text) >= 20 and letters >= 0.85 * len(text):
                    docs.append(text)
    return docs


# ---- model --------------------------------------------------------------------

class LanguageModel(nn.Module):
    """Names match dikkat's decoder-only tensors (docs/model-format.md)."""

    def __init__(self, vocab, d, heads, ffn, layers, positions, dropout):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.embed_positions = nn.Embedding(positions, d)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d, heads, ffn, dropout, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers)])
        self.final_norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)
        nn.init.normal_(self.embed_tokens.weight, std=0.02)
        nn.init.normal_(self.embed_positions.weight, std=0.01)

    def forward(self, ids):  # ids [B, T]
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device)
        x = self.drop(self.embed_tokens(ids) + self.embed_positions(pos))  # [B, T, d]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)   # [T, T]
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        x = self.final_norm(x)
        return x @ self.embed_tokens.weight.t()  # [B, T, V]


def batches(stream, batch, ctx, gen):
    starts = torch.randint(0, len(stream) - ctx - 1, (batch,), generator=gen)
    x = torch.stack([stream[s:s + ctx] for s in starts.tolist()])
    y = torch.stack([stream[s + 1:s + ctx + 1] for s in starts.tolist()])
    return x, y


@torch.no_grad()
def eval_loss(model, stream, ctx, n_windows=64):
    model.eval()
    total, count = 0.0, 0
    step = max(1, (len(stream) - ctx - 1) // n_windows)
    for s in range(0, len(stream) - ctx - 1, step)[:n_windows]:
        x = stream[s:s + ctx].unsqueeze(0)
        y = stream[s + 1:s + ctx + 1].unsqueeze(0)
        total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count


@torch.no_grad()
def greedy(model, ids, n, eos):
    model.eval()
    ids = list(ids)
    for _ in range(n):
        nxt = int(model(torch.tensor([ids]))[0, -1].argmax())
        if nxt == eos:
            break
        ids.append(nxt)
    return ids


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


# ---- main ---------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "models", "dikkat-lm"))
    ap.add_argument("--work", default="/tmp/dikkat-lm-work", help="corpus and checkpoints")
    ap.add_argument("--reference", default=os.path.join(REPO, "tests", "model", "data",
                                                        "dikkat_lm_reference.json"))
    ap.add_argument("--plot", default=os.path.join(REPO, "docs", "dikkat-lm-loss.png"))
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--benchmark", type=int, default=0,
                    help="time this many steps, print steps/s and exit")
    args = ap.parse_args()
    common.setup(args.seed)
    timer = common.Timer()
    os.makedirs(args.work, exist_ok=True)

    # Corpus and tokenizer.
    kjv, fortunes = kjv_documents(), fortune_documents()
    docs = kjv + fortunes
    heldout = docs[::50]
    train_docs = [d for i, d in enumerate(docs) if i % 50 != 0]
    print(f"corpus: {len(kjv)} KJV chapters, {len(fortunes)} fortunes, "
          f"{sum(map(len, docs)) / 1e6:.2f} MB; {len(heldout)} documents held out", flush=True)
    sp_input = os.path.join(args.work, "spm_input.txt")
    with open(sp_input, "w") as f:
        for d in train_docs:
            # Sentences of at most ~2000 bytes: SentencePiece skips longer ones.
            for piece in re.split(r"(?<=[.;:?!]) ", d):
                f.write(piece[:2000] + "\n")
    prefix = os.path.join(args.work, "tokenizer")
    spm.SentencePieceTrainer.train(
        input=sp_input, model_prefix=prefix, vocab_size=args.vocab, model_type="unigram",
        character_coverage=0.9999, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=3,
        num_threads=1, input_sentence_size=0, shuffle_input_sentence=False,
        minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    bos, eos, pad = sp.bos_id(), sp.eos_id(), sp.pad_id()

    def to_stream(ds):
        ids = []
        for d in ds:
            ids += [bos] + sp.encode(d) + [eos]
        return torch.tensor(ids, dtype=torch.long)

    train_stream, held_stream = to_stream(train_docs), to_stream(heldout)
    print(f"tokens: train {len(train_stream)}, held-out {len(held_stream)} "
          f"({timer.minutes():.1f} min)", flush=True)

    model = LanguageModel(args.vocab, args.d_model, args.heads, args.ffn, args.layers,
                          args.context, args.dropout)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params / 1e6:.2f} M", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    steps = args.benchmark or args.steps
    train_points, eval_points, running = [], [], None
    train_start = common.Timer()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, args.lr, warmup=min(200, steps // 10))
        x, y = batches(train_stream, args.batch, args.context, gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        if step % 25 == 0:
            train_points.append((step, running))
        if not args.benchmark and ((step + 1) % args.eval_every == 0 or step + 1 == steps):
            ev = eval_loss(model, held_stream, args.context)
            eval_points.append((step + 1, ev))
            print(f"step {step + 1}/{steps} train {running:.3f} held-out {ev:.3f} "
                  f"({train_start.minutes():.1f} min)", flush=True)
    if args.benchmark:
        print(f"{steps / (train_start.minutes() * 60):.3f} steps/s", flush=True)
        return
    train_minutes = train_start.minutes()

    # Export: fp16 weights; the reference is computed from the rounded weights.
    model.eval()
    state = {k: v.to(torch.float16) for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.float() for k, v in state.items()})
    final_eval = eval_loss(model, held_stream, args.context)
    os.makedirs(args.out, exist_ok=True)
    common.write_safetensors(os.path.join(args.out, "model.safetensors"), state,
                             {"generator": "training/train_lm.py", "seed": args.seed,
                              "steps": steps})
    shutil.copyfile(prefix + ".model", os.path.join(args.out, "tokenizer.model"))
    config = {
        "name": "dikkat-lm",
        "architecture": "decoder-only",
        "vocab_size": args.vocab,
        "d_model": args.d_model,
        "n_heads": args.heads,
        "ffn_dim": args.ffn,
        "n_layers": args.layers,
        "max_positions": args.context,
        "pre_norm": True,
        "norm": "layernorm",
        "norm_eps": 1e-5,
        "final_norm": True,
        "activation": "gelu",
        "positions": "learned",
        "tie_embeddings": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
    }
    common.write_json(os.path.join(args.out, "dikkat.json"), config)

    prompts = ["And the LORD said unto", "The meaning of life is", "A computer",
               "In the beginning", "Love is", "The best way to"]
    samples = []
    for p in prompts:
        ids = sp.encode(p)
        out = greedy(model, ids, 24, eos)
        samples.append({"prompt": p, "prompt_ids": ids, "greedy_ids": out[len(ids):],
                        "greedy_text": sp.decode(out[len(ids):])})
        print(f"  {p!r} -> {sp.decode(out)!r}", flush=True)
    ref_ids = samples[0]["prompt_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ref_ids]))[0, -1]  # [V]
    os.makedirs(os.path.dirname(args.reference), exist_ok=True)
    common.write_json(args.reference, {
        "about": "training/train_lm.py: PyTorch logits of the exported fp16 weights (computed "
                 "in float32) for the last token of prompt_ids, and greedy continuations",
        "prompt_ids": ref_ids,
        "last_logits": [round(v, 5) for v in logits.tolist()],
        "samples": samples,
    })
    common.plot_loss(args.plot, "dikkat-lm (decoder-only, KJV + fortunes)",
                     train_points, eval_points)
    summary = {"parameters": n_params, "train_tokens": len(train_stream),
               "heldout_tokens": len(held_stream), "steps": steps,
               "tokens_seen": steps * args.batch * args.context,
               "train_minutes": round(train_minutes, 1),
               "heldout_loss_fp16": round(final_eval, 4),
               "heldout_perplexity_fp16": round(math.exp(final_eval), 2)}
    print(json.dumps(summary), flush=True)
    common.write_json(os.path.join(args.work, "summary.json"), summary)


if __name__ == "__main__":
    main()
