#!/usr/bin/env bash
# The study of docs/study-fp4-trained-vs-bf16.md, shortened for CI (about 2 minutes on 2
# cores): experiments/fp4-trained-vs-bf16.yaml through `qsweep run` on a private cluster with
# its stages cut down by --set (mini trained 10 steps of 4 x 256 bytes, seed 1; SmolLM2 fine-
# tuned 1 step of 64 tokens; the mini sweep on 4 chunks; the SmolLM2 sweep one component in
# NVFP4 W4A16), then `qsweep results` and tools/study_curves.sql's curves compared digit for
# digit with the committed
# tests/pipeline/data/study-short.txt, which the same commands printed. The text is the King
# James Bible (tools/study_data.sh, Debian's bible-kjv-text); skipped (77) without `bible` or
# without the SmolLM2 GGUF (tools/fetch_smollm2.sh).
# The engine's fixed-order GEMM (worker/engine/gemm_cpu.h) makes every figure a function of the
# run alone, whatever the CPU or OPENBLAS_CORETYPE.
# Regenerate the expected output (only after a deliberate numerics change):
#   bash tests/pipeline/study_short_test.sh build/release/cli/qsweep . --update
# Usage: study_short_test.sh QSWEEP_BIN SOURCE_DIR [--update]
set -euo pipefail
Q=$(realpath "$1")
src=$(realpath "$2")
update=${3:-}
expected=$src/tests/pipeline/data/study-short.txt
. "$(dirname "${BASH_SOURCE[0]}")/../lib/study_data.sh"
study_data_setup study_short_test study
short=(
  --set name=fp4-trained-vs-bf16-short
  --set stages.train.training.steps=10 --set 'stages.train.training.seeds=[1]'
  --set stages.train.training.batch=4 --set stages.train.training.warmup=2
  --set stages.train.training.eval_every=5 --set stages.train.training.eval_batches=2
  --set stages.train.training.log_every=5
  --set stages.finetune.training.steps=1 --set stages.finetune.training.batch=1
  --set stages.finetune.training.warmup=0 --set stages.finetune.training.dataset.ctx=64
  --set stages.finetune.training.eval_every=1 --set stages.finetune.training.eval_batches=1
  --set stages.finetune.training.log_every=1 --set stages.finetune.training.checkpoint_every=1
  --set stages.sweep.dataset.max_chunks=4
  --set stages.sweep-smollm2.dataset.ctx=64 --set stages.sweep-smollm2.dataset.max_chunks=2
  --set 'stages.sweep-smollm2.sensitivity.formats=[nvfp4]'
  --set 'stages.sweep-smollm2.sensitivity.quantize=[weights]'
  --set 'stages.sweep-smollm2.sensitivity.modes=[component]'
  --set '+stages.sweep-smollm2.sensitivity.parts=[down]'
)
"$Q" run "$src/experiments/fp4-trained-vs-bf16.yaml" "${short[@]}" >"$D/run.log" 2>&1 ||
  fail "qsweep run experiments/fp4-trained-vs-bf16.yaml (shortened)"
# The tables, without the footer that names this run's private cluster.
pg_db_start
"$Q" results fp4-trained-vs-bf16-short | sed '/^The same from the views/,$d' >"$D/results.txt"
# and the validation-loss curves the docs read the steps from
psql "$QSWEEP_DB" -X -v ON_ERROR_STOP=1 -v experiment=fp4-trained-vs-bf16-short \
  -f "$src/tools/study_curves.sql" >>"$D/results.txt"
# The report names each trained model by its stage (two training stages: train, finetune).
"$Q" report fp4-trained-vs-bf16-short -o "$D/report.html" >/dev/null
for name in train/mini/bf16/seed=1 train/mini/nvfp4/seed=1 \
  finetune/SmolLM2-135M-Instruct.Q4_1.gguf/bf16/seed=1 finetune/SmolLM2-135M-Instruct.Q4_1.gguf/nvfp4/seed=1; do
  grep -qF "\"$name\"" "$D/report.html" || fail "the report does not name $name"
done
if [ "$update" = --update ]; then
  cp "$D/results.txt" "$expected"
  echo "study_short_test: wrote $expected"
  exit 0
fi
diff -u "$expected" "$D/results.txt" ||
  fail "qsweep results differ from $expected (above: - committed, + this run)"
echo "study_short_test: ok ($(wc -l <"$expected") lines equal)"
