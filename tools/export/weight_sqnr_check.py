#!/usr/bin/env python3
"""Independent check of a compare job's weight SQNR (worker/jobs/jobs.c compare_weights).

Decodes every NVFP4 linear of a compressed-tensors export with NumPy alone (weight_packed: two
E2M1 codes a byte, the even column in the low nibble, sign in bit 3; weight_scale: E4M3;
weight_global_scale: the encode scale, whose FP32 reciprocal multiplies, docs/export.md), reads
the BF16 parent's weight of the same name, and computes 10 log10(sum w_ref^2 / sum (w - w_ref)^2).
Each must equal the stored figure within 1e-9 dB (the two sum in different orders); a linear
the export keeps unquantized (lm_head) must equal the parent's and be stored as +inf.

Usage: weight_sqnr_check.py EXPORT_DIR PARENT_DIR STORED   (STORED: lines "<block>.<kind> dB")
Exit 0 when every linear agrees and every stored figure was checked, 1 otherwise."""
import json
import struct
import sys

import numpy as np

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
KINDS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o",
         "gate_proj": "gate", "up_proj": "up", "down_proj": "down"}


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype=np.uint8)
        dt = t["dtype"]
        if dt == "BF16":
            v = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt == "F32":
            v = raw.view(np.float32)
        elif dt in ("U8", "F8_E4M3"):
            v = raw
        else:
            raise SystemExit(f"{path}: {name}: dtype {dt} not handled by this check")
        out[name] = (dt, v.reshape(t["shape"]))
    return out


def e4m3(b):
    b = b.astype(np.int32)
    s = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 0xF
    m = b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    return (s * v).astype(np.float32)


def decode(packed, scale, glob):
    lo, hi = packed & 0xF, packed >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(packed.shape[0], -1)
    mag = E2M1[codes & 7]
    vals = np.where(codes & 8, -mag, mag).astype(np.float32)
    blocks = np.repeat(e4m3(scale), 16, axis=1)
    return (vals * blocks) * (np.float32(1) / np.float32(glob))


def main(argv):
    exp, parent, stored_path = argv[1:4]
    stored = dict(line.split() for line in open(stored_path) if line.strip())
    e = tensors(exp + "/model.safetensors")
    p = tensors(parent + "/model.safetensors")
    checked = 0
    for name in sorted(e):
        if not name.endswith(".weight_packed"):
            continue
        base = name[: -len(".weight_packed")]
        w = decode(e[name][1], e[base + ".weight_scale"][1], e[base + ".weight_global_scale"][1][0])
        ref = p[base + ".weight"][1].astype(np.float64)
        d = w.astype(np.float64) - ref
        db = 10 * np.log10(np.sum(ref * ref) / np.sum(d * d))
        parts = base.split(".")  # model.layers.<b>.<self_attn|mlp>.<module>
        key = f"{parts[2]}.{KINDS[parts[4]]}"
        got = float(stored.get(key, "nan"))
        if not abs(got - db) <= 1e-9:
            print(f"NOT OK {key}: stored {got!r}, NumPy {db!r}")
            return 1
        checked += 1
    # linears the export keeps as they are (lm_head here): equal to the parent's, +inf dB
    for key in sorted(set(stored) - {k for k in stored if k[0].isdigit()}):
        name = key + ".weight"
        same = name in e and np.array_equal(e[name][1], p[name][1])
        if not (same and stored[key] == "Infinity"):
            print(f"NOT OK {key}: stored {stored[key]}, the export's weight {'equals' if same else 'differs from'} the parent's")
            return 1
        checked += 1
    if checked != len(stored):
        print(f"NOT OK: {checked} linears decoded, {len(stored)} stored figures")
        return 1
    print(f"OK weight SQNR of {checked} linears equals NumPy's within 1e-9 dB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
