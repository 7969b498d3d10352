#!/usr/bin/env python3
"""Gradient goldens for qsweep's training backward, from PyTorch autograd on Hugging Face
transformers' LlamaForCausalLM (CPU). Reference data only: qsweep never runs Python on its run
path.

For each committed tiny checkpoint in tests/engine/data (llama2_mha: MHA, untied lm_head, F16;
llama3_gqa: GQA with Llama 3.1 RoPE scaling, BF16; llama32_tied: GQA, tied embeddings, F32),
the model is loaded with eager attention and run in FP64 (the stored weights are exact in
FP64), on B=2 sequences of T+1=17 tokens drawn by numpy's default_rng(seed) from the
vocabulary: inputs tokens[:, :T], targets tokens[:, 1:], loss = mean cross-entropy over all
B*T positions (torch.nn.functional.cross_entropy). The loss and d loss / d parameter of every
parameter (named_parameters order; a tied lm_head is the embedding) are written to
tests/train/data/<name>.grads, little-endian:
  offset 0  8 bytes magic "QSWGRAD\\0"
  offset 8  u32 version = 1, u32 B, u32 T, u32 n_tensors
  offset 24 f64 loss
  then u32 tokens[B x (T+1)]
  then per tensor: u32 name length, name bytes (no NUL), u32 rows, u32 cols (1 for vectors),
                   f32 grad[rows x cols] (the FP64 gradient rounded to FP32)

Usage: tools/train_grad_goldens.py [--models tests/engine/data] [--out tests/train/data]
"""
import argparse
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

MODELS = [("llama2_mha", 21), ("llama3_gqa", 22), ("llama32_tied", 23)]
B, T = 2, 16


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--models", default=os.path.join(here, "..", "tests", "engine", "data"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "train", "data"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    for name, seed in MODELS:
        model = LlamaForCausalLM.from_pretrained(os.path.join(a.models, name),
                                                 attn_implementation="eager",
                                                 dtype=torch.float32)
        model = model.double()
        model.train(False)
        V = model.config.vocab_size
        rng = np.random.default_rng(seed)
        toks = rng.integers(0, V, size=(B, T + 1), dtype=np.int64)
        ids = torch.tensor(toks[:, :T])
        tgt = torch.tensor(toks[:, 1:])
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        params = list(model.named_parameters())
        path = os.path.join(a.out, name + ".grads")
        with open(path, "wb") as f:
            f.write(b"QSWGRAD\0")
            f.write(struct.pack("<4I", 1, B, T, len(params)))
            f.write(struct.pack("<d", loss.item()))
            f.write(toks.astype("<u4").tobytes())
            for pname, p in params:
                g = p.grad.detach().numpy()
                rows = g.shape[0]
                cols = g.shape[1] if g.ndim == 2 else 1
                nb = pname.encode()
                f.write(struct.pack("<I", len(nb)))
                f.write(nb)
                f.write(struct.pack("<2I", rows, cols))
                f.write(g.astype("<f4").tobytes())
        print(f"{path}: loss {loss.item():.12f}, {len(params)} tensors")


if __name__ == "__main__":
    main()
