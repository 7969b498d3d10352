#!/bin/bash
# On the fixed path (QSWEEP_CPU_GEMM=fixed, the default) the engine's logits are a function of
# the model and tokens alone (worker/engine/gemm_fixed.h, expf_fixed.h): the same bits under
# every OpenBLAS kernel family this CPU offers (OPENBLAS_CORETYPE unset, Haswell, SkylakeX and
# Cooperlake where the CPU has their instructions), for 1 and 2 threads and every ISA path of
# the fixed GEMM and exponential, and the recorded path names no CPU; likewise under the
# register tile the fixed GEMM chooses for each vector path and each 512-bit FMA port count
# (1 and 2), forced, whatever this CPU's own count. Then, in one process, the fixed GEMM's
# logits are within 1e-4 of those of OpenBLAS's Haswell kernels. OpenBLAS's own hashes under each family are printed for
# comparison (they may differ: that is what the fixed path removes).
# Usage: cpu_gemm_fixed_test.sh PROBE [MODEL CTX]: by default the tiny synthetic Llama 3 shape
# and every combination; with a larger MODEL, only OPENBLAS_CORETYPE unset and Haswell and the
# fixed GEMM's vector paths (the scalar one is slow at that size).
set -u
probe=$1
model=${2:-synthetic:tiny-llama3}
ctx=${3:-96}
fails=0
families=(unset Haswell)
mapfile -t isas < <("$probe" --isas)
if [ $# -lt 2 ]; then
    grep -q '^flags.* avx512f ' /proc/cpuinfo && families+=(SkylakeX)
    grep -q '^flags.* avx512_bf16 ' /proc/cpuinfo && families+=(Cooperlake)
else
    mapfile -t isas < <("$probe" --isas | grep -v scalar)
fi

run() { # run FAMILY GEMM THREADS [ISA]: the probe's output
    local fam=$1 gemm=$2
    shift 2
    if [ "$fam" = unset ]; then
        env -u OPENBLAS_CORETYPE QSWEEP_CPU_GEMM="$gemm" "$probe" "$model" "$ctx" "$@"
    else
        env OPENBLAS_CORETYPE="$fam" QSWEEP_CPU_GEMM="$gemm" "$probe" "$model" "$ctx" "$@"
    fi
}

ref=$(run unset fixed 1) || { echo "FAIL probe: exit $?"; exit 1; }
echo "reference (OPENBLAS_CORETYPE unset, 1 thread, the CPU's own ISA):"
echo "$ref"
case "$ref" in "path cpu-qsweep-fixed2"*) ;; *) echo "FAIL path: not cpu-qsweep-fixed2"; fails=$((fails + 1)) ;; esac
same() { # same WHAT FAMILY THREADS [ISA[:TILE]]: the fixed path's output against the reference
    local what=$1 got
    shift
    got=$(run "$1" fixed "${@:2}") || { echo "FAIL $what: exit $?"; fails=$((fails + 1)); return; }
    if [ "$got" != "$ref" ]; then
        echo "FAIL $what:"
        echo "$got"
        fails=$((fails + 1))
    else
        echo "ok   $what: identical"
    fi
}
for fam in "${families[@]}"; do
    for t in 1 2; do
        for isa in "" "${isas[@]}"; do
            same "OPENBLAS_CORETYPE=$fam threads $t isa ${isa:-auto}" "$fam" "$t" $isa
        done
    done
done
mapfile -t tiles < <("$probe" --tiles)
for tile in "${tiles[@]}"; do
    for t in 1 2; do
        same "threads $t tile $tile" unset "$t" "$tile"
    done
done
for fam in "${families[@]}"; do
    echo "openblas under OPENBLAS_CORETYPE=$fam: $(run "$fam" openblas 1 | tr '\n' ' ')"
done
OPENBLAS_CORETYPE=Haswell QSWEEP_CPU_GEMM=fixed "$probe" --tolerance "$model" "$ctx" || { echo "FAIL tolerance"; fails=$((fails + 1)); }
if QSWEEP_CPU_GEMM=fastest "$probe" "$model" "$ctx" 1 >/dev/null 2>&1; then
    echo "FAIL QSWEEP_CPU_GEMM=fastest was accepted"
    fails=$((fails + 1))
else
    echo "ok   QSWEEP_CPU_GEMM=fastest is refused"
fi
exit $((fails > 0))
