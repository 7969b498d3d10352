#!/usr/bin/env bash
# Two per-linear settings whose setting labels (kinds/method_label.h qs_method_setting_label) run past
# 95 characters, on a private cluster with the tiny methods grid cut to q in NVFP4: qsweep
# results (cli/results_methods.c) heads each column with its whole label, however long, so two
# settings never print one text, and each cell sits under its label.
# Usage: results_long_labels_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$SRC/tests/lib/pg.sh"
pg_test_setup methods_results_long_labels rlong
pg_db_start
search='{0.q: mr-gptq+search, 1.q: mr-gptq+search, 2.q: mr-gptq+search}'
smooth='{0.q: smoothquant, 1.q: smoothquant, 2.q: smoothquant}'
"$Q" run "$SRC/experiments/tiny-methods.yaml" --workers 1 --set name=rlong \
  --set 'sensitivity.parts=[q]' --set 'sensitivity.formats=[nvfp4]' \
  --set "sensitivity.method=[rtn,
           {name: per-linear, options: {act_order: true, alpha: 0.25555555, damp: 0.05555555,
                                        linears: $search}},
           {name: per-linear, options: {alpha: 0.75555555, damp: 0.02, linears: $smooth}}]" \
  >"$D/run.log" 2>&1 || fail "qsweep run: $(tail -n 5 "$D/run.log")"
out=$("$Q" results rlong) || fail "qsweep results: $out"
table=$(echo "$out" | grep -A4 "^mean KL divergence by method") || fail "no method table: $out"
header=$(echo "$table" | grep "^  part ") || fail "no header: $out"
row=$(echo "$table" | grep "^  q ") || fail "no row of q: $out"
# the options and linears that differ between the two, in label order (115 and 101 characters);
# the columns come in the order of their options, act_order false first
a=per-linear+act_order=true+alpha=0.25555555+damp=0.05555555+0.q=mr-gptq+search+1.q=mr-gptq+search+2.q=mr-gptq+search
b=per-linear+act_order=false+alpha=0.75555555+damp=0.02+0.q=smoothquant+1.q=smoothquant+2.q=smoothquant
[ "$(echo "$header" | tr -s ' ')" = " part rtn $b $a" ] ||
  fail "the header is not 'part rtn $b $a': $header"
# each cell ends where its label ends
for label in "$a" "$b"; do
  end=$(($(echo "$header" | grep -boF -- "$label" | cut -d: -f1) + ${#label}))
  [ "${row:$((end - 1)):1}" != " " ] && [ "${row:$end:1}" = " " -o ${#row} = "$end" ] ||
    fail "the cell under $label does not end with it: $header / $row"
done
echo "OK results: $header"
echo "methods_results_long_labels: OK"
