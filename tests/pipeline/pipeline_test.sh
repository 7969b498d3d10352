#!/usr/bin/env bash
# The pipeline grid end to end (docs/pipelines.md): experiments/pipeline-tiny.yaml (the micro
# shape trained 8 steps with bf16 and nvfp4, seeds 1 and 2, then each of the 4 trained models
# swept component-wise in NVFP4 and MXFP4: 64 jobs) on a private PostgreSQL cluster with real
# coordinators and workers. One case per run:
#   run       docs/pipelines.md's dry-run lines are the command's; `qsweep run` runs every job once; each baseline and eval job of a trained model
#             names its training job in model.trained_by and has a job_deps edge to exactly
#             that job; the digest each training job recorded is the one its sweep ran on;
#             every eval job's ppl pairs with its baseline in v_sensitivity; the pipeline
#             views, results tables and report heatmap agree with the rows
#             (tests/cli/pipeline_check.py).
#   restart   a coordinator killed with SIGKILL once the training stage has succeeded (the
#             sweep queued or running) and started again: every job succeeds with exactly one
#             attempt that ran (counted in SQL; an ASSIGN the killed coordinator never sent
#             leaves a preempted attempt that never ran and counts against nothing).
#   failed    training that diverges fails each dependent with "dependency N failed: ..."
#             naming its training job's (or its baseline's) id and the divergence, no attempt.
#   resubmit  the same grid submitted again adds nothing; the grid with one more format reuses
#             both finished stages (only the new eval jobs run, no training job runs again);
#             a trained model written again with other weights is refused by its new jobs,
#             and so is one copied over with its .digest record (the coordinator sends the
#             digest the store recorded with each ASSIGN): each refused job fails at its first
#             attempt, naming the path, both digests and the training job.
#   finetune  a training stage of {init: path} fine-tunes a checkpoint, whose sweep runs beside
#             the checkpoint's own (which depends on no training job).
# Usage: pipeline_test.sh QSWEEP_BIN SOURCE_DIR CASE
set -euo pipefail
Q=$1
SRC=$2
CASE=$3
GRID=$SRC/experiments/pipeline-tiny.yaml
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pg.sh"
pg_test_setup "pipeline_test $CASE" pipeline
EP=ipc://$D/coordinator.sock
pg_db_start
expect() { # expect WHAT WANT GOT
  [ "$2" = "$3" ] || fail "$1: expected $2, got $3"
}
state_count() { psql_q "SELECT count(*) FROM jobs WHERE state = '$1'"; }

# Every baseline and eval job of a trained model: trained_by is a train job's key, its edges
# to train jobs are exactly one, to that job; its stand-in digest is the same for the
# baseline and eval jobs of one model.
check_edges() {
  expect "sweep jobs naming a training job" 60 \
    "$(psql_q "SELECT count(*) FROM jobs j JOIN jobs t ON t.job_key = j.spec->'model'->>'trained_by'
               WHERE j.kind IN ('baseline', 'eval') AND t.kind = 'train'")"
  expect "sweep jobs whose train edges are not exactly the one to their trained_by job" 0 \
    "$(psql_q "SELECT count(*) FROM jobs j WHERE j.kind IN ('baseline', 'eval') AND
               (SELECT array_agg(t.job_key) FROM job_deps d JOIN jobs t ON t.id = d.depends_on
                WHERE d.job = j.id AND t.kind = 'train')
               IS DISTINCT FROM ARRAY[j.spec->'model'->>'trained_by']")"
  expect "eval jobs without an edge to the baseline of their model" 0 \
    "$(psql_q "SELECT count(*) FROM jobs e WHERE e.kind = 'eval' AND NOT EXISTS (
               SELECT 1 FROM job_deps d JOIN jobs b ON b.id = d.depends_on
               WHERE d.job = e.id AND b.kind = 'baseline'
                 AND b.spec->'model'->>'digest' = e.spec->'model'->>'digest')")"
  expect "stand-in digests (one per trained model)" 4 \
    "$(psql_q "SELECT count(DISTINCT spec->'model'->>'digest') FROM jobs WHERE kind <> 'train'")"
}

case "$CASE" in
run)
  # docs/pipelines.md shows the start of the dry run: those lines, digit for digit
  "$Q" submit "$GRID" --dry-run --sample 0 >"$D/dry-run.txt" || fail "qsweep submit --dry-run"
  sed -n '/<!-- pipeline-dry-run:begin -->/,/<!-- pipeline-dry-run:end -->/p' \
    "$SRC/docs/pipelines.md" | sed '1,2d;$d' | sed '$d' >"$D/doc-dry-run.txt"
  [ -s "$D/doc-dry-run.txt" ] || fail "no dry-run block in docs/pipelines.md"
  head -n "$(wc -l <"$D/doc-dry-run.txt")" "$D/dry-run.txt" | diff "$D/doc-dry-run.txt" - ||
    fail "docs/pipelines.md's dry run differs from the command's"
  "$Q" run "$GRID" --workers 2 --threads 1 >"$D/run.log" 2>&1 || fail "qsweep run exited $?"
  expect "succeeded jobs" 64 "$(state_count succeeded)"
  expect "attempts" 64 "$(psql_q "SELECT count(*) FROM attempts")"
  check_edges
  # each job's link to the experiment holds its stage, which the trained models' names read
  expect "jobs per stage" "sweep 60,train 4" \
    "$(psql_q "SELECT string_agg(stage || ' ' || n, ',' ORDER BY stage) FROM
               (SELECT stage, count(*) AS n FROM experiment_jobs GROUP BY stage) s")"
  expect "training jobs" 4 "$(psql_q "SELECT count(*) FROM experiment_jobs ej JOIN jobs j
                                      ON j.id = ej.job WHERE ej.stage = 'train' AND j.kind = 'train'")"
  expect "training jobs that recorded a model digest" 4 \
    "$(psql_q "SELECT count(*) FROM v_trained_models")"
  expect "sweep jobs that ran on the recorded digest" 60 \
    "$(psql_q "SELECT count(*) FROM v_trained_model_use WHERE matches")"
  # the record beside each model is the digest the store holds
  while IFS='|' read -r path digest; do
    expect "record $path.digest" "$digest" "$(cat "$path.digest")"
    [ -f "$path/model.safetensors" ] || fail "no trained model in $path"
  done < <(psql_q "SELECT model_path, digest FROM v_trained_models")
  expect "eval ppl rows without their baseline's" 0 \
    "$(psql_q "SELECT count(*) FROM v_sensitivity WHERE experiment = 'pipeline-tiny'
               AND metric = 'ppl' AND baseline_value IS NULL")"
  expect "eval ppl rows" 56 \
    "$(psql_q "SELECT count(*) FROM v_sensitivity WHERE experiment = 'pipeline-tiny'
               AND metric = 'ppl'")"
  # the pipeline views, qsweep results' side-by-side tables and the report's heatmap, each
  # recomputed from jobs, results and job_deps (tests/cli/pipeline_check.py)
  python3 "$SRC/tests/cli/pipeline_check.py" --db "$QSWEEP_DB" --qsweep "$Q" \
    --experiment pipeline-tiny >"$D/check.log" 2>&1 ||
    { cat "$D/check.log" >&2; fail "pipeline_check.py on the run"; }
  cat "$D/check.log"
  # qsweep plan names the trained models as the pipeline does, and takes those names
  rc=0
  "$Q" plan pipeline-tiny --budget-bits 6 >"$D/plan.txt" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "qsweep plan chose one of 4 models by itself"
  grep -Eq "several models \(train/micro/(bf16|nvfp4)/seed=[12], train/micro/(bf16|nvfp4)/seed=[12]\): choose one with --model" \
    "$D/plan.txt" || { cat "$D/plan.txt" >&2; fail "qsweep plan: no error naming the trained models"; }
  "$Q" plan pipeline-tiny --budget-bits 6 --model train/micro/nvfp4/seed=2 >"$D/plan.txt" 2>&1 ||
    { cat "$D/plan.txt" >&2; fail "qsweep plan --model train/micro/nvfp4/seed=2"; }
  ;;
restart)
  "$Q" submit "$GRID" >"$D/submit.log" 2>&1 || fail "qsweep submit"
  "$Q" coordinator --bind "$EP" >"$D/coordinator-1.log" 2>&1 &
  c1=$!
  pids+=($c1)
  for w in 1 2; do
    "$Q" worker --connect "$EP" --id "w$w" --threads 1 --exit-when-idle 200 >"$D/worker-$w.log" 2>&1 &
    pids+=($!)
  done
  # the limits of the waits below only bound a hang, far past a loaded machine's time
  for _ in $(seq 1 6000); do
    [ "$(psql_q "SELECT count(*) FROM jobs WHERE kind = 'train' AND state = 'succeeded'")" = 4 ] &&
      break
    sleep 0.1
  done
  trained=$(psql_q "SELECT count(*) FROM jobs WHERE kind = 'train' AND state = 'succeeded'")
  expect "training jobs succeeded before the kill" 4 "$trained"
  kill -KILL "$c1"
  wait "$c1" 2>/dev/null || true
  swept=$(psql_q "SELECT count(*) FROM jobs WHERE kind <> 'train' AND state = 'succeeded'")
  echo "pipeline_test restart: coordinator killed with 4 of 4 training jobs and $swept of 60 sweep jobs succeeded"
  [ "$swept" -lt 60 ] || fail "the sweep had ended before the kill: nothing between the stages"
  "$Q" coordinator --bind "$EP" --exit-when-done >"$D/coordinator-2.log" 2>&1 &
  c2=$!
  pids+=($c2)
  for _ in $(seq 1 6000); do
    kill -0 "$c2" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$c2" 2>/dev/null &&
    fail "the restarted coordinator still runs after 600 s: $(psql_q "SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM jobs GROUP BY state) s")"
  wait "$c2" || fail "the restarted coordinator exited $?"
  expect "succeeded jobs" 64 "$(state_count succeeded)"
  # Nothing ran twice: one attempt per job, besides an attempt whose ASSIGN the killed
  # coordinator had committed but not sent (its worker's HELLO to the new one names no job;
  # it ended as preempted, never ran and counts against nothing: docs/cluster.md).
  expect "jobs with other than exactly one attempt that ran" 0 \
    "$(psql_q "SELECT count(*) FROM jobs j WHERE (SELECT count(*) FROM attempts a
               WHERE a.job = j.id AND a.outcome <> 'preempted') <> 1")"
  expect "attempts that ran" 64 "$(psql_q "SELECT count(*) FROM attempts WHERE outcome <> 'preempted'")"
  expect "preempted attempts without the restart's reason" 0 \
    "$(psql_q "SELECT count(*) FROM attempts WHERE outcome = 'preempted' AND error NOT LIKE
               'worker re-registered after the coordinator restart without it (its ASSIGN %'")"
  expect "attempts counted against max_attempts" 0 "$(psql_q "SELECT sum(attempts_used) FROM jobs")"
  check_edges
  expect "sweep jobs that ran on the recorded digest" 60 \
    "$(psql_q "SELECT count(*) FROM v_trained_model_use WHERE matches")"
  ;;
failed)
  # lr 100 without clipping: every run diverges at its second step
  rc=0
  "$Q" run "$GRID" --set 'stages.train.training.lrs=[100]' --set '+stages.train.training.clip=0' \
    >"$D/run.log" 2>&1 || rc=$?
  expect "qsweep run's exit code" 5 "$rc"
  expect "failed training jobs" 4 "$(psql_q "SELECT count(*) FROM jobs WHERE kind = 'train'
                                             AND state = 'failed' AND last_error LIKE 'diverged at step %'")"
  expect "failed jobs" 64 "$(state_count failed)"
  # a baseline quotes its training job; an eval job the first of its dependencies that ended
  expect "baselines not failed with their training job's id and error" 0 \
    "$(psql_q "SELECT count(*) FROM jobs b JOIN job_deps d ON d.job = b.id JOIN jobs t ON t.id = d.depends_on
               WHERE b.kind = 'baseline' AND b.last_error <> 'dependency ' || t.id || ' failed: ' || t.last_error")"
  expect "eval jobs not failed with one of their dependencies' id and error" 0 \
    "$(psql_q "SELECT count(*) FROM jobs e WHERE e.kind = 'eval' AND NOT EXISTS (
               SELECT 1 FROM job_deps d JOIN jobs x ON x.id = d.depends_on WHERE d.job = e.id
               AND e.last_error = 'dependency ' || x.id || ' failed: ' || x.last_error)")"
  expect "sweep jobs that got an attempt" 0 \
    "$(psql_q "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job WHERE j.kind <> 'train'")"
  check_edges
  # qsweep results says the runs failed, not that they are unfinished
  "$Q" results pipeline-tiny >"$D/results.txt" || fail "qsweep results"
  expect "recipes whose 2 runs read as failed" 2 \
    "$(grep -c '^    [a-z0-9]* *2 seeds *(failed)  (2 of 2 runs failed or cancelled)$' "$D/results.txt")"
  grep -q "not finished" "$D/results.txt" && fail "a failed run reads as not finished"
  ;;
resubmit)
  "$Q" run "$GRID" >"$D/run.log" 2>&1 || fail "qsweep run exited $?"
  out=$("$Q" submit "$GRID") || fail "qsweep submit again"
  grep -q ": 64 jobs: 0 new, 64 already done, 0 already queued" <<<"$out" ||
    fail "resubmission: $out"
  "$Q" run "$GRID" >"$D/run-again.log" 2>&1 || fail "qsweep run again exited $?"
  expect "attempts after running it again" 64 "$(psql_q "SELECT count(*) FROM attempts")"
  # one more format: the training stage and the sweep's earlier jobs are reused
  more=(--set name=pipeline-tiny-fp8 --set 'stages.sweep.sensitivity.formats=[nvfp4, mxfp4, fp8_e4m3]')
  out=$("$Q" submit "$GRID" "${more[@]}") || fail "qsweep submit with fp8"
  grep -q ": 92 jobs: 28 new, 64 already done, 0 already queued" <<<"$out" ||
    fail "submission with one more format: $out"
  "$Q" run "$GRID" "${more[@]}" >"$D/run-fp8.log" 2>&1 || fail "qsweep run with fp8 exited $?"
  expect "attempts after the fp8 run" 92 "$(psql_q "SELECT count(*) FROM attempts")"
  expect "training attempts" 4 "$(psql_q "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job
                                          WHERE j.kind = 'train'")"
  # the model of bf16 seed 2 written again with other weights (those of bf16 seed 1, the same
  # shape): its new eval jobs (its baseline is reused) refuse it, naming the digest its training
  # job recorded
  src=$(psql_q "SELECT model_path FROM v_trained_models m JOIN jobs j ON j.id = m.train_job_id
                WHERE j.spec->'recipe'->>'name' = 'bf16' AND (j.spec->>'seed')::int = 1")
  dst=$(psql_q "SELECT model_path FROM v_trained_models m JOIN jobs j ON j.id = m.train_job_id
                WHERE j.spec->'recipe'->>'name' = 'bf16' AND (j.spec->>'seed')::int = 2")
  want=$(cat "$dst.digest")
  cp "$src/model.safetensors" "$dst/model.safetensors"
  more=(--set name=pipeline-tiny-int8 --set 'stages.sweep.sensitivity.formats=[int8_channel]')
  rc=0
  "$Q" run "$GRID" "${more[@]}" >"$D/run-int8.log" 2>&1 || rc=$?
  expect "qsweep run on a model written again: exit code" 5 "$rc"
  expect "jobs of the rewritten model refused for its digest" 7 \
    "$(psql_q "SELECT count(*) FROM jobs j WHERE j.state = 'failed' AND j.spec->'model'->>'path' = '$dst'
               AND j.last_error LIKE '%differs from $want, which the store recorded when its training job%'")"
  expect "failed jobs" 7 "$(state_count failed)"
  expect "int8 jobs of the other models succeeded" 21 \
    "$(psql_q "SELECT count(*) FROM jobs WHERE state = 'succeeded' AND spec->>'format' = 'int8_channel'")"
  # the same model copied over with its record beside it: the record now agrees with the
  # weights, but the ASSIGN carries the digest the store recorded, so its 7 new jobs are
  # refused too, each at its first attempt (a permanent error, not retried)
  got=$(cat "$src.digest")
  train_key=$(psql_q "SELECT train_job_key FROM v_trained_models WHERE model_path = '$dst'")
  cp "$src.digest" "$dst.digest"
  more=(--set name=pipeline-tiny-fp6 --set 'stages.sweep.sensitivity.formats=[mxfp6_e2m3]')
  rc=0
  "$Q" run "$GRID" "${more[@]}" >"$D/run-fp6.log" 2>&1 || rc=$?
  expect "qsweep run on a model copied over with its record: exit code" 5 "$rc"
  expect "jobs of the copied model refused, naming path, both digests and training job" 7 \
    "$(psql_q "SELECT count(*) FROM jobs j WHERE j.state = 'failed' AND j.spec->>'format' = 'mxfp6_e2m3'
               AND j.last_error LIKE 'model $dst: digest $got differs from $want, which the store recorded when its training job $train_key ended%'")"
  expect "attempts of the refused fp6 jobs (one each)" 7 \
    "$(psql_q "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job
               WHERE j.spec->>'format' = 'mxfp6_e2m3' AND j.state = 'failed'")"
  expect "fp6 jobs of the other models succeeded" 21 \
    "$(psql_q "SELECT count(*) FROM jobs WHERE state = 'succeeded' AND spec->>'format' = 'mxfp6_e2m3'")"
  expect "sweep jobs that ran on other weights than recorded" 0 \
    "$(psql_q "SELECT count(*) FROM v_trained_model_use WHERE NOT matches")"
  "$Q" results pipeline-tiny-fp6 >"$D/results-fp6.txt" || fail "qsweep results pipeline-tiny-fp6"
  ! grep -q "model mismatch" "$D/results-fp6.txt" || fail "a mismatch flag though the worker refused the copy"
  # its failed-job lines name the model as the pipeline does, not by its folder or key
  expect "failed-job lines naming train/micro/bf16/seed=2" 7 \
    "$(grep -c "^  job [0-9]* (eval of train/micro/bf16/seed=2, [0-9] of [0-9] attempts): model train/micro/bf16/seed=2: digest $got differs from $want, which the store recorded when its training job train/micro/bf16/seed=2 ended" "$D/results-fp6.txt")"
  ! grep -q -e "$dst" -e "$train_key" "$D/results-fp6.txt" || fail "results name a trained model by its folder or key"
  # and so does the report's data: its failed jobs' errors and the models of its rows
  "$Q" report pipeline-tiny-fp6 -o "$D/report-fp6.html" || fail "qsweep report pipeline-tiny-fp6"
  expect "report errors naming train/micro/bf16/seed=2 (each job's and its last attempt's)" 14 \
    "$(grep -o "model train/micro/bf16/seed=2: digest $got differs" "$D/report-fp6.html" | wc -l)"
  grep -q '"model": *"train/micro/bf16/seed=1"' "$D/report-fp6.html" || fail "report rows without the model's name"
  ! grep -q -e "$dst" -e "\"model\": *\"$train_key\"" "$D/report-fp6.html" ||
    fail "the report names a trained model by its folder or key"
  "$Q" results pipeline-tiny >"$D/results.txt" || fail "qsweep results pipeline-tiny"
  ! grep -q "model mismatch" "$D/results.txt" || fail "a mismatch flag on the untouched run"
  ;;
finetune)
  # {init: path} in a pipeline: the 3-block test checkpoint fine-tuned 8 steps with bf16, then
  # the fine-tuned model and the checkpoint itself swept side by side
  "$Q" run "$GRID" --set "stages.train.training.shapes=[{init: $SRC/tests/engine/data/llama3_gqa}]" \
    --set 'stages.train.training.recipes=[bf16]' --set 'stages.train.training.seeds=[1]' \
    --set "stages.sweep.models=[{from: train, shape: llama3_gqa}, $SRC/tests/engine/data/llama3_gqa]" \
    >"$D/run.log" 2>&1 || fail "qsweep run exited $?"
  expect "succeeded jobs (1 train, 2 x (1 baseline + 14 eval))" 31 "$(state_count succeeded)"
  expect "sweep jobs of the fine-tuned model depending on the training job" 15 \
    "$(psql_q "SELECT count(*) FROM jobs j JOIN job_deps d ON d.job = j.id JOIN jobs t ON t.id = d.depends_on
               WHERE t.kind = 'train' AND t.job_key = j.spec->'model'->>'trained_by'")"
  expect "sweep jobs of the checkpoint itself with an edge to a training job" 0 \
    "$(psql_q "SELECT count(*) FROM jobs j JOIN job_deps d ON d.job = j.id JOIN jobs t ON t.id = d.depends_on
               WHERE t.kind = 'train' AND NOT j.spec->'model' ? 'trained_by'")"
  expect "sweep jobs that ran on the recorded digest" 15 \
    "$(psql_q "SELECT count(*) FROM v_trained_model_use WHERE matches")"
  # fine-tuning changed the model: the two baselines' perplexities differ
  expect "distinct baseline perplexities" 2 \
    "$(psql_q "SELECT count(DISTINCT r.value) FROM results r JOIN jobs j ON j.id = r.job
               WHERE j.kind = 'baseline' AND r.name = 'ppl'")"
  ;;
*)
  fail "unknown case (expected run, restart, failed, resubmit or finetune)"
  ;;
esac
echo "pipeline_test $CASE: ok"
