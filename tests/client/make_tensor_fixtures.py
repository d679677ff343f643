"""Writes reference tensor bytes made by PyTorch for tensor_test.cc.

For each dtype (float32, bfloat16, float16) in OUT_DIR:
  <dtype>.input   the float32 values given to torch (little-endian)
  <dtype>.encoded torch's conversion of them to <dtype> (little-endian)
  <dtype>.decoded torch's conversion of that back to float32
The values cover zeros, signs, subnormals of each format, rounding ties,
overflow to infinity, infinities, NaN, and a spread of random magnitudes.
Run with /usr/bin/python3 (Debian's python3-torch).
"""
import math
import os
import sys

import numpy as np
import torch


def values():
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.140625, 65504.0, 65519.0, 65520.0, 70000.0,
               -1e6, 1e-5, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-8, 1e-40, -1e-42,
               3.4e38, math.inf, -math.inf, math.nan,
               # float16 ties: halfway between neighbours at 1.0 (ulp 2^-10)
               1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
               # bfloat16 ties at 1.0 (ulp 2^-7)
               1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 255.5, 256.5]
    gen = torch.Generator().manual_seed(1234)
    randoms = torch.randn(2000, generator=gen) * torch.pow(
        10.0, torch.empty(2000).uniform_(-9, 6, generator=gen))
    return torch.cat([torch.tensor(special, dtype=torch.float32), randoms.float()])


def main():
    out_dir = sys.argv[1]
    x = values()
    for name, dtype in [("float32", torch.float32), ("bfloat16", torch.bfloat16),
                        ("float16", torch.float16)]:
        encoded = x.to(dtype)
        # numpy has no bfloat16: reinterpret the 2-byte patterns as int16.
        raw = encoded.view(torch.int16) if dtype == torch.bfloat16 else encoded
        if dtype == torch.float32:
            encoded_bytes = raw.numpy().astype("<f4").tobytes()
        elif dtype == torch.float16:
            encoded_bytes = raw.numpy().astype("<f2").tobytes()
        else:
            encoded_bytes = raw.numpy().astype("<i2").tobytes()
        with open(os.path.join(out_dir, name + ".input"), "wb") as f:
            f.write(x.numpy().astype("<f4").tobytes())
        with open(os.path.join(out_dir, name + ".encoded"), "wb") as f:
            f.write(encoded_bytes)
        with open(os.path.join(out_dir, name + ".decoded"), "wb") as f:
            f.write(encoded.float().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
