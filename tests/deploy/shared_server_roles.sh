#!/usr/bin/env bash
# deploy/postgres/shared-server.sql on a real PostgreSQL: after it and
# `qsweep db migrate` as the owner,
#   - the coordinator's login (member of qsweep_writer) runs the tiny grid end to end
#     (qsweep run --db: submit, coordinator, workers, results);
#   - a researcher's login (member of qsweep_reader) reads results and writes a report, but
#     cannot submit, cancel, or change a table;
#   - neither can apply migrations (DDL).
# usage: shared_server_roles.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup shared_server_roles roles
# the private cluster: trust authentication on a Unix socket, its user qsweep a superuser
super=$("$Q" db start | sed -n "s/^export QSWEEP_DB='\(.*\)'$/\1/p")
[ -n "$super" ] || fail "qsweep db start printed no connection string"
as() { echo "$super" | sed "s/user=[^ ]*/user=$1/; s/dbname=[^ ]*/dbname=qsweep_shared/"; }
# the template, with its placeholders filled in (the passwords are unused under trust)
sed -e 's/<owner password>/o/; s/<coordinator password>/c/; s/<researcher password>/r/' \
    -e 's/"<researcher>"/alice/' "$SRC/deploy/postgres/shared-server.sql" \
  | sed 's/CREATE DATABASE qsweep /CREATE DATABASE qsweep_shared /; s/ON DATABASE qsweep /ON DATABASE qsweep_shared /' \
  > "$D/shared.sql"
psql "$super" -qX -v ON_ERROR_STOP=1 -f "$D/shared.sql" >/dev/null || fail "shared-server.sql"

out=$("$Q" db migrate --db "$(as qsweep_owner)" 2>&1) || fail "migrate as owner: $out"
out=$("$Q" db migrate --db "$(as qsweep_coordinator)" 2>&1) || fail "migrate again: $out"
# DDL is the owner's alone
if psql "$(as qsweep_coordinator)" -qX -c "CREATE TABLE x (i int)" 2>/dev/null; then
  fail "the coordinator's role may create tables"
fi
out=$("$Q" run "$SRC/experiments/tiny.yaml" --workers 2 --db "$(as qsweep_coordinator)" \
      --set 'sensitivity.formats=[nvfp4]' --set 'sensitivity.quantize=[weights]' 2>&1) \
  || fail "qsweep run as the coordinator's role: $out"
grep -q "8 jobs: 8 new" <<<"$out" || fail "run did not submit 8 jobs: $out"
n=$(psql "$(as alice)" -qAtX -c "SELECT succeeded FROM v_experiment_progress WHERE experiment = 'tiny'")
[ "$n" = 8 ] || fail "alice reads $n succeeded jobs, want 8"
out=$("$Q" results tiny --db "$(as alice)" 2>&1) || fail "results as alice: $out"
out=$("$Q" report tiny -o "$D/r.html" --db "$(as alice)" 2>&1) || fail "report as alice: $out"
if out=$("$Q" submit "$SRC/experiments/tiny.yaml" --set name=alice-grid --db "$(as alice)" 2>&1); then
  fail "alice could submit: $out"
fi
grep -q "permission denied" <<<"$out" || fail "submit as alice: unexpected error: $out"
if psql "$(as alice)" -qX -c "UPDATE jobs SET priority = 9" 2>/dev/null; then
  fail "alice could update jobs"
fi
# cancel of a finished experiment writes nothing ("nothing to cancel"): cancel one that is
# queued, as the coordinator's role submitted it
out=$("$Q" submit "$SRC/experiments/tiny.yaml" --set name=queued --db "$(as qsweep_coordinator)" 2>&1) \
  || fail "submit as the coordinator's role: $out"
if out=$("$Q" cancel queued --db "$(as alice)" 2>&1); then fail "alice could cancel: $out"; fi
grep -q "permission denied" <<<"$out" || fail "cancel as alice: unexpected error: $out"
echo "shared_server_roles: OK"
