#!/usr/bin/env python3
"""Prints the 2^(k/128) table of worker/engine/exp_vec.c, the one the C library's exp uses.

For k = 0..127: H[k] is the double nearest 2^(k/128) and T[k] the double nearest
2^(k/128)/H[k] - 1, computed in 80-digit decimal arithmetic; the table holds the bits of T[k],
then the bits of H[k] less k << 45 (the exponent of 2^(k>>7) is added back at run time).
Usage: python3 tools/exp_table.py
"""
import struct
from decimal import Decimal, getcontext

getcontext().prec = 80
LN2 = Decimal(2).ln()


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def main():
    words = []
    for k in range(128):
        v = (LN2 * k / 128).exp()
        h = float(v)  # correctly rounded
        t = float((v - Decimal(h)) / Decimal(h))
        words += [bits(t), (bits(h) - (k << 45)) % (1 << 64)]
    for i in range(0, 256, 4):
        print("    " + ", ".join("0x%016xull" % w for w in words[i:i + 4]) + ",")


if __name__ == "__main__":
    main()
