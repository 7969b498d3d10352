#!/usr/bin/env bash
# qsweep results' method table (cli/results_methods.c) when two columns share one label: each
# header gives the label and the column's whole options, so the columns can be told apart, on
# a private cluster with the tiny methods grid cut to one part and one format.
# Usage: results_columns_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$SRC/tests/lib/pg.sh"
pg_test_setup methods_results_columns rcols
pg_db_start
"$Q" run "$SRC/experiments/tiny-methods.yaml" --workers 1 --set name=rcols \
  --set 'sensitivity.parts=[q]' --set 'sensitivity.formats=[nvfp4]' \
  --set 'sensitivity.method=[{name: mr-gptq, options: {scale_search: true}},
                             {name: mr-gptq, options: {scale_search: true, damp: 0.02}}]' \
  >"$D/run.log" 2>&1 || fail "qsweep run"
out=$("$Q" results rcols) || fail "qsweep results: $out"
header=$(echo "$out" | grep -A4 "^mean KL divergence by method" | grep "^  part ") ||
  fail "no method table: $out"
for damp in 0.01 0.02; do
  want="mr-gptq+search {\"damp\": $damp, \"act_order\": false, \"scale_search\": true}"
  case "$header" in *"$want"*) ;; *) fail "the header does not hold '$want': $header" ;; esac
done
echo "methods_results_columns: OK"
