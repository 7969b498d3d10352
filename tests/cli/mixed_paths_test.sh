#!/usr/bin/env bash
# `qsweep results` flags a sweep whose jobs ran on more than one CPU numerics path (cli/results.c
# print_paths): the tiny NVFP4 W4A16 sweep (8 jobs) on a private cluster, its first jobs run by a
# worker with OpenBLAS's Haswell kernels, the rest by one with its Sandybridge kernels. Each job
# records "cpu_path.cpu-openblas-<version>-<core>"; the two families differ in the last digits.
# 64 chunks of the text are scored (the grid has 8), so a job runs long enough for worker A to
# be stopped between jobs. Checked: no flag while one worker has run; then the flag, with each
# path's job count equal to that worker's succeeded attempts in SQL; and the same flag in the
# report page as headless Chromium renders it.
# Usage: mixed_paths_test.sh QSWEEP_BIN SOURCE_DIR
set -euo pipefail
Q=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup mixed_paths_test mixed
PORT=$((24000 + ($$ % 4000)))
EP=tcp://127.0.0.1:$PORT
pg_db_start
succeeded() {
  psql_q "SELECT succeeded FROM v_experiment_progress WHERE experiment = 'tiny-mixed'"
}

"$Q" coordinator --bind "$EP" >"$D/coordinator.log" 2>&1 &
pids+=($!)
"$Q" submit "$SRC/experiments/tiny.yaml" --set name=tiny-mixed --set 'sensitivity.formats=[nvfp4]' \
  --set 'sensitivity.quantize=[weights]' --set dataset.max_chunks=64 >"$D/submit.log" 2>&1 || fail "qsweep submit"

# --- worker A (Haswell kernels): the baseline and at least one eval job, then SIGTERM
OPENBLAS_CORETYPE=Haswell "$Q" worker --connect "$EP" --id cpu-a --threads 1 >"$D/a.log" 2>&1 &
a=$!
pids+=($a)
for _ in $(seq 1 600); do
  [ "$(succeeded)" -ge 2 ] 2>/dev/null && break
  sleep 0.1
done
[ "$(succeeded)" -ge 2 ] || fail "worker A finished fewer than 2 jobs in 60 s"
kill -TERM "$a"
wait "$a" || true
out=$("$Q" results tiny-mixed) || fail "qsweep results after worker A"
if echo "$out" | grep -q "mixed numerics"; then fail "a one-path sweep is flagged: $out"; fi

# --- worker B (Sandybridge kernels): the rest
OPENBLAS_CORETYPE=Sandybridge "$Q" worker --connect "$EP" --id cpu-b --threads 1 \
  --exit-when-idle 3 >"$D/b.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 1200); do
  [ "$(succeeded)" = 8 ] && break
  sleep 0.1
done
[ "$(succeeded)" = 8 ] || fail "only $(succeeded) of 8 jobs succeeded"

path_of() { psql_q "SELECT DISTINCT substr(r.name, 10) FROM results r JOIN attempts a
                    ON a.job = r.job AND a.attempt = r.attempt
                    WHERE r.name LIKE 'cpu\_path.%' AND a.worker = '$1'"; }
jobs_of() { psql_q "SELECT count(*) FROM attempts WHERE worker = '$1' AND outcome = 'succeeded'"; }
pa=$(path_of cpu-a) pb=$(path_of cpu-b)
case "$pa" in cpu-openblas-*-haswell) ;; *) fail "worker A's path '$pa'" ;; esac
case "$pb" in cpu-openblas-*-sandybridge) ;; *) fail "worker B's path '$pb'" ;; esac
out=$("$Q" results tiny-mixed) || fail "qsweep results"
echo "$out" | grep -q "^mixed numerics: the jobs of experiment tiny-mixed ran on 2 paths" \
  || fail "no mixed-numerics flag: $out"
na=$(jobs_of cpu-a) nb=$(jobs_of cpu-b)
echo "$out" | grep -Eq "^  $pa: $na jobs?\$" || fail "'$pa: $na' not in: $out"
echo "$out" | grep -Eq "^  $pb: $nb jobs?\$" || fail "'$pb: $nb' not in: $out"
[ $((na + nb)) = 8 ] || fail "A $na + B $nb jobs, want 8"

# --- the report page flags it too: the DOM headless Chromium renders from it
"$Q" report tiny-mixed -o "$D/report.html" >"$D/report.log" 2>&1 || fail "qsweep report"
HOME=$D /usr/bin/chromium --headless --no-sandbox --disable-gpu --no-first-run \
  --virtual-time-budget=10000 --dump-dom "file://$D/report.html" >"$D/dom.html" 2>"$D/chromium.log" \
  || fail "chromium on the report"
grep -q "mixed numerics: the jobs ran on 2 numerics paths" "$D/dom.html" \
  || fail "the rendered report does not flag the mixed paths"
for p in "$pa" "$pb"; do grep -q "<td[^>]*>$p</td>" "$D/dom.html" || fail "report: no cell $p"; done
echo "mixed_paths_test: ok: $pa $na jobs, $pb $nb jobs"
