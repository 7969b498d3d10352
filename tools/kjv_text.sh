#!/usr/bin/env bash
# Writes the King James Bible as plain UTF-8 text (one verse per line, "Ge1:1 In the
# beginning ...") to ${XDG_CACHE_HOME:-~/.cache}/qsweep/data/kjv.txt (or $1), from Debian's
# bible-kjv-text data through its `bible` reader (package bible-kjv; tools/install-deps.sh
# installs both). The training experiment experiments/tiny-fp4-training.yaml reads it with the
# bytes tokenizer. Idempotent: an existing file is left as it is.
set -euo pipefail
out="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/data/kjv.txt}"
if [ -s "$out" ]; then echo "kjv_text: $out exists"; exit 0; fi
command -v bible >/dev/null || { echo "kjv_text: no 'bible' command: run tools/install-deps.sh" >&2; exit 2; }
mkdir -p "$(dirname "$out")"
bible -f "Gen1:1-Rev22:21" > "$out.tmp"
mv "$out.tmp" "$out"
echo "kjv_text: wrote $out ($(wc -c < "$out") bytes)"
