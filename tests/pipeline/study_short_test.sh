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
# ctest runs it with OPENBLAS_CORETYPE=Haswell: the losses depend on OpenBLAS's kernel family.
# Regenerate the expected output (only after a deliberate numerics change):
#   OPENBLAS_CORETYPE=Haswell bash tests/pipeline/study_short_test.sh build/release/cli/qsweep . --update
# Usage: study_short_test.sh QSWEEP_BIN SOURCE_DIR [--update]
set -euo pipefail
qsweep=$(realpath "$1")
src=$(realpath "$2")
update=${3:-}
expected=$src/tests/pipeline/data/study-short.txt
gguf=${QSWEEP_SMOLLM2_GGUF:-${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf}
if ! command -v bible >/dev/null; then
  echo "study_short_test: skipped: no 'bible' command (tools/install-deps.sh installs bible-kjv)"
  exit 77
fi
if [ ! -s "$gguf" ]; then
  echo "study_short_test: skipped: $gguf missing (bash tools/fetch_smollm2.sh)"
  exit 77
fi
D=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-study-XXXXXX")
trap '"$qsweep" db stop >/dev/null 2>&1 || true; rm -rf "$D"' EXIT
chmod 755 "$D" # as root the private cluster runs as the user qsweep
export XDG_DATA_HOME=$D/data XDG_STATE_HOME=$D/state XDG_CACHE_HOME=$D/cache
unset QSWEEP_DB
mkdir -p "$D/cache/qsweep/models"
ln -s "$gguf" "$D/cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf"
QSWEEP=$qsweep bash "$src/tools/study_data.sh" >/dev/null 2>&1
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
if ! "$qsweep" run "$src/experiments/fp4-trained-vs-bf16.yaml" "${short[@]}" >"$D/run.txt" 2>&1; then
  tr '\r' '\n' <"$D/run.txt" | tail -n 40
  echo "study_short_test: qsweep run experiments/fp4-trained-vs-bf16.yaml (shortened) failed"
  exit 1
fi
# The tables, without the footer that names this run's private cluster.
eval "$("$qsweep" db start)"
"$qsweep" results fp4-trained-vs-bf16-short | sed '/^The same from the views/,$d' >"$D/results.txt"
# and the validation-loss curves the docs read the steps from
psql "$QSWEEP_DB" -X -v ON_ERROR_STOP=1 -v experiment=fp4-trained-vs-bf16-short \
  -f "$src/tools/study_curves.sql" >>"$D/results.txt"
# The report names each trained model by its stage (two training stages: train, finetune).
"$qsweep" report fp4-trained-vs-bf16-short -o "$D/report.html" >/dev/null
for name in train/mini/bf16/seed=1 train/mini/nvfp4/seed=1 \
  finetune/SmolLM2-135M-Instruct.Q4_1.gguf/bf16/seed=1 finetune/SmolLM2-135M-Instruct.Q4_1.gguf/nvfp4/seed=1; do
  grep -qF "\"$name\"" "$D/report.html" || { echo "study_short_test: the report does not name $name"; exit 1; }
done
if [ "$update" = --update ]; then
  cp "$D/results.txt" "$expected"
  echo "study_short_test: wrote $expected"
  exit 0
fi
if ! diff -u "$expected" "$D/results.txt"; then
  echo "study_short_test: qsweep results differ from $expected (above: - committed, + this run)"
  exit 1
fi
echo "study_short_test: ok ($(wc -l <"$expected") lines equal)"
