#!/usr/bin/env bash
# Pipeline results (schema/130_pipeline_views.sql, cli/pipeline_results.c, the report's
# pipeline heatmap) on a private cluster: tests/cli/pipeline_data.py stores a pipeline
# experiment as the store holds one (train jobs of three recipes, 3 + 3 + 1 seeds, their final
# metrics; per trained model a baseline and 40 eval jobs naming it in spec.model.trained_by,
# with the job_deps edges), pseudo-random values from a seed; tests/cli/pipeline_check.py then
# computes from those rows what the views, `qsweep results` and the rendered report must hold,
# and compares. Also: a plain sweep in the same database still prints the sensitivity table.
# Usage: pipeline_results_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup pipeline_results_test pipeline
pg_db_start
"$Q" db migrate --db "$QSWEEP_DB" >/dev/null || fail "qsweep db migrate"
python3 "$SRC/tests/cli/pipeline_data.py" study 22 >"$D/data.sql"
psql "$QSWEEP_DB" -qX -v ON_ERROR_STOP=1 -f "$D/data.sql" >/dev/null || fail "loading the rows"
python3 "$SRC/tests/cli/pipeline_check.py" --db "$QSWEEP_DB" --qsweep "$Q" --experiment study \
  || fail "pipeline_check"
# the plain sweep next to it prints the sensitivity table, not the pipeline's
out=$("$Q" results plain-study) || fail "qsweep results plain-study"
grep -q "^experiment plain-study: 1 eval jobs measured (component 1)$" <<<"$out" \
  || fail "plain sweep: $out"
if grep -q "^experiment plain-study: pipeline" <<<"$out"; then fail "a plain sweep printed as a pipeline: $out"; fi
# --csv and --json: one row per (table, part, recipe), the same count as the view's groups
want=$(psql "$QSWEEP_DB" -qAtX -c "SELECT count(DISTINCT (shape, steps, lr, recipe, format,
         options, quantize, mode, part)) FROM v_pipeline_summary WHERE experiment = 'study'")
csv=$("$Q" results study --csv | tail -n +2 | wc -l)
[ "$csv" = "$want" ] || fail "--csv: $csv rows, want $want"
json=$("$Q" results study --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$json" = "$want" ] || fail "--json: $json rows, want $want"
echo "pipeline_results_test: ok ($want rows)"
