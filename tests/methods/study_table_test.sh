#!/usr/bin/env bash
# The method study's CI form (docs/methods.md, "The study"): experiments/fp4-methods-tiny.yaml,
# the shape of the SmolLM2 short form (NVFP4 and MXFP4 weights, rtn, gptq, rotate16, rotate32,
# mr-gptq, smoothquant) and mr-gptq with scale_search on the tiny test checkpoint's down_proj
# with one scored chunk, through `qsweep run` on a private cluster;
# tests/methods/methods_table.py turns its tables into the docs' method tables, compared digit
# for digit with the committed tests/methods/data/fp4_methods_tiny.md, which that same command
# produced.
# Regenerate the expected tables (only after a deliberate numerics change):
#   build/release/cli/qsweep run experiments/fp4-methods-tiny.yaml > run.txt
#   python3 tests/methods/methods_table.py update run.txt tests/methods/data/fp4_methods_tiny.md
# Usage: study_table_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
qsweep=$1
src=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-study-XXXXXX")
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir" # as root the private cluster runs as the user qsweep
expected="$src/tests/methods/data/fp4_methods_tiny.md"
table="$src/tests/methods/methods_table.py"
if ! XDG_DATA_HOME="$dir/data" XDG_STATE_HOME="$dir/state" \
  "$qsweep" run "$src/experiments/fp4-methods-tiny.yaml" >"$dir/run.txt" 2>&1; then
  tr '\r' '\n' <"$dir/run.txt" | tail -n 40
  echo "study_table_test: qsweep run experiments/fp4-methods-tiny.yaml failed"
  exit 1
fi
python3 "$table" check "$dir/run.txt" "$expected"
# Every method's table came back: 2 formats x 7 methods, each naming its method (rtn: none).
n=$(grep -c '^llama3_gqa  \(nv\|mx\)fp4 .* weights  component-wise ' "$dir/run.txt" || true)
[ "$n" -eq 14 ] || { echo "study_table_test: $n method tables in the run, 14 expected"; exit 1; }
# The check is not vacuous: one changed digit is reported, and a file without the block refused.
sed -E '0,/^\| down \| 0\./s/^\| down \| 0\.([0-9])/| down | 0.\1x/' "$expected" >"$dir/changed.md"
rc=0
python3 "$table" check "$dir/run.txt" "$dir/changed.md" >/dev/null || rc=$?
[ "$rc" -eq 1 ] || { echo "study_table_test: a changed table passed the check (rc $rc)"; exit 1; }
echo "no table here" >"$dir/none.md"
rc=0
python3 "$table" check "$dir/run.txt" "$dir/none.md" 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "study_table_test: a file without the block passed (rc $rc)"; exit 1; }
# --block NAME reads and writes a second table's own markers.
python3 "$table" --block second render "$dir/run.txt" >"$dir/second.md"
[ "$(head -n 1 "$dir/second.md")" = '<!-- methods-table:second:begin -->' ] &&
  [ "$(tail -n 1 "$dir/second.md")" = '<!-- methods-table:second:end -->' ] ||
  { echo "study_table_test: --block did not name its markers"; exit 1; }
echo "study_table_test: ok"
