#!/usr/bin/env bash
# qsweep's main job on a fresh machine (README.md): installs what is needed, builds, fetches
# SmolLM2-135M and runs the component-wise FP4 sensitivity sweep on the CPU, on a private
# PostgreSQL cluster, printing the results tables at the end.
#
# Usage: bash tools/demo.sh [qsweep run options...]
#   e.g. bash tools/demo.sh --workers 4 --set dataset.max_chunks=4 --set name=smollm2-4chunks
# Needs root or sudo for the Debian packages. The cluster lives in
# ${XDG_DATA_HOME:-~/.local/share}/qsweep/pg; run the script again and only unfinished jobs run.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== packages"
# what the demo builds and runs with, not the test toolchain (tools/test.sh installs that)
bash tools/install-deps.sh --only build,run

echo "== build"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" --target qsweep

echo "== model"
bash tools/fetch_smollm2.sh

echo "== sweep"
exec build/release/cli/qsweep run experiments/smollm2-fp4-components.yaml "$@"
