"""Helpers shared by the training scripts: the safetensors writer, loss-curve
plots, and the settings every run uses (one torch thread, fixed seeds).

Run the scripts with Debian's /usr/bin/python3 (python3-torch,
python3-sentencepiece, python3-matplotlib); scripts/install-training-deps.sh
installs them and the corpus packages.
"""
import json
import os
import struct
import time

import torch

_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def setup(seed):
    """One thread (the machine is shared: 2 cores) and a fixed seed."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` (name -> tensor) as safetensors: an 8-byte little-endian
    header length, the JSON header (padded with spaces to 8 bytes), then the
    raw little-endian bytes of each tensor in order. Names are sorted so the
    file is byte-identical for identical weights."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 \
            else t.numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")


def plot_loss(path, title, train_points, eval_points, ylabel="cross-entropy (nats/token)"):
    """Saves a loss curve PNG: train_points / eval_points are [(step, loss)]."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if train_points:
        ax.plot(*zip(*train_points), label="train (running mean)", linewidth=1)
    if eval_points:
        ax.plot(*zip(*eval_points), "o-", label="held-out", linewidth=1.5, markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # A fixed creation date keeps the PNG byte-identical across reruns.
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


class Timer:
    def __init__(self):
        self.start = time.monotonic()

    def minutes(self):
        return (time.monotonic() - self.start) / 60.0
