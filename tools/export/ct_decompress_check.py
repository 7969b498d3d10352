#!/usr/bin/env python3
"""An independent reader of qsweep's compressed-tensors export: the compressed-tensors package's
own compressors (compressors/nvfp4, compressors/mxfp4; PyPI compressed-tensors) unpack and
decompress each linear of EXPORT_DIR, and the values are compared with DUMP, a safetensors file
of what qsweep's loader reads back for the same linears (FP32).

  1. the package's unpacking of the codes (unpack_fp4_from_uint8, in FP32) times its decoding of
     the block scales (E4M3, or E8M0 exponents), times the FP32 decode scale 1/global_scale:
     must equal qsweep's values bit for bit (qsweep's decoder: (e2m1 x scale) x S_dec);
  2. the package's decompress() as vLLM's offline path calls it (output BF16, NVFP4 scale
     divided by the global scale first): the number of elements that differ from qsweep's values
     rounded to BF16, and the largest difference in BF16 units in the last place, are printed;
     MXFP4 must agree everywhere, NVFP4 within 1 BF16 ulp (the package rounds scale/global once
     before the product, qsweep the product times 1/global: docs/export.md).

Exit 0 when both hold, 1 otherwise, 77 when the package is not installed (ctest: skipped).
Usage: ct_decompress_check.py EXPORT_DIR DUMP"""
import json
import sys

try:
    import torch
    from compressed_tensors.compressors.mxfp4 import MXFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4 import NVFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationConfig
    from safetensors.torch import load_file
except ImportError as e:  # the test's skip
    print(f"skipped: the compressed-tensors reference is not installed ({e})")
    sys.exit(77)


def bf16_ulps(a, b):
    """|a - b| in BF16 units in the last place (a, b BF16, same sign and binade in practice)."""
    ia = a.view(torch.int16).to(torch.int32)
    ib = b.view(torch.int16).to(torch.int32)
    return (ia - ib).abs()


def main(export_dir, dump):
    config = json.load(open(f"{export_dir}/config.json"))
    qc = QuantizationConfig.model_validate(config["quantization_config"])
    tensors = load_file(f"{export_dir}/model.safetensors")
    qsweep = load_file(dump)
    ok = True
    n_lin = n_el = n_diff = 0
    worst = 0
    for gname, scheme in qc.config_groups.items():
        fmt = config["quantization_config"]["config_groups"][gname]["format"]
        comp = NVFP4PackedCompressor if fmt == "nvfp4-pack-quantized" else MXFP4PackedCompressor
        group = scheme.weights.group_size
        for module in scheme.targets:
            sd = {k[len(module) + 1:]: v for k, v in tensors.items() if k.startswith(module + ".weight_")}
            want = qsweep[module + ".weight"]
            rows, half = sd["weight_packed"].shape
            # 1. codes x block scales x 1/global, qsweep's order, from the package's decoding
            codes = unpack_fp4_from_uint8(sd["weight_packed"], rows, 2 * half, dtype=torch.float32)
            scale = comp._decompress_scale(sd["weight_scale"], torch.float32)
            x = codes * scale.repeat_interleave(group, dim=1)
            if "weight_global_scale" in sd:
                s_dec = torch.tensor(1.0, dtype=torch.float32) / sd["weight_global_scale"].to(torch.float32)
                x = x * s_dec
            if not torch.equal(x.view(torch.int32), want.view(torch.int32)):
                print(f"NOT OK {module}: codes x scales differ from qsweep's values")
                ok = False
            # 2. the package's decompress, as is
            ref = comp.decompress(dict(sd), scheme)["weight"]
            d = bf16_ulps(ref.to(torch.bfloat16), want.to(torch.bfloat16))
            n_lin += 1
            n_el += d.numel()
            n_diff += int((d != 0).sum())
            worst = max(worst, int(d.max()))
            limit = 1 if comp is NVFP4PackedCompressor else 0
            if int(d.max()) > limit:
                print(f"NOT OK {module}: decompress() differs by {int(d.max())} BF16 ulp")
                ok = False
    print(f"{export_dir}: {n_lin} linears, {n_el} weights: codes x scales equal qsweep's bit for bit: "
          f"{'yes' if ok else 'no'}; decompress() (BF16) differs from qsweep's rounded to BF16 in "
          f"{n_diff} weights, by at most {worst} ulp")
    return 0 if ok and n_lin > 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
