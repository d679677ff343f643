#!/usr/bin/python3
"""Fits the polynomial of the erf GELU's erfc (model/cpu_elementwise_body.inc).

erfc(z) = t * exp(-z^2) * P(t) for z >= 0, t = 1 / (1 + z / 2). P (degree 8
by default) is fitted to g(t) = erfc(z) * exp(z^2) / t by least squares,
weighted for relative error and then re-weighted toward the largest errors,
on Chebyshev nodes in t for z in [0, 10]. Prints the coefficients, constant
first, and the relative error of the float32 evaluation against math.erfc.
Needs Debian's python3-numpy: /usr/bin/python3 tools/fit_erfc.py [degree]
"""
import math
import sys

import numpy as np

P_SCALE = 0.5


def main():
    deg = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    n = 4000
    t_lo = 1 / (1 + P_SCALE * 10)
    k = np.arange(n)
    t = t_lo + (1 - t_lo) * (0.5 + 0.5 * np.cos(np.pi * (k + 0.5) / n))
    z = (1 / t - 1) / P_SCALE
    g = np.array([math.erfc(zi) * math.exp(zi * zi) for zi in z]) / t
    a = np.vander(t, deg + 1, increasing=True)
    w = 1 / g
    c, *_ = np.linalg.lstsq(a * w[:, None], g * w, rcond=None)
    for _ in range(30):
        r = (a @ c - g) / g
        wr = w * (1 + 50 * np.abs(r) / np.abs(r).max())
        c, *_ = np.linalg.lstsq(a * wr[:, None], g * wr, rcond=None)

    zz = np.linspace(0, 9, 200001).astype(np.float32)
    tt = (np.float32(1) / (np.float32(1) + np.float32(P_SCALE) * zz)).astype(np.float32)
    acc = np.float32(c[-1])
    for cc in c[-2::-1]:
        acc = (acc * tt + np.float32(cc)).astype(np.float32)
    got = (tt * np.exp(-(zz * zz)).astype(np.float32) * acc).astype(np.float32)
    ref = np.array([math.erfc(v) for v in zz.astype(np.float64)])
    rel = np.abs(got - ref) / ref
    print("degree %d, coefficients (constant first):" % deg)
    print(", ".join("%.9ef" % v for v in c))
    for lim in (1, 2, 4, 6, 9):
        print("z <= %g: max relative error %.3g" % (lim, rel[zz <= lim].max()))


if __name__ == "__main__":
    main()
