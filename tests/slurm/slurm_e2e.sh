#!/usr/bin/env bash
# qsweep workers under a real single-node SLURM:
#   - munged, slurmctld and slurmd (Debian's munge and slurm-wlm) start here as root on
#     127.0.0.1 with ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, no accounting
#     (deploy/slurm/slurm.conf.single-node), a private PostgreSQL and a coordinator beside them;
#   - `qsweep slurm` queues the tiny grid (experiments/tiny.yaml, one format, W4A16, on a
#     longer token file so a job runs for seconds) and an array of 2 workers
#     (deploy/slurm/qsweep-worker.sbatch);
#   - the array task running the first job is scancelled mid-job: its attempt is recorded
#     preempted (not lost), does not count against the job, and the other task finishes the
#     job; every job of the grid succeeds, nothing is lost;
#   - the array drains by itself once the queue is empty (--exit-when-idle);
#   - all of it within 3 minutes.
# usage: slurm_e2e.sh QSWEEP_BIN SOURCE_DIR        (exit 77: skipped, not root or no SLURM)
set -euo pipefail
Q=$1
SRC=$2
T0=$SECONDS
log() { echo "slurm_e2e [$((SECONDS - T0))s]: $*"; }
fail() {
  echo "slurm_e2e: FAIL: $*" >&2
  for f in "$D"/log/*; do echo "--- $f" >&2; tail -n 20 "$f" >&2 || true; done
  exit 1
}

# usage errors, before anything is queued (exit 1), and the embedded script
expect_usage() {
  local rc=0 out
  out=$("$Q" slurm "$@" 2>&1) || rc=$?
  [ "$rc" = 1 ] || { echo "slurm_e2e: FAIL: qsweep slurm $*: exit $rc, want 1: $out" >&2; exit 1; }
}
expect_usage
expect_usage "$SRC/experiments/tiny.yaml" --connect tcp://127.0.0.1:1 --db dbname=x
expect_usage "$SRC/experiments/tiny.yaml" --workers 2 --db dbname=x
expect_usage "$SRC/experiments/tiny.yaml" --workers 0 --connect tcp://127.0.0.1:1 --db dbname=x
expect_usage "$SRC/experiments/tiny.yaml" "$SRC/experiments/tiny.yaml" --workers 2 \
  --connect tcp://127.0.0.1:1 --db dbname=x
"$Q" slurm --print-script | cmp -s - "$SRC/deploy/slurm/qsweep-worker.sbatch" \
  || { echo "slurm_e2e: FAIL: --print-script is not deploy/slurm/qsweep-worker.sbatch" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then echo "slurm_e2e: skipped: slurmd must run as root here"; exit 77; fi
for b in munged slurmctld slurmd sbatch squeue scancel sinfo psql; do
  if ! command -v "$b" >/dev/null && [ ! -x "/usr/sbin/$b" ]; then
    echo "slurm_e2e: skipped: $b not installed (tools/install-deps.sh installs slurm-wlm, munge)"
    exit 77
  fi
done
[ -r /etc/munge/munge.key ] || { echo "slurm_e2e: skipped: no /etc/munge/munge.key"; exit 77; }

D=$(mktemp -d /tmp/qsweep-slurm-XXXXXX)
chmod 755 "$D"
mkdir -p "$D/munge" "$D/state" "$D/spool" "$D/log" "$D/xdg"
chown munge:munge "$D/munge"
# ports of this run only, so two runs on one machine do not meet
base=$((20000 + ($$ % 4000) * 4))
CTLD_PORT=$base SLURMD_PORT=$((base + 1)) COORD_PORT=$((base + 2))
export SLURM_CONF=$D/slurm.conf
export XDG_DATA_HOME=$D/xdg/data XDG_CACHE_HOME=$D/xdg/cache XDG_STATE_HOME=$D/xdg/state
unset QSWEEP_DB QSWEEP_CURVE_SECRET QSWEEP_CURVE_SERVER QSWEEP_CURVE_PUBLIC QSWEEP_CURVE_AUTHORIZED
ARRAY=""
pids=()
# Waits (at most $1 tenths of a second) until this cluster runs no job step: slurmstepd
# removes its socket (spool/<node>_<job>.<step>) when it ends.
steps_gone() {
  for _ in $(seq 1 "$1"); do
    if ! ls "$D/spool" 2>/dev/null | grep '_[0-9]*\.[0-9]*$' >/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}
cleanup() {
  set +e
  # jobs first, while slurmctld is there to hear that they ended (KillWait=5)
  if [ -n "$ARRAY" ]; then
    scancel "$ARRAY" 2>/dev/null
    for _ in $(seq 1 150); do [ -z "$(squeue -h -j "$ARRAY" 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  steps_gone 100
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  [ -f "$D/munge/munged.pid" ] && kill -TERM "$(cat "$D/munge/munged.pid")" 2>/dev/null
  "$Q" db stop >/dev/null 2>&1
  rm -rf "$D"
}
trap cleanup EXIT

# --- SLURM: munged as the munge user on a socket of its own, then the two daemons
su -s /bin/sh munge -c "/usr/sbin/munged --socket=$D/munge/munge.sock \
  --pid-file=$D/munge/munged.pid --log-file=$D/munge/munged.log --seed-file=$D/munge/munged.seed" \
  || fail "munged did not start"
host=$(hostname -s)
sed -e "s#@DIR@#$D#g" -e "s#@HOST@#$host#g" \
    -e "s#^SlurmctldPort=.*#SlurmctldPort=$CTLD_PORT#" -e "s#^SlurmdPort=.*#SlurmdPort=$SLURMD_PORT#" \
    "$SRC/deploy/slurm/slurm.conf.single-node" > "$SLURM_CONF"
printf 'AuthInfo=socket=%s\nKillWait=5\n' "$D/munge/munge.sock" >> "$SLURM_CONF"
/usr/sbin/slurmctld -D > "$D/log/slurmctld.out" 2>&1 & pids+=($!)
/usr/sbin/slurmd -D > "$D/log/slurmd.out" 2>&1 & pids+=($!)
# Each wait below is for a state; its limit only bounds a hang, far past a loaded machine's time.
for _ in $(seq 1 1000); do
  if sinfo -h -o %T 2>/dev/null | grep idle >/dev/null; then break; fi
  sleep 0.2
done
sinfo -h -o %T | grep idle >/dev/null ||
  fail "the node did not come up idle within 200 s; sinfo says: $(sinfo -h -o '%P %D %T' 2>&1)"
log "SLURM up: $(sinfo -h -o '%P %D %T %c')"

# --- database and coordinator
eval "$("$Q" db start)"
psql_q() { psql "$QSWEEP_DB" -qAtX -c "$1"; }
"$Q" coordinator --bind "tcp://127.0.0.1:$COORD_PORT" > "$D/log/coordinator.log" 2>&1 & pids+=($!)

# the tiny grid's text four times over (65536 byte tokens), so a job runs for seconds
tok=$SRC/experiments/data/gpl3.bytes.tokens
{ head -c 24 "$tok"; printf '\x00\x00\x01\x00\x00\x00\x00\x00'
  for _ in 1 2 3 4; do tail -c +33 "$tok"; done; } > "$D/long.tokens"
[ "$(stat -c %s "$D/long.tokens")" = $((32 + 4 * 65536)) ] || fail "token file size"

# --- grid and worker array in one step
out=$("$Q" slurm "$SRC/experiments/tiny.yaml" --workers 2 --connect "tcp://127.0.0.1:$COORD_PORT" \
        --exit-when-idle 20 --set 'sensitivity.formats=[nvfp4]' --set 'sensitivity.quantize=[weights]' \
        --set "dataset.tokens=$D/long.tokens" --set dataset.max_chunks=0 \
        -- "--output=$D/log/worker-%A_%a.out" 2>&1) || fail "qsweep slurm: $out"
echo "$out"
ARRAY=$(echo "$out" | sed -n 's/^SLURM job \([0-9]*\):.*/\1/p')
[ -n "$ARRAY" ] || fail "no SLURM job id in: $out"
total=$(psql_q "SELECT total FROM v_experiment_progress WHERE experiment = 'tiny'")
[ "$total" = 8 ] || fail "expected 8 jobs (1 baseline + 7 components), got $total"

# --- scancel the task running the first job (the baseline), mid-job
victim="" job=""
for _ in $(seq 1 3000); do
  row=$(psql_q "SELECT a.job, a.worker FROM attempts a JOIN jobs j ON j.id = a.job
                WHERE a.outcome = 'running' AND j.kind = 'baseline' LIMIT 1")
  if [ -n "$row" ]; then job=${row%%|*}; victim=${row#*|}; break; fi
  sleep 0.1
done
[ -n "$victim" ] || fail "no attempt of the baseline job started within 300 s; attempts: $(psql_q "SELECT string_agg(job || ' ' || outcome || ' ' || worker, ', ') FROM attempts"); squeue: $(squeue -h -j "$ARRAY" 2>&1)"
task=$(echo "$victim" | sed -n "s/^slurm-${ARRAY}_\([0-9]*\)\..*/\1/p")
[ -n "$task" ] || fail "worker name $victim is not slurm-${ARRAY}_TASK...."
log "job $job runs on $victim: scancel ${ARRAY}_$task"
scancel "${ARRAY}_$task"

# --- every job done, by the remaining task
for _ in $(seq 1 6000); do
  done_=$(psql_q "SELECT succeeded + failed + cancelled FROM v_experiment_progress
                  WHERE experiment = 'tiny'")
  [ "$done_" = 8 ] && break
  sleep 0.1
done
[ "$done_" = 8 ] || fail "only $done_ of 8 jobs finished within 600 s: $(psql_q "SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM jobs GROUP BY state) s")"
log "all 8 jobs finished"
[ "$(psql_q "SELECT succeeded FROM v_experiment_progress WHERE experiment = 'tiny'")" = 8 ] \
  || fail "not every job succeeded: $(psql_q "SELECT * FROM v_experiment_progress")"
first=$(psql_q "SELECT outcome || '|' || worker FROM attempts WHERE job = $job AND attempt = 1")
[ "$first" = "preempted|$victim" ] || fail "attempt 1 of job $job: '$first', want preempted|$victim"
[ "$(psql_q "SELECT count(*) FROM attempts WHERE outcome = 'lost'")" = 0 ] \
  || fail "lost attempts: $(psql_q "SELECT job, attempt, worker FROM attempts WHERE outcome = 'lost'")"
winner=$(psql_q "SELECT worker FROM attempts WHERE job = $job AND outcome = 'succeeded'")
case "$winner" in
  "slurm-${ARRAY}_"*) [ "$winner" != "$victim" ] || fail "job $job succeeded on the cancelled task" ;;
  *) fail "job $job succeeded on '$winner', not on an array task" ;;
esac
# attempts_used counts the attempts that count against max_attempts: failed and lost ones,
# never a preempted one
used=$(psql_q "SELECT attempts_used FROM jobs WHERE id = $job")
[ "$used" = 0 ] || fail "job $job: attempts_used $used (a preempted attempt must not count)"
[ "$(psql_q "SELECT count(DISTINCT job_id) FROM v_sensitivity WHERE experiment = 'tiny'")" = 7 ] \
  || fail "not every eval job has results"
log "job $job: attempt 1 preempted on $victim, done by $winner"

# --- the array drains by itself (exit when idle)
for _ in $(seq 1 3000); do
  [ -z "$(squeue -h -j "$ARRAY" 2>/dev/null)" ] && break
  sleep 0.1
done
[ -z "$(squeue -h -j "$ARRAY")" ] || fail "array $ARRAY still queued or running after 300 s: $(squeue -j "$ARRAY")"
ARRAY=""
steps_gone 1000 || fail "job steps still running 100 s after the array drained: $(ls "$D/spool")"
log "array drained"
log "OK in $((SECONDS - T0)) s"
