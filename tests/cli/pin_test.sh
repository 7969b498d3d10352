#!/usr/bin/env bash
# qsweep pin (coordinator/store/store.h qc_store_pin) on a private cluster with real workers of
# this build:
#   - a family, any, a misspelling or an unknown experiment is refused (exit 2);
#   - through a running coordinator, experiments pinned before any worker starts are held to
#     the path: an OpenBLAS worker runs a later experiment's jobs and none of theirs, although
#     they are older; qsweep status says they wait for the pinned path;
#   - pinning to the path it is pinned to changes nothing; a pin to the path that computed
#     the experiment's results is refused naming the jobs, path and worker, and the pin stays;
#   - a pin replaced by another path sends the jobs to a worker of that path, and a worker of
#     the first pinned path runs the other experiment's;
#   - without a coordinator the pin is written at once, with no request queued.
# Usage: pin_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup cli_pin_holds_jobs_to_the_path pin
PORT=$((36000 + ($$ % 4000)))
EP=tcp://127.0.0.1:$PORT
pg_db_start
# one format, weights only: 8 jobs; each experiment its own max_chunks, so no job is shared
tiny=("$SRC/experiments/tiny.yaml" --set 'sensitivity.quantize=[weights]' --set 'sensitivity.formats=[nvfp4]')
fixed=cpu-qsweep-fixed2
# the attempts of experiment $1 not on worker $2 with path $3
attempts_off() { psql_q "SELECT count(*) FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job
                         JOIN experiments e ON e.id = ej.experiment WHERE e.name = '$1'
                         AND (a.worker <> '$2' OR a.numerics_path IS DISTINCT FROM '$3')"; }
attempts_of() { psql_q "SELECT count(*) FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job
                        JOIN experiments e ON e.id = ej.experiment WHERE e.name = '$1'"; }

"$Q" coordinator --bind "$EP" --lease-ms 120000 >"$D/coordinator.log" 2>&1 &
coord=$!
pids+=($coord)
for e in p:6 r:5; do
  "$Q" submit "${tiny[@]}" --set name=np-${e%:*} --set dataset.max_chunks=${e#*:} \
    >>"$D/submit.log" 2>&1 || fail "submit np-${e%:*}"
done

for bad in cpu cuda any cpu-qsweep-fixed cuda-cc90-autoo; do
  rc=0
  out=$("$Q" pin np-p $bad 2>&1) || rc=$?
  [ $rc = 2 ] || fail "pin to '$bad' exited $rc, want 2: $out"
  grep -q "^qsweep pin: '$bad' is no numerics path a worker announces: give one path, $fixed, cpu-openblas-<version>-<core> or cuda-cc<NN>-<fp32|bf16|auto|emulated>" <<<"$out" ||
    fail "the refusal of '$bad' does not name the accepted forms: $out"
done
rc=0
out=$("$Q" pin np-none $fixed 2>&1) || rc=$?
[ $rc = 2 ] || fail "pin of an unknown experiment exited $rc, want 2: $out"
grep -q "no experiment named 'np-none'" <<<"$out" || fail "unknown experiment: $out"
[ "$(psql_q "SELECT count(*) FROM experiment_numerics")" = 0 ] || fail "a refused pin wrote a pin"

# --- pinned through the coordinator before any worker starts
for e in np-p np-r; do
  out=$("$Q" pin $e $fixed) || fail "pin $e: $out"
  [ "$out" = "experiment $e: pinned to $fixed" ] || fail "pin $e: $out"
done
wait_for "the coordinator stores np-r's pin" '[ "$(pin_of np-r)" = $fixed ]'
[ "$(pin_of np-p)" = $fixed ] || fail "np-p pinned to '$(pin_of np-p)'"
grep -q "experiment [0-9]* pinned to numerics path $fixed by request" "$D/coordinator.log" ||
  fail "the coordinator does not log the pin"
out=$("$Q" pin np-p $fixed) || fail "pin to the same path: $out"
[ "$out" = "experiment np-p: already pinned to $fixed" ] || fail "pin to the same path: $out"

# --- an OpenBLAS worker runs np-o, submitted last, and none of the pinned experiments' jobs
"$Q" submit "${tiny[@]}" --set name=np-o --set dataset.max_chunks=4 >>"$D/submit.log" 2>&1 ||
  fail "submit np-o"
QSWEEP_CPU_GEMM=openblas "$Q" worker --connect "$EP" --id cpu-b --threads 1 >"$D/b.log" 2>&1 &
pids+=($!)
wait_for "np-o done" '[ "$(succeeded np-o)" = 8 ]'
ob=$(psql_q "SELECT numerics_path FROM workers WHERE id = 'cpu-b'")
case "$ob" in cpu-openblas-*) ;; *) fail "cpu-b announces '$ob'" ;; esac
[ "$(attempts_of np-p)" = 0 ] || fail "np-p, pinned to $fixed, has attempts on $ob"
[ "$(attempts_of np-r)" = 0 ] || fail "np-r, pinned to $fixed, has attempts on $ob"
out=$("$Q" status np-p) || fail "status: $out"
grep -q "^np-p: 8 pending jobs waiting: no worker on path $fixed (the experiment is pinned to it" <<<"$out" ||
  fail "status does not say np-p waits for its pinned path: $out"

# --- np-o's results were computed on cpu-b's path: a pin elsewhere would mix two paths
first=$(psql_q "SELECT min(ej.job) FROM experiment_jobs ej JOIN experiments e ON e.id = ej.experiment
                WHERE e.name = 'np-o'")
rc=0
out=$("$Q" pin np-o $fixed 2>&1) || rc=$?
[ $rc = 4 ] || fail "pin of np-o off its results' path exited $rc, want 4: $out"
[ "$out" = "qsweep pin: experiment 'np-o': 8 job(s) of it have results computed on another path, $ob (job $first, worker(s) cpu-b), and pinning it to $fixed would mix two paths in one experiment; submit the grid as a new experiment with numerics: $fixed to measure it there" ] ||
  fail "the refusal does not name np-o's jobs, path and worker: $out"
[ "$(pin_of np-o)" = "$ob" ] || fail "a refused pin changed np-o's pin to '$(pin_of np-o)'"
[ "$(psql_q "SELECT outcome FROM numerics_unpin_requests ORDER BY id DESC LIMIT 1")" = refused ] ||
  fail "the request is not answered refused"

# --- np-r moves to cpu-b's path; a worker of the fixed path then takes np-p
out=$("$Q" pin np-r "$ob") || fail "pin np-r to $ob: $out"
[ "$out" = "experiment np-r: pinned to $ob, replacing its pin to $fixed (no result of it was computed there)" ] ||
  fail "replacing np-r's pin: $out"
wait_for "np-r done" '[ "$(succeeded np-r)" = 8 ]'
[ "$(pin_of np-r)" = "$ob" ] || fail "np-r pinned to '$(pin_of np-r)', want $ob"
[ "$(attempts_off np-r cpu-b "$ob")" = 0 ] || fail "np-r ran off cpu-b"
[ "$(attempts_of np-p)" = 0 ] || fail "np-p ran on $ob"
"$Q" worker --connect "$EP" --id cpu-a --threads 1 >"$D/a.log" 2>&1 &
pids+=($!)
wait_for "np-p done" '[ "$(succeeded np-p)" = 8 ]'
[ "$(attempts_off np-p cpu-a $fixed)" = 0 ] || fail "np-p ran off cpu-a"

# --- no coordinator: the store is changed here, no request queued
kill -TERM $coord
wait $coord || true
"$Q" submit "${tiny[@]}" --set name=np-d --set dataset.max_chunks=3 >>"$D/submit.log" 2>&1 ||
  fail "submit np-d"
requests=$(psql_q "SELECT count(*) FROM numerics_unpin_requests")
out=$("$Q" pin np-d "$ob") || fail "pin without a coordinator: $out"
[ "$out" = "experiment np-d: pinned to $ob" ] || fail "pin without a coordinator: $out"
[ "$(pin_of np-d)" = "$ob" ] || fail "np-d pinned to '$(pin_of np-d)' without a coordinator"
[ "$(psql_q "SELECT count(*) FROM numerics_unpin_requests")" = "$requests" ] ||
  fail "a pin without a coordinator queued a request"
echo "cli_pin_holds_jobs_to_the_path: OK"
