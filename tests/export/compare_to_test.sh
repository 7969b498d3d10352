#!/usr/bin/env bash
# compare_to end to end: the 3-block test model exported as a compressed-tensors NVFP4 checkpoint
# (qsweep export, the cumulative job over every block), then one `qsweep run` of a grid listing
# the source model with that RTN job and the export with `compare_to:` the source. The compare
# job scores the export (nothing quantized further) against the source's baseline: its
# perplexity, KL and top-1 must equal the RTN job's, digit for digit (the export holds the
# job's codes and scales, and the reader decodes them to the job's values: export_round_trip),
# and its weight SQNR per linear is reported for every block linear. The baseline's per-chunk
# progress points and `qsweep status` reading them are checked on the same run.
# Usage: compare_to_test.sh QSWEEP SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$SRC/tests/lib/pg.sh"
pg_test_setup compare_to_test compare
MODEL=$SRC/tests/engine/data/llama3_gqa
job=(--set sensitivity.formats=[nvfp4] --set sensitivity.quantize=[weights]
     --set sensitivity.modes=[cumulative])
"$Q" export "$SRC/experiments/tiny.yaml" "${job[@]}" --job "llama3_gqa nvfp4 weights cumulative 2" \
  -o "$D/tiny-nvfp4" >"$D/export.log" 2>&1 || fail "qsweep export"

cat >"$D/grid.yaml" <<YAML
name: tiny-compare
kind: sensitivity
models:
  - $MODEL
  - {path: $D/tiny-nvfp4, name: tiny-nvfp4, compare_to: $MODEL}
dataset:
  tokens: $SRC/experiments/data/gpl3.bytes.tokens
  ctx: 64
  max_chunks: 8
sensitivity:
  formats: [nvfp4]
  quantize: [weights]
  modes: [cumulative]
  metrics: [kl, ppl, sqnr, top1]
YAML
"$Q" submit "$D/grid.yaml" --dry-run >"$D/dry.log" 2>&1 || fail "qsweep submit --dry-run"
pg_db_start
"$Q" run "$D/grid.yaml" --workers 1 >"$D/run.log" 2>&1 || fail "qsweep run"

# the RTN job over every block (part 2) and the compare job, as the store holds them
val() { # WHERE METRIC
  psql_q "SELECT r.value FROM results r JOIN jobs j ON j.id = r.job
          WHERE $1 AND r.name = '$2' AND r.step = -1"
}
rtn="j.spec->>'mode' = 'cumulative' AND j.spec->>'part' = '2'"
cmp="j.spec ? 'reference_model'"
[ "$(psql_q "SELECT count(*) FROM jobs WHERE kind = 'baseline'")" = 1 ] ||
  fail "the source's baseline is not one job shared by the RTN and the compare job"
for m in ppl nll kl_mean kl_median kl_p99 kl_max top1; do
  a=$(val "$rtn" $m) b=$(val "$cmp" $m)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$m: RTN job $a, compare job $b"
  echo "OK $m $a"
done
n=$(psql_q "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job
            WHERE $cmp AND r.name LIKE 'weight\_sqnr\_db.%' AND r.step = -1
            AND r.value > 0 AND r.value < 100")
[ "$n" = 21 ] || fail "$n weight SQNR rows in (0, 100) dB, want 21 (7 linears x 3 blocks)"
# the same figures from the files alone (NumPy decodes the export: tools/export)
psql_q "SELECT substr(r.name, length('weight_sqnr_db.') + 1) || ' ' || r.value::text
        FROM results r JOIN jobs j ON j.id = r.job
        WHERE $cmp AND r.name LIKE 'weight\_sqnr\_db.%' AND r.step = -1" >"$D/sqnr.txt"
if python3 -c "import numpy" 2>/dev/null; then
  python3 "$SRC/tools/export/weight_sqnr_check.py" "$D/tiny-nvfp4" "$MODEL" "$D/sqnr.txt" ||
    fail "the weight SQNR differs from NumPy's"
else
  echo "compare_to_test: NumPy absent: the weight SQNR's independent check is skipped"
fi
ref=$(psql_q "SELECT j.spec->'reference_model'->>'path' FROM jobs j WHERE $cmp")
[ "$ref" = "$MODEL" ] || fail "the compare job's reference_model path: '$ref'"
"$Q" results tiny-compare >"$D/results.log" 2>&1 || fail "qsweep results"
cat "$D/results.log"
grep -q "^tiny-nvfp4  as-stored {}  weights  compare_to-wise   baseline (unquantized) ppl " \
  "$D/results.log" || fail "qsweep results has no compare_to table"
ppl4=$(printf '%.4f' "$(val "$cmp" ppl)")
grep -Eq "^  llama3_gqa +$ppl4 " "$D/results.log" || fail "qsweep results has no compare_to row of ppl $ppl4"
# the compare job's row is against the parent's baseline (schema/160): its delta is defined
base=$(psql_q "SELECT DISTINCT s.baseline_value FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id
               WHERE $cmp AND s.metric = 'ppl'")
rbase=$(val "j.kind = 'baseline'" ppl)
[ -n "$base" ] && [ "$base" = "$rbase" ] || fail "v_sensitivity pairs the compare job with '$base', not the parent's baseline ppl $rbase"
# the baseline reported each chunk as it went (worker/jobs QW_JOBS_BASELINE_CHUNKS): points
# 1..8 of 8 chunks, which `qsweep status` shows while the baseline runs (here: its state set
# back to running in the store, the run being over)
pts=$(psql_q "SELECT string_agg(r.step || '/' || r.value, ' ' ORDER BY r.step) FROM results r
              JOIN jobs j ON j.id = r.job WHERE j.kind = 'baseline' AND r.name = 'baseline_chunks'
              AND NOT r.final")
[ "$pts" = "1/8 2/8 3/8 4/8 5/8 6/8 7/8 8/8" ] || fail "the baseline's chunk points: '$pts'"
psql_q "UPDATE jobs SET state = 'running' WHERE kind = 'baseline'" >/dev/null
st=$("$Q" status tiny-compare 2>&1) || fail "qsweep status: $st"
grep -q "baseline chunk 8/8" <<<"$st" || fail "qsweep status does not show the baseline's chunks: $st"
echo "compare_to_test: ok ($n weight SQNR rows; status: baseline chunk 8/8)"
