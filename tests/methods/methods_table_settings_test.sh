#!/usr/bin/env bash
# tests/methods/methods_table.py over one method in several settings, on a synthetic run output
# (the header and row layout `qsweep run` prints; round numbers, so each cell can be checked by
# hand): each setting is a column under its setting label, as `qsweep results` names it
# (kinds/method_label.h qs_method_setting_label): the options that differ between the settings of one
# label (gptq: act_order and damp; smoothquant: alpha, 1.0 written "1"), a label measured in one
# setting as it is (mr-gptq), the columns ordered by label then option values. Two tables of one
# setting label are refused, naming it.
# Usage: methods_table_settings_test.sh SOURCE_DIR
set -euo pipefail
src=$1
table="$src/tests/methods/methods_table.py"
dir=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-mtable-XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "methods_table_settings_test: $*"; exit 1; }

header() { # options
  printf 'tiny  nvfp4 %s  weights  component-wise   baseline (unquantized) ppl 100.0000\n' "$1"
  printf '  part              ppl        delta    delta%%     KL mean      KL p99    top-1  SQNR dB\n'
}
row() { # ppl kl
  printf '  q            %s      +0.0000    +0.00%%    %s    0.900000   80.00%%        -\n' "$1" "$2"
}
fo='"clamp": "none", "rounding": "rne"'
{
  header "{$fo}"; row 110.0000 0.500000
  header "{\"damp\": 0.01, $fo, \"method\": \"gptq\", \"act_order\": false}"; row 105.0000 0.200000
  header "{\"damp\": 0.10000000000000001, $fo, \"method\": \"gptq\", \"act_order\": false}"
  row 102.0000 0.100000
  header "{\"damp\": 0.01, $fo, \"method\": \"gptq\", \"act_order\": true}"; row 101.0000 0.150000
  header "{\"damp\": 0.01, $fo, \"method\": \"mr-gptq\", \"act_order\": false}"; row 99.0000 0.050000
  header "{$fo, \"alpha\": 1.0, \"method\": \"smoothquant\"}"; row 120.0000 0.300000
  header "{$fo, \"alpha\": 0.5, \"method\": \"smoothquant\"}"; row 103.0000 0.250000
} >"$dir/run.txt"

cat >"$dir/want.md" <<'MD'
<!-- methods-table:begin -->

Unquantized perplexity 100.0000.

NVFP4 W4A16:

| component | rtn | gptq+act_order=false+damp=0.01 | gptq+act_order=false+damp=0.1 | gptq+act_order=true+damp=0.01 | mr-gptq | smoothquant+alpha=0.5 | smoothquant+alpha=1 | lowest KL |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
| q | 0.5000 (+10.0%) | 0.2000 (+5.0%) | 0.1000 (+2.0%) | 0.1500 (+1.0%) | 0.0500 (-1.0%) | 0.2500 (+3.0%) | 0.3000 (+20.0%) | mr-gptq |

<!-- methods-table:end -->
MD
python3 "$table" render "$dir/run.txt" >"$dir/got.md" || fail "render refused the run output"
diff -u "$dir/want.md" "$dir/got.md" || fail "the rendered table is not the one written out above"
python3 "$table" check "$dir/run.txt" "$dir/want.md" >/dev/null || fail "check fails on its own table"
echo "OK a column per setting: $(grep '^| component' "$dir/got.md")"

# one setting label twice (the same gptq, another rounding): refused, naming it
{
  cat "$dir/run.txt"
  header '{"damp": 0.01, "clamp": "none", "rounding": "stochastic", "method": "gptq", "act_order": true}'
  row 101.0000 0.150000
} >"$dir/twice.txt"
rc=0
python3 "$table" render "$dir/twice.txt" >/dev/null 2>"$dir/err" || rc=$?
[ "$rc" = 2 ] && grep -qF "method gptq+act_order=true+damp=0.01 has two tables" "$dir/err" ||
  fail "two tables of one setting label: exit $rc: $(cat "$dir/err")"
echo "OK two tables of one setting label refused: $(cat "$dir/err")"
echo "methods_table_settings_test: ok"
