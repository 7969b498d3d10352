#!/usr/bin/env python3
"""Independent checks of qsweep's ModelOpt export EXPORT_DIR:
1. ModelOpt's own code: convert_hf_quant_config_format (PyPI nvidia-modelopt,
   modelopt/torch/export/convert_hf_config.py, the function ModelOpt's export_hf_checkpoint makes
   config.json's quantization_config with) applied to hf_quant_config.json must give
   config.json's quantization_config exactly. The file is loaded by its path: it needs only the
   standard library, while importing modelopt.torch would need PyTorch.
2. NumPy alone decodes every NVFP4 linear of model.safetensors as ModelOpt's layout defines it
   (E2M1 code, the even column in the low nibble, times its E4M3 block scale, times the scalar
   weight_scale_2, in FP32 in that order) to DUMP, what qsweep reads back, bit for bit; each has
   a scalar positive input_scale, and every quantized linear of DUMP is in the file.
Exit 0 when both hold, 1 otherwise, 77 when nvidia-modelopt is not installed.
Usage: modelopt_check.py EXPORT_DIR DUMP"""
import importlib.util
import json
import os
import struct
import sys

import numpy as np

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def e4m3(b):
    """FP32 values of E4M3 bytes (no NaN expected: 0x7f/0xff are refused by the writer)."""
    b = b.astype(np.int32)
    s = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    return (s * v).astype(np.float32)


def safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw)
    out = {}
    for name, info in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = {"F32": "<f4", "U8": "u1", "F8_E4M3": "u1", "BF16": "<u2", "F16": "<f2"}[info["dtype"]]
        out[name] = (info["dtype"], info["shape"], np.frombuffer(raw, dtype=dt, count=(b - a) // np.dtype(dt).itemsize, offset=8 + n + a))
    return out


def check_weights(export_dir, dump):
    t = safetensors(os.path.join(export_dir, "model.safetensors"))
    want = safetensors(dump)
    n = bad = 0
    for name, (dt, shape, codes) in t.items():
        if dt != "U8" or not name.endswith(".weight"):
            continue
        m = name[: -len(".weight")]
        rows, half = shape
        scale = e4m3(t[m + ".weight_scale"][2]).reshape(rows, 2 * half // 16)
        s2d, s2shape, s2 = t[m + ".weight_scale_2"]
        ind, inshape, ins = t[m + ".input_scale"]
        assert s2d == ind == "F32" and s2shape == inshape == [], f"{m}: scales are not F32 scalars"
        assert ins[0] > 0 and s2[0] > 0, f"{m}: a scale is not positive"
        c = codes.reshape(rows, half)
        q = np.empty((rows, 2 * half), dtype=np.float32)
        q[:, 0::2], q[:, 1::2] = E2M1[c & 15], E2M1[c >> 4]
        x = (q * np.repeat(scale, 16, axis=1)) * s2[0]
        y = want[name][2].reshape(rows, 2 * half)
        n += 1
        if not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
            print(f"NOT OK {name}: NumPy's decoding differs from qsweep's")
            bad += 1
    linears = [k for k in want if k.endswith("_proj.weight")]
    missing = [k for k in linears if k not in t or t[k][0] != "U8"]
    for k in missing:
        print(f"NOT OK {k}: not packed in the export")
    print(f"{export_dir}: {n} NVFP4 linears decoded by NumPy, {n - bad} equal qsweep's values")
    return n > 0 and bad == 0 and not missing


def main(export_dir, dump):
    spec = importlib.util.find_spec("modelopt")
    if spec is None or not spec.submodule_search_locations:
        print("skipped: nvidia-modelopt is not installed")
        return 77
    path = os.path.join(list(spec.submodule_search_locations)[0], "torch", "export", "convert_hf_config.py")
    mspec = importlib.util.spec_from_file_location("modelopt_convert_hf_config", path)
    mod = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(mod)
    hq = json.load(open(os.path.join(export_dir, "hf_quant_config.json")))
    got = json.load(open(os.path.join(export_dir, "config.json")))["quantization_config"]
    want = mod.convert_hf_quant_config_format(hq)
    ok = check_weights(export_dir, dump)
    if got != want:
        print("NOT OK: config.json's quantization_config is\n%s\nModelOpt makes\n%s"
              % (json.dumps(got, indent=1, sort_keys=True), json.dumps(want, indent=1, sort_keys=True)))
        return 1
    if not ok:
        return 1
    print(f"{export_dir}: config.json's quantization_config is what ModelOpt's "
          f"convert_hf_quant_config_format ({path}) makes of hf_quant_config.json")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
