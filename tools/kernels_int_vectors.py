#!/usr/bin/env python3
"""Reference vectors for qsweep's symmetric integer formats (kernels/: int8_channel,
int4_group), computed independently of the C code with numpy in float32, for
tests/kernels/test_edges.c. Writes tests/kernels/data/int_edges.tsv.

The rule emulated (kernels/README.md, "NaN and Inf"): per block (a row for int8_channel, a
group of `group` elements along k for int4_group), amax = max |x| over the FINITE elements;
s = float32(amax) / float32(int_max), s = 1 when that is 0; q = rint(x / s) (float32
division, round half to even) clipped to [-int_max, int_max]; +-Inf clips to +-int_max, NaN
becomes 0, and the integer code has a single zero (+0); y = float32(q * s).

Usage: python3 tools/kernels_int_vectors.py [output.tsv]
"""
import sys

import numpy as np

F32 = np.float32


def fake_quant(x, int_max, group):
    x = np.asarray(x, dtype=F32)
    y = np.empty_like(x)
    for g0 in range(0, x.size, group):
        blk = x[g0:g0 + group]
        fin = blk[np.isfinite(blk)]
        amax = F32(np.max(np.abs(fin))) if fin.size else F32(0)
        s = F32(amax / F32(int_max))
        if s == 0:
            s = F32(1)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            q = (blk / s).astype(F32)
        q = np.where(np.isnan(q), F32(0), q)
        q = np.clip(np.rint(q), -int_max, int_max).astype(F32)
        q = np.where(q == 0, F32(0), q)  # one integer zero: +0
        y[g0:g0 + group] = (q * s).astype(F32)
    return y


def hexbits(a):
    return ",".join("%08x" % v for v in np.asarray(a, dtype=F32).view(np.uint32))


def cases():
    rng = np.random.default_rng(20261201)
    inf, nan = np.inf, np.nan
    # amax 127 -> s = 1: exact ties at .5 (RNE: 2.5 -> 2, -3.5 -> -4, 0.5 -> 0, -0.5 -> +0)
    ties = [127, 2.5, -3.5, 0.5, -0.5, 1.5, 126.5, -126.5, -0.0, 3e-42]
    yield "int8_channel", 0, ties + [inf, -inf, nan, 64.25]
    # Inf and NaN beside ordinary values: the scale comes from the finite ones
    yield "int8_channel", 0, [inf, 1.0, -0.5, 0.25, nan, -inf, 3.0, 0.001]
    # only non-finite values and zeros: amax 0 -> s = 1, Inf -> +-127, NaN -> 0
    yield "int8_channel", 0, [inf, -inf, nan, 0.0, -0.0]
    yield "int8_channel", 0, list(rng.standard_normal(48).astype(F32) * F32(3))
    # subnormal-only row: s = amax/127 is subnormal or 0
    yield "int8_channel", 0, [1e-40, -3e-41, 1e-45, 0.0]
    for group in (8, 5):
        v = list(rng.standard_normal(21).astype(F32))
        v[2], v[9], v[15], v[19] = inf, nan, -inf, 2.5
        yield "int4_group", group, v
    # int_max 7: ties with amax 7 (s = 1)
    yield "int4_group", 8, [7, 0.5, 1.5, 2.5, -2.5, -6.5, 6.5, -0.4]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/kernels/data/int_edges.tsv"
    with open(out, "w") as f:
        f.write("# Symmetric INT fake-quant reference (numpy %s, float32), made by "
                "tools/kernels_int_vectors.py; rule in its docstring.\n" % np.__version__)
        f.write("# group 0 = one block per row (int8_channel). x and y are FP32 bit patterns.\n")
        f.write("format\tgroup\tk\tx_bits\ty_bits\n")
        for fmt, group, x in cases():
            x = np.asarray(x, dtype=F32)
            int_max = 127 if fmt == "int8_channel" else 7
            y = fake_quant(x, int_max, group if group else x.size)
            f.write("%s\t%d\t%d\t%s\t%s\n" % (fmt, group, x.size, hexbits(x), hexbits(y)))


if __name__ == "__main__":
    main()
