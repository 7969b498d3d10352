#!/usr/bin/env python3
"""An independent reader of qsweep's GGUF export: gguf-py (PyPI gguf, llama.cpp's own Python
package) reads EXPORT_DIR/model.gguf and decodes every tensor with its own decoder
(gguf.quants.dequantize: MXFP4 and whatever types the export kept, Q4_0, Q4_1, Q8_0, F16, BF16,
F32); with attn_q/attn_k rows put back from llama.cpp's permuted order (convert_hf_to_gguf.py
LlamaModel.permute) and GGUF names mapped to Hugging Face ones, each must equal DUMP, what
qsweep's loader reads back for the same tensor (FP32), bit for bit, but for the sign of zero in
MXFP4 tensors (ggml's MXFP4 levels have no -0). Every tensor of the file must have its twin in
DUMP and every tensor of DUMP must be in the file.
Exit 0 when they do, 1 otherwise, 77 when gguf-py is not installed.
Usage: gguf_mxfp4_check.py EXPORT_DIR DUMP"""
import json
import struct
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize
except ImportError as e:
    print(f"skipped: gguf-py is not installed ({e})")
    sys.exit(77)

BLOCK = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}


def read_dump(path):
    """The F32 tensors of a safetensors file (its header: u64 length, JSON; then the bytes)."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{path}: {name} is {info['dtype']}"
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw, dtype="<f4", count=(b - a) // 4, offset=8 + n + a).reshape(info["shape"])
    return out


def hf_name(gguf_name):
    if gguf_name in TOP:
        return TOP[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in BLOCK:
        return f"model.layers.{parts[1]}.{BLOCK[parts[2]]}.{parts[3]}"
    return gguf_name  # GGUF-only tensors (rope_freqs) keep their name in qsweep's loader


def unpermute(w, heads):
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)


def main(export_dir, dump):
    r = GGUFReader(f"{export_dir}/model.gguf")
    field = lambda k: int(r.fields[k].parts[-1][0])
    heads = {"attn_q": field("llama.attention.head_count"), "attn_k": field("llama.attention.head_count_kv")}
    want = read_dump(dump)
    seen, bad, types = set(), 0, {}
    for t in r.tensors:
        name = hf_name(t.name)
        x = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        x = x.reshape([int(d) for d in reversed(t.shape)])
        kind = t.name.split(".")[2] if t.name.startswith("blk.") else ""
        if kind in heads:
            x = unpermute(x, heads[kind])
        tname = GGMLQuantizationType(t.tensor_type).name
        types[tname] = types.get(tname, 0) + 1
        if name not in want:
            print(f"NOT OK {t.name} ({tname}): qsweep reads no {name}")
            bad += 1
            continue
        seen.add(name)
        y = want[name].reshape(x.shape) if want[name].size == x.size else None
        if y is None:
            print(f"NOT OK {t.name} ({tname}): shape {x.shape}, qsweep {want[name].shape}")
            bad += 1
            continue
        if t.tensor_type == GGMLQuantizationType.MXFP4:  # ggml's levels have no -0
            same = np.array_equal(x, y) and np.array_equal(x.view(np.uint32)[x != 0], y.view(np.uint32)[y != 0])
        else:
            same = np.array_equal(x.view(np.uint32), y.view(np.uint32))
        if not same:
            diff = np.flatnonzero(x.view(np.uint32).ravel() != y.view(np.uint32).ravel())
            print(f"NOT OK {t.name} ({tname}): element {diff[0]} is {x.ravel()[diff[0]]!r}, qsweep {y.ravel()[diff[0]]!r}")
            bad += 1
    for name in sorted(set(want) - seen):
        print(f"NOT OK {name}: qsweep reads it, the GGUF file has no such tensor")
        bad += 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(types.items()))
    print(f"{export_dir}/model.gguf: {len(r.tensors)} tensors ({summary}), "
          f"{len(r.tensors) - bad if bad <= len(r.tensors) else 0} equal qsweep's values")
    return 0 if r.tensors and bad == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
