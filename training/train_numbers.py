#!/usr/bin/python3
"""Trains models/dikkat-numbers: an encoder-decoder Transformer in the
configuration of the notebooks that started dikkat (post-LN, sinusoidal
positions, ReLU feed-forward, d_model 256, 4 heads, embeddings scaled by
sqrt(d_model), output layer tied to the embedding) that writes a number given
in digits as English words:

    "4217" -> "four thousand two hundred seventeen"

The task is checked exactly: the converter below is the ground truth. Numbers
are 0..999,999; a number of 1..6 digits is drawn with equal probability per
length. A fixed held-out set (seeded) never appears in training; its greedy
exact-match accuracy with the exported fp16 weights is reported.

Text goes through a SentencePiece unigram model of 80 pieces trained here on
the task's own text, with split_digits: each digit is one piece and nearly
every English word one piece, so a target is ~12 tokens instead of ~50 bytes
(4x less compute per example than a byte vocabulary). The source is the
digits alone (what dikkat-server feeds for a Generate input by default: no
<bos>/<eos>); the decoder starts at <bos> and ends with <eos>.

Layers are torch.nn.Transformer, so the state_dict names are dikkat's own.
Reproducible: fixed seeds, one torch thread, a fixed number of steps.
usage: nice -n 10 /usr/bin/python3 training/train_numbers.py [--steps N]
"""
import argparse
import json
import math
import os
import random
import shutil
import sys

import sentencepiece as spm
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SentencePiece ids (fixed by the trainer options below) and the vocabulary.
UNK, BOS, EOS, PAD = 0, 1, 2, 3
VOCAB = 80
SP = None  # the SentencePieceProcessor, set in main()

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
        "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def below_thousand(n):
    """1..999 in words (American style: no "and"; 21..99 hyphenated)."""
    words = []
    if n >= 100:
        words += [ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(TENS[n // 10] + ("-" + ONES[n % 10] if n % 10 else ""))
    elif n > 0:
        words.append(ONES[n])
    return words


def number_to_words(n):
    """0..999,999 in English words, e.g. 4217 -> "four thousand two hundred seventeen"."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number {n} outside 0..999999")
    if n == 0:
        return "zero"
    words = []
    if n >= 1000:
        words += below_thousand(n // 1000) + ["thousand"]
    words += below_thousand(n % 1000)
    return " ".join(words)


def draw_number(rng):
    digits = rng.randint(1, 6)
    lo = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(lo, 10 ** digits - 1)


def train_tokenizer(prefix, seed):
    """Unigram SentencePiece on digits and words of 40,000 drawn numbers."""
    rng = random.Random(seed)
    with open(prefix + ".txt", "w") as f:
        for _ in range(40000):
            n = draw_number(rng)
            f.write(f"{n}\n{number_to_words(n)}\n")
    spm.SentencePieceTrainer.train(
        input=prefix + ".txt", model_prefix=prefix, vocab_size=VOCAB, model_type="unigram",
        split_digits=True, character_coverage=1.0, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        pad_id=PAD, num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def encode(text):
    return SP.encode(text)


def decode(ids):
    return SP.decode([i for i in ids if i > PAD])


# ---- model --------------------------------------------------------------------

def sinusoidal_table(positions, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): dikkat's table."""
    pos = torch.arange(positions, dtype=torch.float64).unsqueeze(1)                # [P, 1]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    table = torch.zeros(positions, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table.float()


class NumbersModel(nn.Module):
    """Shared source/target embedding (`embed_tokens`), tied output layer."""

    def __init__(self, d, heads, ffn, enc_layers, dec_layers, positions, dropout):
        super().__init__()
        self.d = d
        self.embed_tokens = nn.Embedding(VOCAB, d)
        nn.init.normal_(self.embed_tokens.weight, std=d ** -0.5)
        self.transformer = nn.Transformer(d, heads, enc_layers, dec_layers, ffn, dropout,
                                          activation="relu", batch_first=True, norm_first=False)
        self.register_buffer("pe", sinusoidal_table(positions, d), persistent=False)
        self.drop = nn.Dropout(dropout)

    def embed(self, ids):  # [B, T] -> [B, T, d]
        return self.drop(self.embed_tokens(ids) * math.sqrt(self.d) + self.pe[:ids.shape[1]])

    def encode(self, src):
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=src == PAD)

    def decode(self, tgt, memory, src):
        T = tgt.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        h = self.transformer.decoder(self.embed(tgt), memory, tgt_mask=mask,
                                     tgt_key_padding_mask=tgt == PAD,
                                     memory_key_padding_mask=src == PAD)
        return h @ self.embed_tokens.weight.t()  # [B, T, V]

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src)

    def export_state(self):
        """dikkat's names: embed_tokens.weight, encoder.*, decoder.* (nn.Transformer's own)."""
        out = {"embed_tokens.weight": self.embed_tokens.weight}
        for k, v in self.transformer.state_dict().items():
            out[k] = v
        return out


def pad_batch(seqs):
    n = max(map(len, seqs))
    return torch.tensor([s + [PAD] * (n - len(s)) for s in seqs], dtype=torch.long)


def make_batch(numbers):
    src = pad_batch([encode(str(n)) for n in numbers])
    tgt = [[BOS] + encode(number_to_words(n)) + [EOS] for n in numbers]
    return src, pad_batch([t[:-1] for t in tgt]), pad_batch([t[1:] for t in tgt])


@torch.no_grad()
def greedy(model, numbers, max_len=24):
    """Batched greedy decoding (in eval mode); returns the decoded strings."""
    was_training = model.training
    model.eval()
    src = pad_batch([encode(str(n)) for n in numbers])
    memory = model.encode(src)
    out = torch.full((len(numbers), 1), BOS, dtype=torch.long)
    done = torch.zeros(len(numbers), dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(out, memory, src)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        out = torch.cat([out, nxt.unsqueeze(1)], 1)
        done |= nxt == EOS
        if done.all():
            break
    model.train(was_training)
    texts = []
    for row in out[:, 1:].tolist():
        texts.append(decode(row[:row.index(EOS)] if EOS in row else row))
    return texts


def accuracy(model, numbers):
    got = []
    for i in range(0, len(numbers), 250):
        got += greedy(model, numbers[i:i + 250])
    right = sum(g == number_to_words(n) for g, n in zip(got, numbers))
    return right / len(numbers), got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "models", "dikkat-numbers"))
    ap.add_argument("--reference", default=os.path.join(REPO, "tests", "model", "data",
                                                        "dikkat_numbers_reference.json"))
    ap.add_argument("--plot", default=os.path.join(REPO, "docs", "dikkat-numbers-loss.png"))
    ap.add_argument("--work", default="/tmp/dikkat-numbers-work", help="tokenizer files")
    ap.add_argument("--seed", type=int, default=4217)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    ap.add_argument("--positions", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--lr", type=float, default=7e-4)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--heldout", type=int, default=2000)
    ap.add_argument("--eval-every", type=int, default=200)
    args = ap.parse_args()
    common.setup(args.seed)
    os.makedirs(args.work, exist_ok=True)
    global SP
    SP = train_tokenizer(os.path.join(args.work, "tokenizer"), args.seed)
    assert SP.vocab_size() == VOCAB and SP.pad_id() == PAD, "unexpected SentencePiece ids"

    rng = random.Random(args.seed)
    heldout = []
    seen = set()
    while len(heldout) < args.heldout:
        n = draw_number(rng)
        if n not in seen:
            seen.add(n)
            heldout.append(n)
    held_set = set(heldout)
    # The dev set tracks loss during training; numbers below 10 are too few to hold out.
    dev_src, dev_in, dev_out = make_batch(heldout[:500])

    model = NumbersModel(args.d_model, args.heads, args.ffn, args.layers, args.layers,
                         args.positions, args.dropout)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params / 1e6:.2f} M", flush=True)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    train_points, eval_points, running = [], [], None
    timer = common.Timer()
    for step in range(args.steps):
        warm = min(1.0, (step + 1) / args.warmup)
        decay = 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = args.lr * warm * (0.05 + 0.95 * decay)
        numbers = []
        while len(numbers) < args.batch:
            n = draw_number(rng)
            # Small numbers (< 100) are all seen; larger held-out ones never.
            if n not in held_set or n < 100:
                numbers.append(n)
        src, tgt_in, tgt_out = make_batch(numbers)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if step % 10 == 0:
            train_points.append((step, running))
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            model.eval()
            with torch.no_grad():
                dev = F.cross_entropy(model(dev_src, dev_in).flatten(0, 1), dev_out.flatten(),
                                      ignore_index=PAD).item()
            model.train()
            eval_points.append((step + 1, dev))
            acc, _ = accuracy(model, heldout[:200])
            print(f"step {step + 1}/{args.steps} train {running:.4f} held-out {dev:.4f} "
                  f"exact(200) {acc:.3f} ({timer.minutes():.1f} min)", flush=True)
    train_minutes = timer.minutes()

    # Export fp16 weights; accuracy and references come from the rounded weights.
    model.eval()
    state = {k: v.detach().to(torch.float16) for k, v in model.export_state().items()}
    model.embed_tokens.weight.data.copy_(state["embed_tokens.weight"].float())
    model.transformer.load_state_dict({k: state[k].float() for k in model.transformer.state_dict()})
    acc, got = accuracy(model, [n for n in heldout if n >= 100])
    print(f"held-out exact match (fp16 weights, numbers >= 100): {acc:.4f}", flush=True)
    errors = [(n, g) for n, g in zip([n for n in heldout if n >= 100], got)
              if g != number_to_words(n)]
    for n, g in errors[:10]:
        print(f"  {n}: got {g!r}, want {number_to_words(n)!r}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    common.write_safetensors(os.path.join(args.out, "model.safetensors"), state,
                             {"generator": "training/train_numbers.py", "seed": args.seed,
                              "steps": args.steps})
    shutil.copyfile(os.path.join(args.work, "tokenizer.model"),
                    os.path.join(args.out, "tokenizer.model"))
    config = {
        "name": "dikkat-numbers",
        "architecture": "encoder-decoder",
        "vocab_size": VOCAB,
        "d_model": args.d_model,
        "n_heads": args.heads,
        "ffn_dim": args.ffn,
        "n_encoder_layers": args.layers,
        "n_decoder_layers": args.layers,
        "max_positions": args.positions,
        "pre_norm": False,
        "norm": "layernorm",
        "norm_eps": 1e-5,
        "encoder_final_norm": True,
        "decoder_final_norm": True,
        "activation": "relu",
        "positions": "sinusoidal",
        "embedding_scale": math.sqrt(args.d_model),
        "tie_embeddings": True,
        "share_encoder_decoder_embeddings": True,
        "pad_token_id": PAD,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "decoder_start_token_id": BOS,
    }
    common.write_json(os.path.join(args.out, "dikkat.json"), config)

    # Reference: logits of the decoder's last position for one source and prefix.
    ref_n = 4217
    src = torch.tensor([encode(str(ref_n))])
    prefix = [BOS] + encode(number_to_words(ref_n))[:10]
    with torch.no_grad():
        logits = model(src, torch.tensor([prefix]))[0, -1]  # [V]
    sample = [n for n in heldout if n >= 100][:200]
    os.makedirs(os.path.dirname(args.reference), exist_ok=True)
    common.write_json(args.reference, {
        "about": "training/train_numbers.py: PyTorch logits of the exported fp16 weights "
                 "(computed in float32) at the last decoder position, and held-out numbers "
                 "(never trained on) with their words from the script's converter",
        "source_ids": src[0].tolist(),
        "decoder_ids": prefix,
        "last_logits": [round(v, 5) for v in logits.tolist()],
        "heldout": [{"digits": str(n), "words": number_to_words(n)} for n in sample],
    })
    common.plot_loss(args.plot, "dikkat-numbers (encoder-decoder, digits -> words)",
                     train_points, eval_points, ylabel="cross-entropy (nats/token)")
    summary = {"parameters": n_params, "steps": args.steps, "batch": args.batch,
               "train_minutes": round(train_minutes, 1),
               "heldout_numbers": len([n for n in heldout if n >= 100]),
               "heldout_exact_match_fp16": round(acc, 4)}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
