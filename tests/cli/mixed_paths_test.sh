#!/usr/bin/env bash
# `qsweep results` flags an experiment whose jobs ran on more than one CPU numerics path
# (cli/results.c print_paths): an experiment on a private cluster, its first jobs run by a
# worker on the default fixed-order GEMM ("cpu_path.cpu-qsweep-fixed2"), the rest by one with
# QSWEEP_CPU_GEMM=openblas and OpenBLAS's Sandybridge kernels
# ("cpu_path.cpu-openblas-<version>-sandybridge"). Each job records its path
# (worker/jobs/jobs.c for baseline and eval jobs, worker/train/train_job.c for train jobs); the
# two GEMMs differ in the last digits. The coordinator pins an experiment to the path of its
# first job (coordinator/server/scheduler.h), so these grids say `numerics: any`, the one way
# to run an experiment on two paths. KIND is the experiment:
#   sweep     the tiny NVFP4 W4A16 sweep (8 jobs), scoring 64 chunks of the text (the grid has
#             8) so a job runs long enough for worker A to be stopped between jobs; the report
#             page, as headless Chromium renders it, must flag it too.
#   training  a tiny training grid (tiny shape, bf16 and nvfp4, seed 1: 2 runs of 12 steps on
#             the committed bytes-tokenized text); a run worker A leaves unfinished is
#             checkpointed at SIGTERM and finished by worker B, whose path it records; every
#             run has its row in v_numerics_path.
# Checked: no flag while one worker has run; then the flag, with each path's job count equal to
# that worker's succeeded attempts in SQL.
# Usage: mixed_paths_test.sh QSWEEP_BIN SOURCE_DIR [sweep|training]
set -euo pipefail
Q=$1
SRC=$2
KIND=${3:-sweep}
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup "mixed_paths_test $KIND" mixed
PORT=$((24000 + ($$ % 4000)))
EP=tcp://127.0.0.1:$PORT
pg_db_start
case "$KIND" in
sweep) # experiment, jobs, jobs worker A must finish before it is stopped
  EXP=tiny-mixed N=8 A_MIN=2
  submit=("$SRC/experiments/tiny.yaml" --set name=$EXP --set 'sensitivity.formats=[nvfp4]'
          --set 'sensitivity.quantize=[weights]' --set dataset.max_chunks=64 --set +numerics=any)
  ;;
training)
  EXP=tiny-train-mixed N=2 A_MIN=1
  cat >"$D/grid.yaml" <<YAML
name: $EXP
kind: training
numerics: any
training:
  shapes: [tiny]
  dataset: {tokens: $SRC/experiments/data/gpl3.bytes.tokens, ctx: 128, val_fraction: 0.05}
  recipes: [bf16, nvfp4]
  lrs: [0.003]
  seeds: [1]
  steps: 12
  batch: 8
  warmup: 2
  eval_every: 12
  eval_batches: 2
  log_every: 4
  checkpoint_dir: $D/ckpt
YAML
  submit=("$D/grid.yaml")
  ;;
*) fail "KIND is sweep or training, not '$KIND'" ;;
esac

"$Q" coordinator --bind "$EP" >"$D/coordinator.log" 2>&1 &
pids+=($!)
"$Q" submit "${submit[@]}" >"$D/submit.log" 2>&1 || fail "qsweep submit"

# --- worker A (the fixed-order GEMM): A_MIN jobs at least, then SIGTERM
env -u QSWEEP_CPU_GEMM "$Q" worker --connect "$EP" --id cpu-a --threads 1 >"$D/a.log" 2>&1 &
a=$!
pids+=($a)
# the limits of the waits below only bound a hang, far past a loaded machine's time
for _ in $(seq 1 6000); do
  [ "$(succeeded "$EXP")" -ge $A_MIN ] 2>/dev/null && break
  sleep 0.1
done
[ "$(succeeded "$EXP")" -ge $A_MIN ] || fail "worker A finished $(succeeded "$EXP") jobs in 600 s, fewer than $A_MIN"
kill -TERM "$a"
wait "$a" || true
out=$("$Q" results $EXP) || fail "qsweep results after worker A"
if grep -q "mixed numerics" <<<"$out"; then fail "a one-path experiment is flagged: $out"; fi
if grep -q '"numerics_path": "' <<<"$out"; then fail "a one-path experiment's options name its path: $out"; fi

# --- worker B (OpenBLAS, Sandybridge kernels): the rest
QSWEEP_CPU_GEMM=openblas OPENBLAS_CORETYPE=Sandybridge "$Q" worker --connect "$EP" --id cpu-b --threads 1 \
  --exit-when-idle 3 >"$D/b.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 12000); do
  [ "$(succeeded "$EXP")" = $N ] && break
  sleep 0.1
done
[ "$(succeeded "$EXP")" = $N ] || fail "only $(succeeded "$EXP") of $N jobs succeeded within 1200 s"

path_of() { psql_q "SELECT DISTINCT substr(r.name, 10) FROM results r JOIN attempts a
                    ON a.job = r.job AND a.attempt = r.attempt
                    WHERE r.name LIKE 'cpu\_path.%' AND a.worker = '$1'"; }
jobs_of() { psql_q "SELECT count(*) FROM attempts WHERE worker = '$1' AND outcome = 'succeeded'"; }
pa=$(path_of cpu-a) pb=$(path_of cpu-b)
case "$pa" in cpu-qsweep-fixed2) ;; *) fail "worker A's path '$pa'" ;; esac
case "$pb" in cpu-openblas-*-sandybridge) ;; *) fail "worker B's path '$pb'" ;; esac
out=$("$Q" results $EXP) || fail "qsweep results"
grep -q "^mixed numerics: the jobs of experiment $EXP ran on 2 paths" <<<"$out" \
  || fail "no mixed-numerics flag: $out"
na=$(jobs_of cpu-a) nb=$(jobs_of cpu-b)
echo "$out" | grep -Eq "^  $pa: $na jobs?\$" || fail "'$pa: $na' not in: $out"
echo "$out" | grep -Eq "^  $pb: $nb jobs?\$" || fail "'$pb: $nb' not in: $out"
[ $((na + nb)) = $N ] || fail "A $na + B $nb jobs, want $N"
if [ "$KIND" = sweep ]; then
  # each path's jobs are a table of their own: every table header names one path, and the
  # rows under the headers of a path number that path's eval jobs
  for p in "$pa" "$pb"; do
    grep -q "\"numerics_path\": \"$p\"" <<<"$out" || fail "no table of path $p in: $out"
  done
  heads=$(echo "$out" | grep -c "baseline (unquantized)")
  named=$(echo "$out" | grep "baseline (unquantized)" | grep -c '"numerics_path": ')
  [ "$heads" = "$named" ] || fail "$heads tables, $named of them of one numerics path: $out"
  grep -q "no table ranks one path's jobs against another's" <<<"$out" ||
    fail "the flag does not say the tables are per path: $out"
  rows=$("$Q" results $EXP --csv | grep -c '""numerics_path""') || true
  evals=$(psql_q "SELECT count(*) FROM jobs j JOIN experiment_jobs ej ON ej.job = j.id
                  JOIN experiments e ON e.id = ej.experiment WHERE e.name = '$EXP' AND j.kind = 'eval'")
  [ "$rows" = "$evals" ] || fail "$rows CSV rows name their path, want every eval job's $evals"
fi

if [ "$KIND" = training ]; then
  rows=$(psql_q "SELECT count(*) FROM v_numerics_path n JOIN jobs j ON j.id = n.job_id
                 WHERE j.kind = 'train'")
  [ "$rows" = $N ] || fail "v_numerics_path holds $rows train jobs, want $N"
else
  # --- the report page flags it too: the DOM headless Chromium renders from it
  "$Q" report $EXP -o "$D/report.html" >"$D/report.log" 2>&1 || fail "qsweep report"
  HOME=$D /usr/bin/chromium --headless --no-sandbox --disable-gpu --no-first-run \
    --virtual-time-budget=10000 --dump-dom "file://$D/report.html" >"$D/dom.html" 2>"$D/chromium.log" \
    || fail "chromium on the report"
  grep -q "mixed numerics: the jobs ran on 2 numerics paths" "$D/dom.html" \
    || fail "the rendered report does not flag the mixed paths"
  for p in "$pa" "$pb"; do grep -q "<td[^>]*>$p</td>" "$D/dom.html" || fail "report: no cell $p"; done
fi
echo "mixed_paths_test $KIND: ok: $pa $na jobs, $pb $nb jobs"
