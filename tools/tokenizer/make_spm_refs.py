#!/usr/bin/env python3
"""Trains the small SentencePiece models of tests/tokenizer/data/spm/ and writes the reference
ids `sentencepiece` itself gives on the test texts.

Reference data only: qsweep never runs Python on its run path.

Models (trained here with sentencepiece's own trainer on the GPL-3 text, texts/gpl3.txt):
  spm/bpe.model       BPE, vocab 1000, byte_fallback, split_digits, normalizer "identity",
                      add_dummy_prefix, remove_extra_whitespaces off: the settings of Llama 2's
                      tokenizer.model
  spm/bpe_ws.model    BPE, vocab 600, byte_fallback, normalizer "identity", no dummy prefix,
                      remove_extra_whitespaces on (leading, trailing and repeated spaces
                      dropped), one user-defined symbol "<sep>"
  spm/unigram.model   unigram, vocab 300: a model type qsweep refuses by name

Texts: texts/*.txt and llama2c_run.c (tests/tokenizer/data/SOURCES.md), and spm/random.txt:
200 random strings written here (seeded) from ASCII, spaces in runs, digits and code points
from several scripts, one per line.

References: refs/spm_<model>.<text>.ids, the ids of SentencePieceProcessor.encode(text) (no
BOS/EOS), separated by spaces.

spm/tiny_llama/: a one-block Llama checkpoint (random F16 weights, dim 64, vocab 1000, tied)
whose only tokenizer is spm/bpe.model as tokenizer.model, for a `qsweep run` sweep on a text
dataset (tests/cli/run_test.c).

Usage: python3 tools/tokenizer/make_spm_refs.py [--data tests/tokenizer/data]
Needs: pip install sentencepiece numpy safetensors.
"""
import argparse
import io
import json
import os
import random
import shutil

import numpy as np
from safetensors.numpy import save_file

import sentencepiece as spm

TEXTS = {"gpl3": "texts/gpl3.txt", "kjv_esther": "texts/kjv_esther.txt",
         "llama2c_run": "texts/llama2c_run.c", "unicode": "texts/unicode.txt",
         "whitespace": "texts/whitespace.txt", "random": "spm/random.txt"}

MODELS = {
    "bpe": dict(model_type="bpe", vocab_size=1000, byte_fallback=True, split_digits=True,
                normalization_rule_name="identity", add_dummy_prefix=True,
                remove_extra_whitespaces=False),
    "bpe_ws": dict(model_type="bpe", vocab_size=600, byte_fallback=True,
                   normalization_rule_name="identity", add_dummy_prefix=False,
                   remove_extra_whitespaces=True, user_defined_symbols=["<sep>"]),
    "unigram": dict(model_type="unigram", vocab_size=300, normalization_rule_name="identity"),
}


def random_text(seed=20261201, lines=200):
    """Seeded random strings: ASCII words, space runs, digits, other scripts, <sep>."""
    rng = random.Random(seed)
    ranges = [(0x41, 0x5A), (0x61, 0x7A), (0x30, 0x39), (0x3B1, 0x3C9), (0x430, 0x44F),
              (0x4E00, 0x4E40), (0x3041, 0x3096), (0x5D0, 0x5EA), (0x1F600, 0x1F64F), (0xE9, 0xFF)]
    out = []
    for _ in range(lines):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.2:
                parts.append(" " * rng.randint(1, 4))
            elif r < 0.25:
                parts.append("<sep>")
            elif r < 0.35:
                parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 8))))
            else:
                lo, hi = rng.choice(ranges)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 9))))
        out.append("".join(parts))
    return "\n".join(out) + "\n"


def write_tiny_llama(d):
    """config.json, model.safetensors (F16) and tokenizer.model of spm/tiny_llama/."""
    dim, ffn, heads, kv, vocab = 64, 128, 4, 2, 1000
    out = os.path.join(d, "spm", "tiny_llama")
    os.makedirs(out, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": dim, "intermediate_size": ffn, "num_hidden_layers": 1,
           "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
           "torch_dtype": "float16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    rng = np.random.default_rng(20261203)
    hd = dim // heads
    shapes = {"model.embed_tokens.weight": (vocab, dim),
              "model.layers.0.self_attn.q_proj.weight": (heads * hd, dim),
              "model.layers.0.self_attn.k_proj.weight": (kv * hd, dim),
              "model.layers.0.self_attn.v_proj.weight": (kv * hd, dim),
              "model.layers.0.self_attn.o_proj.weight": (dim, heads * hd),
              "model.layers.0.mlp.gate_proj.weight": (ffn, dim),
              "model.layers.0.mlp.up_proj.weight": (ffn, dim),
              "model.layers.0.mlp.down_proj.weight": (dim, ffn)}
    w = {k: rng.standard_normal(s) / np.sqrt(s[1]) for k, s in shapes.items()}
    for k in ("model.norm.weight", "model.layers.0.input_layernorm.weight",
              "model.layers.0.post_attention_layernorm.weight"):
        w[k] = 1 + 0.1 * rng.standard_normal(dim)
    save_file({k: v.astype(np.float16) for k, v in w.items()}, os.path.join(out, "model.safetensors"))
    shutil.copyfile(os.path.join(d, "spm", "bpe.model"), os.path.join(out, "tokenizer.model"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                                   "tokenizer", "data"))
    a = ap.parse_args()
    d = a.data
    os.makedirs(os.path.join(d, "spm"), exist_ok=True)
    with open(os.path.join(d, "spm", "random.txt"), "w", encoding="utf-8") as f:
        f.write(random_text())
    with open(os.path.join(d, TEXTS["gpl3"]), encoding="utf-8") as f:
        corpus = f.read().splitlines()
    for name, opts in MODELS.items():
        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_writer=buf,
                                       character_coverage=1.0, num_threads=1, minloglevel=2,
                                       **opts)
        with open(os.path.join(d, "spm", name + ".model"), "wb") as f:
            f.write(buf.getvalue())
        if name == "unigram":
            continue
        sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
        for text, path in TEXTS.items():
            with open(os.path.join(d, path), encoding="utf-8", newline="") as f:  # CR kept
                ids = sp.encode(f.read())
            with open(os.path.join(d, "refs", f"spm_{name}.{text}.ids"), "w") as f:
                f.write(" ".join(map(str, ids)) + "\n")
    write_tiny_llama(d)


if __name__ == "__main__":
    main()
