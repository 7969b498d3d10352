#!/usr/bin/env bash
# A worker whose --backend auto falls back to the CPU offers no GPU (worker/jobs/jobs_backend.h
# qw_jobs_backend_offer), end to end in a CUDA build on a private cluster: the worker sees two
# GPUs through a stand-in driver (fake_libcuda.c, on LD_LIBRARY_PATH) and cannot load its CUDA
# module ($QSWEEP_CUDA_MODULE names a missing file), so it runs on the CPU with
# cuda_unavailable; it announces no GPU and says why, the jobs of a grid that asks for a GPU
# wait while it runs a CPU grid's jobs queued after them, each result carrying
# backend_fallback.cuda_unavailable.
# Usage: fallback_offer_test.sh QSWEEP_BIN SOURCE_DIR FAKE_DRIVER_DIR
set -euo pipefail
Q=$1
SRC=$2
FAKE=$3
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup fallback_offer_test fboffer
PORT=$((36000 + ($$ % 4000)))
EP=tcp://127.0.0.1:$PORT
pg_db_start
tiny=("$SRC/experiments/tiny.yaml" --set 'sensitivity.quantize=[weights]' --set dataset.max_chunks=2
      --set 'sensitivity.formats=[nvfp4]')

"$Q" coordinator --bind "$EP" >"$D/coordinator.log" 2>&1 &
pids+=($!)
"$Q" submit "${tiny[@]}" --set name=fb-gpu --set '+resources={gpu_count: 1}' >"$D/submit.log" 2>&1 ||
  fail "submit fb-gpu"
# 3 chunks: other jobs than fb-gpu's (resources are not part of a job's key), its own baseline
"$Q" submit "${tiny[@]}" --set name=fb-cpu --set dataset.max_chunks=3 >>"$D/submit.log" 2>&1 ||
  fail "submit fb-cpu"
LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  QSWEEP_CUDA_MODULE=/nonexistent/libqsweep_cuda.so \
  "$Q" worker --connect "$EP" --id fb-a --threads 1 --backend auto >"$D/worker.log" 2>&1 &
pids+=($!)
wait_for "fb-cpu done" '[ "$(succeeded fb-cpu)" = 8 ]'
[ "$(psql_q "SELECT count(*) FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job
             JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'fb-gpu'")" = 0 ] ||
  fail "a job asking for a GPU ran on the worker that falls back to the CPU"
[ "$(psql_q "SELECT gpus FROM workers WHERE id = 'fb-a'")" = "[]" ] ||
  fail "fb-a announced GPUs: $(psql_q "SELECT gpus FROM workers WHERE id = 'fb-a'")"
note=$(psql_q "SELECT backend_note FROM workers WHERE id = 'fb-a'")
case "$note" in
  "CUDA backend not available: "*"; --backend auto runs on the CPU (cuda_unavailable): 2 GPUs not offered") ;;
  *) fail "fb-a's note: $note" ;;
esac
grep -q "GPU 0: Fake H200 0.*(not offered: jobs run on the CPU backend)" "$D/worker.log" ||
  fail "the worker did not see the stand-in driver's GPUs, or does not mark them not offered"
n=$(psql_q "SELECT count(*) FROM results r JOIN experiment_jobs ej ON ej.job = r.job
            JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'fb-cpu' AND r.final
            AND r.name = 'backend_fallback.cuda_unavailable'")
[ "$n" = 8 ] || fail "$n of fb-cpu's 8 results carry backend_fallback.cuda_unavailable"
echo "fallback_offer_test: ok"
