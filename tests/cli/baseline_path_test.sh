#!/usr/bin/env bash
# v_sensitivity pairs an eval job with the baseline of its own numerics path: three
# experiments of the same tiny grid on a private cluster, one without `numerics`, one with
# `numerics: cpu` and one with `numerics: cpu-qsweep-fixed2`, run in that order. Their baseline
# jobs are three jobs (the path is in the job key, kinds/spec.h), each newer than the one
# before; each experiment's deltas must be against its own baseline, never the newest of
# another path (on a GPU path that baseline's perplexity differs by the BF16 activations).
# Usage: baseline_path_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup baseline_path_test bpath
pg_db_start
tiny=("$SRC/experiments/tiny.yaml" --set 'sensitivity.quantize=[weights]' --set dataset.max_chunks=2
      --set 'sensitivity.formats=[nvfp4]' --set 'sensitivity.modes=[cumulative]'
      --set 'sensitivity.metrics=[ppl]')
for e in "bp-none" "bp-cpu +numerics=cpu" "bp-fixed +numerics=cpu-qsweep-fixed2"; do
  set -- $e
  "$Q" run "${tiny[@]}" --set name=$1 ${2:+--set "$2"} --workers 1 --db "$QSWEEP_DB" \
    >"$D/$1.log" 2>&1 || fail "qsweep run $1: $(tail -3 "$D/$1.log")"
done
[ "$(psql_q "SELECT count(*) FROM jobs WHERE kind = 'baseline'")" = 3 ] ||
  fail "want 3 baseline jobs, one per path: $(psql_q "SELECT count(*) FROM jobs WHERE kind = 'baseline'")"
rows=$(psql_q "SELECT count(*) FROM v_sensitivity WHERE experiment LIKE 'bp-%' AND metric = 'ppl'")
[ "$rows" = 9 ] || fail "want 9 ppl rows (3 experiments x 3 cumulative jobs), got $rows"
bad=$(psql_q "SELECT string_agg(s.experiment || ' ' || s.part, ', ') FROM v_sensitivity s
              JOIN jobs j ON j.id = s.job_id JOIN jobs b ON b.id = s.baseline_job_id
              WHERE s.experiment LIKE 'bp-%' AND s.metric = 'ppl' AND coalesce(nullif(j.spec ->> 'numerics', 'any'), '')
                    <> coalesce(nullif(b.spec ->> 'numerics', 'any'), '')")
[ -z "$bad" ] || fail "eval jobs paired with the baseline of another path: $bad"
[ "$(psql_q "SELECT count(*) FROM v_sensitivity WHERE experiment LIKE 'bp-%' AND metric = 'ppl'
             AND baseline_job_id IS NULL")" = 0 ] ||
  fail "an eval job without its baseline"
echo "baseline_path_test: ok"
