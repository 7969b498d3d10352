#!/usr/bin/env bash
# A GPTQ job exported and evaluated, end to end through the worker: `qsweep run` of a grid with
# method gptq (NVFP4 weights, cumulative over the 3 blocks of the test model, calibrated on the
# last 4 chunks), `qsweep export` of its job over every block (GPTQ applied again by the
# exporter, its codes and scales written), then a `qsweep run` of the export with `compare_to:`
# the source. The compare job's perplexity, NLL, KL and top-1, as the store holds them, must
# equal the GPTQ job's: the worker's GPTQ (its model cache and prefix cache, the worker's
# threads) and the export's are the same weights, and the checkpoint decodes to them.
# Usage: gptq_run_test.sh QSWEEP SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$SRC/tests/lib/pg.sh"
pg_test_setup gptq_run_test gptq-run
MODEL=$SRC/tests/engine/data/llama3_gqa
DATA="  tokens: $SRC/experiments/data/gpl3.bytes.tokens
  ctx: 64
  max_chunks: 8"
cat >"$D/gptq.yaml" <<YAML
name: tiny-gptq
kind: sensitivity
models:
  - $MODEL
dataset:
$DATA
  calibration: {chunks: 4}
sensitivity:
  formats: [nvfp4]
  method: [gptq]
  quantize: [weights]
  modes: [cumulative]
  metrics: [kl, ppl, top1]
YAML
"$Q" export "$D/gptq.yaml" --job "llama3_gqa nvfp4 weights cumulative 2 method gptq" \
  -o "$D/tiny-gptq-nvfp4" >"$D/export.log" 2>&1 || fail "qsweep export: $(cat "$D/export.log")"
cat >"$D/compare.yaml" <<YAML
name: tiny-gptq-compare
kind: sensitivity
models:
  - {path: $D/tiny-gptq-nvfp4, name: tiny-gptq-nvfp4, compare_to: $MODEL}
dataset:
$DATA
sensitivity:
  formats: [nvfp4]
  quantize: [weights]
  modes: [cumulative]
  metrics: [kl, ppl, top1]
YAML
pg_db_start
"$Q" run "$D/gptq.yaml" --workers 1 >"$D/run.log" 2>&1 || fail "qsweep run (gptq): $(tail "$D/run.log")"
"$Q" run "$D/compare.yaml" --workers 1 >"$D/run2.log" 2>&1 ||
  fail "qsweep run (compare): $(tail "$D/run2.log")"
val() { # WHERE METRIC
  psql_q "SELECT r.value FROM results r JOIN jobs j ON j.id = r.job
          WHERE $1 AND r.name = '$2' AND r.step = -1"
}
gptq="j.spec->>'method' = 'gptq' AND j.spec->>'mode' = 'cumulative' AND j.spec->>'part' = '2'"
cmp="j.spec ? 'reference_model'"
for m in ppl nll kl_mean kl_median kl_p99 kl_max top1; do
  a=$(val "$gptq" $m) b=$(val "$cmp" $m)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$m: GPTQ job $a, its export $b"
  echo "OK $m $a"
done
echo "gptq_run_test: ok (the export of the GPTQ job scores as the job did)"
