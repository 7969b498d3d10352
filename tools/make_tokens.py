#!/usr/bin/env python3
"""Tokenizes English prose with SmolLM2's tokenizer as Hugging Face transformers reads it from
the GGUF, and writes a qsweep token file (version 1).

The committed tests/engine/data/gpl3.smollm2.tokens is not made by this script:
transformers' GGUF conversion keeps only ByteLevel and drops the digit pre-split that
the GGUF's tokenizer.ggml.pre = smollm names, giving 7658 ids where llama.cpp's llama-tokenize
gives 7639. The file is made by qsweep itself:
  qsweep tokenize ~/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      /usr/share/common-licenses/GPL-3 -o tests/engine/data/gpl3.smollm2.tokens
This script stays to show the difference (transformers' ids, for comparison).

Reference data only: qsweep never runs Python on its run path. The tokenizer is the one
embedded in the SmolLM2-135M-Instruct GGUF (tools/fetch_smollm2.sh puts it in the cache),
loaded by Hugging Face transformers (tokenizers backend). No BOS is added: the text's own
tokens only, as tokenizer(text)["input_ids"] returns them for this vocabulary.

Token file format (worker/checkpoint/tokens.h), little-endian:
  offset 0  8 bytes magic "QSWTOKS\\0"
  offset 8  u32 version = 1
  offset 12 u32 vocab_size of the tokenizer
  offset 16 u32 dtype: 1 = uint32
  offset 20 u32 reserved = 0
  offset 24 u64 count
  offset 32 count x u32 token ids

Usage: tools/make_tokens.py [--text /usr/share/common-licenses/GPL-3]
                            [--gguf ~/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf]
                            [--out tests/engine/data/gpl3.smollm2.tokens]
"""
import argparse
import os
import struct
import sys

MAGIC = b"QSWTOKS\0"
VERSION = 1
DTYPE_U32 = 1


def default_gguf():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "qsweep", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def write_tokens(path, ids, vocab_size):
    """Writes ids (each < vocab_size) in the token file format above."""
    for i, t in enumerate(ids):
        if not 0 <= t < vocab_size:
            raise ValueError(f"token {i} = {t} outside vocab {vocab_size}")
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<IIII", VERSION, vocab_size, DTYPE_U32, 0))
        f.write(struct.pack("<Q", len(ids)))
        f.write(struct.pack(f"<{len(ids)}I", *ids))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--gguf", default=default_gguf())
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "engine", "data", "gpl3.smollm2.tokens"))
    a = ap.parse_args()
    if not os.path.exists(a.gguf):
        sys.exit(f"make_tokens.py: {a.gguf} not found; run tools/fetch_smollm2.sh first")

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(a.gguf), gguf_file=os.path.basename(a.gguf))
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if tok.decode(ids) != text:
        sys.exit("make_tokens.py: the tokens do not decode back to the text")
    vocab = len(tok)
    write_tokens(a.out, ids, vocab)
    print(f"{a.out}: {len(ids)} tokens, vocab {vocab}, from {a.text}")


if __name__ == "__main__":
    main()
