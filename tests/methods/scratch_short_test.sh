#!/usr/bin/env bash
# The methods study's fourth model, shortened for CI (docs/methods.md, "A fourth model"):
# experiments/fp4-methods-scratch.yaml through `qsweep run` on a private cluster with its stages
# cut down by --set (mini trained from scratch 30 steps of 4 x 256 bytes; its sweep on 2 chunks
# of Revelation, 2 calibration chunks, MXFP4 weights, q and up, by rtn, gptq, rotate32 and
# rotate-full), the pipeline's tables turned into the docs' method tables by
# tests/methods/methods_table.py --decimals 6 and compared digit for digit with the committed
# tests/methods/data/fp4_methods_scratch_short.md, which the same commands printed. The text is
# the King James Bible (tools/study_data.sh, Debian's bible-kjv-text, which also tokenizes it
# for SmolLM2); skipped (77) without `bible` or without the SmolLM2 GGUF
# (tools/fetch_smollm2.sh). The fixed-order GEMM makes every figure a function of the run alone.
# Regenerate the expected tables (only after a deliberate numerics change):
#   bash tests/methods/scratch_short_test.sh build/release/cli/qsweep . --update
# Usage: scratch_short_test.sh QSWEEP_BIN SOURCE_DIR [--update]
set -euo pipefail
Q=$(realpath "$1")
src=$(realpath "$2")
update=${3:-}
expected=$src/tests/methods/data/fp4_methods_scratch_short.md
table=$src/tests/methods/methods_table.py
. "$(dirname "${BASH_SOURCE[0]}")/../lib/study_data.sh"
study_data_setup scratch_short_test scratch
short=(
  --set name=fp4-methods-scratch-short
  --set stages.train.training.steps=30 --set stages.train.training.batch=4
  --set stages.train.training.warmup=2 --set stages.train.training.eval_every=5
  --set stages.train.training.eval_batches=2 --set stages.train.training.log_every=5
  --set stages.train.training.checkpoint_every=30
  --set stages.sweep.dataset.max_chunks=2 --set stages.sweep.dataset.calibration.chunks=2
  --set 'stages.sweep.sensitivity.formats=[mxfp4]'
  --set 'stages.sweep.sensitivity.quantize=[weights]'
  --set 'stages.sweep.sensitivity.parts=[q,up]'
  --set 'stages.sweep.sensitivity.method=[rtn,gptq,rotate32,rotate-full]'
)
"$Q" run "$src/experiments/fp4-methods-scratch.yaml" "${short[@]}" >"$D/run.log" 2>&1 ||
  fail "qsweep run experiments/fp4-methods-scratch.yaml (shortened)"
if [ "$update" = --update ]; then
  python3 "$table" --block scratch --decimals 6 render "$D/run.log" >"$expected"
  echo "scratch_short_test: wrote $expected"
  exit 0
fi
python3 "$table" --block scratch --decimals 6 check "$D/run.log" "$expected" ||
  fail "the method tables differ from $expected (above: - committed, + this run)"
# Every method's table came back: 4 methods, MXFP4 weights, each naming its method (rtn: none).
n=$(grep -c '^mini (30 steps, lr 0.003)  mxfp4 .* weights  component-wise$' "$D/run.log" || true)
[ "$n" -eq 4 ] || fail "$n method tables in the run, 4 expected"
# a --decimals outside 1..6 is refused
for d in 0 7; do
  rc=0
  python3 "$table" --decimals $d render "$D/run.log" >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "--decimals $d was taken (rc $rc)"
done
# standard input is read once, for either kind of table
python3 "$table" --block scratch --decimals 6 render - <"$D/run.log" >"$D/stdin.md" ||
  fail "methods_table.py could not read the run from standard input"
diff -u "$expected" "$D/stdin.md" || fail "the tables read from standard input differ"
# a table whose options are {} (the header then names none) is a table of its own
sed -E '0,/^mini .* mxfp4 \{"rounding": "rne", "scale_rule": "rceil"\}  weights  component-wise$/s//mini (30 steps, lr 0.003)  mxfp4  weights  component-wise/' \
  "$D/run.log" >"$D/noopts.log"
grep -q '^mini (30 steps, lr 0.003)  mxfp4  weights  component-wise$' "$D/noopts.log" ||
  fail "the options-less header was not made"
python3 "$table" --block scratch --decimals 6 render "$D/noopts.log" >"$D/noopts.md" ||
  fail "methods_table.py refused a table without options"
diff -u "$expected" "$D/noopts.md" ||
  fail "a table without options (rtn's, above) was read otherwise than with them"
echo "scratch_short_test: ok"
