# The setup that the shell tests on a private PostgreSQL cluster share; source it, then call
#   pg_test_setup NAME PREFIX
# which makes, for the test NAME (the prefix of its failure lines):
#   D         a fresh directory ${TMPDIR:-/tmp}/qsweep-PREFIX-XXXXXX, mode 755 (as root the
#             private cluster runs as the user qsweep, who must reach it); the test's logs go
#             in D/*.log;
#   XDG_DATA_HOME, XDG_CACHE_HOME, XDG_STATE_HOME  below D, so `qsweep db start` makes the
#             cluster there; QSWEEP_DB and the QSWEEP_CURVE_* variables unset, so nothing of
#             the caller's environment is reached;
#   pids      an empty array: a process the test starts in the background and adds to it is
#             sent SIGTERM and waited for at exit;
#   fail MSG  prints "NAME: FAIL: MSG" and the last 25 lines of each D/*.log to stderr (carriage
#             returns as line ends), and exits 1;
#   an EXIT trap that ends the processes in pids, stops the private cluster and removes D.
# Then pg_db_start starts the cluster (qsweep db start; QSWEEP_DB exported), and
# psql_q SQL prints SQL's result unaligned, tuples only. Both need Q, the qsweep binary.
# On the started cluster:
#   pin_of EXP      the numerics path experiment EXP is pinned to (empty: none)
#   succeeded EXP   how many of EXP's jobs succeeded
#   wait_for WHAT COND   evaluates the shell condition COND every 0.1 s until it holds; after
#             3000 tries (the limit only bounds a hang) fails with WHAT and COND as it last
#             expanded ("[ 5 = 8 ]"), so the log says what was seen.
pg_test_setup() {
  PG_TEST_NAME=$1
  D=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-$2-XXXXXX")
  chmod 755 "$D"
  export XDG_DATA_HOME=$D/data XDG_CACHE_HOME=$D/cache XDG_STATE_HOME=$D/state
  unset QSWEEP_DB QSWEEP_CURVE_SECRET QSWEEP_CURVE_SERVER QSWEEP_CURVE_PUBLIC QSWEEP_CURVE_AUTHORIZED
  pids=()
  trap pg_test_cleanup EXIT
}

fail() {
  echo "$PG_TEST_NAME: FAIL: $*" >&2
  for f in "$D"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f" >&2
    tr '\r' '\n' <"$f" | tail -n 25 >&2 || true
  done
  exit 1
}

pg_test_cleanup() {
  set +e
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  "$Q" db stop >/dev/null 2>&1
  rm -rf "$D"
}

pg_db_start() {
  eval "$("$Q" db start)"
}

psql_q() { psql "$QSWEEP_DB" -qAtX -v ON_ERROR_STOP=1 -c "$1"; }

pin_of() { psql_q "SELECT n.path FROM experiment_numerics n JOIN experiments e ON e.id = n.experiment
                   WHERE e.name = '$1'"; }

succeeded() { psql_q "SELECT succeeded FROM v_experiment_progress WHERE experiment = '$1'"; }

wait_for() {
  for _ in $(seq 1 3000); do
    eval "$2" && return 0
    sleep 0.1
  done
  fail "$1: not so after 3000 tries; last seen: $(eval "echo \"$2\"" 2>&1)"
}
