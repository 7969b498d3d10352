#!/usr/bin/env bash
# docs/training.md's table against a run, shortened for CI: experiments/tiny-fp4-training.yaml
# for 20 steps, recipes bf16 and nvfp4, seed 1, through `qsweep run` on a private cluster, its
# table turned into markdown by tools/train_table.py and compared digit for digit with the
# committed tests/cli/data/tiny_training_short.md, which that same command produced. The text
# is the King James Bible from tools/kjv_text.sh (skipped, 77, without Debian's `bible`).
# The engine's fixed-order GEMM (worker/engine/gemm_cpu.h) makes the losses a function of the
# run alone; under QSWEEP_CPU_GEMM=openblas they move in the fourth decimal with OpenBLAS's
# kernel family.
# Regenerate the expected table (only after a deliberate numerics change):
#   bash tools/kjv_text.sh && build/release/cli/qsweep run \
#     experiments/tiny-fp4-training.yaml --set name=tiny-fp4-training-short --set training.steps=20 \
#     --set 'training.recipes=[bf16,nvfp4]' --set 'training.seeds=[1]' > run.txt
#   python3 tools/train_table.py update run.txt tests/cli/data/tiny_training_short.md
# Usage: train_table_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
qsweep=$1
src=$2
if ! command -v bible >/dev/null; then
  echo "train_table_test: skipped: no 'bible' command (tools/install-deps.sh installs bible-kjv)"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-train-table-XXXXXX")
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir" # as root the private cluster runs as the user qsweep
expected="$src/tests/cli/data/tiny_training_short.md"
bash "$src/tools/kjv_text.sh" "$dir/cache/qsweep/data/kjv.txt" >/dev/null
if ! XDG_DATA_HOME="$dir/data" XDG_STATE_HOME="$dir/state" XDG_CACHE_HOME="$dir/cache" \
  "$qsweep" run "$src/experiments/tiny-fp4-training.yaml" --set name=tiny-fp4-training-short \
  --set training.steps=20 --set 'training.recipes=[bf16,nvfp4]' --set 'training.seeds=[1]' \
  >"$dir/run.txt" 2>&1; then
  tr '\r' '\n' <"$dir/run.txt" | tail -n 40
  echo "train_table_test: qsweep run experiments/tiny-fp4-training.yaml (shortened) failed"
  exit 1
fi
python3 "$src/tools/train_table.py" check "$dir/run.txt" "$expected"
# The check is not vacuous: one changed digit is reported, and a file without the block refused.
sed -E '0,/^\| bf16 \| /s/^\| bf16 \| 1 \| ([0-9.]+)/| bf16 | 1 | \1 9/' "$expected" >"$dir/changed.md"
rc=0
python3 "$src/tools/train_table.py" check "$dir/run.txt" "$dir/changed.md" >/dev/null || rc=$?
[ "$rc" -eq 1 ] || { echo "train_table_test: a changed table passed the check (rc $rc)"; exit 1; }
echo "no table here" >"$dir/none.md"
rc=0
python3 "$src/tools/train_table.py" check "$dir/run.txt" "$dir/none.md" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "train_table_test: a file without the block passed (rc $rc)"; exit 1; }
echo "train_table_test: ok"
