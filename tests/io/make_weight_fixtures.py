#!/usr/bin/python3
"""Weight-file fixtures and a reference safetensors parser for weights_test.

  make_weight_fixtures.py make OUT_DIR   writes the fixtures below into OUT_DIR
                                         plus expected.json (raw bytes in hex)
  make_weight_fixtures.py read FILE      parses a .safetensors file on its own
                                         (strictly, as the reference reader does)
                                         and prints its tensors as JSON

Run with Debian's /usr/bin/python3 (python3-torch). There is no safetensors
package here, so the format is written and read by hand: an 8-byte
little-endian header length, a JSON header, raw little-endian bytes.
"""
import collections
import hashlib
import json
import os
import struct
import sys
import zipfile

import torch

ST_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
    torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
TORCH_DTYPES = {v: k for k, v in ST_DTYPES.items()}


def raw_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def describe(t):
    return {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "hex": raw_bytes(t).hex()}


def write_safetensors(path, tensors, metadata=None):
    """Tensors are laid out in dict order, with no alignment padding between them."""
    header, chunks, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        data = raw_bytes(t)
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


def basic_tensors():
    g = torch.Generator().manual_seed(1234)
    f32 = torch.randn(2, 3, generator=g)
    f32[0, 0], f32[0, 1], f32[0, 2], f32[1, 0] = float("inf"), float("nan"), -0.0, 1e-40
    f16 = torch.tensor([1.0, -2.5, 65504.0, 6e-8, float("-inf")], dtype=torch.float16)
    # Order matters: the 3-byte I8 tensor right after F32 leaves every later
    # multi-byte tensor misaligned, which exercises the reader's copy path.
    return collections.OrderedDict([
        ("f32", f32),
        ("i8", torch.tensor([-128, 0, 127], dtype=torch.int8)),
        ("f16", f16),
        ("bf16", torch.randn(3, 2, generator=g).to(torch.bfloat16)),
        ("i64", torch.tensor([2**62 + 1, -2**63, 0, 7], dtype=torch.int64)),
        ("f64", torch.tensor([3.141592653589793, -1e300], dtype=torch.float64)),
        ("i32", torch.tensor([2**31 - 1, -2**31, 5], dtype=torch.int32)),
        ("i16", torch.tensor([-32768, 32767], dtype=torch.int16)),
        ("u8", torch.tensor([0, 1, 200, 255], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("scalar", torch.tensor(2.5)),
        ("empty", torch.zeros(0, 3)),
        ("layer.0.weight", torch.randn(4, 4, generator=g)),
    ])


def small_model_state_dict():
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    sd = model.state_dict()  # an OrderedDict carrying _metadata, as in real checkpoints
    big = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sd["extra.big"] = big
    sd["extra.view"] = big.t()  # non-contiguous, shares big's storage
    sd["extra.row"] = big[1]  # storage offset 4
    sd["extra.bf16"] = torch.randn(5).to(torch.bfloat16)
    sd["extra.half"] = torch.randn(2, 2).to(torch.float16)
    sd["extra.ids"] = torch.tensor([1, -2, 2**40], dtype=torch.int64)
    return sd


def make(out):
    expected = {}

    basic = basic_tensors()
    write_safetensors(os.path.join(out, "basic.safetensors"), basic, {"format": "pt"})
    expected["basic"] = {k: describe(v) for k, v in basic.items()}
    expected["basic_metadata"] = {"format": "pt"}
    expected["f32_transposed"] = describe(basic["f32"].t())

    os.makedirs(os.path.join(out, "single_dir"))
    write_safetensors(os.path.join(out, "single_dir", "model.safetensors"), basic)

    g = torch.Generator().manual_seed(99)
    shard1 = collections.OrderedDict([("a", torch.randn(2, 2, generator=g)),
                                      ("b", torch.randn(3, generator=g).half())])
    shard2 = collections.OrderedDict([("c", torch.arange(6, dtype=torch.int64).reshape(2, 3))])
    for d, index_extra in (("sharded", {}), ("sharded_bad", {"missing.weight": 1})):
        os.makedirs(os.path.join(out, d))
        names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        write_safetensors(os.path.join(out, d, names[0]), shard1)
        write_safetensors(os.path.join(out, d, names[1]), shard2)
        weight_map = {k: names[0] for k in shard1}
        weight_map.update({k: names[1] for k in shard2})
        weight_map.update({k: names[v - 1] for k, v in index_extra.items()})
        with open(os.path.join(out, d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 34}, "weight_map": weight_map}, f)
    expected["sharded"] = {k: describe(v) for k, v in list(shard1.items()) + list(shard2.items())}
    # An index whose shard path climbs out of its folder (to basic.safetensors).
    os.makedirs(os.path.join(out, "sharded_escape"))
    with open(os.path.join(out, "sharded_escape", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": {"f32": "../basic.safetensors"}}, f)

    sd = small_model_state_dict()
    torch.save(sd, os.path.join(out, "ckpt.pt"))
    expected["ckpt"] = {k: describe(v) for k, v in sd.items()}
    # Protocol 4 uses other opcodes (FRAME, MEMOIZE, STACK_GLOBAL, ...).
    torch.save(sd, os.path.join(out, "ckpt_proto4.pt"), pickle_protocol=4)
    torch.manual_seed(3)
    params = dict(torch.nn.Linear(2, 2).named_parameters())  # nn.Parameter values
    torch.save(params, os.path.join(out, "params.pt"))
    expected["params"] = {k: describe(v) for k, v in params.items()}
    torch.save({"model": sd, "epoch": 3, "note": "not a tensor",
                "optimizer": {"state": {0: {"momentum": torch.ones(2)}}, "lr": 0.1}},
               os.path.join(out, "nested.pt"))
    nested = {"model." + k: describe(v) for k, v in sd.items()}
    nested["optimizer.state.0.momentum"] = describe(torch.ones(2))
    expected["nested"] = nested
    # One dict saved twice: the pickle refers to it again through the memo.
    torch.save({"model": sd, "ema": sd}, os.path.join(out, "twice.pt"))
    expected["twice"] = {p + k: describe(v) for p in ("model.", "ema.") for k, v in sd.items()}
    torch.save(sd, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
    # Hostile pickles (zip archives as torch.save writes them, data.pkl by
    # hand): a dict that contains itself (PROTO 2, EMPTY_DICT, BINPUT 0,
    # BINUNICODE "a", BINGET 0, SETITEM, STOP: 15 bytes), and dicts nested
    # 200000 deep ({"a": {"a": ...}}: ~1.6 MB).
    depth = 200000
    deep = (b"\x80\x02" + b"}X\x01\x00\x00\x00a" * depth + b"}" + b"s" * depth + b".")
    # 60 levels of dicts, each holding the previous level twice through the
    # memo ({"a": d, "b": d}): 1.3 KB, 2^60 paths to flatten (the load
    # never ended; fuzz/torch_pickle_fuzzer.cc reports it as a timeout).
    shared = b"\x80\x02}q\x000"
    for i in range(1, 61):
        shared += (b"}(X\x01\x00\x00\x00ah" + bytes([i - 1]) + b"X\x01\x00\x00\x00bh"
                   + bytes([i - 1]) + b"uq" + bytes([i]) + (b"0" if i < 60 else b""))
    shared += b"."
    for name, pkl in (("cyclic.pt", b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s."),
                      ("deep.pt", deep), ("shared_dicts.pt", shared)):
        with zipfile.ZipFile(os.path.join(out, name), "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", pkl)
            z.writestr("archive/version", "3\n")
    os.makedirs(os.path.join(out, "bin_dir"))
    torch.save(sd, os.path.join(out, "bin_dir", "pytorch_model.bin"))

    hashes = {}
    rng = torch.Generator().manual_seed(5)
    # Sizes around SHA-256's 64-byte block and padding edge, and one past the
    # reader's 1 MiB chunk.
    for size in (0, 55, 56, 64, (1 << 20) + 3):
        name = "hash_%d.bin" % size
        data = bytes(torch.randint(0, 256, (size,), dtype=torch.uint8, generator=rng).tolist())
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        hashes[name] = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "basic.safetensors"), "rb") as f:
        hashes["basic.safetensors"] = hashlib.sha256(f.read()).hexdigest()
    expected["sha256"] = hashes

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def read(path):
    """Strict reader: 8-aligned header, offsets that tile the data exactly."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8 != 0:
        raise SystemExit("header length %d is not a multiple of 8" % n)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", None)
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    position = 0
    for begin, end, name in spans:
        if begin != position:
            raise SystemExit("tensor %s starts at %d, expected %d" % (name, begin, position))
        position = end
    if position != len(data):
        raise SystemExit("tensors cover %d of %d data bytes" % (position, len(data)))
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = TORCH_DTYPES[info["dtype"]]
        chunk = bytearray(data[begin:end])
        if end > begin:
            t = torch.frombuffer(chunk, dtype=dtype).reshape(info["shape"])
        else:
            t = torch.zeros(info["shape"], dtype=dtype)
        tensors[name] = describe(t)
    json.dump({"header_length": n, "metadata": metadata, "tensors": tensors}, sys.stdout)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("make", "read"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        read(sys.argv[2])
