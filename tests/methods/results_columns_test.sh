#!/usr/bin/env bash
# Two settings of one method label in one sweep (gptq with damp 0.01 and 0.1, mr-gptq+search with
# damp 0.01 and 0.02), on a private cluster with the tiny methods grid cut to one part and one
# format. qsweep results (cli/results_methods.c) gives each setting a column under its setting
# label (kinds/method_label.h qs_method_setting_label: gptq+damp=0.1), holding that setting's KL;
# qsweep plan refuses to choose between two settings, naming their labels, and --methods with a
# setting label plans that setting, its grid holding its options. A plan whose budget keeps
# every linear bf16 writes no grid (submit would refuse it) and exits 2 saying so.
# Usage: results_columns_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$SRC/tests/lib/pg.sh"
pg_test_setup methods_results_columns rcols
pg_db_start
"$Q" run "$SRC/experiments/tiny-methods.yaml" --workers 1 --set name=rcols \
  --set 'sensitivity.parts=[q]' --set 'sensitivity.formats=[nvfp4]' \
  --set 'sensitivity.method=[rtn, gptq, {name: gptq, options: {damp: 0.1}},
                             {name: mr-gptq, options: {scale_search: true}},
                             {name: mr-gptq, options: {scale_search: true, damp: 0.02}}]' \
  >"$D/run.log" 2>&1 || fail "qsweep run: $(tail -n 5 "$D/run.log")"
out=$("$Q" results rcols) || fail "qsweep results: $out"
header=$(echo "$out" | grep -A4 "^mean KL divergence by method" | grep "^  part ") ||
  fail "no method table: $out"
row=$(echo "$out" | grep -A4 "^mean KL divergence by method" | grep "^  q ") ||
  fail "no row of q: $out"
labels=(rtn gptq+damp=0.01 gptq+damp=0.1 mr-gptq+search+damp=0.01 mr-gptq+search+damp=0.02)
[ "$(echo "$header" | tr -s ' ')" = " part ${labels[*]}" ] ||
  fail "the header is not 'part ${labels[*]}': $header"
# each column holds its own setting's job: the KL the database has for that method and damp
read -r -a cells <<<"$(echo "$row" | tr -d '*')"
kl() {
  psql_q "SELECT to_char(s.value, 'FM0.000000') FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id
          WHERE s.experiment = 'rcols' AND s.metric = 'kl_mean'
            AND coalesce(j.spec ->> 'method', 'rtn') = '$1'
            AND coalesce((j.spec -> 'method_options' ->> 'damp')::float8, 0) = $2
            AND coalesce(j.spec -> 'method_options' ->> 'scale_search', 'false') = '$3'"
}
want=("$(kl rtn 0 false)" "$(kl gptq 0.01 false)" "$(kl gptq 0.1 false)"
      "$(kl mr-gptq 0.01 true)" "$(kl mr-gptq 0.02 true)")
for i in 0 1 2 3 4; do
  [ "${cells[$((i + 1))]}" = "${want[$i]}" ] ||
    fail "column ${labels[$i]} holds ${cells[$((i + 1))]}, its job measured ${want[$i]}: $row"
done
[ "${want[1]}" != "${want[2]}" ] || fail "the two gptq settings measured one KL: ${want[1]}"
echo "OK results: a column per setting, $header"

# plan: two settings of one label are two candidates a per-linear grid cannot both hold
rc=0
"$Q" plan rcols --budget-bits 15.2 -o "$D/plan.yaml" >"$D/plan.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "plan over two gptq settings: exit $rc: $(cat "$D/plan.out")"
grep -qF "gptq was measured with 2 settings: gptq+damp=0.01, gptq+damp=0.1" "$D/plan.out" ||
  fail "the refusal names no labels: $(cat "$D/plan.out")"
grep -qF -- "--methods" "$D/plan.out" || fail "the refusal names no way out: $(cat "$D/plan.out")"
[ ! -e "$D/plan.yaml" ] || fail "a refused plan wrote $D/plan.yaml"
echo "OK plan refuses two settings: $(grep -F "settings" "$D/plan.out")"
# a bare label with two settings names them too
rc=0
"$Q" plan rcols --budget-bits 15.2 --methods rtn,gptq >"$D/plan.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -qF "gptq+damp=0.01, gptq+damp=0.1" "$D/plan.out" ||
  fail "--methods rtn,gptq: exit $rc: $(cat "$D/plan.out")"
echo "OK --methods rtn,gptq: $(grep -F "settings" "$D/plan.out")"

# --methods with a setting label: q by gptq with damp 0.1 in every block (15.2 bits per weight
# need q in FP4: the tiny model's q is 12288 of its 165888 block weights, 15.15 bits in NVFP4)
"$Q" plan rcols --budget-bits 15.2 --methods gptq+damp=0.1 -o "$D/plan.yaml" >"$D/plan.out" 2>&1 ||
  fail "plan --methods gptq+damp=0.1: $(cat "$D/plan.out")"
grep -qE "^  q +[0-9]+  gptq\+damp=0\.1 +nvfp4 " "$D/plan.out" ||
  fail "q is not planned by gptq+damp=0.1: $(cat "$D/plan.out")"
# (JSON writes 0.1 with 17 digits: 0.10000000000000001, which reads back as 0.1)
grep -qE '"damp":0\.1(0000000000000001)?,' "$D/plan.yaml" && grep -qF '"0.q":"gptq"' "$D/plan.yaml" ||
  fail "the grid does not hold gptq with damp 0.1: $(cat "$D/plan.yaml")"
"$Q" submit "$D/plan.yaml" --dry-run >"$D/submit.out" 2>&1 ||
  fail "submit refuses the plan's grid: $(cat "$D/submit.out")"
# a value typed in another form is the same setting: 0.10 and 1e-1 are the 0.1 measured
for typed in gptq+damp=0.10 gptq+damp=1e-1; do
  "$Q" plan rcols --budget-bits 15.2 --methods "$typed" >"$D/plan.out" 2>&1 ||
    fail "plan --methods $typed: $(cat "$D/plan.out")"
  grep -qE "^  q +[0-9]+  gptq\+damp=0\.1 +nvfp4 " "$D/plan.out" ||
    fail "q is not planned by gptq+damp=0.1 for --methods $typed: $(cat "$D/plan.out")"
done
# a well-formed setting the sweep did not measure has no results; a malformed one is refused
rc=0
"$Q" plan rcols --budget-bits 15.2 --methods gptq+damp=0.2 >"$D/plan.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -qF "has no component-mode results of method gptq+damp=0.2" "$D/plan.out" ||
  fail "--methods gptq+damp=0.2: exit $rc: $(cat "$D/plan.out")"
rc=0
"$Q" plan rcols --budget-bits 15.2 --methods gptq+damp=abc >"$D/plan.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -qF "malformed setting label 'gptq+damp=abc': 'damp=abc'" "$D/plan.out" &&
  ! grep -qF "no component-mode results" "$D/plan.out" ||
  fail "--methods gptq+damp=abc: exit $rc: $(cat "$D/plan.out")"
"$Q" plan rcols --budget-bits 15.2 --methods mr-gptq+search+damp=0.02 >"$D/plan.out" 2>&1 ||
  fail "plan --methods mr-gptq+search+damp=0.02: $(cat "$D/plan.out")"
grep -qF '"damp":0.02,' "$D/plan.out" && grep -qF '"scale_search":true' "$D/plan.out" ||
  fail "the grid does not hold mr-gptq+search with damp 0.02: $(cat "$D/plan.out")"
echo "OK plan --methods by setting label"

# a budget that keeps every linear bf16: nothing to validate, no grid written
rc=0
"$Q" plan rcols --budget-bits 16 --methods rtn -o "$D/p16.yaml" >"$D/plan.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "plan --budget-bits 16 -o: exit $rc: $(cat "$D/plan.out")"
grep -qF "the budget keeps every linear unquantized: nothing to validate" "$D/plan.out" ||
  fail "plan --budget-bits 16: $(cat "$D/plan.out")"
[ ! -e "$D/p16.yaml" ] || fail "plan --budget-bits 16 wrote $D/p16.yaml"
echo "OK plan --budget-bits 16: $(grep -F "nothing to validate" "$D/plan.out")"
echo "methods_results_columns: OK"
