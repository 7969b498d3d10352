#!/usr/bin/env bash
# qsweep unpin (and requeue) without a coordinator while another command's transaction holds the
# coordinator lock for a moment (requeue, another unpin: coordinator/store/lock.c): it waits for it
# and removes the pin here, instead of queueing a request that no coordinator answers and the
# next one to start would apply; a holder that is no coordinator and keeps the lock is named in
# a refusal, and no request is queued either way.
# Usage: unpin_lock_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$SRC/tests/lib/pg.sh"
pg_test_setup cli_unpin_waits_for_a_command_holding_the_lock unpinlock
pg_db_start
"$Q" submit "$SRC/experiments/tiny.yaml" --set name=ul >"$D/submit.log" 2>&1 || fail "submit"
# the pin as a coordinator's first dispatch would write it
psql_q "INSERT INTO experiment_numerics (experiment, path)
        SELECT id, 'cpu-qsweep-fixed2' FROM experiments WHERE name = 'ul'"
hold() { # seconds: a session named as a command's holds the lock that long
  PGAPPNAME="qsweep requeue" psql "$QSWEEP_DB" -qAtX -v ON_ERROR_STOP=1 \
    -c "BEGIN" -c "LOCK TABLE qsweep_coordinator_lock IN EXCLUSIVE MODE" \
    -c "SELECT pg_sleep($1)" -c "COMMIT" >/dev/null
}
held() { psql_q "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                 WHERE c.relname = 'qsweep_coordinator_lock' AND l.granted"; }
wait_held() {
  for _ in $(seq 1 200); do [ "$(held)" = 1 ] && return 0; sleep 0.01; done
  fail "the holding session never took the lock"
}
hold 0.5 &
holder=$!
pids+=($holder)
wait_held
out=$("$Q" unpin ul --wait 0 2>&1) || fail "unpin while a command held the lock: $out"
[ "$out" = "experiment ul: unpinned from cpu-qsweep-fixed2" ] || fail "unpin: $out"
wait $holder
[ "$(psql_q "SELECT count(*) FROM numerics_unpin_requests")" = 0 ] ||
  fail "a request was queued for a coordinator that does not run"
# requeue waits for such a holder the same way (coordinator/store/lock.c
# qc_store_lock_for_command) instead of calling it a running coordinator
hold 0.5 &
holder=$!
pids+=($holder)
wait_held
out=$("$Q" requeue ul 2>&1) || fail "requeue while a command held the lock: $out"
[ "$out" = "0 job(s) of experiment ul queued again" ] || fail "requeue: $out"
wait $holder
# a holder that keeps the lock and is no coordinator: refused, naming it
psql_q "INSERT INTO experiment_numerics (experiment, path)
        SELECT id, 'cpu-qsweep-fixed2' FROM experiments WHERE name = 'ul'"
hold 8 &
holder=$!
pids+=($holder)
wait_held
rc=0
out=$("$Q" unpin ul --wait 0 2>&1) || rc=$?
[ $rc = 4 ] || fail "unpin while a command kept the lock exited $rc, want 4: $out"
case "$out" in *"'qsweep requeue'"*) ;; *) fail "the refusal does not name the holder: $out" ;; esac
[ "$(psql_q "SELECT count(*) FROM numerics_unpin_requests")" = 0 ] ||
  fail "a request was queued for a coordinator that does not run"
[ -n "$(psql_q "SELECT path FROM experiment_numerics")" ] || fail "a refused unpin removed the pin"
echo "cli_unpin_waits_for_a_command_holding_the_lock: OK"
