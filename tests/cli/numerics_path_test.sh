#!/usr/bin/env bash
# The numerics path in scheduling (coordinator/server/scheduler.h qc_sched_on_path), on a
# private cluster with real workers of this build (no CUDA):
#   - a worker started with --backend auto says in `qsweep workers` and `qsweep status` that
#     it runs on the CPU and why, and every result of its jobs, eval and train, carries
#     backend_fallback.<why>;
#   - a grid's `numerics: cuda` waits, with `qsweep status` naming the path no worker offers,
#     while the worker runs the jobs queued behind it; a bad `numerics` is refused at its key;
#   - an experiment without `numerics` is pinned to the path of its first job, in
#     experiment_numerics; a restarted coordinator reads the pin from the store and hands the
#     experiment's jobs to no worker of another path (an OpenBLAS worker runs a `numerics: cpu`
#     experiment meanwhile), until a worker of the pinned path comes.
# With MODE run instead: `qsweep run` of a `numerics: cuda` grid on this machine's CPU workers
# stops with exit 5, saying which path its jobs wait for, and leaves them pending, unattempted;
# and `qsweep worker --backend cuda` refuses to start in this build.
# Usage: QSWEEP_TEST_CUDA_BUILD=0|1 numerics_path_test.sh QSWEEP_BIN SOURCE_DIR [scheduling|run]
# (1: this qsweep was built with its CUDA module, so a worker falls back for want of a GPU, not
# of the module; a machine with a GPU skips the test, whose workers must run on the CPU).
set -euo pipefail
Q=$1
SRC=$2
if [ "${QSWEEP_TEST_CUDA_BUILD:-0}" = 1 ]; then
  if nvidia-smi -L >/dev/null 2>&1; then
    echo "numerics_path_test: a GPU is visible, and this test needs workers that fall back to the CPU: skipped"
    exit 77
  fi
  note="the worker offers no GPU" why=no_gpu cuda_refusal="offers no GPU"
else
  note="this build has no CUDA backend" why=no_cuda_build cuda_refusal="this build has no CUDA backend"
fi
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup numerics_path_test npath
PORT=$((28000 + ($$ % 4000)))
EP=tcp://127.0.0.1:$PORT
pg_db_start
tiny=("$SRC/experiments/tiny.yaml" --set 'sensitivity.quantize=[weights]' --set dataset.max_chunks=2)
if [ "${3:-scheduling}" = run ]; then
  rc=0
  "$Q" run "${tiny[@]}" --set name=np-run --set 'sensitivity.formats=[nvfp4]' --set +numerics=cuda \
    --workers 1 --db "$QSWEEP_DB" >"$D/run.log" 2>&1 || rc=$?
  [ $rc = 5 ] || fail "qsweep run of numerics: cuda on CPU workers exited $rc, want 5"
  grep -q "8 pending jobs waiting: no worker of this run on path cuda (the grid's numerics)" "$D/run.log" ||
    fail "qsweep run does not say which path its jobs wait for"
  [ "$(psql_q "SELECT count(*) FROM attempts")" = 0 ] || fail "a numerics: cuda job ran on the CPU"
  [ "$(psql_q "SELECT count(*) FROM jobs WHERE state = 'pending'")" = 8 ] || fail "jobs not left pending"
  # --backend cuda in this build refuses to start (exit 2, bad input) rather than serve them on the CPU
  rc=0
  "$Q" worker --connect "$EP" --id cuda-w --backend cuda >"$D/cuda.log" 2>&1 || rc=$?
  [ $rc = 2 ] || fail "qsweep worker --backend cuda without CUDA exited $rc, want 2"
  grep -q "$cuda_refusal" "$D/cuda.log" || fail "--backend cuda: no reason given"
  # one reason, once: without the module the GPU probe's "no CUDA in this build" said it again
  [ "$(grep -o "built without nvcc" "$D/cuda.log" | wc -l)" -le 1 ] ||
    fail "--backend cuda: the reason is repeated: $(cat "$D/cuda.log")"
  # a misspelt --backend is a usage error naming the choices, and nothing about GPUs after it
  rc=0
  "$Q" worker --connect "$EP" --id typo-w --backend gpu >"$D/typo.log" 2>&1 || rc=$?
  [ $rc = 1 ] || fail "qsweep worker --backend gpu exited $rc, want 1"
  grep -q '^qsweep worker: --backend "gpu": expected auto, cpu or cuda$' "$D/typo.log" ||
    fail "--backend gpu: $(cat "$D/typo.log")"
  echo "numerics_path_test run: ok"
  exit 0
fi
attempts_of() { psql_q "SELECT count(a.*) FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job
                        JOIN experiments e ON e.id = ej.experiment WHERE e.name = '$1'"; }

"$Q" coordinator --bind "$EP" >"$D/coordinator.log" 2>&1 &
coord=$!
pids+=($coord)
"$Q" submit "${tiny[@]}" --set name=np-cuda --set 'sensitivity.formats=[nvfp4]' --set +numerics=cuda \
  >"$D/submit.log" 2>&1 || fail "submit np-cuda"
"$Q" submit "${tiny[@]}" --set name=np-first --set 'sensitivity.formats=[nvfp4]' \
  >>"$D/submit.log" 2>&1 || fail "submit np-first"
if out=$("$Q" submit "${tiny[@]}" --set name=np-bad --set +numerics=gpu 2>&1); then
  fail "numerics: gpu accepted: $out"
fi
grep -q "numerics: 'gpu' is not a numerics path" <<<"$out" || fail "numerics: gpu: $out"
[ "$(psql_q "SELECT count(*) FROM experiments WHERE name = 'np-bad'")" = 0 ] || fail "np-bad stored"

# --- worker A: --backend auto in a build without CUDA
"$Q" worker --connect "$EP" --id cpu-a --threads 1 --backend auto >"$D/a.log" 2>&1 &
a=$!
pids+=($a)
wait_for "np-first done" '[ "$(succeeded np-first)" = 8 ]'
[ "$(attempts_of np-cuda)" = 0 ] || fail "np-cuda (numerics: cuda) ran on the CPU worker"
fixed=cpu-qsweep-fixed2
[ "$(pin_of np-first)" = $fixed ] || fail "np-first pinned to '$(pin_of np-first)', want $fixed"
[ -z "$(pin_of np-cuda)" ] || fail "np-cuda pinned to '$(pin_of np-cuda)' without a job run"
w=$("$Q" workers) || fail "qsweep workers"
echo "$w" | grep "^cpu-a " | grep "| $fixed (--backend auto on the CPU: $note" >/dev/null ||
  fail "qsweep workers: no path and fallback in the row of cpu-a: $w"
st=$("$Q" status) || fail "qsweep status"
grep -q "^worker cpu-a: numerics path $fixed: --backend auto runs on the CPU: $note" <<<"$st" ||
  fail "qsweep status does not say cpu-a falls back: $st"
grep -q "^np-cuda: 8 pending jobs waiting: no worker on path cuda (its grid asks for numerics: cuda)" <<<"$st" ||
  fail "qsweep status does not name np-cuda's missing path: $st"
n=$(psql_q "SELECT count(DISTINCT r.job) FROM results r JOIN experiment_jobs ej ON ej.job = r.job
            JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'np-first' AND r.final
            AND r.name = 'backend_fallback.$why'")
[ "$n" = 8 ] || fail "$n of np-first's 8 results carry backend_fallback.$why"
# a training job on the same worker says so too (2 steps of the tiny shape, committed tokens)
cat >"$D/train.yaml" <<YAML
name: np-train
kind: training
training:
  shapes: [tiny]
  dataset: {tokens: $SRC/experiments/data/gpl3.bytes.tokens, ctx: 32, val_fraction: 0.05}
  recipes: [bf16]
  lrs: [0.003]
  seeds: [1]
  steps: 2
  batch: 2
  eval_every: 2
  eval_batches: 1
  checkpoint_dir: $D/ckpt
YAML
"$Q" submit "$D/train.yaml" >>"$D/submit.log" 2>&1 || fail "submit np-train"
wait_for "np-train done" '[ "$(succeeded np-train)" = 1 ]'
n=$(psql_q "SELECT count(*) FROM results r JOIN experiment_jobs ej ON ej.job = r.job
            JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'np-train' AND r.final
            AND r.name = 'backend_fallback.$why'")
[ "$n" = 1 ] || fail "np-train's result does not carry backend_fallback.$why"
kill -TERM $a
wait $a || true
# its BYE stored (left_at), so no status below counts it as a live worker of the fixed path
for _ in $(seq 1 300); do
  [ "$(psql_q "SELECT left_at IS NOT NULL FROM workers WHERE id = 'cpu-a'")" = t ] && break
  sleep 0.1
done
[ "$(psql_q "SELECT left_at IS NOT NULL FROM workers WHERE id = 'cpu-a'")" = t ] ||
  fail "worker cpu-a is not marked left 30 s after its SIGTERM"

# --- a standby coordinator: np-second pinned to the fixed path in the store (as a coordinator
# that pinned it and stopped would leave it), then an OpenBLAS worker
kill -TERM $coord
wait $coord || true
"$Q" submit "${tiny[@]}" --set name=np-second --set 'sensitivity.formats=[mxfp4]' \
  >>"$D/submit.log" 2>&1 || fail "submit np-second"
psql_q "INSERT INTO experiment_numerics (experiment, path)
        SELECT id, '$fixed' FROM experiments WHERE name = 'np-second'" >/dev/null
"$Q" coordinator --bind "$EP" >"$D/coordinator2.log" 2>&1 &
pids+=($!)
"$Q" submit "${tiny[@]}" --set name=np-cpu --set 'sensitivity.formats=[mxfp4]' --set +numerics=cpu \
  >>"$D/submit.log" 2>&1 || fail "submit np-cpu"
QSWEEP_CPU_GEMM=openblas "$Q" worker --connect "$EP" --id cpu-b --threads 1 >"$D/b.log" 2>&1 &
b=$!
pids+=($b)
wait_for "np-cpu done" '[ "$(succeeded np-cpu)" = 8 ]'
case "$(pin_of np-cpu)" in cpu-openblas-*) ;; *) fail "np-cpu pinned to '$(pin_of np-cpu)'" ;; esac
[ "$(psql_q "SELECT count(*) FROM attempts WHERE worker = 'cpu-b' AND job IN (SELECT ej.job FROM
     experiment_jobs ej JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'np-second')")" = 0 ] ||
  fail "the OpenBLAS worker ran a job of np-second, pinned to $fixed"
st=$("$Q" status np-second) || fail "qsweep status np-second"
grep -q "^np-second: 7 pending jobs waiting: no worker on path $fixed (the experiment is pinned to it" <<<"$st" ||
  fail "qsweep status does not name np-second's pin: $st"
# np-shared: the same grid, so every job is np-second's and follows the older experiment's pin
# (the scheduler's rule), which its status names though np-shared itself has no pin row
"$Q" submit "${tiny[@]}" --set name=np-shared --set 'sensitivity.formats=[mxfp4]' \
  >>"$D/submit.log" 2>&1 || fail "submit np-shared"
st=$("$Q" status np-shared) || fail "qsweep status np-shared"
grep -q "^np-shared: 7 pending jobs waiting: no worker on path $fixed (its jobs are also experiment np-second's, pinned to it" <<<"$st" ||
  fail "qsweep status does not say np-shared's jobs follow np-second's pin: $st"
kill -TERM $b
wait $b || true
"$Q" worker --connect "$EP" --id cpu-a --threads 1 --exit-when-idle 3 >"$D/a2.log" 2>&1 &
pids+=($!)
wait_for "np-second done" '[ "$(succeeded np-second)" = 8 ]'
ran=$(psql_q "SELECT string_agg(DISTINCT a.worker, ',') FROM attempts a JOIN experiment_jobs ej
              ON ej.job = a.job JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'np-second'")
[ "$ran" = cpu-a ] || fail "np-second's jobs ran on '$ran', want cpu-a alone"
[ "$(attempts_of np-cuda)" = 0 ] || fail "np-cuda ran on a CPU worker"
echo "numerics_path_test: ok"
