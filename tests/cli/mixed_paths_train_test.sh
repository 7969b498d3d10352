#!/usr/bin/env bash
# `qsweep results` flags a training experiment whose runs trained on more than one CPU numerics
# path, as it flags a sweep (cli/results.c print_paths under the training table): a tiny
# training grid (tiny shape, bf16 and nvfp4, seed 1: 2 runs of 12 steps on the committed
# bytes-tokenized text) on a private cluster, its first runs trained by a worker with
# OpenBLAS's Haswell kernels, the rest by one with its Sandybridge kernels. Each run records
# "cpu_path.cpu-openblas-<version>-<core>" (worker/train/train_job.c) with its final metrics,
# from the worker of its succeeded attempt (a run worker A leaves unfinished is checkpointed at
# SIGTERM and finished by worker B, whose path it records).
# Checked: no flag while one worker has trained; then the flag, with each path's run count
# equal to that worker's succeeded attempts in SQL; and v_numerics_path holds one row per run.
# Usage: mixed_paths_train_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup mixed_paths_train_test mixedtr
PORT=$((24000 + ($$ % 4000)))
EP=tcp://127.0.0.1:$PORT
pg_db_start
succeeded() {
  psql_q "SELECT succeeded FROM v_experiment_progress WHERE experiment = 'tiny-train-mixed'"
}

cat >"$D/grid.yaml" <<YAML
name: tiny-train-mixed
kind: training
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
"$Q" coordinator --bind "$EP" >"$D/coordinator.log" 2>&1 &
pids+=($!)
"$Q" submit "$D/grid.yaml" >"$D/submit.log" 2>&1 || fail "qsweep submit: $(cat "$D/submit.log")"

# --- worker A (Haswell kernels): at least one run, then SIGTERM
OPENBLAS_CORETYPE=Haswell "$Q" worker --connect "$EP" --id cpu-a --threads 1 >"$D/a.log" 2>&1 &
a=$!
pids+=($a)
for _ in $(seq 1 1200); do
  [ "$(succeeded)" -ge 1 ] 2>/dev/null && break
  sleep 0.1
done
[ "$(succeeded)" -ge 1 ] || fail "worker A finished no run in 120 s"
kill -TERM "$a"
wait "$a" || true
out=$("$Q" results tiny-train-mixed) || fail "qsweep results after worker A"
if echo "$out" | grep -q "mixed numerics"; then fail "a one-path training is flagged: $out"; fi

# --- worker B (Sandybridge kernels): the rest
OPENBLAS_CORETYPE=Sandybridge "$Q" worker --connect "$EP" --id cpu-b --threads 1 \
  --exit-when-idle 3 >"$D/b.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 2400); do
  [ "$(succeeded)" = 2 ] && break
  sleep 0.1
done
[ "$(succeeded)" = 2 ] || fail "only $(succeeded) of 2 runs succeeded"

path_of() { psql_q "SELECT DISTINCT substr(r.name, 10) FROM results r JOIN attempts a
                    ON a.job = r.job AND a.attempt = r.attempt
                    WHERE r.name LIKE 'cpu\_path.%' AND a.worker = '$1'"; }
jobs_of() { psql_q "SELECT count(*) FROM attempts WHERE worker = '$1' AND outcome = 'succeeded'"; }
pa=$(path_of cpu-a) pb=$(path_of cpu-b)
case "$pa" in cpu-openblas-*-haswell) ;; *) fail "worker A's path '$pa'" ;; esac
case "$pb" in cpu-openblas-*-sandybridge) ;; *) fail "worker B's path '$pb'" ;; esac
rows=$(psql_q "SELECT count(*) FROM v_numerics_path n JOIN jobs j ON j.id = n.job_id
               WHERE j.kind = 'train'")
[ "$rows" = 2 ] || fail "v_numerics_path holds $rows train jobs, want 2"
out=$("$Q" results tiny-train-mixed) || fail "qsweep results"
echo "$out" | grep -q "^mixed numerics: the jobs of experiment tiny-train-mixed ran on 2 paths" \
  || fail "no mixed-numerics flag: $out"
na=$(jobs_of cpu-a) nb=$(jobs_of cpu-b)
echo "$out" | grep -Eq "^  $pa: $na jobs?\$" || fail "'$pa: $na' not in: $out"
echo "$out" | grep -Eq "^  $pb: $nb jobs?\$" || fail "'$pb: $nb' not in: $out"
[ $((na + nb)) = 2 ] || fail "A $na + B $nb runs, want 2"
echo "mixed_paths_train_test: ok: of 2 runs, $na on $pa and $nb on $pb"
