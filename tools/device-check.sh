#!/usr/bin/env bash
# The device check: configures a CUDA build, builds it (nvcc, -Werror on host and
# device code), runs every GPU test (ctest label `gpu`) and the GPU benchmarks, and prints one
# summary. Meant to finish in under 5 minutes on one H200 with 16 cores.
#
# Usage: tools/device-check.sh [build-dir]     (default build/device)
# Environment:
#   QSWEEP_SMOLLM2   path of SmolLM2-135M-Instruct.Q4_1.gguf. Default: the cache of
#                    tools/fetch_smollm2.sh (${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models), then
#                    shared/models/ in the repository. The device machine cannot reach the
#                    network and only the repository tree travels to it: fetch the file here
#                    (tools/fetch_smollm2.sh shared/models) so that it travels in shared/.
#                    When absent the SmolLM2 parts are skipped with a message.
#   DEVICE_CHECK_JOBS  build parallelism (default: all cores).
# Exit status: 0 when the build passed and no test or benchmark failed (skipped is not failed),
# 1 otherwise. Without a GPU the build still runs and the summary says "no GPU: skipped".
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build/device}"
jobs="${DEVICE_CHECK_JOBS:-$(nproc)}"
log="$build/device-check.log"
start=$(date +%s)
summary=()
fail=0

note() { summary+=("$1"); echo "device-check: $1" >&2; }
elapsed() { echo $(( $(date +%s) - start )); }

mkdir -p "$build"
: >"$log"

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  note "build: no nvcc found: CUDA build skipped"
  printf '\n== device-check summary (%ss) ==\n' "$(elapsed)"; printf '%s\n' "${summary[@]}"
  exit 0
fi
export PATH="$PATH:/usr/local/cuda/bin"

# --- GPU present? (nvidia-smi, else the driver's device nodes)
gpu="none"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu="$(nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader | head -1)"
fi

# --- configure and build
if cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DQSWEEP_CUDA=ON >>"$log" 2>&1 &&
   grep -q "CUDA kernels ON" "$log" &&
   cmake --build "$build" -j"$jobs" >>"$log" 2>&1; then
  note "build: ok (CUDA, -Werror), $(elapsed)s"
else
  note "build: FAILED (see $log; missing packages: tools/install-deps.sh lists them)"
  tail -n 25 "$log" >&2
  printf '\n== device-check summary (%ss) ==\n' "$(elapsed)"; printf '%s\n' "${summary[@]}"
  exit 1
fi

# --- SmolLM2 checkpoint
smol="${QSWEEP_SMOLLM2:-}"
if [ -z "$smol" ]; then
  for c in "${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
           "$root/shared/models/SmolLM2-135M-Instruct.Q4_1.gguf"; do
    if [ -f "$c" ]; then smol="$c"; break; fi
  done
fi
if [ -n "$smol" ] && [ -f "$smol" ]; then
  export QSWEEP_SMOLLM2="$smol"
  note "smollm2: $smol"
else
  unset QSWEEP_SMOLLM2
  note "smollm2: checkpoint absent: SmolLM2 parts skipped (run tools/fetch_smollm2.sh shared/models before the check: the device machine has no network)"
fi

# --- GPU tests
if [ "$gpu" = "none" ]; then
  note "gpu: no GPU: skipped (GPU tests exit 77, benchmarks not run)"
fi
ctest_out="$build/ctest-gpu.txt"
if ctest --test-dir "$build" -L gpu --output-on-failure --timeout 240 >"$ctest_out" 2>&1; then
  res=ok
else
  res=FAILED
  fail=1
fi
# One line per test: "1/2 Test #44: name ....   Passed  0.30 sec".
per_test='^ *[0-9]+/[0-9]+ Test +#[0-9]+: '
passed=$(grep -cE "$per_test.* Passed " "$ctest_out" || true)
skipped=$(grep -cE "$per_test.*Skipped " "$ctest_out" || true)
failed=$(grep -E "$per_test" "$ctest_out" | grep -cvE " Passed |Skipped " || true)
note "ctest -L gpu: $res: $passed passed, $skipped skipped, $failed failed ($ctest_out)"

# --- GPU benchmarks: every executable named bench_gpu_* or bench_cuda_* under the build's
# bench/; their lines starting "summary:" (else their last 4 lines) go into the summary.
if [ "$gpu" != "none" ]; then
  note "device: $gpu"
  while IFS= read -r b; do
    name="$(basename "$b")"
    out="$build/$name.txt"
    if timeout 150 "$b" >"$out" 2>&1; then
      if grep -q '^summary:' "$out"; then
        while IFS= read -r l; do note "$name: ${l#summary: }"; done < <(grep '^summary:' "$out")
      else # a benchmark without summary lines: its last lines
        while IFS= read -r l; do note "$name: $l"; done < <(tail -n 4 "$out")
      fi
    else
      rc=$?
      if [ "$rc" = 77 ]; then
        note "$name: skipped: $(tail -1 "$out")"
      else
        note "$name: FAILED (exit $rc, see $out)"
        fail=1
      fi
    fi
  done < <(find "$build/bench" -type f -executable \( -name 'bench_gpu_*' -o -name 'bench_cuda_*' \) | sort)
fi

printf '\n== device-check summary (%ss) ==\n' "$(elapsed)"
printf '%s\n' "${summary[@]}"
exit "$fail"
