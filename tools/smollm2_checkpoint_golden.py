#!/usr/bin/env python3
"""Golden values for qw_checkpoint on the real SmolLM2-135M-Instruct Q4_1 GGUF.

Reads the file fetched by tools/fetch_smollm2.sh with llama.cpp's own Python package `gguf`
(GGUFReader + gguf.quants.dequantize), the independent reference, and writes
tests/checkpoint/fixtures/smollm2_golden.json: the llama.* config keys, and for a few
tensors their Hugging Face name and shape, the first 64 values of a few rows in HF order,
and the float64 sum and sum of squares of the whole tensor.

HF order: GGUF dims reversed (numpy already gives [rows, cols]); attn_q/attn_k rows
un-permuted with transformers' reverse_permute (integrations/ggml.py / modeling_gguf_pytorch_utils.py,
TensorProcessor for llama): reshape(n_head, dim, 2, ...).swapaxes(2, 1).

Reference data only; never on qsweep's run path. Needs: pip install numpy gguf.
Usage: python3 tools/smollm2_checkpoint_golden.py [path.gguf]
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

TENSORS = {  # GGUF name -> HF name
    "token_embd.weight": "model.embed_tokens.weight",
    "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
    "blk.0.attn_k.weight": "model.layers.0.self_attn.k_proj.weight",
    "blk.7.attn_v.weight": "model.layers.7.self_attn.v_proj.weight",
    "blk.29.ffn_down.weight": "model.layers.29.mlp.down_proj.weight",
    "blk.5.attn_norm.weight": "model.layers.5.input_layernorm.weight",
    "output_norm.weight": "model.norm.weight",
}


def reverse_permute(weights, n_head, num_kv_heads=None):
    if num_kv_heads is not None and n_head != num_kv_heads:
        n_head = num_kv_heads
    dim = weights.shape[0] // n_head // 2
    w = weights.reshape(n_head, dim, 2, *weights.shape[1:])
    return w.swapaxes(2, 1).reshape(weights.shape)


def main():
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                           "qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    path = sys.argv[1] if len(sys.argv) > 1 else default
    r = GGUFReader(path)
    cfg = {k: r.fields[k].contents() for k in (
        "llama.block_count", "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.rope.freq_base", "llama.context_length",
        "llama.attention.layer_norm_rms_epsilon", "llama.vocab_size", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id")}
    n_head, n_kv = cfg["llama.attention.head_count"], cfg["llama.attention.head_count_kv"]
    out = {"source": os.path.basename(path), "config": cfg, "tensors": []}
    by_name = {t.name: t for t in r.tensors}
    for gname, hf in TENSORS.items():
        t = by_name[gname]
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)]) if len(t.shape) > 1 else w.reshape(-1)
        if gname.endswith("attn_q.weight"):
            w = reverse_permute(w, n_head, n_head)
        elif gname.endswith("attn_k.weight"):
            w = reverse_permute(w, n_head, n_kv)
        rows = [0, 1, 33, w.shape[0] - 1] if w.ndim == 2 else [None]
        entry = {"name": hf, "gguf_name": gname, "type": t.tensor_type.name, "shape": list(w.shape),
                 "sum": float(w.astype(np.float64).sum()), "sumsq": float((w.astype(np.float64) ** 2).sum()),
                 "rows": {}}
        for row in rows:
            v = w[row][:64] if row is not None else w[:64]
            entry["rows"][str(row if row is not None else 0)] = [float(x) for x in v]
        out["tensors"].append(entry)
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "checkpoint", "fixtures",
                       "smollm2_golden.json")
    with open(dst, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(dst)


if __name__ == "__main__":
    main()
