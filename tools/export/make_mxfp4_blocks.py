#!/usr/bin/env python3
"""Reference values of ggml's MXFP4 tensor type (block_mxfp4: one E8M0 byte, then 16 bytes of
E2M1 nibbles, element j in the low nibble of byte j and element j + 16 in its high nibble) from
gguf-py's own decoder (gguf.quants.dequantize, GGMLQuantizationType.MXFP4), for qsweep's GGUF
reader. 64 seeded random blocks, the exponent bytes 0, 1, 2, 127, 254 and 255 among them.
Writes OUT/mxfp4_blocks.bin (the blocks) and OUT/mxfp4_values.bin (their values, FP32
little-endian). Usage: make_mxfp4_blocks.py OUT   (committed output: tests/export/fixtures;
gguf 0.19.0 from PyPI)"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize


def main(out):
    rng = np.random.default_rng(39)
    blocks = rng.integers(0, 256, size=(64, 17), dtype=np.uint8)
    blocks[:6, 0] = [0, 1, 2, 127, 254, 255]
    values = dequantize(blocks.reshape(-1), GGMLQuantizationType.MXFP4).astype("<f4")
    os.makedirs(out, exist_ok=True)
    blocks.tofile(os.path.join(out, "mxfp4_blocks.bin"))
    values.tofile(os.path.join(out, "mxfp4_values.bin"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/export/fixtures")
