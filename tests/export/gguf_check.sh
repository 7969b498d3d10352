#!/usr/bin/env bash
# The independent GGUF reader: qsweep's GGUF export of tests/checkpoint/fixtures/tiny_quant.gguf
# with block 0 in MXFP4 (block 1 keeps its Q4_0, Q4_1, Q8_0, F16, BF16 linears) decoded, every
# tensor, by
# gguf-py (llama.cpp's own Python package, tools/export/gguf_mxfp4_check.py) and compared with
# what qsweep reads back; then the same job made by GPTQ (its own codes and scales). Skipped
# (exit 77) when gguf-py is not installed (tools/install-deps.sh installs it in its test group);
# QSWEEP_CT_PYTHON names another Python that has it.
# Usage: gguf_check.sh EXPORT_TEST CHECK_SCRIPT
set -euo pipefail
py=${QSWEEP_CT_PYTHON:-python3}
if ! "$py" -c "import gguf.quants, numpy" 2>/dev/null; then
    echo "skipped: $py has no gguf-py (pip install gguf; set QSWEEP_CT_PYTHON to a Python that has it)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in mxfp4-gguf gptq-mxfp4-gguf; do
    "$1" write "$f" "$tmp/$f" "$tmp/$f.dump"
    "$py" "$2" "$tmp/$f" "$tmp/$f.dump"
done
