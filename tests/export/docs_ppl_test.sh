#!/usr/bin/env bash
# docs/export.md's llama.cpp table, qsweep's side: the perplexities qsweep gives SmolLM2-135M
# and its MXFP4 W4A16 GGUF export (every block linear, 4 chunks of 512) are the ones the table
# shows, digit for digit. llama.cpp's side needs its 40-minute build and runs only by hand
# (bench/peer/llama_cpp_export_ppl.sh, which prints the whole table). Skipped (77) without
# SmolLM2 (tools/fetch_smollm2.sh).
# Usage: docs_ppl_test.sh EXPORT_TEST SOURCE_DIR [PRINTED]
#   PRINTED: what `export_test peer ... 512 4` already printed (the peer script passes its own
#   run's output), checked instead of running it again.
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printed="${3:-$tmp/ppl.txt}"
if [ -z "${3:-}" ]; then
  gguf="$HOME/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  [ -f "$gguf" ] || { echo "skipped: $gguf absent (tools/fetch_smollm2.sh fetches it)"; exit 77; }
  "$1" peer "$gguf" "$tmp/export" "$2/tests/engine/data/gpl3.smollm2.tokens" 512 4 | tee "$printed"
fi
n=0
for v in $(awk '$1 == "qsweep" && $3 == "ppl" && $2 != "export" {printf "%.4f\n", $4}' "$printed"); do
  grep -qF "| $v |" "$2/docs/export.md" ||
    { echo "FAILED: qsweep's perplexity $v is not in docs/export.md's llama.cpp table"; exit 1; }
  n=$((n + 1))
done
[ "$n" = 2 ] || { echo "FAILED: expected 2 perplexities from export_test peer, got $n"; exit 1; }
echo "docs/export.md shows qsweep's $n perplexities as printed"
