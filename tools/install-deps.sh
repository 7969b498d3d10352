#!/usr/bin/env bash
# Installs the Debian packages qsweep builds, tests and runs with. Idempotent; needs root
# (or sudo). CUDA is not installed here: it is optional and, where present, lives in
# /usr/local/cuda.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
pkgs=(
  build-essential cmake pkg-config git ca-certificates unzip
  libcmocka-dev libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libpq-dev
  libopenblas-dev libjansson-dev libfyaml-dev libsodium-dev libpcre2-dev
  postgresql postgresql-client
  clang libclang-rt-14-dev cppcheck python3 python3-pip
  libfaketime iproute2
  chromium                  # tests/report: renders qsweep report's page headless
  slurm-wlm munge           # tests/slurm: a real single-node SLURM (slurmctld, slurmd)
  bible-kjv bible-kjv-text    # tools/kjv_text.sh: the text of experiments/tiny-fp4-training.yaml
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The Debian postgresql package starts a system cluster; qsweep never uses it (tests and
# `qsweep run` start private clusters), so it is left alone.
echo "install-deps: all packages present"
