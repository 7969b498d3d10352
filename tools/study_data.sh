#!/usr/bin/env bash
# Writes the texts and token files of experiments/fp4-trained-vs-bf16.yaml into
# ${XDG_CACHE_HOME:-~/.cache}/qsweep/data/ (or $1), from Debian's bible-kjv-text through its
# `bible` reader (tools/install-deps.sh installs it), split by book so the sweeps read text no
# model trained on:
#   kjv-gen-jude.txt               Genesis 1:1 to Jude 1:25, the training text (4,339,062 bytes)
#   kjv-gen-jude.smollm2.tokens    the same through SmolLM2's tokenizer (the fine-tunes' data)
#   kjv-revelation.bytes.tokens    Revelation, the held-out text, as bytes (the mini sweeps)
#   kjv-revelation.smollm2.tokens  Revelation through SmolLM2's tokenizer (the SmolLM2 sweeps)
# The SmolLM2 tokenizer is the one in the GGUF tools/fetch_smollm2.sh fetches. Token files are
# written by `qsweep tokenize` (build/release/cli/qsweep, or $QSWEEP). Idempotent: files that
# exist are left as they are.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/data}"
qsweep="${QSWEEP:-$here/build/release/cli/qsweep}"
gguf="${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf"
command -v bible >/dev/null || { echo "study_data: no 'bible' command: run tools/install-deps.sh" >&2; exit 2; }
[ -x "$qsweep" ] || { echo "study_data: $qsweep: not built (cmake --build build/release)" >&2; exit 2; }
[ -s "$gguf" ] || { echo "study_data: $gguf: missing (bash tools/fetch_smollm2.sh)" >&2; exit 2; }
mkdir -p "$out"
text() { # FILE RANGE
  if [ ! -s "$out/$1" ]; then
    bible -f "$2" > "$out/$1.tmp"
    mv "$out/$1.tmp" "$out/$1"
  fi
}
tokens() { # TOKENIZER TEXT FILE
  [ -s "$out/$3" ] || "$qsweep" tokenize "$1" "$out/$2" -o "$out/$3"
}
text kjv-gen-jude.txt "Gen1:1-Jude1:25"
text kjv-revelation.txt "Rev1:1-Rev22:21"
tokens "$gguf" kjv-gen-jude.txt kjv-gen-jude.smollm2.tokens
tokens bytes kjv-revelation.txt kjv-revelation.bytes.tokens
tokens "$gguf" kjv-revelation.txt kjv-revelation.smollm2.tokens
echo "study_data: $out holds the study's texts and token files"
