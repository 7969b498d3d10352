#!/usr/bin/env python3
"""Golden references for qsweep's Llama engine, from Hugging Face transformers (PyTorch, CPU).

Reference data only: qsweep never runs Python on its run path. Needs torch, transformers, and
for the SmolLM2 GGUF gguf>=0.10 and accelerate (pip install gguf accelerate).

(a) Small random-initialised LlamaForCausalLM checkpoints, written by transformers' own
    save_pretrained into tests/engine/data/<name>/, one per layout the loader must read:
      llama2_mha    Llama-2 style: MHA, rope theta 1e4, untied lm_head, F16 weights
      llama3_gqa    Llama-3.1 style: GQA, rope theta 5e5 with "llama3" frequency scaling, BF16
      llama32_tied  Llama-3.2 style: GQA, tied embeddings, llama3 scaling (factor 32), F32
      oddk          hidden 72 and intermediate 200 (K not a multiple of 16), head_dim 24, F16
      sharded       three shards (max_shard_size) with model.safetensors.index.json, BF16
    transformers 5 writes the RoPE settings as one "rope_parameters" object; every config.json
    here is rewritten to the layout the published Llama 2/3/3.1/3.2 checkpoints use (top-level
    rope_theta, rope_scaling, torch_dtype), which is what qsweep's loader reads.
    Weights are drawn with a wider spread than transformers' default init (std 0.02 gives
    nearly uniform next-token distributions, a weak test), norms around 1. The reference
    model runs in FP32 on the stored weights (rounded to the stored dtype first), eager
    attention, so the goldens are what an exact FP32 implementation of the stored model gives.
(b) SmolLM2-135M-Instruct from its Q4_1 GGUF (tools/fetch_smollm2.sh), read by transformers'
    GGUF loader (dequantized to FP32): logits of a 64-token prefix of the committed token
    file (the last 8 rows stored, to keep the file small) and the baseline perplexity of the
    committed tokens under qsweep's chunking (worker/engine/eval.h, llama.cpp's definition).

Golden logits file goldens.bin, little-endian:
  offset 0  8 bytes magic "QSWGOLD\\0"
  offset 8  u32 version = 1, u32 n_seqs, u32 vocab_size, u32 reserved = 0
  then per sequence: u32 n, u32 row0, u32 tokens[n], f32 logits[(n - row0) x vocab_size]
  (rows row0..n-1 of the [n x vocab] logits of tokens run as one fresh sequence).
Perplexity golden ppl.txt: one "key value" per line.

Usage: tools/make_goldens.py [--out tests/engine/data] [--skip-smollm2] [--ppl-ctx 512 --ppl-chunks 4]
       tools/make_goldens.py --only smollm2 --ppl-only --ppl-chunks 14 --ppl-name ppl_14chunks.txt
         (the baseline of the full SmolLM2 sweep, experiments/smollm2-fp4-components.yaml)
"""
import argparse
import copy
import json
import math
import os
import struct
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

GOLD_MAGIC = b"QSWGOLD\0"

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               # 64 instead of 8192 so that, for these tiny models and short sequences, the
               # three regimes of the scaling (kept, smoothed, divided) all occur.
               "original_max_position_embeddings": 64}

CHECKPOINTS = [
    dict(name="llama2_mha", dtype=torch.float16, seed=11,
         cfg=dict(vocab_size=320, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, rope_theta=10000.0,
                  rms_norm_eps=1e-5, tie_word_embeddings=False)),
    dict(name="llama3_gqa", dtype=torch.bfloat16, seed=12,
         cfg=dict(vocab_size=384, hidden_size=64, intermediate_size=224, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                  rope_scaling=LLAMA3_ROPE, rms_norm_eps=1e-5, tie_word_embeddings=False)),
    dict(name="llama32_tied", dtype=torch.float32, seed=13,
         cfg=dict(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                  rope_scaling=dict(LLAMA3_ROPE, factor=32.0), rms_norm_eps=1e-5,
                  tie_word_embeddings=True)),
    dict(name="oddk", dtype=torch.float16, seed=14,
         cfg=dict(vocab_size=300, hidden_size=72, intermediate_size=200, num_hidden_layers=2,
                  num_attention_heads=3, num_key_value_heads=1, head_dim=24, rope_theta=10000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=False)),
    dict(name="sharded", dtype=torch.bfloat16, seed=15, max_shard_size="150KB",
         cfg=dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                  rms_norm_eps=1e-5, tie_word_embeddings=False)),
]

SEQ_LENGTHS = [1, 9, 40, 100]  # 100 > the 64-row attention tile of worker/engine/model.c


def write_goldens(path, vocab, seqs):
    """seqs: list of (tokens list, row0, logits float32 array [(n-row0) x vocab])."""
    with open(path, "wb") as f:
        f.write(GOLD_MAGIC)
        f.write(struct.pack("<IIII", 1, len(seqs), vocab, 0))
        for toks, row0, logits in seqs:
            logits = np.ascontiguousarray(logits, dtype="<f4")
            assert logits.shape == (len(toks) - row0, vocab)
            f.write(struct.pack("<II", len(toks), row0))
            f.write(struct.pack(f"<{len(toks)}I", *toks))
            f.write(logits.tobytes())


@torch.no_grad()
def logits_of(model, toks):
    out = model(input_ids=torch.tensor([toks], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


@torch.no_grad()
def make_checkpoint(spec, outdir):
    torch.manual_seed(spec["seed"])
    cfg = LlamaConfig(max_position_embeddings=128, attn_implementation="eager", **spec["cfg"])
    model = LlamaForCausalLM(cfg).float().eval()
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.2 * torch.randn_like(p))
        else:
            p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]) * (2.0 if "embed" in name else 1.0))
    # Round to the stored dtype, then run the reference in FP32 on exactly those values.
    for p in model.parameters():
        p.copy_(p.to(spec["dtype"]).float())
    d = os.path.join(outdir, spec["name"])
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.endswith(".safetensors") or f.endswith(".json") or f == "goldens.bin":
            os.remove(os.path.join(d, f))
    # Save a copy: casting the model itself would also round its RoPE inv_freq buffer.
    copy.deepcopy(model).to(spec["dtype"]).save_pretrained(d, max_shard_size=spec.get("max_shard_size", "50GB"))
    if os.path.exists(os.path.join(d, "generation_config.json")):
        os.remove(os.path.join(d, "generation_config.json"))
    cpath = os.path.join(d, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp.pop("rope_theta")
    c["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    c["torch_dtype"] = c.pop("dtype")
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    rng = np.random.default_rng(spec["seed"])
    vocab = cfg.vocab_size
    seqs = []
    for n in SEQ_LENGTHS:
        toks = [int(t) for t in rng.integers(0, vocab, size=n)]
        seqs.append((toks, 0, logits_of(model, toks)))
    write_goldens(os.path.join(d, "goldens.bin"), vocab, seqs)
    # The files on disk must be exactly the model the goldens came from: reload and rerun.
    back = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for toks, _, lg in seqs:
        if not np.array_equal(logits_of(back, toks), lg):
            sys.exit(f"make_goldens.py: {d}: reloaded checkpoint gives different logits")
    files = sorted(os.listdir(d))
    print(f"{d}: {files}")


def read_tokens(path):
    """Ids and vocab_size of a token file (worker/checkpoint/tokens.h): version 1, or version 2
    (`qsweep tokenize`: 32 bytes of tokenizer digest after the header)."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"QSWTOKS\0", path
    version, vocab, dtype, _ = struct.unpack_from("<IIII", b, 8)
    (count,) = struct.unpack_from("<Q", b, 24)
    start = {1: 32, 2: 64}.get(version)
    assert start and dtype == 1 and len(b) == start + 4 * count, path
    return list(struct.unpack_from(f"<{count}I", b, start)), vocab


@torch.no_grad()
def smollm2(outdir, gguf, tokens_path, ctx, chunks, ppl_name="ppl.txt", logits=True):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
                                                 dtype=torch.float32, attn_implementation="eager").eval()
    toks, vocab = read_tokens(tokens_path)
    d = os.path.join(outdir, "smollm2")
    os.makedirs(d, exist_ok=True)
    n, keep = 64, 8
    if logits:
        lg = logits_of(model, toks[:n])
        write_goldens(os.path.join(d, "goldens.bin"), lg.shape[1], [(toks[:n], n - keep, lg[n - keep:])])
    # Perplexity, qsweep/llama.cpp chunking: chunk c = toks[c*ctx:(c+1)*ctx], fresh context,
    # scored positions j = ctx/2 .. ctx-2, logits at j predict token j+1.
    n_chunks = min(chunks, len(toks) // ctx)
    first = ctx // 2
    nll, nll2, count = 0.0, 0.0, 0
    for c in range(n_chunks):
        chunk = toks[c * ctx:(c + 1) * ctx]
        lp = torch.log_softmax(torch.from_numpy(logits_of(model, chunk)).double(), dim=-1)
        for j in range(first, ctx - 1):
            v = -lp[j, chunk[j + 1]].item()
            nll += v
            nll2 += v * v
            count += 1
    mean = nll / count
    with open(os.path.join(d, ppl_name), "w") as f:
        f.write(f"# SmolLM2-135M-Instruct Q4_1 GGUF via transformers {__import__('transformers').__version__}, FP32, eager\n")
        f.write(f"# tokens {os.path.basename(tokens_path)}; definition in worker/engine/eval.h\n")
        f.write(f"ctx {ctx}\nn_chunks {n_chunks}\nn_scored {count}\nnll {mean:.10f}\nppl {math.exp(mean):.10f}\n")
    print(f"{d}: ctx {ctx} chunks {n_chunks} scored {count} nll {mean:.6f} ppl {math.exp(mean):.6f}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "engine", "data"))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    ap.add_argument("--gguf", default=os.path.join(cache, "qsweep", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens", default=None)
    ap.add_argument("--ppl-ctx", type=int, default=512)
    ap.add_argument("--ppl-chunks", type=int, default=4)
    ap.add_argument("--ppl-name", default="ppl.txt", help="file of the perplexity golden")
    ap.add_argument("--ppl-only", action="store_true", help="SmolLM2: the perplexity, not the logits")
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--only", default=None, help="one checkpoint name")
    a = ap.parse_args()
    torch.set_num_threads(2)
    for spec in CHECKPOINTS:
        if a.only is None or a.only == spec["name"]:
            make_checkpoint(spec, a.out)
    if not a.skip_smollm2 and (a.only is None or a.only == "smollm2"):
        if not os.path.exists(a.gguf):
            sys.exit(f"make_goldens.py: {a.gguf} not found; run tools/fetch_smollm2.sh first")
        smollm2(a.out, a.gguf, a.tokens or os.path.join(a.out, "gpl3.smollm2.tokens"), a.ppl_ctx, a.ppl_chunks,
                a.ppl_name, not a.ppl_only)


if __name__ == "__main__":
    main()
