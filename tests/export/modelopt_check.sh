#!/usr/bin/env bash
# ModelOpt's own config code and NumPy as independent readers of qsweep's ModelOpt export of the
# test model (every block linear NVFP4 W4A4, fused, calibrated: tools/export/modelopt_check.py),
# and of a GPTQ job (o and down NVFP4 W4A4: GPTQ's own codes and scales).
# Skipped (exit 77) when nvidia-modelopt is not installed (tools/install-deps.sh installs it, no
# dependencies, in its test group); QSWEEP_CT_PYTHON names another Python that has it.
# Usage: modelopt_check.sh EXPORT_TEST CHECK_SCRIPT
set -euo pipefail
py=${QSWEEP_CT_PYTHON:-python3}
if ! "$py" -c "import importlib.util as u, numpy; assert u.find_spec('modelopt')" 2>/dev/null; then
    echo "skipped: $py has no nvidia-modelopt (pip install --no-deps nvidia-modelopt)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in modelopt gptq-modelopt; do
    "$1" write "$f" "$tmp/$f" "$tmp/$f.dump"
    "$py" "$2" "$tmp/$f" "$tmp/$f.dump"
done
