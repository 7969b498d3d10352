#!/usr/bin/env python3
"""Writes the small checkpoints the checkpoint_* tests read (tests/checkpoint/fixtures/).

Reference data only (never on qsweep's run path). Independent writers: the `safetensors`
package (numpy API) for F32/F16 safetensors, and the `gguf` package (llama.cpp's gguf-py)
for GGUF files and for Q8_0/Q4_0/Q4_1/BF16 quantization and dequantization. BF16
safetensors are written by hand (numpy has no bfloat16) from the bits gguf-py's BF16
quantizer produces.

One tiny Llama (dim 64, FFN 96, 2 blocks, 4 heads / 2 KV heads, head_dim 16, vocab 64) is
written several ways; the tests check that every way gives back the same FP32 tensors:
  tiny_f32/             config.json + model.safetensors (F32), untied lm_head
  tiny_bf16/            same weights rounded to BF16, tie_word_embeddings true (no lm_head)
  tiny_f16_sharded/     F16, two shards + model.safetensors.index.json
  tiny_f32.gguf         the F32 weights as llama.cpp's convert_hf_to_gguf.py writes them:
                        dims reversed, Q/K rows permuted for rotary, untied (output.weight)
  tiny_quant.gguf       mixed Q8_0/Q4_0/Q4_1/F16/BF16/F32 tensors, tied (no output.weight),
                        vocab from tokenizer.ggml.tokens, every metadata value type present
  tiny_quant_expect.safetensors   gguf-py's dequantization of tiny_quant.gguf, HF names/order
  tiny_bf16_expect.safetensors    FP32 value of each BF16 weight (bits << 16)
  tiny_f16_expect.safetensors     numpy's float16 -> float32 of each F16 weight
  dtypes.safetensors    every F16 bit pattern and 4096 BF16 patterns, with numpy's FP32 values
  rope_*.gguf           one-block models with llama.cpp's rope_freqs.weight for Llama 3.1 and
                        3.2 release rope scaling and a small case; rope_cases.json: the HF values
  tokens_small.bin      a 10-token file in the tokens.h format (vocab 64)
  digests.txt           hashlib BLAKE2b-256 digests as qw_checkpoint_digest / qw_tokens_load
                        define them (per file: u64 little-endian length, then the bytes)

Usage: tools need numpy, safetensors, gguf (pip). Run: python3 tests/checkpoint/make_fixtures.py
"""
import hashlib
import json
import math
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")

DIM, FFN, LAYERS, HEADS, KV_HEADS, VOCAB = 64, 96, 2, 4, 2, 64
HEAD_DIM = DIM // HEADS


def permute(weights, n_head, n_head_kv):
    """llama.cpp convert_hf_to_gguf.py, LlamaModel.permute (verbatim but for numpy)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def tiny_weights(rng):
    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, DIM)),
         "model.norm.weight": 1 + 0.1 * rng.standard_normal(DIM),
         "lm_head.weight": rng.standard_normal((VOCAB, DIM))}
    shapes = {"self_attn.q_proj": (HEADS * HEAD_DIM, DIM), "self_attn.k_proj": (KV_HEADS * HEAD_DIM, DIM),
              "self_attn.v_proj": (KV_HEADS * HEAD_DIM, DIM), "self_attn.o_proj": (DIM, HEADS * HEAD_DIM),
              "mlp.gate_proj": (FFN, DIM), "mlp.up_proj": (FFN, DIM), "mlp.down_proj": (DIM, FFN)}
    for l in range(LAYERS):
        w[f"model.layers.{l}.input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(DIM)
        w[f"model.layers.{l}.post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(DIM)
        for k, s in shapes.items():
            w[f"model.layers.{l}.{k}.weight"] = rng.standard_normal(s) / np.sqrt(s[1])
    return {k: v.astype(np.float32) for k, v in w.items()}


def config(tied):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": DIM, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": tied, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}


def write_config(d, tied):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(tied), f, indent=2)


def write_bf16_safetensors(path, tensors):
    """safetensors layout (u64 header length, JSON header, data) for uint16 BF16 bit arrays."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], dtype="<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_bits(x):
    return quantize(x.astype(np.float32), QT.BF16).view(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def gguf_name(hf):
    m = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
         "lm_head.weight": "output.weight"}
    if hf in m:
        return m[hf]
    parts = hf.split(".")
    layer, role = parts[2], ".".join(parts[3:-1])
    r = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}[role]
    return f"blk.{layer}.{r}.weight"


def gguf_writer(path, with_vocab_size):
    g = GGUFWriter(path, "llama")
    g.add_context_length(256)
    g.add_embedding_length(DIM)
    g.add_block_count(LAYERS)
    g.add_feed_forward_length(FFN)
    g.add_head_count(HEADS)
    g.add_head_count_kv(KV_HEADS)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_rope_freq_base(10000.0)
    g.add_bos_token_id(1)
    g.add_eos_token_id(2)
    if with_vocab_size:
        g.add_vocab_size(VOCAB)
    else:
        g.add_token_list([f"tok{i}" for i in range(VOCAB)])
    return g


def gguf_hf_to_file(hf, w):
    if hf.endswith("q_proj.weight"):
        return permute(w, HEADS, HEADS)
    if hf.endswith("k_proj.weight"):
        return permute(w, HEADS, KV_HEADS)
    return w


def main():
    rng = np.random.default_rng(20261129)
    w = tiny_weights(rng)

    d = os.path.join(HERE, "tiny_f32")
    write_config(d, tied=False)
    save_file(w, os.path.join(d, "model.safetensors"))

    d = os.path.join(HERE, "tiny_bf16")
    write_config(d, tied=True)
    bits = {k: bf16_bits(v) for k, v in w.items() if k != "lm_head.weight"}
    write_bf16_safetensors(os.path.join(d, "model.safetensors"), bits)
    save_file({k: bf16_value(b) for k, b in bits.items()}, os.path.join(HERE, "tiny_bf16_expect.safetensors"))

    d = os.path.join(HERE, "tiny_f16_sharded")
    write_config(d, tied=False)
    names = sorted(w)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    wm = {}
    for fn, ns in shards.items():
        save_file({n: w[n].astype(np.float16) for n in ns}, os.path.join(d, fn))
        wm.update({n: fn for n in ns})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=2)
    save_file({n: w[n].astype(np.float16).astype(np.float32) for n in names},
              os.path.join(HERE, "tiny_f16_expect.safetensors"))

    g = gguf_writer(os.path.join(HERE, "tiny_f32.gguf"), with_vocab_size=True)
    for hf in names:
        g.add_tensor(gguf_name(hf), np.ascontiguousarray(gguf_hf_to_file(hf, w[hf])))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()

    # Mixed types; 1-D norms stay F32 as llama.cpp keeps them.
    types = {"model.embed_tokens.weight": QT.Q8_0, "self_attn.q_proj": QT.Q4_0, "self_attn.k_proj": QT.Q4_1,
             "self_attn.v_proj": QT.Q8_0, "self_attn.o_proj": QT.BF16, "mlp.gate_proj": QT.F16,
             "mlp.up_proj": QT.Q4_1, "mlp.down_proj": QT.Q4_0}
    g = gguf_writer(os.path.join(HERE, "tiny_quant.gguf"), with_vocab_size=False)
    g.add_custom_alignment(64)
    for key, val, vt in [("test.u8", 200, VT.UINT8), ("test.i8", -100, VT.INT8), ("test.u16", 60000, VT.UINT16),
                         ("test.i16", -30000, VT.INT16), ("test.u32", 4000000000, VT.UINT32),
                         ("test.i32", -2000000000, VT.INT32), ("test.f32", 1.5, VT.FLOAT32),
                         ("test.bool", True, VT.BOOL), ("test.string", "qsweep", VT.STRING),
                         ("test.u64", 2**63, VT.UINT64), ("test.i64", -2**62, VT.INT64),
                         ("test.f64", 2.25, VT.FLOAT64)]:
        g.add_key_value(key, val, vt)
    g.add_array("test.array_of_arrays", [[1, 2, 3], ["a", "bc"], [[4.5], [5.5]]])
    expect = {}
    for hf in names:
        if hf == "lm_head.weight":
            continue
        role = ".".join(hf.split(".")[3:-1]) if hf.startswith("model.layers.") else hf
        qt = types.get(role, QT.F32)
        q = quantize(np.ascontiguousarray(gguf_hf_to_file(hf, w[hf])), qt)
        deq = dequantize(q, qt).reshape(w[hf].shape)
        # Quantization is per row and permute() moves whole rows: un-permuting the file's rows
        # equals dequantizing the unpermuted quantization. Recompute in HF order for the golden.
        expect[hf] = dequantize(quantize(w[hf], qt), qt).reshape(w[hf].shape).astype(np.float32)
        assert np.array_equal(np.ascontiguousarray(gguf_hf_to_file(hf, expect[hf])), deq)
        if qt == QT.F32:
            g.add_tensor(gguf_name(hf), q)
        else:
            g.add_tensor(gguf_name(hf), q, raw_dtype=qt)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    save_file(expect, os.path.join(HERE, "tiny_quant_expect.safetensors"))

    f16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    bf = (np.arange(4096, dtype=np.uint32) * 16 + 7).astype(np.uint16)  # every exponent, both signs
    header = {"f16": {"dtype": "F16", "shape": [65536], "data_offsets": [0, 131072]},
              "bf16": {"dtype": "BF16", "shape": [4096], "data_offsets": [131072, 131072 + 8192]}}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(HERE, "dtypes.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + f16.astype("<u2").tobytes() + bf.astype("<u2").tobytes())
    save_file({"f16": f16.view(np.float16).astype(np.float32), "bf16": bf16_value(bf)},
              os.path.join(HERE, "dtypes_expect.safetensors"))

    toks = np.array([1, 5, 9, 63, 0, 2, 17, 33, 8, 40], dtype="<u4")
    with open(os.path.join(HERE, "tokens_small.bin"), "wb") as f:
        f.write(b"QSWTOKS\0" + struct.pack("<IIIIQ", 1, VOCAB, 1, 0, len(toks)) + toks.tobytes())

    def model_digest(paths):
        h = hashlib.blake2b(digest_size=32)
        for p in paths:
            data = open(p, "rb").read()
            h.update(struct.pack("<Q", len(data)) + data)
        return h.hexdigest()

    sh = os.path.join(HERE, "tiny_f16_sharded")
    with open(os.path.join(HERE, "digests.txt"), "w") as f:
        f.write("tiny_f32 " + model_digest([os.path.join(HERE, "tiny_f32", n)
                                            for n in ("config.json", "model.safetensors")]) + "\n")
        f.write("tiny_f16_sharded " + model_digest([os.path.join(sh, n) for n in (
            "config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors")]) + "\n")
        f.write("tiny_f32.gguf " + model_digest([os.path.join(HERE, "tiny_f32.gguf")]) + "\n")
        f.write("tokens_small.bin " + hashlib.blake2b(open(os.path.join(HERE, "tokens_small.bin"), "rb").read(),
                                                       digest_size=32).hexdigest() + "\n")

    write_rope_ggufs(rng)
    write_fuzz_seeds(os.path.join(os.path.dirname(HERE), "fuzz", "seeds"))


def llama3_rope_factors(hparams):
    """llama.cpp convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors (numpy for torch)."""
    rope_scaling = hparams["rope_scaling"]
    base = hparams.get("rope_theta", 10000.0)
    dim = hparams.get("head_dim", hparams["hidden_size"] // hparams["num_attention_heads"])
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = rope_scaling.get("factor", 8.0)
    low_freq_factor = rope_scaling.get("low_freq_factor", 1.0)
    high_freq_factor = rope_scaling.get("high_freq_factor", 4.0)
    old_context_len = hparams.get("original_max_position_embeddings", 8192)
    old_context_len = rope_scaling.get("original_max_position_embeddings", old_context_len)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(rope_factors, dtype=np.float32)


ROPE_CASES = {  # file -> (head_dim, rope_theta, rope_scaling) as in the HF config.json
    # Llama 3.1 8B/70B/405B release values (meta-llama/Llama-3.1-8B config.json).
    "rope_llama31.gguf": (128, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    # Llama 3.2 1B/3B release values (meta-llama/Llama-3.2-1B config.json).
    "rope_llama32.gguf": (64, 500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    # A small made-up case with a two-point smooth band.
    "rope_small.gguf": (16, 10000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 16.0, "original_max_position_embeddings": 1024}),
}


def write_rope_ggufs(rng):
    """One-block models (1 head, head_dim as in the case) carrying rope_freqs.weight as
    llama.cpp writes it for Llama 3.1-style rope scaling; rope_cases.json holds the HF values."""
    cases = {}
    for fn, (hd, theta, rs) in ROPE_CASES.items():
        hp = {"hidden_size": hd, "num_attention_heads": 1, "rope_theta": theta, "rope_scaling": rs}
        g = GGUFWriter(os.path.join(HERE, fn), "llama")
        for k, v in (("context_length", 131072), ("embedding_length", hd), ("block_count", 1),
                     ("feed_forward_length", 32), ("head_count", 1), ("head_count_kv", 1)):
            getattr(g, "add_" + k)(v)
        g.add_layer_norm_rms_eps(1e-5)
        g.add_rope_freq_base(theta)
        g.add_vocab_size(4)
        g.add_tensor("rope_freqs.weight", llama3_rope_factors(hp))
        for name, shape in (("token_embd.weight", (4, hd)), ("output_norm.weight", (hd,)),
                            ("blk.0.attn_norm.weight", (hd,)), ("blk.0.ffn_norm.weight", (hd,)),
                            ("blk.0.attn_q.weight", (hd, hd)), ("blk.0.attn_k.weight", (hd, hd)),
                            ("blk.0.attn_v.weight", (hd, hd)), ("blk.0.attn_output.weight", (hd, hd)),
                            ("blk.0.ffn_gate.weight", (32, hd)), ("blk.0.ffn_up.weight", (32, hd)),
                            ("blk.0.ffn_down.weight", (hd, 32))):
            x = rng.standard_normal(shape).astype(np.float32)
            if len(shape) == 1 or shape[-1] % 32:
                g.add_tensor(name, x.astype(np.float16) if len(shape) > 1 else x)
            else:
                g.add_tensor(name, quantize(x, QT.Q4_0), raw_dtype=QT.Q4_0)
        g.write_header_to_file()
        g.write_kv_data_to_file()
        g.write_tensors_to_file()
        g.close()
        cases[fn] = dict(rs, head_dim=hd, rope_theta=theta,
                         rope_freqs=[float(v) for v in llama3_rope_factors(hp)])
    with open(os.path.join(HERE, "rope_cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}


def write_fuzz_seeds(d):
    """Small valid inputs for the libFuzzer targets (tests/checkpoint/fuzz/seeds/<target>/)."""
    rng = np.random.default_rng(7)
    for t in ("safetensors", "gguf", "config", "tokens"):
        os.makedirs(os.path.join(d, t), exist_ok=True)
    save_file({"a": rng.standard_normal((2, 3)).astype(np.float32), "b": np.ones(4, np.float16)},
              os.path.join(d, "safetensors", "f32_f16.safetensors"))
    write_bf16_safetensors(os.path.join(d, "safetensors", "bf16.safetensors"),
                           {"w": bf16_bits(rng.standard_normal((2, 2)))})
    # A complete one-block model (tied), so that the fuzzer also reaches qw_checkpoint_open's
    # shape validation and the Q/K un-permutation.
    g = GGUFWriter(os.path.join(d, "gguf", "mini.gguf"), "llama")
    for k, v in (("context_length", 64), ("embedding_length", 32), ("block_count", 1), ("feed_forward_length", 32),
                 ("head_count", 2), ("head_count_kv", 1)):
        getattr(g, "add_" + k)(v)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_rope_freq_base(10000.0)
    g.add_token_list(["a", "b", "c", "d"])
    g.add_array("test.nested", [[1, 2], ["x"]])
    for name, shape, qt in (("token_embd.weight", (4, 32), QT.Q8_0), ("output_norm.weight", (32,), QT.F32),
                            ("blk.0.attn_norm.weight", (32,), QT.F32), ("blk.0.ffn_norm.weight", (32,), QT.F16),
                            ("blk.0.attn_q.weight", (32, 32), QT.Q4_0), ("blk.0.attn_k.weight", (16, 32), QT.Q4_1),
                            ("blk.0.attn_v.weight", (16, 32), QT.BF16), ("blk.0.attn_output.weight", (32, 32), QT.Q4_1),
                            ("blk.0.ffn_gate.weight", (32, 32), QT.Q8_0), ("blk.0.ffn_up.weight", (32, 32), QT.Q4_0),
                            ("blk.0.ffn_down.weight", (32, 32), QT.Q4_1)):
        q = quantize(rng.standard_normal(shape).astype(np.float32), qt)
        g.add_tensor(name, q, raw_dtype=None if qt == QT.F32 else qt)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    for name, tied, rope in (("llama2.json", False, None), ("llama31.json", False, LLAMA31_ROPE),
                             ("llama32_tied.json", True, LLAMA31_ROPE)):
        c = config(tied)
        c["rope_scaling"] = rope
        with open(os.path.join(d, "config", name), "w") as f:
            json.dump(c, f)
    toks = np.array([3, 1, 2], dtype="<u4")
    with open(os.path.join(d, "tokens", "three.tok"), "wb") as f:
        f.write(b"QSWTOKS\0" + struct.pack("<IIIIQ", 1, 4, 1, 0, len(toks)) + toks.tobytes())


if __name__ == "__main__":
    main()
