#!/usr/bin/env bash
# The device check: configures a CUDA build, builds it (nvcc, -Werror on host and device code),
# checks the module boundary (the qsweep binary links no CUDA library; the CUDA backend module's
# symbols resolve against it; docs/gpu.md), runs every GPU test (ctest label `gpu`) and the GPU
# benchmarks (bench_gpu_*, bench_cuda_*, bench_train --backend cuda), and prints one summary.
# Meant to finish in under 8 minutes on one H200 with 16 cores. Without a GPU every GPU part is
# skipped with a message and the exit status is 0 when the build and the CPU-side checks pass.
#
# Usage: tools/device-check.sh [build-dir]     (default build/device)
# Environment:
#   QSWEEP_SMOLLM2   path of SmolLM2-135M-Instruct.Q4_1.gguf. Default: the cache of
#                    tools/fetch_smollm2.sh (${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models), then
#                    shared/models/ in the repository. The device machine cannot reach the
#                    network and only the repository tree travels to it: fetch the file here
#                    (tools/fetch_smollm2.sh shared/models) so that it travels in shared/.
#                    When absent, the SmolLM2 comparisons run on a synthetic checkpoint of
#                    SmolLM2-135M's exact shape (BF16, deterministic weights) that the check
#                    writes itself with bench_engine --synthetic.
#   DEVICE_CHECK_JOBS  build parallelism (default: all cores).
#   DEVICE_CHECK_REHEARSE_SWEEP  non-empty: without a GPU, run the SmolLM2 sweep comparison with
#                    both sides on the CPU (rehearses the script, not the GPU).
#   DEVICE_CHECK_REHEARSE_TRAIN  non-empty: without a GPU, run the 30-step training comparison
#                    with both sides on the CPU (rehearses the script, not the GPU).
#   DEVICE_CHECK_SKIP_BUILD  non-empty: use the existing build in build-dir as it is (rehearsals
#                    on a machine without a GPU, where a full build takes too long).
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
marks="" # "stage Ns, ...": seconds since the start at the end of each stage (the 8-minute budget)
mark() { marks="$marks${marks:+, }$1 $(elapsed)s"; }

mkdir -p "$build"
build="$(cd "$build" && pwd)" # absolute: ctest runs each test in its own directory
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
if [ -n "${DEVICE_CHECK_SKIP_BUILD:-}" ] && [ -f "$build/CMakeCache.txt" ]; then
  note "build: skipped (DEVICE_CHECK_SKIP_BUILD: the existing build in $build, a rehearsal)"
elif cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DQSWEEP_CUDA=ON >>"$log" 2>&1 &&
   grep -q "CUDA kernels ON" "$log" &&
   cmake --build "$build" -j"$jobs" >>"$log" 2>&1; then
  note "build: ok (CUDA, -Werror), $(elapsed)s"
else
  note "build: FAILED (see $log; missing packages: tools/install-deps.sh lists them)"
  tail -n 25 "$log" >&2
  printf '\n== device-check summary (%ss) ==\n' "$(elapsed)"; printf '%s\n' "${summary[@]}"
  exit 1
fi

mark build
# --- SmolLM2 checkpoint
smol="${QSWEEP_SMOLLM2:-}"
if [ -z "$smol" ]; then
  for c in "${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
           "$root/shared/models/SmolLM2-135M-Instruct.Q4_1.gguf"; do
    if [ -f "$c" ]; then smol="$c"; break; fi
  done
fi
if [ -n "$smol" ] && [ -e "$smol" ]; then
  export QSWEEP_SMOLLM2="$smol"
  note "smollm2: $smol"
else
  synth="$build/smollm2-synthetic"
  if "$build/bench/engine/bench_engine" --synthetic "$synth" 16 1 >"$build/bench_engine_synthetic.txt" 2>&1 &&
     [ -f "$synth/config.json" ]; then
    export QSWEEP_SMOLLM2="$synth"
    note "smollm2: the GGUF is absent: comparisons on a synthetic checkpoint of SmolLM2-135M's shape ($synth)"
  else
    unset QSWEEP_SMOLLM2
    note "smollm2: checkpoint absent and bench_engine --synthetic failed (see $build/bench_engine_synthetic.txt): SmolLM2 parts skipped"
  fi
fi

# --- the module boundary: no CUDA library in the qsweep binary, the module's symbols resolve
if ldd "$build/cli/qsweep" | grep -qE 'libcu|libnccl'; then
  note "module: FAILED: qsweep links a CUDA library: $(ldd "$build/cli/qsweep" | grep -E 'libcu|libnccl' | awk '{print $1}' | tr '\n' ' ')"
  fail=1
else
  note "module: qsweep links no CUDA library (ldd)"
fi
if ctest --test-dir "$build" -R '^(gpu_cuda_module_.*|gpu_info|gpu_info_hidden|kernels_cuda_gemm_path|cli_backend_choice|engine_backend|train_devices)$' \
     --output-on-failure >"$build/ctest-cpu-side.txt" 2>&1; then
  note "cpu-side GPU logic (GEMM path table, GPU list, backend choice, module symbols): ok"
else
  note "cpu-side GPU logic: FAILED ($build/ctest-cpu-side.txt)"
  fail=1
fi
help_ms=$( { /usr/bin/time -f '%e %M' "$build/cli/qsweep" --help >/dev/null; } 2>&1 | tail -1)
note "startup: qsweep --help $(echo "$help_ms" | awk '{printf "%.0f ms, %.1f MB RSS", $1*1000, $2/1024}')"

# --- GPU tests
if [ "$gpu" = "none" ]; then
  note "gpu: no GPU: skipped (GPU tests exit 77, bench_gpu_*/bench_cuda_* not run)"
fi
ctest_out="$build/ctest-gpu.txt"
# -V: every test's output is kept (the SmolLM2 comparison's figures below come from it)
if ctest --test-dir "$build" -L gpu -V --output-on-failure --timeout 240 >"$ctest_out" 2>&1; then
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
# the SmolLM2 criterion (perplexity within 1e-4 relative, top-1 agreement >= 99.5%) is
# gpu_smollm2_cuda's; its figures go into the summary ("NN: OK: cpu ppl ..." under -V)
while IFS= read -r l; do
  note "smollm2 eval cuda vs cpu (gpu_smollm2_cuda): ${l#*: }"
done < <(grep -E '^[0-9]+: (OK|NOT OK): cpu ppl .* cuda fp32 ppl' "$ctest_out")
mark "gpu tests"

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
# bench_train's CUDA mode (the trainer on the GPU, bf16 and nvfp4, against cuBLAS BF16 GEMMs of
# the step's shapes). It runs with or without a GPU: without one it says so and exits 0, which
# the summary shows (its invocation is rehearsed with the rest of the script).
tf="$build/bench_train_cuda.txt"
if [ -x "$build/bench/train/bench_train" ]; then
  if timeout 150 "$build/bench/train/bench_train" --backend cuda >"$tf" 2>&1; then
    while IFS= read -r l; do note "bench_train --backend cuda: ${l#summary: }"; done < <(grep '^summary:' "$tf")
  else
    note "bench_train --backend cuda: FAILED (exit $?, see $tf)"
    fail=1
  fi
else
  note "bench_train --backend cuda: FAILED: $build/bench/train/bench_train not built"
  fail=1
fi
mark benchmarks

# --- a shortened NVFP4 W4A16 component sweep of SmolLM2 (or its synthetic stand-in) through
# qsweep run, once with a CPU worker and once with a GPU worker, each in a private cluster of
# its own (a job already done under the same key is not run again, whatever the backend): the
# components' ranking by mean KL must be the same. Rehearsal without a GPU:
# DEVICE_CHECK_REHEARSE_SWEEP=1 runs the second sweep on the CPU too (the comparison logic, not
# the GPU). DEVICE_CHECK_SWEEP_CHUNKS: chunks of 512 tokens per evaluation (default 4).
# Ranking of one run's results: the part column ordered by kl_mean, largest first (quoted CSV
# fields, the options JSON, are dropped first, so part is field 6 and kl_mean field 10).
ranking() {
  "$build/cli/qsweep" results "$1" --csv | tail -n +2 | sed -E 's/"([^"]|"")*"//g' |
    awk -F, '$5 == "component" {print $10, $6}' | sort -g -r | awk '{print $2}' | tr '\n' ' '
}
# One side: qsweep run with QSWEEP_BACKEND=$1 in its own cluster under $build/sweep-$1; prints
# "ranking|gemm paths". Exit status that of the run.
sweep_side() (
  home="$build/sweep-$1"
  rm -rf "$home" && mkdir -p "$home" || exit 1
  export XDG_DATA_HOME="$home/data" XDG_STATE_HOME="$home/state" XDG_CACHE_HOME="$home/cache"
  unset QSWEEP_DB QSWEEP_BASELINE_DIR QSWEEP_CUDA_GEMM
  q="$build/cli/qsweep"
  eval "$("$q" db start 2>>"$build/sweep.txt")" || exit 1
  QSWEEP_BACKEND=$1 "$q" run "$root/experiments/smollm2-fp4-components.yaml" --workers 1 \
    --set name="dc-$1" --set "models=[$QSWEEP_SMOLLM2]" --set "sensitivity.formats=[nvfp4]" \
    --set "sensitivity.quantize=[weights]" --set "sensitivity.metrics=[ppl,kl,top1]" \
    --set "dataset.max_chunks=${DEVICE_CHECK_SWEEP_CHUNKS:-4}" >>"$build/sweep.txt" 2>&1
  rc=$?
  r=$(ranking "dc-$1")
  p=$("$q" results "dc-$1" --csv | tail -n +2 | awk -F, '{print $NF}' | sort -u | tr '\n' ' ')
  "$q" db stop >/dev/null 2>&1
  echo "$r|$p"
  exit $rc
)
if [ -n "${QSWEEP_SMOLLM2:-}" ] && { [ "$gpu" != "none" ] || [ -n "${DEVICE_CHECK_REHEARSE_SWEEP:-}" ]; }; then
  : >"$build/sweep.txt"
  second=cuda
  [ "$gpu" = "none" ] && second=cpu
  if a=$(sweep_side cpu) && b=$(sweep_side "$second"); then
    if [ -n "${a%%|*}" ] && [ "${a%%|*}" = "${b%%|*}" ]; then
      note "sweep (NVFP4 W4A16 components, ${DEVICE_CHECK_SWEEP_CHUNKS:-4} chunks): same ranking by KL on cpu and $second (${a%%|*}; gemm_path cpu: ${a#*|}, $second: ${b#*|})"
    else
      note "sweep: FAILED: ranking by KL differs: cpu [${a%%|*}], $second [${b%%|*}] (gemm_path ${b#*|}; $build/sweep.txt)"
      fail=1
    fi
  else
    note "sweep: FAILED (see $build/sweep.txt)"
    fail=1
  fi
elif [ "$gpu" = "none" ]; then
  note "sweep: no GPU: skipped (DEVICE_CHECK_REHEARSE_SWEEP=1 rehearses it on the CPU)"
fi
mark sweep

# --- tiny training, 30 steps, GPU against CPU: the same grid through qsweep run with a CPU
# worker and with a GPU worker, each in its own private cluster. bf16: final training loss
# within 1e-3 relative. nvfp4 (stochastic rounding, whose streams the two backends draw
# differently): within twice the standard deviation of the CPU's final losses over seeds 1-3,
# an upper bound of the rounding spread (it holds the initialization's spread too). The data
# is the committed bytes-tokenized GPL-3 text, so the check needs no network.
# Then data_parallel over the GPUs present: G ranks against 1 rank with G times the
# accumulation (the same samples), fp32 recipe, final loss within 1e-6 relative (train_dp's
# criterion on the CPU ranks).
train_grid() { # name recipes seeds data_parallel accum
  cat <<YAML
name: $1
kind: training
training:
  shapes: [tiny]
  dataset: {tokens: $root/experiments/data/gpl3.bytes.tokens, ctx: 128, val_fraction: 0.05}
  recipes: $2
  lrs: [0.003]
  seeds: $3
  steps: 30
  batch: 8
  accum: $5
  data_parallel: $4
  warmup: 3
  eval_every: 30
  eval_batches: 2
  log_every: 10
  checkpoint_every: 30
  checkpoint_dir: $build/train-ckpt/$1
YAML
}
# One training run in its own cluster under $build/train-$name with QSWEEP_BACKEND=$2; prints
# "recipe seed final_train_loss" rows. Exit status that of the run.
train_side() ( # name backend recipes seeds data_parallel accum
  home="$build/train-$1"
  rm -rf "$home" "$build/train-ckpt/$1" && mkdir -p "$home" "$build/train-ckpt/$1" || exit 1
  export XDG_DATA_HOME="$home/data" XDG_STATE_HOME="$home/state" XDG_CACHE_HOME="$home/cache"
  unset QSWEEP_DB QSWEEP_BASELINE_DIR QSWEEP_CUDA_GEMM
  q="$build/cli/qsweep"
  train_grid "$1" "$3" "$4" "$5" "$6" >"$home/grid.yaml"
  eval "$("$q" db start 2>>"$build/train.txt")" || exit 1
  QSWEEP_BACKEND=$2 "$q" run "$home/grid.yaml" --workers 1 >>"$build/train.txt" 2>&1
  rc=$?
  psql "$QSWEEP_DB" -XAt -F ' ' -c "SELECT recipe, seed, value FROM v_train_final
      WHERE experiment = '$1' AND metric = 'final_train_loss' ORDER BY recipe, seed" \
      2>>"$build/train.txt"
  "$q" db stop >/dev/null 2>&1
  exit $rc
)
# The value of "recipe seed" in rows $1, empty when absent.
train_value() { awk -v r="$2" -v s="$3" '$1 == r && $2 == s {print $3}' <<<"$1"; }
ngpu=0
[ "$gpu" != "none" ] && ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$gpu" != "none" ] || [ -n "${DEVICE_CHECK_REHEARSE_TRAIN:-}" ]; then
  : >"$build/train.txt"
  second=cuda
  [ "$gpu" = "none" ] && second=cpu
  if c=$(train_side dct-cpu cpu '[bf16, nvfp4]' '[1, 2, 3]' 1 1) &&
     g=$(train_side "dct-$second" "$second" '[bf16, nvfp4]' '[1]' 1 1); then
    cb=$(train_value "$c" bf16 1) gb=$(train_value "$g" bf16 1)
    cn=$(train_value "$c" nvfp4 1) gn=$(train_value "$g" nvfp4 1)
    sd=$(awk '$1 == "nvfp4" {n++; s += $3; q += $3 * $3} END {if (n > 1) printf "%.9g", sqrt((q - s * s / n) / (n - 1))}' <<<"$c")
    verdict=$(awk -v b="$second" -v cb="$cb" -v gb="$gb" -v cn="$cn" -v gn="$gn" -v sd="$sd" 'BEGIN {
      if (cb == "" || gb == "" || cn == "" || gn == "" || sd == "") { print "FAILED: missing losses"; exit }
      rb = (gb - cb) / cb; if (rb < 0) rb = -rb; dn = gn - cn; if (dn < 0) dn = -dn
      ok = (rb <= 1e-3 && dn <= 2 * sd) ? "ok" : "FAILED"
      printf "%s: bf16 cpu %.6f %s %.6f (rel %.2e, limit 1e-3); nvfp4 cpu %.6f %s %.6f (|d| %.2e, limit 2 sd = %.2e)", ok, cb, b, gb, rb, cn, b, gn, dn, 2 * sd }')
    note "train (tiny, 30 steps, $second vs cpu): $verdict"
    case "$verdict" in ok*) ;; *) fail=1 ;; esac
  else
    note "train: FAILED (see $build/train.txt)"
    fail=1
  fi
  if [ "$gpu" = "none" ]; then
    note "data_parallel: no GPU: skipped (its jobs ask for one GPU per rank; train_dp checks the CPU ranks)"
  elif [ "$ngpu" -ge 2 ]; then
    if a=$(train_side dcdp-1 cuda '[fp32]' '[1]' 1 "$ngpu") &&
       b=$(train_side dcdp-n cuda '[fp32]' '[1]' "$ngpu" 1); then
      la=$(train_value "$a" fp32 1) lb=$(train_value "$b" fp32 1)
      verdict=$(awk -v a="$la" -v b="$lb" -v n="$ngpu" 'BEGIN {
        if (a == "" || b == "") { print "FAILED: missing losses"; exit }
        r = (b - a) / a; if (r < 0) r = -r
        printf "%s: 1 rank x accum %d %.9f, %d ranks %.9f (rel %.2e, limit 1e-6)", (r <= 1e-6 ? "ok" : "FAILED"), n, a, n, b, r }')
      note "data_parallel over $ngpu GPUs (fp32, 30 steps): $verdict"
      case "$verdict" in ok*) ;; *) fail=1 ;; esac
    else
      note "data_parallel: FAILED (see $build/train.txt)"
      fail=1
    fi
  else
    note "data_parallel: $ngpu GPU present: needs 2 or more, skipped"
  fi
else
  note "train and data_parallel (GPU vs CPU): no GPU: skipped (DEVICE_CHECK_REHEARSE_TRAIN=1 rehearses the training comparison on the CPU)"
fi
mark "train and data_parallel"

# --- the benchmarks' ratios against their targets (a missed target is reported, not failed:
# benchmarks are measurements). quantize: the slowest quantize kernel as a ratio of a D2D
# copy, target 0.85 (bench_cuda_quantize's "x memcpy" column); evaluation of the 7B shape:
# its rate as a ratio of the cuBLAS BF16 GEMM rate, target 0.6 (bench_gpu_eval's summary); a
# training step of SmolLM2-135M's shape (bf16 and nvfp4 recipes): its FLOP/s as a ratio of the
# cuBLAS BF16 GEMM rate on the step's GEMM shapes, target 0.5 (bench_train --backend cuda).
if [ "$gpu" != "none" ]; then
  qf="$build/bench_cuda_quantize.txt"
  if [ -f "$qf" ]; then
    note "target quantize/D2D >= 0.85: $(awk '/^(fake|packed) / {r = $NF; if (min == "" || r < min) {min = r; k = $0}} END {if (min == "") print "no rows"; else printf "slowest %.2f (%s): %s", min, k, (min >= 0.85 ? "met" : "missed")}' "$qf")"
  fi
  ef="$build/bench_gpu_eval.txt"
  if [ -f "$ef" ]; then
    while IFS= read -r l; do
      r=$(sed -E 's/.* = ([0-9.]+) x cuBLAS.*/\1/' <<<"$l")
      note "target 7B eval/cuBLAS BF16 >= 0.6: $r ($(awk -v r="$r" 'BEGIN {print (r >= 0.6 ? "met" : "missed")}')): ${l#summary: }"
    done < <(grep -E '^summary: eval llama2-7b.* x cuBLAS' "$ef")
  fi
  if grep -qE '^summary: train smollm2-135m.* x cuBLAS BF16' "$tf" 2>/dev/null; then
    while IFS= read -r l; do
      r=$(sed -E 's/.* = ([0-9.]+) x cuBLAS BF16.*/\1/' <<<"$l")
      rec=$(sed -E 's/.* recipe ([^:]+):.*/\1/' <<<"$l")
      note "target training step/cuBLAS BF16 >= 0.5 (smollm2-135m, $rec): $r ($(awk -v r="$r" 'BEGIN {print (r >= 0.5 ? "met" : "missed")}'))"
    done < <(grep -E '^summary: train smollm2-135m.* x cuBLAS BF16' "$tf")
  else
    note "target training step/cuBLAS BF16 >= 0.5: not measured (no SmolLM2-shape row in $tf)"
  fi
fi

note "time: $marks (seconds since the start; budget 480 on an H200)"
printf '\n== device-check summary (%ss) ==\n' "$(elapsed)"
printf '%s\n' "${summary[@]}"
exit "$fail"
