#!/usr/bin/env bash
# qsweep unpin (coordinator/store/store.h qc_store_unpin) and the one vocabulary of numerics paths
# (schema/200_numerics_unpin.sql), on a private cluster with real workers of this build:
#   - while a job of a pinned experiment runs on the pinned path (its worker stopped with
#     SIGSTOP mid-job), the running coordinator refuses the unpin, naming the job's worker, and
#     the pin stays;
#   - once nothing runs, the coordinator removes the pin, and the experiment's next job pins it
#     again to the path of the worker that takes it (an OpenBLAS worker);
#   - every attempt records its worker's announced path (attempts.numerics_path), and
#     v_numerics_path.worker_path gives it beside the result's path, so results join pins;
#   - without a coordinator the pin is removed at once, refused while the store still marks an
#     attempt of it running on the pinned path; an experiment without a pin says so, an
#     unknown one exits 2.
# Usage: unpin_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup unpin_test unpin
PORT=$((32000 + ($$ % 4000)))
EP=tcp://127.0.0.1:$PORT
pg_db_start
# 64 chunks: each job runs long enough (about a second) to be caught running
tiny=("$SRC/experiments/tiny.yaml" --set 'sensitivity.quantize=[weights]' --set dataset.max_chunks=64)
fixed=cpu-qsweep-fixed2
running_of() { psql_q "SELECT count(*) FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job
                       JOIN experiments e ON e.id = ej.experiment
                       WHERE e.name = '$1' AND a.outcome = 'running'"; }

"$Q" coordinator --bind "$EP" --lease-ms 120000 >"$D/coordinator.log" 2>&1 &
coord=$!
pids+=($coord)
"$Q" submit "${tiny[@]}" --set name=np-u --set 'sensitivity.formats=[nvfp4]' >"$D/submit.log" 2>&1 ||
  fail "submit np-u"
out=$("$Q" unpin np-u) || fail "unpin of an experiment never dispatched: $out"
[ "$out" = "experiment np-u: not pinned" ] || fail "unpin before any job: $out"

# --- worker A on the fixed path, stopped while a job of np-u runs on it
"$Q" worker --connect "$EP" --id cpu-a --threads 1 --no-supervise >"$D/a.log" 2>&1 &
a=$!
pids+=($a)
# stopped: the worker is stopped right after an ASSIGN (the coordinator logs it as it sends it),
# and the coordinator's last job line after a second is still that assignment: no result came
stopped=0
assigned() { grep -c -- "-> worker cpu-a$" "$D/coordinator.log" || true; }
last_job_line() { grep -o "job [0-9]* attempt [0-9]* .*" "$D/coordinator.log" | tail -1; }
seen=0
for _ in $(seq 1 20000); do
  now=$(assigned)
  if [ "$now" -gt "$seen" ]; then
    seen=$now
    kill -STOP $a
    sleep 1
    case "$(last_job_line)" in *"-> worker cpu-a") stopped=1; break ;; esac
    kill -CONT $a
  fi
  grep -q "job 8 attempt 1 succeeded" "$D/coordinator.log" && break
  sleep 0.005
done
# a stopped worker ignores the SIGTERM the cleanup sends: continue it first
fail_stopped() {
  kill -CONT $a 2>/dev/null || true
  fail "$@"
}
[ $stopped = 1 ] || fail_stopped "never caught a job of np-u running on cpu-a"
[ "$(pin_of np-u)" = $fixed ] || fail_stopped "np-u pinned to '$(pin_of np-u)', want $fixed"
rc=0
out=$("$Q" unpin np-u 2>&1) || rc=$?
[ $rc = 4 ] || fail_stopped "unpin while a job runs on the pinned path exited $rc, want 4: $out"
grep -q "^qsweep unpin: experiment 'np-u': job [0-9]* runs on the pinned path $fixed (worker cpu-a)" <<<"$out" ||
  fail_stopped "the refusal does not name the running job's path and worker: $out"
[ "$(pin_of np-u)" = $fixed ] || fail_stopped "a refused unpin removed the pin"
[ "$(psql_q "SELECT outcome FROM numerics_unpin_requests ORDER BY id DESC LIMIT 1")" = refused ] ||
  fail_stopped "the request is not answered refused"
# A leaves: its job goes back to the queue (preempted), nothing of np-u runs any more
kill -CONT $a
kill -TERM $a
wait $a || true
wait_for "no attempt of np-u running after cpu-a left" '[ "$(running_of np-u)" = 0 ]'
done_by_a=$(succeeded np-u)
[ "$done_by_a" -lt 8 ] || fail "cpu-a ran every job of np-u before it left"
out=$("$Q" unpin np-u) || fail "unpin with nothing running: $out"
[ "$out" = "experiment np-u: unpinned from $fixed" ] || fail "unpin: $out"
[ -z "$(pin_of np-u)" ] || fail "np-u still pinned to '$(pin_of np-u)' after the unpin"
grep -q "experiment [0-9]* unpinned from numerics path $fixed" "$D/coordinator.log" ||
  fail "the coordinator does not log the unpin"

# --- worker B on OpenBLAS takes the rest: the experiment is pinned again, to B's path
QSWEEP_CPU_GEMM=openblas "$Q" worker --connect "$EP" --id cpu-b --threads 1 >"$D/b.log" 2>&1 &
pids+=($!)
wait_for "np-u done" '[ "$(succeeded np-u)" = 8 ]'
case "$(pin_of np-u)" in cpu-openblas-*) ;; *) fail "np-u pinned again to '$(pin_of np-u)'" ;; esac
# each attempt's path is its worker's, and v_numerics_path gives it beside the result's path
bad=$(psql_q "SELECT count(*) FROM attempts a WHERE a.numerics_path IS DISTINCT FROM
              (SELECT w.numerics_path FROM workers w WHERE w.id = a.worker)")
[ "$bad" = 0 ] || fail "$bad attempts do not record their worker's path"
[ "$(psql_q "SELECT count(*) FROM attempts WHERE worker = 'cpu-a' AND numerics_path = '$fixed'")" -ge 1 ] ||
  fail "no attempt of cpu-a records $fixed"
n=$(psql_q "SELECT count(*) FROM v_numerics_path n JOIN experiment_jobs ej ON ej.job = n.job_id
            JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'np-u'
            AND n.worker_path = n.path")
[ "$n" = 8 ] || fail "$n of np-u's 8 jobs have worker_path = path in v_numerics_path (CPU paths are one text)"
# the jobs that ran on the pinned path, by a join of results to the pin
n=$(psql_q "SELECT count(*) FROM v_numerics_path n JOIN experiment_jobs ej ON ej.job = n.job_id
            JOIN experiment_numerics en ON en.experiment = ej.experiment AND en.path = n.worker_path
            JOIN experiments e ON e.id = ej.experiment WHERE e.name = 'np-u'")
[ "$n" = $((8 - done_by_a)) ] || fail "$n jobs of np-u join its pin, want the $((8 - done_by_a)) cpu-b ran"

# --- no coordinator: the store is changed here
kill -TERM $coord
wait $coord || true
psql_q "UPDATE attempts SET outcome = 'running', ended_at = NULL WHERE id = (SELECT max(a.id)
        FROM attempts a WHERE a.worker = 'cpu-b')" >/dev/null
rc=0
out=$("$Q" unpin np-u 2>&1) || rc=$?
[ $rc = 4 ] || fail "unpin with an attempt left running exited $rc, want 4: $out"
grep -q "1 attempt(s) of its jobs are marked running on cpu-openblas-.* (worker cpu-b)" <<<"$out" ||
  fail "the refusal without a coordinator: $out"
psql_q "UPDATE attempts SET outcome = 'succeeded', ended_at = now() WHERE outcome = 'running'" >/dev/null
out=$("$Q" unpin np-u) || fail "unpin without a coordinator: $out"
case "$out" in "experiment np-u: unpinned from cpu-openblas-"*) ;; *) fail "unpin: $out" ;; esac
[ -z "$(pin_of np-u)" ] || fail "the pin stays after an unpin without a coordinator"
rc=0
out=$("$Q" unpin np-none 2>&1) || rc=$?
[ $rc = 2 ] || fail "unpin of an unknown experiment exited $rc, want 2"
grep -q "no experiment named 'np-none'" <<<"$out" || fail "unknown experiment: $out"
echo "unpin_test: ok"
