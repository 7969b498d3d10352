#!/usr/bin/env python3
"""Baseline for bench_tokenizer: Hugging Face tokenizers (the Rust library through its Python
package) encoding a text file on one thread, two ways: the whole text as one string, and the
text cut at line ends into pieces of about 1 KB given to encode_batch (HF is much faster on
short inputs). Prints "<ids whole> <best seconds whole> <ids pieces> <best seconds pieces>"
of `repeats` runs each.
Usage: hf_baseline.py TOKENIZER_JSON TEXT [repeats]"""
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402

tok = Tokenizer.from_file(sys.argv[1])
tok.encode_special_tokens = True
with open(sys.argv[2], encoding="utf-8", newline="") as f:
    text = f.read()
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
pieces, cur = [], []
size = 0
for line in text.splitlines(keepends=True):
    cur.append(line)
    size += len(line)
    if size >= 1000:
        pieces.append("".join(cur))
        cur, size = [], 0
if cur:
    pieces.append("".join(cur))


def best_of(f):
    best, n = None, 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = f()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return n, best


n1, t1 = best_of(lambda: len(tok.encode(text, add_special_tokens=False).ids))
n2, t2 = best_of(lambda: sum(len(e.ids) for e in tok.encode_batch(pieces, add_special_tokens=False)))
print(n1, t1, n2, t2)
