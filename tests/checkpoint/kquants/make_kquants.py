#!/usr/bin/env python3
"""Writes the K-quant, IQ4 and Q5 fixtures the checkpoint_kquants test reads (tests/checkpoint/fixtures/).

Reference data only (never on qsweep's run path). Two independent sources:

  kquant_blocks.bin     8 blocks of every type, random bytes with finite random f16 (f32 for
  kquant_blocks.json    Q8_K) super-block scales, so every quant, scale and min bit pattern is
  kquant_blocks_expect.safetensors   exercised; the index gives each type's ggml number,
                        offset and block count, the safetensors the values gguf-py's
                        gguf.quants.dequantize gives (Q8_K, which gguf-py does not decode and no
                        file type uses, by its definition in ggml-quants.c dequantize_row_q8_K:
                        x = d*q, computed here with numpy in float32)
  tiny_kquant.gguf      a one-block Llama (dim 256, FFN 256, 4 heads / 2 KV heads, vocab 256,
                        untied) whose weights llama.cpp's own quantizer (ggml_quantize_chunk,
                        which llama-quantize calls per tensor; ggml_quantize_rows.c) turned
                        into Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS, one type per
                        tensor (norms F32), written with gguf-py's GGUFWriter
  tiny_kquant_expect.safetensors   gguf-py's dequantization of the first 16 rows of every
                        tensor of tiny_kquant.gguf (all of a norm), in Hugging Face names and
                        order (Q/K rows un-permuted, so they come from rows across each head)

Usage (needs numpy, safetensors, gguf from pip):
  python3 tests/checkpoint/kquants/make_kquants.py --blocks
  python3 tests/checkpoint/kquants/make_kquants.py --model \
      --quantizer "$(tests/checkpoint/kquants/build_ggml_quantize.sh /tmp/llama)"
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
sys.path.insert(0, os.path.dirname(HERE))
from make_fixtures import gguf_name, permute  # noqa: E402  (same name map and permutation)

# type -> (block elements, block bytes, byte offsets of the f16 scales in a block)
BLOCKS = {
    "Q2_K": (256, 84, [80, 82]),
    "Q3_K": (256, 110, [108]),
    "Q4_K": (256, 144, [0, 2]),
    "Q5_K": (256, 176, [0, 2]),
    "Q6_K": (256, 210, [208]),
    "Q8_K": (256, 292, []),
    "IQ4_NL": (32, 18, [0]),
    "IQ4_XS": (256, 136, [0]),
    "Q5_0": (32, 22, [0]),
    "Q5_1": (32, 24, [0, 2]),
}
N_BLOCKS = 8
EXPECT_ROWS = 16  # rows of each 2-D tensor kept in tiny_kquant_expect.safetensors (size)

DIM, FFN, HEADS, KV_HEADS, VOCAB = 256, 256, 4, 2, 256
TYPES = {  # GGUF tensor -> ggml type name (ggml_type_name)
    "token_embd.weight": "q4_K",
    "output.weight": "q6_K",
    "blk.0.attn_q.weight": "q2_K",
    "blk.0.attn_k.weight": "q3_K",
    "blk.0.attn_v.weight": "q5_K",
    "blk.0.attn_output.weight": "iq4_xs",
    "blk.0.ffn_gate.weight": "iq4_nl",
    "blk.0.ffn_up.weight": "q4_K",
    "blk.0.ffn_down.weight": "q6_K",
}


def random_f16(rng, n):
    """Finite f16 scales of either sign, magnitudes 2^-14 .. 2^-2 (weights-sized)."""
    v = rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-14, -2, n))
    return v.astype(np.float16)


def write_blocks():
    rng = np.random.default_rng(20261201)
    blob, index, expect = bytearray(), {}, {}
    for name, (elems, nbytes, f16_at) in BLOCKS.items():
        raw = rng.integers(0, 256, (N_BLOCKS, nbytes), dtype=np.uint8)
        for at in f16_at:
            raw[:, at:at + 2] = random_f16(rng, N_BLOCKS).view(np.uint8).reshape(N_BLOCKS, 2)
        if name == "Q8_K":
            d = (rng.choice([-1.0, 1.0], N_BLOCKS) * np.exp2(rng.uniform(-14, -2, N_BLOCKS))).astype(np.float32)
            raw[:, 0:4] = d.view(np.uint8).reshape(N_BLOCKS, 4)
            q = raw[:, 4:260].view(np.int8).astype(np.float32)
            values = (d[:, None] * q).reshape(-1)
        else:
            values = dequantize(raw.reshape(-1), QT[name]).reshape(-1)
        assert values.size == N_BLOCKS * elems and np.all(np.isfinite(values))
        index[name] = {"ggml_type": int(QT[name]), "offset": len(blob), "blocks": N_BLOCKS,
                       "block_elements": elems, "block_bytes": nbytes}
        blob += raw.tobytes()
        expect[name] = values.astype(np.float32)
    with open(os.path.join(FIXTURES, "kquant_blocks.bin"), "wb") as f:
        f.write(bytes(blob))
    with open(os.path.join(FIXTURES, "kquant_blocks.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    save_file(expect, os.path.join(FIXTURES, "kquant_blocks_expect.safetensors"))


def tiny_weights(rng):
    head_dim = DIM // HEADS
    shapes = {"model.embed_tokens.weight": (VOCAB, DIM), "lm_head.weight": (VOCAB, DIM),
              "model.layers.0.self_attn.q_proj.weight": (HEADS * head_dim, DIM),
              "model.layers.0.self_attn.k_proj.weight": (KV_HEADS * head_dim, DIM),
              "model.layers.0.self_attn.v_proj.weight": (KV_HEADS * head_dim, DIM),
              "model.layers.0.self_attn.o_proj.weight": (DIM, HEADS * head_dim),
              "model.layers.0.mlp.gate_proj.weight": (FFN, DIM),
              "model.layers.0.mlp.up_proj.weight": (FFN, DIM),
              "model.layers.0.mlp.down_proj.weight": (DIM, FFN)}
    w = {k: rng.standard_normal(s) / np.sqrt(s[1]) for k, s in shapes.items()}
    for k in ("model.norm.weight", "model.layers.0.input_layernorm.weight",
              "model.layers.0.post_attention_layernorm.weight"):
        w[k] = 1 + 0.1 * rng.standard_normal(DIM)
    return {k: v.astype(np.float32) for k, v in w.items()}


def to_file(hf, x):
    if hf.endswith("q_proj.weight"):
        return permute(x, HEADS, HEADS)
    if hf.endswith("k_proj.weight"):
        return permute(x, HEADS, KV_HEADS)
    return x


def from_file(hf, x):
    """Inverse of to_file: the permutation swaps (2, hd/2) to (hd/2, 2) within each head."""
    if not (hf.endswith("q_proj.weight") or hf.endswith("k_proj.weight")):
        return x
    heads = HEADS if hf.endswith("q_proj.weight") else KV_HEADS
    return x.reshape(heads, x.shape[0] // heads // 2, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def ggml_quantize(tool, x, qtype, tmp):
    """x (rows x n_per_row FP32) through llama.cpp's ggml_quantize_chunk (ggml_quantize_rows.c)."""
    src, dst = os.path.join(tmp, "rows.f32"), os.path.join(tmp, "rows.bin")
    np.ascontiguousarray(x, dtype="<f4").tofile(src)
    subprocess.run([tool, qtype, str(x.shape[-1]), src, dst], check=True)
    return np.fromfile(dst, dtype=np.uint8)


def write_model(tool):
    w = tiny_weights(np.random.default_rng(20261202))
    out = os.path.join(FIXTURES, "tiny_kquant.gguf")
    g = GGUFWriter(out, "llama")
    g.add_name("qsweep tiny K-quant test model")
    g.add_context_length(128)
    g.add_embedding_length(DIM)
    g.add_block_count(1)
    g.add_feed_forward_length(FFN)
    g.add_head_count(HEADS)
    g.add_head_count_kv(KV_HEADS)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_rope_freq_base(10000.0)
    g.add_vocab_size(VOCAB)
    g.add_quantization_version(2)  # GGML_QNT_VERSION
    with tempfile.TemporaryDirectory() as tmp:
        for hf in sorted(w):
            name, x = gguf_name(hf), np.ascontiguousarray(to_file(hf, w[hf]))
            if name in TYPES:
                qt = QT[TYPES[name].upper()]
                q = ggml_quantize(tool, x, TYPES[name], tmp)
                g.add_tensor(name, q.reshape(x.shape[0], -1), raw_dtype=qt)
            else:
                g.add_tensor(name, x)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    r = GGUFReader(out)
    expect = {}
    hf_of = {gguf_name(hf): hf for hf in w}
    for t in r.tensors:
        hf = hf_of[t.name]
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        x = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        expect[hf] = np.ascontiguousarray(from_file(hf, x)[:EXPECT_ROWS] if x.ndim == 2 else x)
        assert t.tensor_type.name == TYPES.get(t.name, "f32").upper()
    assert set(expect) == set(w)
    save_file(expect, os.path.join(FIXTURES, "tiny_kquant_expect.safetensors"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", action="store_true", help="write kquant_blocks.*")
    ap.add_argument("--model", action="store_true", help="write tiny_kquant.gguf and its expect file")
    ap.add_argument("--quantizer", help="path of ggml_quantize_rows (build_ggml_quantize.sh), for --model")
    a = ap.parse_args()
    if not a.blocks and not a.model:
        ap.error("give --blocks, --model or both")
    if a.blocks:
        write_blocks()
    if a.model:
        if not a.quantizer:
            ap.error("--model needs --quantizer")
        write_model(a.quantizer)


if __name__ == "__main__":
    main()
