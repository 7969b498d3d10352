#!/usr/bin/env bash
# The independent reader: qsweep's NVFP4 and MXFP4 exports of the test model, and its export of
# the NVFP4 job made by GPTQ (GPTQ's own codes and scales), decompressed by the
# compressed-tensors package (tools/export/ct_decompress_check.py) and compared with what qsweep
# reads back. Skipped (exit 77) when the package is not installed: QSWEEP_CT_PYTHON names a
# Python that has it (pip install compressed-tensors; test-only, never on qsweep's run path).
# Usage: ct_check.sh EXPORT_TEST CHECK_SCRIPT
set -euo pipefail
py=${QSWEEP_CT_PYTHON:-python3}
if ! "$py" -c "import compressed_tensors, torch, safetensors" 2>/dev/null; then
    echo "skipped: $py has no compressed_tensors (set QSWEEP_CT_PYTHON to a Python that has it)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in nvfp4 mxfp4 gptq-nvfp4; do
    "$1" write "$f" "$tmp/$f" "$tmp/$f.dump"
    "$py" "$2" "$tmp/$f" "$tmp/$f.dump"
done
