#!/usr/bin/env python3
"""How far a fine-tuned checkpoint's weights are from the Q4_1 grid of the GGUF it started from.

SmolLM2-135M-Instruct.Q4_1.gguf stores each linear in blocks of 32 weights along K, each block
a step d and an offset m (both FP16) and 4-bit codes q, the weight m + q d (ggml's Q4_1). For the
same linear of a Hugging Face folder (model.safetensors in F32, as a qsweep training job writes
it), each weight w is placed on its block's grid: x = (w - m) / d, and its distance to the grid
is |x - round(x)| with round(x) kept in 0..15, in units of d (0: on the grid; weights spread
evenly between grid points average 0.25). Prints, per component (down_proj, v_proj, up_proj, all
30 blocks), the mean, median and 99th percentile of that distance and the share of weights
exactly on the grid. Needs NumPy and the gguf package.
Usage: q4_1_grid_distance.py GGUF FOLDER_OR_SAFETENSORS
Exit status: 0, 2 bad input (naming the file and tensor).
"""
import json
import os
import struct
import sys

COMPONENTS = [("ffn_down", "mlp.down_proj", "down"), ("attn_v", "self_attn.v_proj", "v"),
              ("ffn_up", "mlp.up_proj", "up")]


def bad(msg):
    print(f"q4_1_grid_distance: {msg}", file=sys.stderr)
    sys.exit(2)


def safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    raw = np.memmap(path, dtype=np.uint8, mode="r")

    def tensor(name):
        h = header.get(name)
        if h is None:
            bad(f"{path}: no tensor {name}")
        if h["dtype"] != "F32":
            bad(f"{path}: {name} is {h['dtype']}, expected F32")
        a, b = h["data_offsets"]
        return np.frombuffer(raw[8 + n + a:8 + n + b].tobytes(), dtype=np.float32).reshape(h["shape"])
    return tensor


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import gguf
        import numpy as np
    except ImportError as e:
        bad(f"needs NumPy and gguf: {e}")
    st = argv[2]
    if os.path.isdir(st):
        st = os.path.join(st, "model.safetensors")
    tensor = safetensors(st)
    reader = gguf.GGUFReader(argv[1])
    by_name = {t.name: t for t in reader.tensors}
    n_layers = sum(1 for t in by_name if t.startswith("blk.") and t.endswith(".ffn_down.weight"))
    for gname, hname, label in COMPONENTS:
        dist = []
        for layer in range(n_layers):
            t = by_name.get(f"blk.{layer}.{gname}.weight")
            if t is None or t.tensor_type != gguf.GGMLQuantizationType.Q4_1:
                bad(f"{argv[1]}: blk.{layer}.{gname}.weight is not Q4_1")
            blocks = np.asarray(t.data).reshape(-1, 20)  # d (f16), m (f16), 16 bytes of codes
            d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
            m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
            w = tensor(f"model.layers.{layer}.{hname}.weight").reshape(-1, 32)
            if w.shape[0] != blocks.shape[0]:
                bad(f"{st}: model.layers.{layer}.{hname}.weight has {w.size} weights, the GGUF's "
                    f"{blocks.shape[0] * 32}")
            x = (w - m) / np.where(d == 0, 1, d)
            dist.append(np.abs(x - np.clip(np.round(x), 0, 15)).ravel())
        r = np.concatenate(dist)
        print(f"{label:<5} distance to the Q4_1 grid (units of the block's step): mean {r.mean():.4f}"
              f"  median {np.median(r):.4f}  p99 {np.quantile(r, 0.99):.4f}"
              f"  on the grid {100 * np.mean(r == 0):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
