#!/usr/bin/env bash
# The README's results table is checked against a run, shortened for CI: the
# tiny sweep (experiments/tiny.yaml, same modes, formats and quantize settings as the README's
# SmolLM2 sweep) through `qsweep run` on a private cluster, its tables turned into the README's
# table by tools/results_table.py and compared digit for digit with the committed
# tests/cli/data/tiny_results.md, which that same command produced. The engine's fixed-order
# GEMM (worker/engine/gemm_cpu.h) makes every digit a function of the job alone: neither the
# CPU, OPENBLAS_CORETYPE, the worker count nor the threads change one.
# The same for the fused-scale form (NVFP4 W4A16 with sensitivity.fuse: [qkv, gate_up]) against
# tests/cli/data/tiny_results_fused.md, the shortened form of docs/checkpoints.md's table.
# Regenerate the expected tables (only after a deliberate numerics change):
#   build/release/cli/qsweep run experiments/tiny.yaml > run.txt
#   python3 tools/results_table.py update run.txt tests/cli/data/tiny_results.md
#   build/release/cli/qsweep run experiments/tiny.yaml \
#     --set name=tiny-fused --set 'sensitivity.formats=[nvfp4]' \
#     --set 'sensitivity.quantize=[weights]' --set '+sensitivity.fuse=[qkv,gate_up]' > fused.txt
#   python3 tools/results_table.py update fused.txt tests/cli/data/tiny_results_fused.md
# Usage: results_table_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
qsweep=$1
src=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-table-XXXXXX")
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir" # as root the private cluster runs as the user qsweep
expected="$src/tests/cli/data/tiny_results.md"
if ! XDG_DATA_HOME="$dir/data" XDG_STATE_HOME="$dir/state" \
  "$qsweep" run "$src/experiments/tiny.yaml" >"$dir/run.txt" 2>&1; then
  tr '\r' '\n' <"$dir/run.txt" | tail -n 40
  echo "results_table_test: qsweep run experiments/tiny.yaml failed"
  exit 1
fi
python3 "$src/tools/results_table.py" check "$dir/run.txt" "$expected"
if ! XDG_DATA_HOME="$dir/data" XDG_STATE_HOME="$dir/state" \
  "$qsweep" run "$src/experiments/tiny.yaml" --set name=tiny-fused \
  --set 'sensitivity.formats=[nvfp4]' --set 'sensitivity.quantize=[weights]' \
  --set '+sensitivity.fuse=[qkv,gate_up]' >"$dir/fused.txt" 2>&1; then
  tr '\r' '\n' <"$dir/fused.txt" | tail -n 40
  echo "results_table_test: qsweep run experiments/tiny.yaml with fused scales failed"
  exit 1
fi
python3 "$src/tools/results_table.py" check "$dir/fused.txt" "$src/tests/cli/data/tiny_results_fused.md"
# The check is not vacuous: one changed cell is reported, and a file without the block refused.
sed -E '0,/^\| 1 \| /s/^\| 1 \| ([a-z]+) /| 1 | \1x /' "$expected" >"$dir/changed.md"
rc=0
python3 "$src/tools/results_table.py" check "$dir/run.txt" "$dir/changed.md" >/dev/null || rc=$?
[ "$rc" -eq 1 ] || { echo "results_table_test: a changed table passed the check (rc $rc)"; exit 1; }
echo "no table here" >"$dir/none.md"
rc=0
python3 "$src/tools/results_table.py" check "$dir/run.txt" "$dir/none.md" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "results_table_test: a file without the block passed (rc $rc)"; exit 1; }
echo "results_table_test: ok"
