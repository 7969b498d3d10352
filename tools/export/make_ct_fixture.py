#!/usr/bin/env python3
"""A compressed-tensors FP4 checkpoint written by the reference package itself (PyPI
compressed-tensors: its qparams, quantizer and compressors), for qsweep's reader test: a 1-block
Llama (hidden 64, intermediate 96, 4 heads of 16, 2 KV heads, vocab 64) with seeded random BF16
weights; q/k/v/o quantized to NVFP4 (config group with format nvfp4-pack-quantized), gate/up/down
to MXFP4 (mxfp4-pack-quantized), lm_head in the ignore list.

Writes OUT/ct_published/{config.json,model.safetensors} and OUT/ct_published_expected.safetensors:
for each linear, `<module>.weight`: the package's unpacked codes (FP32) times its decoded block
scales times 1/global_scale (FP32), and `<module>.weight_decompressed`: the package's
decompress() output (BF16). tests/export checks qsweep's loader against both.
Usage: make_ct_fixture.py OUT   (committed output: tests/export/fixtures; compressed-tensors 0.20.1)"""
import json
import os
import sys

import torch
from compressed_tensors.compressors.mxfp4 import MXFP4PackedCompressor
from compressed_tensors.compressors.nvfp4 import NVFP4PackedCompressor
from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
from compressed_tensors.quantization import QuantizationScheme
from compressed_tensors.quantization.quant_scheme import MXFP4A16, NVFP4A16
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
from safetensors.torch import save_file

DIM, HIDDEN, HEADS, KV, HD, VOCAB = 64, 96, 4, 2, 16, 64
LIN = {"self_attn.q_proj": (HEADS * HD, DIM), "self_attn.k_proj": (KV * HD, DIM),
       "self_attn.v_proj": (KV * HD, DIM), "self_attn.o_proj": (DIM, HEADS * HD),
       "mlp.gate_proj": (HIDDEN, DIM), "mlp.up_proj": (HIDDEN, DIM), "mlp.down_proj": (DIM, HIDDEN)}


def qparams(w, args):
    """Scales as llm-compressor's static min-max observer gives them: per group of the weights."""
    g = args.group_size
    groups = w.float().reshape(w.shape[0], w.shape[1] // g, g)
    gmin, gmax = groups.amin(dim=2), groups.amax(dim=2)
    gs = None
    if args.strategy == "tensor_group":
        gs = generate_gparam(w.float().min(), w.float().max())
    scale, _ = calculate_qparams(gmin, gmax, args, global_scale=gs)
    return scale, gs


def main(out):
    torch.manual_seed(39)
    tensors = {}
    dense = {"model.embed_tokens.weight": torch.randn(VOCAB, DIM),
             "model.norm.weight": 1 + 0.1 * torch.randn(DIM),
             "lm_head.weight": 0.05 * torch.randn(VOCAB, DIM),
             "model.layers.0.input_layernorm.weight": 1 + 0.1 * torch.randn(DIM),
             "model.layers.0.post_attention_layernorm.weight": 1 + 0.1 * torch.randn(DIM)}
    for k, v in dense.items():
        tensors[k] = v.to(torch.bfloat16)
    expected = {}
    groups = {"group_0": ("nvfp4-pack-quantized", NVFP4A16, NVFP4PackedCompressor, []),
              "group_1": ("mxfp4-pack-quantized", MXFP4A16, MXFP4PackedCompressor, [])}
    for name, shape in LIN.items():
        module = f"model.layers.0.{name}"
        # a few large weights, so that blocks use different scales
        w = (0.05 * torch.randn(*shape) * (1 + 10 * (torch.rand(*shape) > 0.98))).to(torch.bfloat16)
        key = "group_0" if name.startswith("self_attn") else "group_1"
        fmt, preset, comp, targets = groups[key]
        targets.append(module)
        scheme = QuantizationScheme(targets=[module], **preset)
        scale, gs = qparams(w, scheme.weights)
        sd = {"weight": w, "weight_scale": scale}
        if gs is not None:
            sd["weight_global_scale"] = gs
        c = comp.compress(sd, scheme)
        for k, v in c.items():
            tensors[f"{module}.{k}"] = v.contiguous()
        rows, half = c["weight_packed"].shape
        codes = unpack_fp4_from_uint8(c["weight_packed"], rows, 2 * half, dtype=torch.float32)
        x = codes * comp._decompress_scale(c["weight_scale"], torch.float32).repeat_interleave(
            scheme.weights.group_size, dim=1)
        if "weight_global_scale" in c:
            x = x * (torch.tensor(1.0) / c["weight_global_scale"].float())
        expected[f"{module}.weight"] = x.contiguous()
        expected[f"{module}.weight_decompressed"] = comp.decompress(dict(c), scheme)["weight"].contiguous()
    qc = {"quant_method": "compressed-tensors", "format": "mixed-precision",
          "quantization_status": "compressed", "ignore": ["lm_head"], "config_groups": {}}
    for key, (fmt, preset, comp, targets) in groups.items():
        scheme = QuantizationScheme(targets=targets, **preset)
        d = json.loads(scheme.model_dump_json())
        d["format"] = fmt
        qc["config_groups"][key] = d
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
              "intermediate_size": HIDDEN, "num_hidden_layers": 1, "num_attention_heads": HEADS,
              "num_key_value_heads": KV, "head_dim": HD, "vocab_size": VOCAB,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
              "bos_token_id": 1, "eos_token_id": 2, "quantization_config": qc}
    d = os.path.join(out, "ct_published")
    os.makedirs(d, exist_ok=True)
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
    save_file(tensors, os.path.join(d, "model.safetensors"))
    save_file(expected, os.path.join(out, "ct_published_expected.safetensors"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/export/fixtures")
