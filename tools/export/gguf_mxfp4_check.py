#!/usr/bin/env python3
"""An independent reader of qsweep's GGUF export: gguf-py (PyPI gguf) reads EXPORT_DIR/model.gguf
and decodes its MXFP4 tensors with its own decoder (gguf.quants.dequantize); the values, with
attn_q/attn_k rows put back from llama.cpp's permuted order (convert_hf_to_gguf.py
LlamaModel.permute), must equal DUMP, what qsweep's loader reads back for the same linears
(FP32, Hugging Face names), bit for bit but for the sign of zero (ggml's levels have no -0).
Exit 0 when they do, 1 otherwise, 77 when gguf-py is not installed.
Usage: gguf_mxfp4_check.py EXPORT_DIR DUMP"""
import sys

try:
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize
    from safetensors.numpy import load_file
except ImportError as e:
    print(f"skipped: gguf-py is not installed ({e})")
    sys.exit(77)

KINDS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}


def unpermute(w, heads):
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)


def main(export_dir, dump):
    r = GGUFReader(f"{export_dir}/model.gguf")
    field = lambda k: int(r.fields[k].parts[-1][0])
    heads = {"attn_q": field("llama.attention.head_count"), "attn_k": field("llama.attention.head_count_kv")}
    want = load_file(dump)
    n = ok = 0
    for t in r.tensors:
        if t.tensor_type != GGMLQuantizationType.MXFP4:
            continue
        _, layer, kind, _ = t.name.split(".")
        x = dequantize(t.data, t.tensor_type).reshape(int(t.shape[1]), int(t.shape[0]))
        if kind in heads:
            x = unpermute(x, heads[kind])
        y = want[f"model.layers.{layer}.{KINDS[kind]}.weight"]
        same = np.array_equal(x, y) and np.array_equal(x.view(np.uint32)[x != 0], y.view(np.uint32)[y != 0])
        n += 1
        ok += same
        if not same:
            print(f"NOT OK {t.name}")
    print(f"{export_dir}/model.gguf: {n} MXFP4 tensors, {ok} equal qsweep's values")
    return 0 if n and ok == n else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
