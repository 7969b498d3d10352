#!/usr/bin/env bash
# The independent GGUF reader: qsweep's MXFP4 GGUF export of tests/checkpoint/fixtures/
# tiny_quant.gguf decoded by gguf-py (tools/export/gguf_mxfp4_check.py) and compared with what
# qsweep reads back. Skipped (exit 77) when gguf-py is not installed: QSWEEP_CT_PYTHON names a
# Python that has it (pip install gguf safetensors; test-only).
# Usage: gguf_check.sh EXPORT_TEST CHECK_SCRIPT
set -euo pipefail
py=${QSWEEP_CT_PYTHON:-python3}
if ! "$py" -c "import gguf, safetensors.numpy" 2>/dev/null; then
    echo "skipped: $py has no gguf-py (set QSWEEP_CT_PYTHON to a Python that has it)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" write mxfp4-gguf "$tmp/gguf" "$tmp/gguf.dump"
"$py" "$2" "$tmp/gguf" "$tmp/gguf.dump"
